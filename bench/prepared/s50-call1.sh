#!/usr/bin/env bash
# Session 50, for any card (about 6 minutes): the cold-code probe (bench/probes/icache_cold_code.cu,
# seconds), then bench/prepared/s49-call1.sh (the batch-1 fusions against main). Carry .devcarry/lib,
# .devcarry/s48, .devcarry/s49 and .devcarry/s50 (the probe, built as its header says, copied there).
cd "$(dirname "$0")/../.."
timeout 60 .devcarry/s50/probe_icache_cold_code | tee $OUT/icache_probe.txt
bash bench/prepared/s49-call1.sh
