#!/usr/bin/env bash
# Fresh machine to a served model: installs dependencies and the embedded default model (setup.sh),
# builds, starts the OpenAI-compatible server on osprey-mini (no --model: the default), asks it one
# question, shows the answer with its reasoning, and stops the server.
# osprey-mini is a small gpt-oss trained by train/ on synthetic dialogues (country facts, arithmetic,
# unit conversions, tool calls): a model for demos and tests, not a general assistant.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh >/dev/null
PORT=${PORT:-8000}
build/osprey serve --port "$PORT" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
REQUEST='{"model": "osprey-mini", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 200, "temperature": 0}'
echo "POST /v1/chat/completions $REQUEST"
RESPONSE=$(curl -sS "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "$REQUEST")
echo "$RESPONSE"
node -e 'const m = JSON.parse(process.argv[1]).choices[0].message;
         console.log(`\nreasoning: ${m.reasoning_content}\nanswer:    ${m.content}`);' "$RESPONSE"
