#!/usr/bin/env bash
# Session 39, call 2: the 120b prefill of 1k and 8k prompts, main (c60fbf1's kernels) and branch
# s38-route-wgmma (.devcarry/s38w) alternating, two rounds.
cd "$(dirname "$0")/../.."
mkdir -p build/main build/wg
un() { xz -d -c $1 > $2 && chmod +x $2; }
un .devcarry/m38/osprey.xz build/main/osprey; un .devcarry/s38w/osprey.xz build/wg/osprey
cp build/wg/osprey build/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
D=$(synth_dir 120b)
for r in 1 2; do for n in main wg; do
  echo "-- 120b $n"; timeout 125 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024,8192 --prefill-reps 4 \
    --batches 1 --contexts 8192 --steps 8 > $OUT/bench120_${n}_$r.txt 2>&1; grep -E "^\| (1024|8192|1 )|rror|loaded" $OUT/bench120_${n}_$r.txt
done; done
date
