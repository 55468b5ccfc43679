#!/usr/bin/env bash
# The MXFP4 decode GEMM's rings (issue 14, eighteenth session) on the GPU machine, in one call:
# the probe of its knobs (bench/probes/mxfp4_decode_ring.cu, built on the CPU machine into
# build/probe_mxfp4_decode_ring), the CUDA tests (TEST_FILTER), ncu detail of the production
# kernels at batch 1 and 64 (NCU=1), then `bench --backend cuda` decode of the 20b and (with
# BIG=1) the 120b synthetic checkpoints, this build against BASE_BIN in the same call. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
P=$PWD/build/probe_mxfp4_decode_ring
echo "== probe"
timeout ${PROBE_S:-150} $P 2>&1 | tee $OUT/probe.md
[ -z "${SKIP_TESTS:-}" ] && timeout ${TESTS_S:-200} bash -c "source $(dirname "$0")/device_env.sh; cuda_tests"
if [ -n "${NCU:-}" ]; then  # the production kernels, then the previous production's (the probe's row_kernel<4, ..>)
  for shape in "20b b1" "20b b64"; do
    for k in mxfp4_decode_kernel row_kernel; do
      f="$OUT/ncu_${shape/ /_}_$k.txt"
      timeout 90 ncu --set full -k regex:$k --launch-count 2 $P "$shape" > "$f" 2>&1
      echo "-- ncu $shape $k"
      grep -iE "^  [a-z_:<>, 0-9()]*kernel|Duration|DRAM Throughput|Issued Ipc|Eligible Warps|Registers Per|Achieved Occ|L2 Hit|stall" "$f" | head -30
    done
  done
fi
bench() {  # model label binary args
  timeout ${BENCH_S:-150} $3 bench --backend cuda --model $(synth_dir $1) --weights ${WEIGHTS:-mxfp4} $4 > $OUT/bench_$1_$2.log 2>&1
  echo "-- $1 $2"; grep -E "^\| [0-9]|rror" $OUT/bench_$1_$2.log
}
ARGS20=${ARGS20:---prefill-lens 16 --batches 1,8,64 --contexts 8192 --steps 16}
bench 20b this $B "$ARGS20"
[ -n "${BASE_BIN:-}" ] && bench 20b base $BASE_BIN "$ARGS20"
if [ -n "${BIG:-}" ]; then
  ARGS120=${ARGS120:---prefill-lens 16 --batches 1,128 --contexts 8192 --steps 16}
  bench 120b this $B "$ARGS120"
  [ -n "${BASE_BIN:-}" ] && bench 120b base $BASE_BIN "$ARGS120"
fi
true
