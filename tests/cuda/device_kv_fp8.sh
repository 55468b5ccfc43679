#!/usr/bin/env bash
# The FP8 KV cache (--kv-cache-dtype fp8, issue 14's decode lever) on the GPU machine: the CUDA
# tests (TEST_FILTER; SKIP_TESTS=1 skips them), compute-sanitizer on SANITIZE (a gtest filter),
# then `bench --backend cuda` of MODEL (20b or 120b synthetic, written first: the 120b to
# /dev/shm) with --kv-cache-dtype bf16 and fp8 in this call (BENCH_ARGS), and with FIDELITY set the
# trained osprey-mini's logits on the KV paths against the CPU fp32 engine (bench/fidelity_paths.py
# over FID_IDS, `train/data.py --train 10 --test-per-family 4 --seed 1` rendered by `osprey render
# --reply`, carried in build/fid). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
preamble
if [ -n "${FIDELITY:-}" ]; then
  echo "== osprey-mini: KV paths against the CPU fp32 engine"
  mini_fidelity fidelity_kv.md 16 \
    cpu:mxfp4,cpu:mxfp4:kv-cache-dtype=fp8,cuda:fp8:weights=mxfp4,cuda:fp8:weights=mxfp4:kv-cache-dtype=fp8,cuda:fp8:weights=mxfp4:dense=bf16,cuda:fp8:weights=mxfp4:dense=bf16:kv-cache-dtype=fp8
fi
if [ -n "${COMPARE:-}" ]; then
  # One dialogue's logits, the GPU's FP8-expert path with the skinny kernel (the emulation's sums up
  # to order) against its CPU emulation, with each KV cache: the FP8 cache must move both alike.
  mkdir -p models && [ -d models/osprey-mini ] || tar -C models -xJf data/osprey-mini.tar.xz
  TOK=$(python3 -c "import json; print(','.join(map(str, json.loads(open('${FID_IDS:-build/fid/test.ids}').readline())['ids'])))")
  for kv in bf16 fp8; do
    $B logits --backend cuda --weights fp8 --no-cublaslt --kv-cache-dtype $kv --model models/osprey-mini --tokens $TOK --out /tmp/g_$kv.npy 2>/dev/null
    $B --threads 16 logits --precision fp8 --kv-cache-dtype $kv --model models/osprey-mini --tokens $TOK --out /tmp/c_$kv.npy 2>/dev/null
  done
  python3 -c "
import numpy as np
g8, g16, c8, c16 = (np.load(f'/tmp/{n}.npy').astype(np.float64) for n in ('g_fp8', 'g_bf16', 'c_fp8', 'c_bf16'))
r = lambda a, b: np.linalg.norm(a - b) / np.linalg.norm(b)
print(f'positions {g8.shape[0]}: gpu-cpu with fp8 KV {r(g8, c8):.3e}, with bf16 KV {r(g16, c16):.3e}; fp8 against bf16 KV: gpu {r(g8, g16):.3e}, cpu {r(c8, c16):.3e}')
print(f'argmax: gpu fp8 vs cpu fp8 {(g8.argmax(1) == c8.argmax(1)).mean():.4f}, gpu bf16 vs cpu bf16 {(g16.argmax(1) == c16.argmax(1)).mean():.4f}')" | tee $OUT/compare_kv.txt
fi
MODEL=${MODEL:-20b}
[ "$MODEL" = "" ] && exit 0
DIR=$(synth_dir $MODEL)
for kv in ${KVS:-bf16 fp8}; do
  echo "== $MODEL --kv-cache-dtype $kv"
  timeout ${BENCH_S:-200} $B bench --backend cuda --model $DIR --weights ${WEIGHTS:-mxfp4} --kv-cache-dtype $kv \
    ${BENCH_ARGS:---prefill-lens 8192 --batches 1,64,128 --contexts 8192 --steps 16} \
    --json $OUT/bench_${MODEL}_kv_$kv.json > $OUT/bench_${MODEL}_kv_$kv.log 2>&1
  grep -E "^\||KV blocks|rror" $OUT/bench_${MODEL}_kv_$kv.log | grep -v "^|--" | tail -14
done
