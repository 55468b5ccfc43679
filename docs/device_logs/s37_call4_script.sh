#!/usr/bin/env bash
# Session 37, call 4: the W4A8 conversion at 4 items a thread against main's 2 (branch
# s37-conv-items; OSPREY_EXP_CONV_SMS values 102 and 104 pick the items in one process, each
# twice, alternating): the 20b and 120b 8k prefills.
cd "$(dirname "$0")/../.."
mkdir -p build
xz -d -c .devcarry/i37/osprey.xz > build/osprey && chmod +x build/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
D=$(synth_dir 20b)
OSPREY_EXP_CONV_SMS="102,104,102,104" timeout 90 $B bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 \
  --prefill-reps 3 --batches 1 --contexts 64 --steps 4 > $OUT/prefill_20b.log 2>&1
grep -E "conv_items|rror" $OUT/prefill_20b.log
date
D=$(synth_dir 120b)
date
OSPREY_EXP_CONV_SMS="102,104,102,104" timeout 300 $B bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 \
  --prefill-reps 2 --batches 1 --contexts 8192 --steps 16 > $OUT/prefill_120b.log 2>&1
grep -E "conv_items|rror|loaded|^\| 8192 \| 1 " $OUT/prefill_120b.log
date
