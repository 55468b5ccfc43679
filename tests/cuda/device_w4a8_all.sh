#!/usr/bin/env bash
# One device call for the W4A8 prefill (issue 14, seventeenth session): the relevant CUDA tests,
# the 20b (8k and 32k prefill) with MXFP4 and FP8 experts, the 120b (8k prefill,
# decode batch 1, 64, 128; FP8 experts: prefill and batch 1, all that fits), the trained
# osprey-mini's long dialogues on each expert path, and compute-sanitizer memcheck on the new
# kernels' tests, in that order (each step under its own timeout). Logs to $OUT.
D=$(dirname "$0")
TEST_FILTER='MoeMxfp4.*:CudaFp8Model.*:CudaFp8.Cublas*' TESTS_S=120 MODEL=20b WEIGHTS="mxfp4 fp8" BENCH_S=120 \
  BENCH_ARGS=${BENCH_ARGS_20B:---prefill-lens 8192,32768 --batches 1 --contexts 8192 --steps 4} bash $D/device_w4a8.sh
SKIP_TESTS=1 MODEL=120b WEIGHTS="mxfp4 fp8" BENCH_S=170 \
  BENCH_ARGS="--prefill-lens 8192 --batches 1,64,128 --contexts 8192 --steps 16" \
  BENCH_ARGS_FP8="--prefill-lens 8192 --batches 1 --contexts 8192 --steps 16" bash $D/device_w4a8.sh
SKIP_TESTS=1 MODEL=none FIDELITY=1 FID_IDS=build/fid/long.ids FID_N=6 FID_S=100 \
  FID_PATHS=cuda:fp8:weights=mxfp4,cuda:fp8:weights=mxfp4:no-cublaslt,cuda:fp8:weights=fp8 bash $D/device_w4a8.sh
SKIP_TESTS=1 MODEL=none TOOLS=memcheck SANITIZE_S=80 SANITIZE='MoeMxfp4.Fp8Conversion*:MoeMxfp4.W4a8*' bash $D/device_w4a8.sh
grep -E 'chunk against' ${OUT:-/tmp/out}/tests.log
true
