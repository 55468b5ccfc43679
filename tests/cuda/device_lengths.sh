#!/usr/bin/env bash
# Every GPU entry point over prompt lengths 1..300 on a trained checkpoint (the lengths that once
# broke `logits --backend cuda`: 33, 34, 65, 83): logits (FP8 with and without cuBLASLt, BF16, FP32),
# generate (FP8, BF16, FP32), bench (prefill at every length) and serve (a /v1/completions request
# per length, eight at a time). Prints one line per entry point: lengths run, failures, non-finite.
#   [TOKENS_JSON=F] bash tests/cuda/device_lengths.sh MODEL_DIR [MAX_LEN]
# The prompts are prefixes of the "tokens" of TOKENS_JSON (default: the model's goldens/*.json).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
B=$PWD/build/osprey M=$1 N=${2:-300}
D=$(mktemp -d)
# Prompts: prefixes of real dialogues' ids, repeated when shorter than N.
python3 - "${TOKENS_JSON:-$M/goldens/*.json}" "$N" "$D" <<'PY'
import glob, json, sys
src, n, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ids = []
for g in sorted(glob.glob(src)):
    ids += json.load(open(g))["tokens"]
ids = (ids * (n // max(len(ids), 1) + 1))[:n]
with open(d + "/prompts.txt", "w") as f:
    for L in range(1, n + 1):
        f.write(",".join(map(str, ids[:L])) + "\n")
PY
check_npy='import numpy as np, sys; a = np.load(sys.argv[1]); sys.exit(0 if a.shape[0] == int(sys.argv[2]) and np.isfinite(a).all() else 3)'
# The default path (FP8, cuBLASLt from 32 rows) at every length; the others every 7th and at the
# lengths that failed.
some=$( (seq 1 7 $N; echo 33 34 65 83 | tr ' ' '\n') | sort -nu | awk -v n=$N '$1 <= n')
for mode in "fp8" "fp8 --no-cublaslt" "bf16" "fp32"; do
  if [ "$mode" = fp8 ]; then lens=$(seq 1 $N); else lens=$some; fi
  run_len() {
    local L=$1; local p; p=$(sed -n ${L}p $D/prompts.txt)
    $B logits --backend cuda --precision $mode --model $M --tokens $p --out $D/l$L.npy >/dev/null 2>$D/l$L.err &&
      python3 -c "$check_npy" $D/l$L.npy $L || echo $L
    rm -f $D/l$L.npy
  }
  export -f run_len; export B M D mode check_npy
  fails=$(echo "$lens" | xargs -P 8 -I{} bash -c 'run_len {}' | sort -n | tr '\n' ' ')
  echo "logits --backend cuda --precision $mode: $(echo "$lens" | wc -l) lengths in 1..$N, failed or non-finite: ${fails:-none}"
done
for prec in fp8 bf16 fp32; do
  $B generate --backend cuda --precision $prec --model $M --prompts $D/prompts.txt --max-tokens 4 --greedy \
    > $D/gen_$prec.txt 2>$D/gen_$prec.err
  rc=$?
  echo "generate --backend cuda --precision $prec --prompts (1..$N): rc $rc, $(grep -c . $D/gen_$prec.txt) outputs"
  [ $rc = 0 ] || tail -2 $D/gen_$prec.err
done
$B bench --backend cuda --model $M --prefill-lens $(seq -s, 1 $N) --contexts 512 --batches 1,8 --steps 4 \
  > $D/bench.txt 2>$D/bench.err
echo "bench --backend cuda --prefill-lens 1..$N: rc $?, $(grep -c '^| [0-9]' $D/bench.txt) table rows"
PORT=$((20000 + RANDOM % 20000))
$B serve --backend cuda --model $M --port $PORT --max-batch 8 > /dev/null 2>$D/serve.err &
S=$!
for _ in $(seq 300); do curl -sf http://127.0.0.1:$PORT/health >/dev/null && break; sleep 0.2; done
ask() {
  local L=$1; local p; p=$(sed -n ${L}p $D/prompts.txt)
  code=$(curl -s -o $D/s$1.json -w '%{http_code}' http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' \
    -d "{\"model\":\"$(basename $M)\",\"prompt\":[$p],\"max_tokens\":3,\"temperature\":0}")
  [ "$code" = 200 ] && grep -q '"choices"' $D/s$1.json || echo $L
}
export -f ask; export PORT
fails=$(seq 1 $N | xargs -P 8 -I{} bash -c 'ask {}' | sort -n | tr '\n' ' ')
echo "serve --backend cuda, /v1/completions at lengths 1..$N: failed: ${fails:-none}"
kill $S; wait $S 2>/dev/null
rm -rf $D
