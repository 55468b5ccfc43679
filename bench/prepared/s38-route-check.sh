#!/usr/bin/env bash
# Session 38's prepared device call (not run: the session's device time was spent): a build of
# branch s38-route-mma (the fp32 tiled route up to 32 experts, the logits by mma.sync above; THIS
# = .devcarry/s38, the default) or of branch s38-route-wgmma (the logits by wgmma; THIS =
# .devcarry/s38w) against main, in one call:
# - the whole CUDA suite and compute-sanitizer memcheck on the route tests;
# - the route probe (bench/probes/prefill_passes.cu route), main's, THIS's and, when given, ALT's
#   (the other branch's directory), alternating;
# - the 20b and the 120b prefill of 1k and 8k prompts, main and THIS alternating.
# Carry .devcarry/lib, THIS (osprey.xz, tests.xz, probe.xz, and main's probe_main.xz), ALT if
# given, and .devcarry/m38 (main's osprey.xz), then run:
#   [THIS=.devcarry/s38w] [ALT=.devcarry/s38] bash bench/prepared/s38-route-mma-check.sh
cd "$(dirname "$0")/../.."
mkdir -p build/tests build/main
THIS=${THIS:-.devcarry/s38}
xz -d -c $THIS/osprey.xz > build/osprey && chmod +x build/osprey
xz -d -c $THIS/tests.xz > build/tests/osprey_cuda_tests && chmod +x build/tests/osprey_cuda_tests
xz -d -c $THIS/probe.xz > build/probe && chmod +x build/probe
xz -d -c $THIS/probe_main.xz > build/main/probe && chmod +x build/main/probe
[ -n "${ALT:-}" ] && mkdir -p build/alt && xz -d -c $ALT/probe.xz > build/alt/probe && chmod +x build/alt/probe
xz -d -c .devcarry/m38/osprey.xz > build/main/osprey && chmod +x build/main/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
timeout 150 $T > $OUT/tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|^T [0-9]+ E|tests from .* ran" $OUT/tests.log | head -30
timeout 100 compute-sanitizer --tool memcheck $T --gtest_filter='CudaFp8.MoeRoute*' > $OUT/memcheck.txt 2>&1
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.txt | head
for r in 1 2; do
  build/main/probe route | tee -a $OUT/probe_main.txt | cut -c1-40
  build/probe route | tee -a $OUT/probe_this.txt | cut -c1-40
  [ -n "${ALT:-}" ] && build/alt/probe route | tee -a $OUT/probe_alt.txt | cut -c1-40
done
D=$(synth_dir 20b)
for r in 1 2; do for b in main this; do
  bin=$B; [ $b = main ] && bin=build/main/osprey
  echo "-- 20b $b"; timeout 120 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024,8192 --prefill-reps 3 \
    --batches 1 --contexts 8192 --steps 8 > $OUT/bench20_${b}_$r.txt 2>&1; grep -E "^\| (1024|8192|1 )|rror" $OUT/bench20_${b}_$r.txt
done; done
D=$(synth_dir 120b)  # one round (each load takes 65-90 s): a second call repeats it
for r in 1; do for b in main this; do
  bin=$B; [ $b = main ] && bin=build/main/osprey
  echo "-- 120b $b"; timeout 150 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024,8192 --prefill-reps 4 \
    --batches 1 --contexts 8192 --steps 8 > $OUT/bench120_${b}_$r.txt 2>&1; grep -E "^\| (1024|8192|1 )|rror|loaded" $OUT/bench120_${b}_$r.txt
done; done
date
