#!/usr/bin/env bash
# The FP16 KV cache (--kv-cache-dtype fp16: FP16 keys, values, Q and P in the tensor-core
# attention; issue 14's fidelity criterion) on the GPU machine, in one call:
# 1. the CUDA tests (TEST_FILTER, default: every attention, rope-to-cache and model test), and
#    compute-sanitizer over the FP16 ones (SANITIZE);
# 2. with FIDELITY set: the trained osprey-mini's logits on the paths of the criterion against the
#    CPU fp32 engine, each later path's mean KL paired against the CUDA BF16 reference path's
#    (bench/fidelity_paths.py), over FID_N dialogues from the FID_FIRST-th of FID_IDS: the held-out
#    dialogues docs/FIDELITY.md measured on the CPU (`train/data.py --seed 0` rendered by
#    `osprey render --reply`, as bench/fidelity_cpu.sh writes /tmp/osprey_fidelity_cpu/test.ids;
#    carry it as build/fid/test0.ids). All 96 in one call (fidelity_paths.py runs 16 dialogues a
#    `logits --tokens-file`); FID_N=48 and FID_FIRST=48 halve it if 540 s are too few.
# 3. unless SKIP_BENCH: `bench --backend cuda` of MODEL (20b synthetic) with --kv-cache-dtype bf16
#    and fp16 in this call: the prefill attention of one layer (--attention-lens), an 8k prefill and
#    decode at 8k context.
# Logs to $OUT. The parts' time caps (tests TESTS_S 300 s, sanitizer SANITIZE_S 240 s, each bench
# BENCH_S 200 s, fidelity FID_S 540 s) add up past a 10-minute call: run the fidelity as its own
# call (FIDELITY=1 SKIP_TESTS=1 SANITIZE= SKIP_BENCH=1). KVS with fp8 needs BENCH_ARGS without
# --attention-lens (which times the 16-bit caches only).
source "$(dirname "$0")/device_env.sh"
export TEST_FILTER=${TEST_FILTER:-'*Attention*:*Flash*:*KvWrite*:*QkvRope*:*Refuses*:CudaFp8Model.*'}
export SANITIZE=${SANITIZE-'CudaFp8.*Fp16*:*QkvRopeToCacheFp16*'}
preamble
if [ -n "${FIDELITY:-}" ]; then
  echo "== osprey-mini: the criterion's paths against the CPU fp32 engine"
  FID_IDS=${FID_IDS:-build/fid/test0.ids} FID_S=${FID_S:-540} mini_fidelity fidelity_kv_fp16_${FID_FIRST:-0}.md 96 \
    cuda:bf16,cuda:fp8:weights=mxfp4:dense=bf16,cuda:fp8:weights=mxfp4:dense=bf16:kv-cache-dtype=fp16,cuda:fp8:weights=mxfp4:kv-cache-dtype=fp16 \
    ${FID_FIRST:-0}
fi
[ -n "${SKIP_BENCH:-}" ] && exit 0
MODEL=${MODEL:-20b}
DIR=$(synth_dir $MODEL)
for kv in ${KVS:-bf16 fp16}; do
  echo "== $MODEL --kv-cache-dtype $kv"
  timeout ${BENCH_S:-200} $B bench --backend cuda --model $DIR --weights ${WEIGHTS:-mxfp4} --kv-cache-dtype $kv \
    ${BENCH_ARGS:---attention-lens 8192,32768 --prefill-lens 8192 --batches 1,64 --contexts 8192 --steps 16} \
    --json $OUT/bench_${MODEL}_kv_$kv.json > $OUT/bench_${MODEL}_kv_$kv.log 2>&1
  grep -E "^\||KV blocks|rror" $OUT/bench_${MODEL}_kv_$kv.log | grep -v "^|--" | tail -16
done
