#!/usr/bin/env bash
# Session 37, call 2: the W4A8 prefill with the grouped GEMMs' persistent grid leaving N SMs to
# the conversion of the next experts (branch s37-conv-sms; OSPREY_EXP_CONV_SMS sweeps N in one
# process, each value twice, alternating): 20b and 120b 8k prefill. N = 0 is main's grid.
cd "$(dirname "$0")/../.."
mkdir -p build
xz -d -c .devcarry/c37/osprey.xz > build/osprey && chmod +x build/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
D=$(synth_dir 20b)
date
OSPREY_EXP_CONV_SMS="0,8,16,32" timeout 90 $B bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 \
  --prefill-reps 3 --batches 1 --contexts 64 --steps 4 > $OUT/prefill_20b.log 2>&1
grep -E "conv_sms|rror" $OUT/prefill_20b.log
date
D=$(synth_dir 120b)
date
OSPREY_EXP_CONV_SMS="0,8,16,24,32,48" timeout 300 $B bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 \
  --prefill-reps 2 --batches 1 --contexts 64 --steps 4 > $OUT/prefill_120b.log 2>&1
grep -E "conv_sms|rror|load" $OUT/prefill_120b.log
date
