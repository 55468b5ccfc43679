#!/usr/bin/env bash
# GPU sampling on the GPU machine in one call: the CudaSample kernel tests (and compute-sanitizer
# memcheck/racecheck on them), then `bench --backend cuda` decode on the 20b synthetic checkpoint
# with argmax and with sampled token selection (SAMPLINGS: ";"-separated bench arguments), and
# `generate --backend cuda` greedy vs sampled, and seeded sampled generation on the GPU against
# the CPU fp8 emulation's host sampler. Needs build/ from this machine's build and .devcarry/lib.
# Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
BATCHES=${BATCHES:-1,8,64}
SAMPLINGS=${SAMPLINGS:-"--temperature 0;--temperature 1;--temperature 0.8 --top-p 0.9;--temperature 1 --top-k 50"}
echo "== CudaSample tests"
$T --gtest_filter='CudaSample.*' 2>&1 | tee $OUT/sample_tests.log | grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|row" | head -30
if [ -z "${SKIP_SANITIZER:-}" ]; then
  compute-sanitizer --tool memcheck --print-limit 5 $T --gtest_filter='CudaSample.*' > $OUT/sample_memcheck.log 2>&1
  tail -2 $OUT/sample_memcheck.log
  compute-sanitizer --tool racecheck --print-limit 50 $T --gtest_filter='CudaSample.*' > $OUT/sample_racecheck.log 2>&1
  grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/sample_racecheck.log | head -3
fi
echo "== sampled generate: CUDA fp8 (GPU sampling) vs CPU fp8 emulation (host sampler), same seeds"
cuda_vs_cpu "parity-b tiny" "--temperature 0.8 --top-p 0.9;--temperature 1.2 --top-k 40;--temperature 1" "1 2 3" \
  | tee $OUT/sample_vs_cpu.log
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
echo "== bench --backend cuda decode, 20b, 8k context, by token selection"
IFS=';' read -ra cs <<< "$SAMPLINGS"
for c in "${cs[@]}"; do
  echo "-- $c"
  $B bench --backend cuda --model $M/20b --prefill-lens 1024 --contexts 8192 --batches $BATCHES --steps 16 $c 2>&1 | grep -E "^\| 8192|selection"
done | tee $OUT/sample_bench.log
echo "== generate --backend cuda, 20b, 512 tokens"
for mode in "--greedy" "--temperature 0.8 --top-p 0.9 --seed 1" "--temperature 1 --seed 1"; do
  echo "-- $mode: $($B generate --backend cuda --model $M/20b --tokens $(seq -s, 1 64) --max-tokens 512 --ignore-eos $mode 2>&1 >/dev/null | grep prefill)"
done | tee $OUT/sample_generate.log
