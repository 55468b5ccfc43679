#!/usr/bin/env bash
# The CUDA tests, then the generate contract on the 20b shape: the same ids line with and without
# --speculative (n-gram, and the tiny synthetic checkpoint, same tokenizer, drafting for the 20b),
# the acceptance on stderr. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
( time $T --gtest_brief=1 ) > $OUT/cuda_tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran|real" $OUT/cuda_tests.log | head -20
$B synth --preset 20b --seed 1 --out /dev/shm/20b --quiet
$B synth --preset tiny --seed 2 --out /dev/shm/tiny --quiet
P=$(python3 -c "print(','.join(str(t) for t in ([1000 + i % 9 for i in range(60)])))")
for spec in "" "--speculative ngram:4 --speculative-mode always" "--speculative ngram:4" "--speculative draft:/dev/shm/tiny:3 --speculative-mode always"; do
  echo "== generate --backend cuda $spec"
  $B generate --backend cuda --model /dev/shm/20b --tokens $P --max-tokens 64 --greedy --ignore-eos $spec > $OUT/ids.txt 2> $OUT/err.txt
  md5sum < $OUT/ids.txt; head -c 120 $OUT/ids.txt; echo; grep -E "verify steps|generated|decoded" $OUT/err.txt
done
