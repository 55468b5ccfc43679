#!/usr/bin/env bash
# Every speed target of issues 14 and 16 in one device call (about 6 minutes on an H100): the 20b
# (MXFP4 experts; per-op and persistent decode; FP8 experts at batch 1) and the 120b synthetic
# checkpoints, `bench --backend cuda --json`, then bench/targets.py's table against the targets,
# into $OUT/targets.md. Uses build/osprey (carry .devcarry/lib; see tests/cuda/device_env.sh).
# SKIP_120B=1: without the 120b (its synthesis and load take about 3 minutes).
cd "$(dirname "$0")/.."
source tests/cuda/device_env.sh
set +e
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
run_bench() {  # LABEL TIMEOUT ARGS..: one bench into $OUT/targets_LABEL.{json,txt}
  local label=$1 to=$2; shift 2
  echo "-- $label"
  timeout $to $B bench --backend cuda --json $OUT/targets_$label.json "$@" > $OUT/targets_$label.txt 2>&1
  grep -E "^\| [0-9]|rror" $OUT/targets_$label.txt | head -20
}
D=$(synth_dir 20b)
run_bench 20b 150 --model $D --weights mxfp4 --prefill-lens 8192,32768 --prefill-reps 2 --batches 1,8,64 \
  --contexts 8192,32768 --steps 32
run_bench 20b-persistent 90 --model $D --weights mxfp4 --prefill-lens "" --batches 1,8 --contexts 8192,32768 \
  --steps 32 --decode-kernel persistent
run_bench 20b-fp8 90 --model $D --weights fp8 --prefill-lens "" --batches 1 --contexts 8192 --steps 32
labels="20b=$OUT/targets_20b.json 20b-persistent=$OUT/targets_20b-persistent.json 20b-fp8=$OUT/targets_20b-fp8.json"
if [ -z "${SKIP_120B:-}" ]; then
  D=$(synth_dir 120b)
  run_bench 120b 240 --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 2 --batches 1,64,128 \
    --contexts 8192 --steps 16
  labels="$labels 120b=$OUT/targets_120b.json"
fi
python3 bench/targets.py $labels | tee $OUT/targets.md
