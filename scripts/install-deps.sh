#!/usr/bin/env bash
# Installs the Debian 12 packages joinlab's build and tests need, only those missing: a second
# run installs nothing and needs no network. Runs as root, or through sudo otherwise.
#
# The CUDA toolkit is not a Debian package: install it from NVIDIA (the build finds nvcc in
# /usr/local/cuda/bin; without it joinlab builds without the CUDA backend).
# nvcomp, the optional peer of `joinlab bench-codec --peer nvcomp`, is not installed here: it is
# NVIDIA's SDK under its own licence, from PyPI (pip install nvidia-libnvcomp-cu13); the build
# finds it when present (docs/benchmarks.md, "Cascaded compression").
set -euo pipefail

packages=(
  build-essential           # g++, make
  cmake                     # >= 3.24
  pkg-config                # finds SimGrid
  git                       # commit id in result files
  libboost-program-options-dev
  libeigen3-dev             # calibration fits
  libgtest-dev              # tests
  libsimgrid-dev            # simulation backend (SimGrid 3.32)
  libopenmpi-dev openmpi-bin  # multi-process ranks
  libucx-dev                # RDMA transport
  python3-matplotlib        # plots/ (scale-out plot of simulated runs)
  clang libclang-rt-dev libomp-dev  # .ci/sanitize: libFuzzer (fuzz_experiment) and clang's OpenMP
)

missing=()
for p in "${packages[@]}"; do
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install as root: ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
