#!/usr/bin/env bash
# Final measurements: the 20b verify-step table with the final decode buckets; on the 20b shape
# (random weights, which amplify rounding) whether greedy ids depend on the path: direct generate,
# the engine without drafts, the engine with n-gram drafts; and, without any speculation, whether a
# sequence's greedy tokens behind serve change when other requests share its decode steps.
source "$(dirname "$0")/device_env.sh"
$B synth --preset 20b --seed 1 --out /dev/shm/20b --quiet
$B bench --backend cuda --model /dev/shm/20b --prefill-lens 1024 --batches 1,8,32 --contexts 8192 --steps 24 \
  --verify-k 1,2,3,4,5,6,7,8 --verify-batches 1,8,32 --json $OUT/verify_20b.json 2>&1 | grep -v "loading weights" > $OUT/verify_20b.log
cat $OUT/verify_20b.log
P=$(python3 -c "print(','.join(str(1000 + i % 9) for i in range(60)))")
for spec in "" "--speculative ngram:4 --speculative-mode off" "--speculative ngram:4 --speculative-mode always"; do
  ids=$($B generate --backend cuda --model /dev/shm/20b --tokens $P --max-tokens 64 --greedy --ignore-eos $spec 2>/dev/null)
  echo "generate $spec: $(echo $ids | md5sum | cut -c1-8) $(echo $ids | cut -d, -f1-12)"
done
$B serve --backend cuda --model /dev/shm/20b --port 8311 --max-batch 8 --max-seq-len 4096 > $OUT/serve.log 2>&1 &
S=$!
for i in $(seq 1 240); do kill -0 $S 2>/dev/null || break; curl -sf localhost:8311/health >/dev/null && break; sleep 0.5; done
req() { curl -s localhost:8311/v1/completions -d "{\"model\":\"20b\",\"prompt\":[$1],\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true}" | python3 -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'][:80].encode())"; }
echo "alone:          $(req $P)"
O1=$(python3 -c "print(','.join(str(5000 + i * 7 % 300) for i in range(40)))")
( req $O1 >/dev/null & req $O1 >/dev/null & req $O1 >/dev/null & echo "beside three:   $(req $P)"; wait )
kill $S
