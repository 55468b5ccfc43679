#!/usr/bin/env bash
# The SwiGLU in the grouped up GEMM's epilogue (m_grouped_fp8_gemm_nt_contiguous_swiglu) on the GPU
# machine: the grouped GEMM's test (which holds the epilogue to the SwiGLU kernel bit for bit) and
# the CUDA model tests (TEST_FILTER; SKIP_TESTS=1 skips them), compute-sanitizer on the grouped GEMM's
# test (SANITIZE=1), the probe (.devcarry/probe_grouped_fp8_gemm: the GEMM then the SwiGLU kernel
# against the epilogue at the 20b and 120b shapes), then the prefill of this build against BASE_BIN
# (main's build) on the synthetic checkpoints in PRESETS (default 20b 120b) for WEIGHTS (default
# mxfp4 fp8), in this call. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== tests"
  timeout ${TESTS_S:-200} $T --gtest_filter="${TEST_FILTER:-CudaFp8.GroupedWgmma*:CudaFp8.MoeSwiglu*:CudaFp8Model.*}" 2>&1 |
    tee $OUT/tests.log | grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|tests ran|OK \]" | head -40
fi
[ -n "${SANITIZE:-}" ] && TEST_FILTER='CudaFp8.GroupedWgmma*' timeout 240 bash "$(dirname "$0")/device_sanitize.sh"
if [ -x .devcarry/probe_grouped_fp8_gemm ]; then
  echo "== probe"
  for shape in "8192 32" "8192 128"; do timeout 120 .devcarry/probe_grouped_fp8_gemm $shape 2>&1 | grep -E "^#|SwiGLU|production"; done |
    tee $OUT/probe.md
fi
VARIANTS="this:$B ${BASE_BIN:+base:$BASE_BIN}" PRESETS="${PRESETS:-20b 120b}" WEIGHTS="${WEIGHTS:-mxfp4 fp8}" \
  bash "$(dirname "$0")/device_prefill_variants.sh"
