#!/usr/bin/env bash
# The second call of s46-h200a.sh's plan (same builds and carry): the 120b 8k prefill on `two` (two
# sets, the pass) and `staged` (one set, the staged conversion) against main, to attribute what
# s46-h200a.sh's `twostaged` did.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s46 main two staged
D=$(synth_dir 120b)
for n in two staged main; do
  f=$OUT/prefill_120b_$n.txt
  echo "-- 120b $n"
  timeout 150 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 3 \
    --batches "" --steps 1 > $f 2>&1
  grep -E "ahead|KV blocks|^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror" $f | head -4
done
date
