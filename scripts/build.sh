#!/usr/bin/env bash
# Configures and builds joinlab: scripts/build.sh [BUILD_DIR [TARGET ...]] (default: build, all).
# Turns on the CUDA backend when nvcc is at /usr/local/cuda/bin (CUDA code compiles for sm_90
# without a GPU) and the SimGrid backend. Extra CMake options go in $JOINLAB_CMAKE_ARGS.
# Parallelism: $JOBS, default the number of cores.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
shift || true
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

args=(-DCMAKE_BUILD_TYPE=Release -DJOINLAB_SIMGRID=ON)
if [ -x /usr/local/cuda/bin/nvcc ]; then
  args+=(-DJOINLAB_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
else
  args+=(-DJOINLAB_CUDA=OFF)
fi
if command -v ccache >/dev/null; then  # only speeds up rebuilds; never required
  args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# shellcheck disable=SC2206  # word splitting of the extra options is intended
args+=(${JOINLAB_CMAKE_ARGS:-})

cmake -S "$root" -B "$build_dir" "${args[@]}"
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" "${targets[@]}"
