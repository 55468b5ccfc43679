#!/usr/bin/env bash
# W4A8 prefill of MXFP4 experts (issue 14) on the GPU machine: the CUDA tests (TEST_FILTER;
# SKIP_TESTS=1 skips them), compute-sanitizer on SANITIZE (a gtest filter), then `bench --backend
# cuda` of MODEL (20b or 120b synthetic; the 120b in /dev/shm) for each --weights in WEIGHTS
# (default mxfp4 fp8), this build and, with BASE_BIN, another build's osprey (for the weights in
# BASE_WEIGHTS, default all), in this call (BENCH_ARGS; BENCH_ARGS_FP8 for the fp8 runs). With FIDELITY set, first the trained osprey-mini's logits on the expert paths
# against the CPU fp32 engine (bench/fidelity_paths.py over FID_IDS, `train/data.py --train 10
# --test-per-family 4 --seed 1` rendered by `osprey render --reply`, carried in build/fid: 6 of its
# 32 dialogues are long enough, 256 tokens, for the W4A8 prefill). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
preamble
if [ -n "${FIDELITY:-}" ]; then
  echo "== osprey-mini: expert paths against the CPU fp32 engine"
  mini_fidelity fidelity_w4a8.md 32 \
    cpu:mxfp4,cuda:fp8:weights=mxfp4,cuda:fp8:weights=mxfp4:no-cublaslt,cuda:fp8:weights=fp8,cuda:fp8:weights=mxfp4:dense=bf16
fi
MODEL=${MODEL:-20b}
[ "$MODEL" = none ] && exit 0
DIR=$(synth_dir $MODEL)
run() {  # label binary weights (BENCH_ARGS_FP8: the fp8 runs' own arguments, e.g. the 120b's prefill only)
  local args=${BENCH_ARGS:---prefill-lens 8192 --batches 1,64 --contexts 8192 --steps 16}
  [ "$3" = fp8 ] && [ -n "${BENCH_ARGS_FP8:-}" ] && args=$BENCH_ARGS_FP8
  [ "$1" = base ] && [ -n "${BASE_WEIGHTS:-}" ] && [[ " $BASE_WEIGHTS " != *" $3 "* ]] && return
  timeout ${BENCH_S:-200} $2 bench --backend cuda --model $DIR --weights $3 $args \
    --json $OUT/bench_${MODEL}_$1_$3.json > $OUT/bench_${MODEL}_$1_$3.log 2>&1
  echo "-- $MODEL $1 $3"; grep -E "^\| [0-9]|W4A8|KV blocks|rror" $OUT/bench_${MODEL}_$1_$3.log | grep -v "^|--"
}
for wt in ${WEIGHTS:-mxfp4 fp8}; do
  run this $B $wt
  [ -n "${BASE_BIN:-}" ] && run base $BASE_BIN $wt
done
true
