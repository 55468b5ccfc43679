#!/usr/bin/env bash
# Session 45, first device call: bench/targets.sh (every speed target of issues 14 and 16, 20b and
# 120b) on main's build (carry .devcarry/lib and .devcarry/s45: build/main from main 708a220).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s45 main
bash bench/targets.sh
date
