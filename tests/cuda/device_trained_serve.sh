#!/bin/bash
# The default model (osprey-mini) behind serve on both backends: greedy answers, a json_schema
# answer and a long system prompt sent twice (a prefix hit), cuda against cpu. Usage: bash tests/cuda/device_trained_serve.sh
source tests/cuda/device_env.sh
[ -d models/osprey-mini ] || { mkdir -p models && tar -C models -xJf data/osprey-mini.tar.xz; }
for be in cuda cpu; do
  $B serve --backend $be --port 8140 > $OUT/serve_mini_$be.log 2>&1 &
  SP=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:8140/health > /dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 0.5; done
  grep -E "KV|serving" $OUT/serve_mini_$be.log | head -3
  for q in "What is the capital of France?" "Name three primary colors." "What is 12 plus 30?"; do
    curl -s http://127.0.0.1:8140/v1/chat/completions -H 'content-type: application/json' \
      -d "{\"model\":\"osprey-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":120,\"temperature\":0}" \
      | python3 -c "import json,sys; j=json.load(sys.stdin); c=j['choices'][0] if 'choices' in j else sys.exit(print(' error', j)); print('$be', repr(c['message'].get('content')), c['finish_reason'])"
  done
  curl -s http://127.0.0.1:8140/v1/chat/completions -H 'content-type: application/json' -d '{"model":"osprey-mini","messages":[{"role":"user","content":"Give me a person as JSON."}],"max_tokens":200,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false}}}}' \
    | python3 -c "import json,sys; j=json.load(sys.stdin); c=j['choices'][0] if 'choices' in j else sys.exit(print(' error', j)); print('$be json_schema', c['message'].get('content'), c['finish_reason'])"
  # the same long system prompt twice: the second is a prefix hit
  SYS=$(python3 -c "print(' '.join(['Answer briefly and helpfully.']*300))")
  for k in 1 2; do
    curl -s -w ' %{time_total}s' http://127.0.0.1:8140/v1/chat/completions -H 'content-type: application/json' \
      -d "{\"model\":\"osprey-mini\",\"messages\":[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"What is the capital of France?\"}],\"max_tokens\":60,\"temperature\":0}" \
      | python3 -c "import sys; t=sys.stdin.read(); import json; j=json.loads(t[:t.rindex(' ')]); print('$be system x$k', repr(j['choices'][0]['message'].get('content')), j['usage']['prompt_tokens'], 'tokens', t[t.rindex(' '):])"
  done
  curl -s http://127.0.0.1:8140/metrics | grep -E "^vllm:prefix_cache_(queries|hits)_total"
  kill $SP; wait $SP 2>/dev/null
done
