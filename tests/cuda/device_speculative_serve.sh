#!/usr/bin/env bash
# serve --backend cuda --speculative on osprey-mini: n-gram, and a 2-layer self-draft on the GPU
# (loaded before the target, whose KV pool takes what is left): the same greedy answer as without,
# the drafts counted in /metrics. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
mkdir -p models && tar -xJf data/osprey-mini.tar.xz -C models
python3 bench/make_layer_draft.py models/osprey-mini 2 /dev/shm/draft2 >/dev/null
ask() { curl -s localhost:8140/v1/chat/completions -d '{"model":"osprey-mini","messages":[{"role":"user","content":"What is the capital of Japan?"}],"temperature":0,"max_tokens":200}' | python3 -c "import json,sys; m=json.load(sys.stdin)['choices'][0]['message']; print(repr(m['reasoning_content']), repr(m['content']))"; }
for spec in "" "--speculative ngram:4 --speculative-mode always" "--speculative draft:/dev/shm/draft2:4 --speculative-mode always"; do
  $B serve --backend cuda --model models/osprey-mini --port 8140 --max-batch 8 $spec > $OUT/serve.log 2>&1 &
  S=$!
  for i in $(seq 1 120); do kill -0 $S 2>/dev/null || break; curl -sf localhost:8140/health >/dev/null && break; sleep 0.5; done
  echo "== serve --backend cuda $spec"
  grep -E "KV cache|speculative" $OUT/serve.log | head -3
  ask
  curl -s localhost:8140/metrics | grep -E "^osprey_spec_decode_(num_drafts|num_accepted_tokens|num_draft_tokens)_total"
  kill $S; wait $S 2>/dev/null
done
