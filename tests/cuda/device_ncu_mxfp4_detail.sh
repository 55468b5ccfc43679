#!/usr/bin/env bash
# ncu's warp-state, scheduler, instruction and occupancy sections on one MXFP4 decode GEMM launch
# (20b, batch 1, 8k context), and the instruction mix of the decode kernel's SASS. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
$B synth --preset 20b --seed 1 --out $M/20b --quiet
OSPREY_PROFILE_DECODE=1 ncu --profile-from-start off --clock-control none -k regex:mxfp4_decode --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
  $B bench --backend cuda --model $M/20b --weights mxfp4 --prefill-lens 16 --contexts 8192 --batches 1 --steps 1 2>/dev/null > $OUT/ncu_detail.txt
grep -E "Stall|Warp Cycles|Issued|Executed Ipc|Active Warps|Eligible|No Eligible|Registers|Achieved Occupancy|Theoretical Occ|Instructions|Duration|Throughput|Block Limit|Waves" $OUT/ncu_detail.txt | head -60
cuobjdump -sass build/osprey 2>/dev/null | awk '/Function : .*mxfp4_decode_kernelILi1/{f=1;next} f&&/Function :/{f=0} f' > $OUT/dec1.sass
wc -l $OUT/dec1.sass; grep -oE "(HMMA|HMUL2|HFMA2|LOP3|SHF|IMAD|LDS|LDGSTS|BAR|F2F|PRMT|HADD2|FMUL|I2F|F2I|BRA|ISETP)[^ ]*" $OUT/dec1.sass | sed 's/\..*//' | sort | uniq -c | sort -rn | head -20
grep -m5 -E "HMUL2|BF16" $OUT/dec1.sass
