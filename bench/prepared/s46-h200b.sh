#!/usr/bin/env bash
# The second call of s46-h200a.sh's plan (same builds and carry): the 120b 8k prefill on `two` (two
# sets, the pass) and `staged` (one set, the staged conversion) against main, to attribute what
# s46-h200a.sh's `twostaged` did.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s46 main two staged
D=$(synth_dir 120b)
prefill_only $D 8192 150 two staged main
date
