#!/usr/bin/env bash
# Session 43, second device call: bench/targets.sh (every speed target of issues 14 and 16, 20b and
# 120b) on mid, main e365b2c (carry .devcarry/lib and .devcarry/s42, as bench/prepared/s43-call1.sh).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s42 mid
bash bench/targets.sh
date
