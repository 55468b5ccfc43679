#!/usr/bin/env bash
# Session 49, call 2 (about 3 minutes on a warm machine; the 120b at batch 1 fits an H100): after
# s49-call1.sh, the same builds (carry .devcarry/lib, .devcarry/s48/head and .devcarry/s49):
#   1. the 120b decode step at batch 1 (8k context): head both head both;
#   2. where the 120b's batch-1 step goes (attr: main with bench/prepared/s33-attribution.patch,
#      kernels left out of the step's graph; never run on the 120b).
# attr's build: a worktree of main with build/ built there (scripts/setup.sh's
# data/o200k_base.tiktoken copied in), then in it: python3 bench/variant_build.py
# bench/prepared/s33-attribution.patch <this checkout>/.devcarry/s49/attr --no-tests
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s48/head build/head
unpack .devcarry/s49/attr build/attr
builds_preamble .devcarry/s49 both
D=$(synth_dir 120b)
for n in head both head both; do
  echo "-- 120b $n"
  timeout 100 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 16 --batches 1 \
    --contexts 8192 --steps 32 > $OUT/decode_120b_$n.txt 2>&1
  grep -E "loaded in|^\| [0-9]+ \| [0-9]+ \||rror" $OUT/decode_120b_$n.txt | head -4
done
date
echo "== 120b batch 1: kernels left out of the step (main + s33-attribution.patch)"
OSPREY_SKIP_LIST="none;qkv;rope;attn;o;up;down;combine;unembed;rope,attn;up,down;qkv,o,up,down,unembed;none" \
  timeout 150 build/attr/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 16 \
  --batches 1 --contexts 8192 --steps 32 > $OUT/attribution_120b.log 2>&1
grep -E "^\| (left out|8192)|rror" $OUT/attribution_120b.log
date
