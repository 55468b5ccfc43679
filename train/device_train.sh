#!/usr/bin/env bash
# One device call on the GPU machine: make the dialogues (data.py, rendered by the carried
# build/osprey), train a model of SHAPE for SECONDS (train.py), export it, and measure every osprey
# path on it (fidelity.py). Carry build/osprey, .devcarry (libcpp-httplib) and the countries-list
# package (tests/node/node_modules/countries-list). Writes logs, results and, for SHAPE=small, the
# compressed checkpoint to $OUT.
#   SHAPE=small|wide TRAIN_SECONDS=N TRAIN=N PER_FAMILY=N GEN_PATHS=... PATHS=... bash train/device_train.sh
set -euo pipefail
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
SHAPE=${SHAPE:-small}; SECONDS_BUDGET=${TRAIN_SECONDS:-270}; TRAIN=${TRAIN:-200000}; SEED=${SEED:-0}
OUT=${OUT:-/tmp/out}; W=/dev/shm/osprey_train; M=$W/$SHAPE
B=$PWD/build/osprey
mkdir -p $W $OUT
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
t0=$(date +%s)
if [ ! -f $W/train.ids ]; then
  for s in $(seq 0 15); do
    python3 train/data.py --countries tests/node/node_modules/countries-list --out-train $W/train.$s.jsonl \
      --out-test $W/test.jsonl --train $TRAIN --shards 16 --shard $s --seed $SEED &
  done
  wait
  for s in $(seq 0 15); do $B render --tokenizer data/o200k_base.tiktoken --requests $W/train.$s.jsonl --reply > $W/train.$s.ids & done
  $B render --tokenizer data/o200k_base.tiktoken --requests $W/test.jsonl --reply > $W/test.ids
  wait
  cat $W/train.{0..15}.ids > $W/train.ids
fi
echo "data: $(wc -l < $W/train.ids) training, $(wc -l < $W/test.ids) held-out dialogues ($(( $(date +%s) - t0 ))s)"
[ -f $W/tokenizer.json ] || { $B synth --preset tiny --seed 0 --out $W/tiny --quiet && cp $W/tiny/tokenizer.json $W/tiny/tokenizer_config.json $W/; }
rm -rf $M
PYTHONUNBUFFERED=1 python3 train/train.py --train $W/train.ids --test $W/test.ids --test-families $W/test.jsonl \
  --shape $SHAPE --seconds $SECONDS_BUDGET --seed $SEED --tokenizer-json $W/tokenizer.json --out $M \
  ${TRAIN_ARGS:-} 2>&1 | tee $OUT/train_$SHAPE.log
cp $W/tokenizer_config.json $M/
cp $M/osprey_train.json $OUT/osprey_train_$SHAPE.json
if [ "$SHAPE" = small ]; then
  mkdir -p $W/pkg && rm -rf $W/pkg/osprey-mini && cp -r $M $W/pkg/osprey-mini && rm -rf $W/pkg/osprey-mini/goldens
  tar -C $W/pkg -cf - osprey-mini | xz -9e -T16 > $OUT/osprey-mini.tar.xz
  # The parity test's golden: the first held-out dialogue's first 96 positions (causal: the same rows).
  python3 -c "
import json, numpy as np
m = json.load(open('$M/goldens/0.json')); n = min(96, len(m['tokens']))
np.save('$OUT/osprey-mini-golden.npy', np.load('$M/goldens/0.npy')[:n].astype(np.float32))
json.dump({'tokens': m['tokens'][:n], 'columns': m['columns'], 'family': m['family']}, open('$OUT/osprey-mini-golden.json', 'w'))"
  ls -la $OUT/osprey-mini.tar.xz $OUT/osprey-mini-golden.*
fi
PYTHONUNBUFFERED=1 python3 train/fidelity.py --osprey $B --model $M --test $W/test.ids --test-families $W/test.jsonl \
  --per-family ${PER_FAMILY:-15} ${PATHS:+--paths $PATHS} ${GEN_PATHS:+--gen-paths $GEN_PATHS} \
  --out $OUT/fidelity_$SHAPE.json 2>&1 | tee $OUT/fidelity_$SHAPE.log
echo "done in $(( $(date +%s) - t0 ))s"
