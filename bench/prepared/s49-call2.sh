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
decode_builds $D 1 100 head both head both
date
echo "== 120b batch 1: kernels left out of the step (main + s33-attribution.patch)"
ATTR=$PWD/build/attr/osprey PRESET=120b BATCHES=1 RUN_S=150 \
  SKIPS="none;qkv;rope;attn;o;up;down;combine;unembed;rope,attn;up,down;qkv,o,up,down,unembed;none" \
  bash tests/cuda/device_attribution.sh
date
