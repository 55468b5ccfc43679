#!/usr/bin/env bash
# Prefill of builds side by side on the GPU machine (issue 14): for each synthetic checkpoint in
# PRESETS (20b; 120b in /dev/shm) and each --weights in WEIGHTS, `bench --backend cuda` of every
# binary in VARIANTS ("name:path", space-separated; .xz files are unpacked first), all in this call
# and in the order given; then, with REPEAT_FIRST=1, the first variant again (the call's drift).
# BENCH_ARGS (20b) and BENCH_ARGS_120B set the bench's shape. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
list=()
for v in $VARIANTS; do
  name=${v%%:*} bin=${v#*:}
  if [[ $bin == *.xz ]]; then xz -dc $bin > /tmp/variant_$name && chmod +x /tmp/variant_$name && bin=/tmp/variant_$name; fi
  list+=("$name:$bin")
done
[ -n "${REPEAT_FIRST:-}" ] && list+=("${list[0]%%:*}_again:${list[0]#*:}")
for P in ${PRESETS:-20b}; do
  D=$(synth_dir $P)
  args=${BENCH_ARGS:---prefill-lens 8192,32768 --batches 1 --contexts 8192 --steps 4}
  [ $P = 120b ] && args=${BENCH_ARGS_120B:---prefill-lens 8192 --batches 1 --contexts 8192 --steps 4}
  for wt in ${WEIGHTS:-mxfp4}; do
    for v in "${list[@]}"; do
      name=${v%%:*} bin=${v#*:}
      $bin bench --backend cuda --model $D --weights $wt $args --json $OUT/bench_${P}_${name}_$wt.json \
        > $OUT/bench_${P}_${name}_$wt.log 2>&1
      echo "-- $P $wt $name"; grep -E "^\| [0-9]|rror" $OUT/bench_${P}_${name}_$wt.log
    done
  done
done
