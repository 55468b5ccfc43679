#!/usr/bin/env bash
# GPU sampling on the GPU machine in one call: the CudaSample kernel tests (and compute-sanitizer
# memcheck/racecheck on them), then `bench --backend cuda` decode on the 20b synthetic checkpoint
# with argmax and with sampled token selection (SAMPLINGS: ";"-separated bench arguments), and
# `generate --backend cuda` greedy vs sampled, and seeded sampled generation on the GPU against
# the CPU fp8 emulation's host sampler. Needs build/ from this machine's build and .devcarry/lib.
# Logs to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
B=$PWD/build/osprey
T=$PWD/build/tests/osprey_cuda_tests
M=${MODELS:-/root/osprey_models}
OUT=${OUT:-/tmp/out}
BATCHES=${BATCHES:-1,8,64}
SAMPLINGS=${SAMPLINGS:-"--temperature 0;--temperature 1;--temperature 0.8 --top-p 0.9;--temperature 1 --top-k 50"}
mkdir -p "$M" "$OUT"
echo "== CudaSample tests"
$T --gtest_filter='CudaSample.*' 2>&1 | tee $OUT/sample_tests.log | grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|row" | head -30
if [ -z "${SKIP_SANITIZER:-}" ]; then
  compute-sanitizer --tool memcheck --print-limit 5 $T --gtest_filter='CudaSample.*' > $OUT/sample_memcheck.log 2>&1
  tail -2 $OUT/sample_memcheck.log
  compute-sanitizer --tool racecheck --print-limit 50 $T --gtest_filter='CudaSample.*' > $OUT/sample_racecheck.log 2>&1
  grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/sample_racecheck.log | head -3
fi
echo "== sampled generate: CUDA fp8 (GPU sampling) vs CPU fp8 emulation (host sampler), same seeds"
for p in parity-b tiny; do
  [ -d $M/$p ] || $B synth --preset $p --seed 7 --out $M/$p --quiet
  for mode in "--temperature 0.8 --top-p 0.9" "--temperature 1.2 --top-k 40" "--temperature 1"; do for sd in 1 2 3; do
    G=$($B generate --backend cuda --model $M/$p --tokens 5,6,7,8 --max-tokens 24 $mode --seed $sd --ignore-eos 2>/dev/null)
    C=$($B --threads 16 generate --precision fp8 --model $M/$p --tokens 5,6,7,8 --max-tokens 24 $mode --seed $sd --ignore-eos 2>/dev/null)
    python3 -c "import sys; a=sys.argv[1].split(','); b=sys.argv[2].split(','); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), len(a)); print(f'$p $mode seed $sd: cuda and cpu agree on the first {n} of {len(a)} tokens')" "$G" "$C"
  done; done
done | tee $OUT/sample_vs_cpu.log
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
