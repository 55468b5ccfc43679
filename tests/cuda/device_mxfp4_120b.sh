#!/usr/bin/env bash
# Issue 14, second call: the trained osprey-mini's logits on every path against the CPU fp32 engine
# (bench/fidelity_paths.py over FID_IDS), then the 120b synthetic checkpoint (written to /dev/shm)
# under `bench --backend cuda` with --weights mxfp4 (batch 64 and 128 at 8k) and --weights fp8
# (what fits). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
if [ -z "${SKIP_FIDELITY:-}" ]; then
  mkdir -p models && tar -C models -xJf data/osprey-mini.tar.xz
  echo "== osprey-mini: every path against the CPU fp32 engine"
  python3 bench/fidelity_paths.py $B models/osprey-mini ${FID_IDS:-build/fid/test.ids} ${FID_N:-16} \
    cpu:bf16,cpu:mxfp4,cpu:fp8,cuda:bf16,cuda:fp8,cuda:fp8:no-cublaslt,cuda:fp8:weights=fp8 2>&1 | tee $OUT/fidelity_mini.md
fi
echo "== 120b"
( time $B synth --preset 120b --seed 1 --out /dev/shm/120b --quiet ) 2>&1 | grep -E "real|error"
$B bench --backend cuda --model /dev/shm/120b --weights mxfp4 ${MX_ARGS:---prefill-lens 8192 --batches 1,8,64,128 --contexts 8192 --steps 16} \
  --json $OUT/bench_120b_mxfp4.json > $OUT/bench_120b_mxfp4.log 2>&1
echo "-- mxfp4"; grep -vE "^\s*$|^loading" $OUT/bench_120b_mxfp4.log | tail -20
$B bench --backend cuda --model /dev/shm/120b --weights fp8 ${FP8_ARGS:---prefill-lens 8192 --batches 1,8,32 --contexts 8192 --steps 16} \
  --json $OUT/bench_120b_fp8.json > $OUT/bench_120b_fp8.log 2>&1
echo "-- fp8"; grep -vE "^\s*$|^loading" $OUT/bench_120b_fp8.log | tail -20
$B bench --backend cuda --model /dev/shm/120b --weights fp8 --prefill-lens 1024 --batches 64 --contexts 8192 --steps 4 \
  > $OUT/bench_120b_fp8_b64.log 2>&1; echo "fp8 batch 64 at 8k: rc $? $(grep -iE 'error|pages' $OUT/bench_120b_fp8_b64.log | tail -1)"
