#!/usr/bin/env bash
# CPU paths of osprey against its CPU fp32 engine on the trained osprey-mini, without numpy (the CPU
# machine has none): for each of the first N held-out dialogues (train/data.py's test split, seed 0,
# rendered by `osprey render --reply`), the fp32 logits and each variant's, compared by
# bench/fidelity_kl.cpp (build/osprey_fidelity_kl) and deleted; then per variant the positions,
# argmax agreement, mean KL with a 95% bootstrap interval over dialogues, and the worst KL; then
# each later variant's mean KL minus the first's, with a paired bootstrap interval (the same
# resampled dialogues for both: the difference is resolved far better than either mean).
#   VARIANTS="name:precision[:ENV=1+ENV=1[:--flag+value]] ..." N=96 bash bench/fidelity_cpu.sh
# (the fourth field: more `osprey logits` arguments, '+' for spaces, e.g. --kv-cache-dtype+fp8)
# The EXP_* variables of docs/FIDELITY.md's measurement exist only with
# bench/prepared/cpu-bf16-attention-roundings.patch applied; without it they change nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build/osprey} MODEL=${MODEL:-models/osprey-mini} N=${N:-96} W=${W:-/tmp/osprey_fidelity_cpu}
VARIANTS=${VARIANTS:-"bf16:bf16 mxfp4:mxfp4 fp8:fp8"}
mkdir -p $W
KL=build/osprey_fidelity_kl
[ -x $KL ] || ninja -C build osprey_fidelity_kl >/dev/null
if [ ! -s $W/test.ids ]; then
  python3 train/data.py --countries tests/node/node_modules/countries-list --out-train $W/train.jsonl \
    --out-test $W/test.jsonl --train 10 --shards 1 --shard 0 --seed 0 >/dev/null
  $B render --tokenizer data/o200k_base.tiktoken --requests $W/test.jsonl --reply > $W/test.ids
fi
python3 -c "
import json, sys
for l in list(open('$W/test.ids'))[:$N]: print(','.join(map(str, json.loads(l)['ids'])))" > $W/tokens.txt
for v in $VARIANTS; do rm -f $W/raw_${v%%:*}.txt; done
while read -r toks; do
  $B logits --backend cpu --precision fp32 --model $MODEL --tokens "$toks" --out $W/ref.npy 2>/dev/null
  for v in $VARIANTS; do
    IFS=: read -r name prec envs args <<< "$v"
    env ${envs//+/ } $B logits --backend cpu --precision $prec ${args//+/ } --model $MODEL --tokens "$toks" \
      --out $W/path.npy 2>/dev/null
    $KL --raw $W/ref.npy $W/path.npy >> $W/raw_$name.txt
  done
done < $W/tokens.txt
rm -f $W/ref.npy $W/path.npy
echo "| path | dialogues | positions | argmax | mean KL (95% interval over dialogues) | worst KL |"
echo "|---|---:|---:|---:|---:|---:|"
for v in $VARIANTS; do
  python3 - "$W/raw_${v%%:*}.txt" "$v" <<'PY'
import random, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
n = sum(r[0] for r in rows); kl = sum(r[1] for r in rows); agree = sum(r[2] for r in rows)
rng = random.Random(1); means = []
for _ in range(2000):
    s = [rng.choice(rows) for _ in rows]
    means.append(sum(r[1] for r in s) / sum(r[0] for r in s))
means.sort()
print(f"| {sys.argv[2]} | {len(rows)} | {int(n)} | {100 * agree / n:.2f}% | {kl / n:.2e} ({means[50]:.1e} to {means[1949]:.1e}) | "
      f"{max(r[3] for r in rows):.2e} |")
PY
done
set -- $VARIANTS
if [ $# -gt 1 ]; then
  echo
  echo "| path | mean KL minus ${1%%:*}'s (95% paired interval) | ratio |"
  echo "|---|---:|---:|"
  first=${1%%:*}; shift
  for v in "$@"; do
    python3 - "$W/raw_$first.txt" "$W/raw_${v%%:*}.txt" "$v" <<'PY'
import random, sys
a = [list(map(float, l.split())) for l in open(sys.argv[1])]
b = [list(map(float, l.split())) for l in open(sys.argv[2])]
assert len(a) == len(b) and all(x[0] == y[0] for x, y in zip(a, b)), "the variants saw different dialogues"
def diff(idx): return (sum(b[i][1] for i in idx) - sum(a[i][1] for i in idx)) / sum(a[i][0] for i in idx)
rng = random.Random(1); ds = sorted(diff([rng.randrange(len(a)) for _ in a]) for _ in range(4000))
print(f"| {sys.argv[3]} | {diff(range(len(a))):+.2e} ({ds[100]:+.1e} to {ds[3899]:+.1e}) | "
      f"{sum(r[1] for r in b) / sum(r[1] for r in a):.2f} |")
PY
  done
fi
