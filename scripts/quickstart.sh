#!/usr/bin/env bash
# Fresh machine to first tokens: installs dependencies, builds, writes the embedded default model
# (the tiny synthetic gpt-oss checkpoint, full o200k vocabulary) and generates from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
MODEL=models/tiny
[ -f "$MODEL/config.json" ] || build/osprey synth --preset tiny --seed 0 --out "$MODEL"
echo "prompt token ids: 200006,1428,200008,12194,0" >&2
echo "generated token ids:" >&2
build/osprey generate --model "$MODEL" --tokens 200006,1428,200008,12194,0 --max-tokens 16 --greedy
