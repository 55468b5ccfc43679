#!/usr/bin/env bash
# MoE expert GEMMs on the GPU machine (issue 14's MXFP4 decode path): optionally the CUDA tests
# (TEST_FILTER; SKIP_TESTS=1 skips them) and compute-sanitizer on SANITIZE (a gtest filter), then `bench --moe-batches` (the two expert GEMMs of one
# layer alone, MXFP4 and FP8 experts in the same run) at the 20b shape and at the 120b shape (its
# config only: the 20b's with 128 experts and 36 layers), then, with DECODE_ARGS, `bench` decode
# points of the 20b for each --weights in WEIGHTS (default mxfp4 fp8) with this build and, with
# BASE_BIN, another build's osprey, in this call; BASE_MOE (an osprey) times the MoE GEMMs of
# another build as well. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
cuda_tests
[ -n "${SANITIZE:-}" ] && sanitize_tests "$SANITIZE"  # memcheck and racecheck on these tests
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
mkdir -p $M/120b_shape
python3 -c "
import json, sys
c = json.load(open('$M/20b/config.json'))
for k in ('num_local_experts', 'num_experts'):
    if k in c: c[k] = 128
c['num_hidden_layers'] = 36
if 'layer_types' in c: c['layer_types'] = (c['layer_types'] * 2)[:36]
json.dump(c, open('$M/120b_shape/config.json', 'w'))"
MOE=${MOE_BATCHES:-1,4,8,16,32,64,128}
for shape in 20b 120b_shape; do
  echo "== MoE GEMMs, $shape"
  $B bench --backend cuda --model $M/$shape --prefill-lens "" --batches "" --moe-batches $MOE --steps 32 \
    > $OUT/moe_$shape.log 2>&1
  grep -E "^\| [0-9]|rror" $OUT/moe_$shape.log
  if [ -n "${BASE_MOE:-}" ]; then
    $BASE_MOE bench --backend cuda --model $M/$shape --prefill-lens "" --batches "" --moe-batches $MOE --steps 32 \
      > $OUT/moe_base_$shape.log 2>&1
    echo "-- base"; grep -E "^\| [0-9]|rror" $OUT/moe_base_$shape.log
  fi
done
if [ -n "${DECODE_ARGS:-}" ]; then
  run() {  # label binary weights
    $2 bench --backend cuda --model $M/20b --weights $3 $DECODE_ARGS --json $OUT/bench_$1_$3.json > $OUT/bench_$1_$3.log 2>&1
    echo "-- $1 $3"; grep -E "^\| [0-9]|rror" $OUT/bench_$1_$3.log
  }
  for wt in ${WEIGHTS:-mxfp4 fp8}; do
    run this $B $wt
    [ -n "${BASE_BIN:-}" ] && [ "$wt" = mxfp4 ] && run base $BASE_BIN $wt
  done
fi
