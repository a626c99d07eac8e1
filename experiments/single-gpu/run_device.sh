#!/usr/bin/env bash
# What one device-machine call runs (bench.sh is the benchmark part): GPU tests,
# compute-sanitizer memcheck on a small run of each strategy, ncu counters of the main kernels,
# and the benchmarks.
#   experiments/single-gpu/run_device.sh BIN_DIR OUT_DIR [steps...]   steps: smoke tests sanitize ncu bench streaming
# (streaming: gpj's consumer kernel and host lanes - test_cuda_streaming, gpj/gpj-b/gpj-h/crj on two
# ranks sharing the GPU, and compute-sanitizer memcheck of a small gpj run; not in the default steps)
set -uo pipefail
bin=$1; out=$2; shift 2
steps=${*:-smoke tests sanitize bench}
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
for step in $steps; do
  case $step in
    smoke)
      timeout ${JL_SMOKE_S:-60} "$bin/joinlab" run "$here/phj.ini" --experiment.repeat=2 --experiment.output_dir=/tmp/smoke 2>&1 | tail -15 ;;
    tests)
      for t in test_cuda_ops test_cuda_backend; do
        timeout ${JL_TEST_S:-200} "$bin/$t" --gtest_brief=1 > "$out/$t.log" 2>&1; echo "$t exit $?"; grep -E "FAILED|Failure|error|Expected|Which is|differs" "$out/$t.log" | head -20
      done ;;
    sanitize)
      timeout ${JL_SANITIZE_S:-120} compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/joinlab" run "$here/sanitize.ini" \
        --experiment.output_dir=/tmp/sanitize > "$out/sanitize.log" 2>&1; echo "sanitize exit $?"; tail -5 "$out/sanitize.log" ;;
    ncu)  # hardware counters of the main kernels on a 2^25 run of phj and smj
      for s in ${JL_NCU:-phj smj}; do
        timeout ${JL_NCU_S:-120} ncu --clock-control none -c 12 \
          -k regex:"partition_scatter|partition_histogram|partitioned_join_kernel|merge_join_kernel|checksum_kernel|Onesweep|probe_kernel" \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
          "$bin/joinlab" run "$here/$s.ini" --workload.rows=2^25 --experiment.repeat=1 \
          --experiment.output_dir=/tmp/ncu-$s > "$out/ncu-$s.txt" 2>&1
        echo "ncu $s exit $?"
      done ;;
    streaming)
      timeout ${JL_TEST_S:-300} "$bin/test_cuda_streaming" --gtest_brief=1 > "$out/test_cuda_streaming.log" 2>&1
      echo "test_cuda_streaming exit $?"; grep -E "FAILED|Failure|rror|Expected|Which is|differs|PASSED" "$out/test_cuda_streaming.log" | head -30
      timeout ${JL_STREAM_S:-240} "$bin/joinlab" run "$here/streaming.ini" --strategy.idle_timeout_s=30 \
        --experiment.output_dir=/tmp/streaming > "$out/streaming.log" 2>&1; echo "streaming runs exit $?"; tail -12 "$out/streaming.log"
      timeout ${JL_SANITIZE_S:-240} compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/joinlab" run "$here/streaming.ini" \
        --experiment.strategy=gpj --experiment.repeat=1 --workload.r.rows=2^14 --workload.s.rows=2^16 \
        --strategy.chunk_bytes=4096 --strategy.idle_timeout_s=60 --experiment.output_dir=/tmp/sanitize-gpj > "$out/sanitize-gpj.log" 2>&1
      echo "sanitize gpj exit $?"; tail -5 "$out/sanitize-gpj.log" ;;
    bench)
      timeout ${JL_BENCH_S:-420} "$here/bench.sh" "$bin/joinlab" "$out/results" > "$out/bench.log" 2>&1; echo "bench exit $?"; tail -40 "$out/bench.log" ;;
  esac
done
