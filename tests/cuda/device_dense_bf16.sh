#!/usr/bin/env bash
# BF16 dense layers (--dense bf16, issue 14's fidelity criterion) on the GPU machine: the trained
# osprey-mini's logits on each GPU path against the CPU fp32 engine (bench/fidelity_paths.py), over
# FID_N dialogues of FID_IDS and over LONG_IDS (the same dialogues as one 1,490-token prompt: the
# long-chunk paths, cuBLAS for the experts), then `bench --backend cuda` on the 20b synthetic
# checkpoint with --dense fp8 and bf16 (MXFP4 experts) in this call. FID_IDS and LONG_IDS come from
# `train/data.py --seed 5 --test-per-family 2` rendered by `osprey render --reply` (build/fid,
# carried). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
mkdir -p models && [ -d models/osprey-mini ] || tar -C models -xJf data/osprey-mini.tar.xz
PATHS=${PATHS:-cuda:bf16,cuda:fp8:weights=mxfp4,cuda:fp8:weights=mxfp4:dense=bf16,cuda:fp8:weights=fp8,cuda:fp8:weights=fp8:dense=bf16}
if [ -z "${SKIP_FIDELITY:-}" ]; then
  echo "== osprey-mini, ${FID_N:-8} dialogues: GPU paths against the CPU fp32 engine"
  python3 bench/fidelity_paths.py $B models/osprey-mini ${FID_IDS:-build/fid/test.ids} ${FID_N:-8} $PATHS 2>&1 |
    tee $OUT/fidelity_mini.md
  echo "== osprey-mini, the dialogues as one prompt"
  python3 bench/fidelity_paths.py $B models/osprey-mini ${LONG_IDS:-build/fid/long.ids} 1 $PATHS 2>&1 |
    tee $OUT/fidelity_mini_long.md
fi
[ -n "${SKIP_BENCH:-}" ] && exit 0
P=${PRESET:-20b}; D=$M/$P; [ "$P" = 120b ] && D=/dev/shm/120b
[ -d $D ] || $B synth --preset $P --seed 1 --out $D --quiet
for dn in ${DENSE:-fp8 bf16}; do
  $B bench --backend cuda --model $D --weights ${WEIGHTS:-mxfp4} --dense $dn --prefill-lens ${PREFILL_LENS:-8192} \
    --batches ${BATCHES:-1,8,64} --contexts 8192 --steps ${STEPS:-16} --json $OUT/bench_${P}_dense_$dn.json \
    > $OUT/bench_${P}_dense_$dn.log 2>&1
  echo "-- $P dense $dn"; grep -E "^\| [0-9]|rror|loaded" $OUT/bench_${P}_dense_$dn.log
done
