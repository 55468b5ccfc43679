#!/usr/bin/env bash
# Fresh machine to a served model: installs dependencies, builds, writes the embedded default
# model (the tiny synthetic gpt-oss checkpoint with the real o200k_harmony tokenizer), starts the
# OpenAI-compatible server on it, sends one chat request, shows the answer, and stops the server.
# (The tiny model's weights are random: its answer is well-formed JSON over meaningless tokens.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh >/dev/null
MODEL=models/tiny
[ -f "$MODEL/tokenizer.json" ] || build/osprey synth --preset tiny --seed 0 --out "$MODEL" --quiet
PORT=${PORT:-8000}
build/osprey serve --model "$MODEL" --port "$PORT" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
REQUEST='{"model": "tiny", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 24, "temperature": 0}'
echo "POST /v1/chat/completions $REQUEST"
echo "answer:"
curl -sS "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "$REQUEST"
echo
