#!/usr/bin/env bash
# Speculative decoding on the GPU machine. PART=a: the CUDA tests (the new verify and engine
# speculation tests among them), the verify-step cost on the 20b shape (k = 1..8 at batch 1, 8, 32,
# 8k context) and the trained osprey-mini end to end (bench/speculative_trained.sh cuda). PART=b:
# the verify-step cost on the 120b shape (checkpoint written to /dev/shm). Carry build/osprey,
# build/tests/osprey_cuda_tests, .devcarry and tests/node/node_modules/countries-list. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
VERIFY="--prefill-lens 1024 --batches 1,8,32 --contexts 8192 --steps 24 --verify-k 1,2,3,4,5,6,7,8 --verify-batches 1,8,32"
case ${PART:-a} in
a)
  echo "== CUDA tests"
  ( time $T --gtest_brief=1 ) > $OUT/cuda_tests.log 2>&1
  grep -E "^\[  (PASSED|FAILED)|Failure|tests ran|real" $OUT/cuda_tests.log | head -30
  echo "== 20b verify steps"
  $B synth --preset 20b --seed 1 --out /dev/shm/20b --quiet
  $B bench --backend cuda --model /dev/shm/20b $VERIFY --json $OUT/verify_20b.json > $OUT/verify_20b.log 2>&1
  cat $OUT/verify_20b.log | grep -v "^osprey: load"
  rm -rf /dev/shm/20b
  echo "== trained osprey-mini"
  mkdir -p models && tar -xJf data/osprey-mini.tar.xz -C models
  W=/dev/shm/spec bash bench/speculative_trained.sh cuda models/osprey-mini 48 200 2>&1 | tee $OUT/trained_cuda.md
  ;;
b)
  echo "== 120b verify steps"
  ( time $B synth --preset 120b --seed 1 --out /dev/shm/120b --quiet ) 2>&1 | grep -E "real|error"
  $B bench --backend cuda --model /dev/shm/120b $VERIFY --json $OUT/verify_120b.json > $OUT/verify_120b.log 2>&1
  cat $OUT/verify_120b.log | grep -v "^osprey: load"
  ;;
esac
