#!/usr/bin/env bash
# Speculative decoding on the trained osprey-mini: acceptance and end-to-end speedup per proposer on
# held-out prompts (train/data.py's test split, the last reply removed), greedy, with the outputs
# checked identical to decoding without speculation.
#   bash bench/speculative_trained.sh cpu|cuda [MODEL] [PROMPTS] [MAX_TOKENS]
# The drafts: the n-gram proposer, and osprey-mini's own first 2 and 1 layers (bench/make_layer_draft.py).
set -euo pipefail
BACKEND=${1:-cpu}; M=${2:-models/osprey-mini}; N=${3:-48}; MAXT=${4:-200}
B=${B:-build/osprey}; W=${W:-$(mktemp -d)}; mkdir -p $W
python3 train/data.py --countries tests/node/node_modules/countries-list --out-train $W/tr.jsonl \
  --out-test $W/test.jsonl --train 16 --test-per-family $(( (N + 7) / 8 )) --seed 3 >/dev/null
python3 - "$W" "$N" <<'PY'
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
with open(f"{w}/test.jsonl") as f, open(f"{w}/prompts.jsonl", "w") as o:
    for line in list(f)[:n]:
        d = json.loads(line); d["request"]["messages"] = d["request"]["messages"][:-1]; o.write(json.dumps(d) + "\n")
PY
$B render --model $M --requests $W/prompts.jsonl |
  python3 -c "import json,sys; [print(','.join(map(str, json.loads(l)['ids']))) for l in sys.stdin]" > $W/prompts.ids
python3 bench/make_layer_draft.py $M 2 $W/draft2 >/dev/null
python3 bench/make_layer_draft.py $M 1 $W/draft1 >/dev/null
run() {  # name, extra flags: prints "name seconds", the generation time generate logs (prefill and
         # decode of all prompts; not the process start or the model load)
  $B generate --model $M --backend $BACKEND --prompts $W/prompts.ids --max-tokens $MAXT --greedy "${@:2}" > $W/$1.out 2> $W/$1.err
  python3 - "$1" "$W/$1.err" <<'PY'
import re, sys
t = open(sys.argv[2]).read()
m = re.search(r"prefill \d+ tokens in ([\d.]+)s, decoded \d+ tokens in ([\d.]+)s", t)
s = float(m[1]) + float(m[2]) if m else float(re.search(r"generated \d+ tokens in ([\d.]+)s", t)[1])
print(f"{sys.argv[1]} {s:.3f}")
PY
}
echo "backend $BACKEND, $(wc -l < $W/prompts.ids) held-out prompts, up to $MAXT tokens each, greedy"
base=$(run plain | cut -d' ' -f2)
echo
echo "| proposer | K | mode | draft tokens accepted | tokens per verify step | verify steps / engine steps | seconds | speedup | same tokens |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---|"
echo "| none (direct generate) | — | — | — | — | — | $base | 1.00 | — |"
eng=$(run engine --speculative ngram:4 --speculative-mode off | cut -d' ' -f2)
echo "| none (the engine, drafts off) | — | off | — | — | — | $eng | $(python3 -c "print(f'{$base / $eng:.2f}')") | $(cmp -s $W/plain.out $W/engine.out && echo yes || echo NO) |"
for cfg in "ngram 4 always" "ngram 4 auto" "ngram 8 always" "draft2 4 always" "draft2 4 auto" "draft2 8 always" "draft1 4 always"; do
  set -- $cfg
  case $1 in ngram) spec=ngram:$2 ;; *) spec=draft:$W/$1:$2 ;; esac
  name=$1-$2-$3
  secs=$(run $name --speculative $spec --speculative-mode $3 | cut -d' ' -f2)
  line=$(grep "verify steps" $W/$name.err)
  acc=$(echo "$line" | sed -E 's/.*: [0-9]+ verify steps, ([0-9]+) of ([0-9]+) draft tokens accepted \(([0-9.]+)%\).*/\1 of \2 (\3%)/')
  per=$(echo "$line" | sed -E 's/.*, ([0-9.]+) tokens per verify step.*/\1/')
  steps=$(echo "$line" | sed -E 's/.*; ([0-9]+) of ([0-9]+) engine steps.*/\1 \/ \2/')
  same=$(cmp -s $W/plain.out $W/$name.out && echo yes || echo NO)
  echo "| $1 | $2 | $3 | $acc | $per | $steps | $secs | $(python3 -c "print(f'{$base / $secs:.2f}')") | $same |"
done
