#!/usr/bin/env bash
# ncu kernel times of one 20b decode step at 8k context (after the graph's warm-up step), summed by
# kernel, for each WEIGHTS format and batch in NCU (default "1 64"). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
for wt in ${WEIGHTS:-mxfp4 fp8}; do for nb in ${NCU:-1 64}; do
  echo "== ncu: decode step kernels, 20b, --weights $wt, batch $nb, context 8192"
  ncu_decode_step $nb 14 $OUT/ncu_decode_${wt}_b$nb.txt --weights $wt
done; done
