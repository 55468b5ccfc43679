#!/usr/bin/env bash
# Session 48, for an H200 (about 7 minutes): bench/targets.sh on main (every speed target of issues
# 14 and 16; no H200 figures since session 35), then the 120b 8k prefill on `twostaged`
# (bench/prepared/s46-h200a.sh: two FP8 expert buffer sets, each conversion two layers ahead, plus
# the staged conversion; it needs the H200's memory for the 120b) and on main again.
# Carry .devcarry/lib, .devcarry/s48/head (main at 41f24a8, the fast MXFP4 load: `mkdir -p
# .devcarry/s48/head && xz -c build/osprey > .devcarry/s48/head/osprey.xz`) and .devcarry/s46/twostaged (see s46-h200a.sh for how it is
# built; it loads the 120b the old way, about 70-110 s).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s46/twostaged build/twostaged
builds_preamble .devcarry/s48 head
bash bench/targets.sh
date
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
[ "$mem" -gt 100000 ] && prefill_only $(synth_dir 120b) 8192 150 twostaged head
date
