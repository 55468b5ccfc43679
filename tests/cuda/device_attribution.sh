#!/usr/bin/env bash
# Where a per-op decode step's time goes inside the graph (issue 16's bubbles, issue 14's batch-1
# figures): decode steps with named kernels left out, by a build with
# bench/prepared/s33-attribution.patch applied (never on main: its results are wrong, only its
# timing counts). Build it on the CPU machine:
#   git worktree add /tmp/attr HEAD && (cd /tmp/attr && git apply bench/prepared/s33-attribution.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DOSPREY_TESTS=OFF && ninja -C build osprey)
#   mkdir -p .devcarry/attr && xz -T2 -k -c /tmp/attr/build/osprey > .devcarry/attr/osprey.xz
# and carry .devcarry. ATTR (default .devcarry/attr/osprey: the build), PRESET (default 20b; 120b:
# in /dev/shm), BATCHES (default 1,8), SKIPS (";"-separated lists for OSPREY_SKIP_LIST; "none" is
# the whole step), all in one load of the model. Log and table to $OUT.
source "$(dirname "$0")/device_env.sh"
A=${ATTR:-$PWD/.devcarry/attr/osprey}
[ -x $A ] || { xz -d -k -f $A.xz && chmod +x $A; }
D=$(synth_dir ${PRESET:-20b})
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
OSPREY_SKIP_LIST=${SKIPS:-"none;qkv;rope;attn;o;up;down;combine;unembed;rope,attn;qkv,o,up,down,unembed;none"} \
  timeout ${RUN_S:-400} $A bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches ${BATCHES:-1,8} \
  --contexts 8192 --steps 32 > $OUT/attribution.log 2>&1
grep -E "^\| (left out|8192)|rror" $OUT/attribution.log | tee $OUT/attribution.md
