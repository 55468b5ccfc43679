#!/usr/bin/env bash
# Session 50, for any card when the budget is short (about 4 minutes): s50-call1.sh with LEAN=1 (the
# cold-code probe, then s49-call1.sh without the sanitizers and the rope-only build, the 20b step at
# batches 1 and 8). Carry .devcarry/lib, .devcarry/s48, .devcarry/s49, .devcarry/s50.
LEAN=1 exec bash "$(dirname "$0")/s50-call1.sh"
