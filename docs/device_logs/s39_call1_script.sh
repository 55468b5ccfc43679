#!/usr/bin/env bash
# Session 39, call 1: session 38's two route branches against main (c60fbf1's kernels).
# mma = branch s38-route-mma (.devcarry/s38), wg = branch s38-route-wgmma (.devcarry/s38w).
# Both CUDA suites, memcheck on the route tests, the route probe (main, mma, wg, twice), the 20b
# prefill of 1k and 8k prompts (main, mma, wg).
cd "$(dirname "$0")/../.."
mkdir -p build/tests build/main build/mma build/wg
un() { xz -d -c $1 > $2 && chmod +x $2; }
un .devcarry/m38/osprey.xz build/main/osprey; un .devcarry/s38/probe_main.xz build/main/probe
for v in mma:s38 wg:s38w; do n=${v%%:*}; d=.devcarry/${v#*:}
  un $d/osprey.xz build/$n/osprey; un $d/tests.xz build/$n/tests; un $d/probe.xz build/$n/probe; done
cp build/mma/osprey build/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
for n in wg mma; do echo "== tests $n"
  timeout 120 build/$n/tests > $OUT/tests_$n.log 2>&1
  grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|^T [0-9]+ E|tests from .* ran" $OUT/tests_$n.log | head -20
done
for n in wg mma; do echo "== memcheck $n"
  timeout 90 compute-sanitizer --tool memcheck build/$n/tests --gtest_filter='CudaFp8.MoeRoute*' > $OUT/memcheck_$n.txt 2>&1
  grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_$n.txt | head -4
done
date
for r in 1 2; do for n in main mma wg; do echo "-- probe $n"
  build/$n/probe route | tee -a $OUT/probe_$n.txt | cut -c1-60
done; done
D=$(synth_dir 20b)
for n in main mma wg; do
  echo "-- 20b $n"; timeout 100 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024,8192 --prefill-reps 3 \
    --batches 1 --contexts 8192 --steps 8 > $OUT/bench20_$n.txt 2>&1; grep -E "^\| (1024|8192|1 )|rror" $OUT/bench20_$n.txt
done
date
