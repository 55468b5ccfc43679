#!/usr/bin/env bash
# Issue 16's exactness on the GPU machine: greedy tokens of the persistent decode kernel against the
# kernel-per-op path and against the CPU emulation of the same roundings (--precision mxfp4), on
# the trained osprey-mini over the first N held-out dialogues' prompts (FID_IDS: render --reply
# lines; a prompt is a line's first prompt_tokens ids), MAX_TOKENS each; then (with PRESET set,
# e.g. 20b) the same kernels on a synthetic checkpoint over a few random prompts past the window.
# The parity checkpoints are not in it: their head_dim (16, 32) is not the persistent kernel's (64).
# KERNELS: per-op, persistent (1 block an SM), persistent2 (2 blocks an SM, the default). Streams and a summary to $OUT.
source "$(dirname "$0")/device_env.sh"
mkdir -p models && [ -d models/osprey-mini ] || tar -C models -xJf data/osprey-mini.tar.xz
N=${N:-48} MAX=${MAX_TOKENS:-64}
python3 - "${FID_IDS:-build/fid/test0.ids}" $N > $OUT/prompts.txt <<'PY'
import json, sys
for line in list(open(sys.argv[1]))[:int(sys.argv[2])]:
    d = json.loads(line)
    print(",".join(map(str, d["ids"][:d["prompt_tokens"]])))
PY
kernel_flags() {
  case $1 in
    persistent) echo "--decode-kernel persistent --persistent-blocks 1" ;;
    persistent2) echo "--decode-kernel persistent --persistent-blocks 2" ;;
    *) echo "--decode-kernel $1" ;;
  esac
}
# compare LABEL A B: streams (one comma-separated line a prompt) identical, and the first divergence.
compare() {
  python3 - "$@" <<'PY'
import sys
label, a, b = sys.argv[1], open(sys.argv[2]).read().split("\n"), open(sys.argv[3]).read().split("\n")
a, b = [l for l in a if l], [l for l in b if l]
assert len(a) == len(b), f"{label}: {len(a)} against {len(b)} streams"
same = sum(x == y for x, y in zip(a, b))
firsts = []
for x, y in zip(a, b):
    x, y = x.split(","), y.split(",")
    n = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    if x != y: firsts.append(n)
tokens = sum(len(x.split(",")) for x in a)
print(f"{label}: {same} of {len(a)} streams identical ({tokens} tokens)" +
      (f"; the others part at token {sorted(firsts)}" if firsts else ""))
PY
}
run_model() {  # TAG MODEL PROMPTS EXTRA
  local tag=$1 model=$2 prompts=$3 extra=$4
  for k in ${KERNELS:-per-op persistent persistent2}; do
    $B generate --backend cuda --model $model --prompts $prompts --max-tokens $MAX --greedy $extra $(kernel_flags $k) \
      > $OUT/${tag}_$k.txt 2> $OUT/${tag}_$k.log || { echo "$tag $k failed:"; tail -3 $OUT/${tag}_$k.log; }
  done
  [ -n "${NO_CPU:-}" ] || $B generate --backend cpu --precision mxfp4 --model $model --prompts $prompts --max-tokens $MAX \
    --greedy $extra > $OUT/${tag}_cpu_mxfp4.txt 2> $OUT/${tag}_cpu_mxfp4.log
  for k in ${KERNELS:-per-op persistent persistent2}; do
    [ "$k" = per-op ] || compare "$tag $k vs per-op" $OUT/${tag}_$k.txt $OUT/${tag}_per-op.txt
    [ -n "${NO_CPU:-}" ] || compare "$tag $k vs cpu mxfp4 emulation" $OUT/${tag}_$k.txt $OUT/${tag}_cpu_mxfp4.txt
  done
}
echo "== osprey-mini, $N held-out prompts, $MAX greedy tokens each"
run_model mini models/osprey-mini $OUT/prompts.txt ""
if [ -n "${PRESET:-}" ]; then
  D=$(synth_dir $PRESET)
  python3 -c "
import random
r = random.Random(5)
for n in (40, 150, 300, 700): print(','.join(str(r.randrange(200000)) for _ in range(n)))" > $OUT/prompts_$PRESET.txt
  echo "== $PRESET synthetic, 4 random prompts (40 to 700 tokens), $MAX greedy tokens each past EOS"
  MAX=${MAX_SYNTH:-32} NO_CPU=${NO_CPU_SYNTH:-1} run_model $PRESET $D $OUT/prompts_$PRESET.txt "--ignore-eos"
fi
