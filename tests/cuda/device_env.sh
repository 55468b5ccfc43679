# Sourced by the device scripts (tests/cuda/device_*.sh) on the GPU machine: the carried
# libraries, the binaries built on the CPU machine, where models and logs go, and the checks that
# compare token streams of the CUDA path with the CPU fp8 emulation's.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
# NCCL (NcclCommunicator opens libnccl.so.2 at run time): the system's, else the copy torch ships.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  nccl_dir=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
  [ -n "$nccl_dir" ] && [ -d "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir:$LD_LIBRARY_PATH
fi
B=$PWD/build/osprey
T=$PWD/build/tests/osprey_cuda_tests
M=${MODELS:-/root/osprey_models}
OUT=${OUT:-/tmp/out}
mkdir -p "$M" "$OUT"

# unpack DIR DEST: every DIR/NAME.xz (binaries built on the CPU machine and carried compressed,
# .devcarry/...) decompressed to DEST/NAME, executable. Device scripts call it before anything
# else, e.g. `unpack .devcarry/s39/b build/b`.
unpack() {
  local f
  mkdir -p "$2"
  for f in "$1"/*.xz; do
    [ -e "$f" ] || { echo "unpack: no .xz files in $1" >&2; return 1; }
    xz -d -c "$f" > "$2/$(basename "${f%.xz}")" && chmod +x "$2/$(basename "${f%.xz}")"
  done
}

# builds_preamble DIR NAME..: the start of a script that compares builds carried as DIR/NAME/*.xz
# (bench/variant_build.py): each unpacked to build/NAME, the first one's osprey as build/osprey (the
# helpers' $B), errors no longer fatal, $OUT packed into one all.tgz when the script exits (one file
# comes back), and the GPU's name and clocks.
builds_preamble() {
  local dir=$1 n; shift
  for n in "$@"; do unpack "$dir/$n" "build/$n"; done
  cp "build/$1/osprey" build/osprey
  set +e
  trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
}

# cuda_tests: the CUDA tests that TEST_FILTER selects (default all) unless SKIP_TESTS is set, logged
# to $OUT/tests.log, their summary and failures printed. sanitize_tests FILTER: compute-sanitizer
# memcheck and racecheck over those tests (device_sanitize.sh), at most SANITIZE_S seconds.
cuda_tests() {
  [ -n "${SKIP_TESTS:-}" ] && return
  echo "== tests"
  $T --gtest_filter="${TEST_FILTER:-*}" 2>&1 | tee $OUT/tests.log |
    grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|tests ran|rror" | head -60
}
sanitize_tests() {
  TEST_FILTER=$1 timeout ${SANITIZE_S:-240} bash "$(dirname "${BASH_SOURCE[0]}")/device_sanitize.sh"
}

# preamble: the GPU's name and clocks, the CUDA tests (cuda_tests, at most TESTS_S seconds) and,
# with SANITIZE set, compute-sanitizer on those tests (sanitize_tests).
preamble() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  [ -z "${SKIP_TESTS:-}" ] && timeout ${TESTS_S:-300} bash -c "source ${BASH_SOURCE[0]}; cuda_tests"
  [ -n "${SANITIZE:-}" ] && sanitize_tests "$SANITIZE"
  true
}

# mini_fidelity LOG N PATHS [FIRST]: the trained osprey-mini (unpacked from data/ if needed) on
# FID_PATHS (default PATHS) against the CPU fp32 engine (bench/fidelity_paths.py), over FID_N
# (default N) dialogues of FID_IDS (default build/fid/test.ids) from the FIRST-th (default 0), at
# most FID_S seconds, into $OUT/LOG.
mini_fidelity() {
  mkdir -p models && [ -d models/osprey-mini ] || tar -C models -xJf data/osprey-mini.tar.xz
  timeout ${FID_S:-200} python3 "$(dirname "${BASH_SOURCE[0]}")/../../bench/fidelity_paths.py" $B models/osprey-mini \
    ${FID_IDS:-build/fid/test.ids} ${FID_N:-$2} ${FID_PATHS:-$3} ${4:-0} 2>&1 | tee $OUT/$1
}

# synth_dir MODEL: the synthetic checkpoint's directory ($M/MODEL; the 120b in /dev/shm), written
# first (seed 1) if missing.
synth_dir() {
  local dir=$M/$1
  [ "$1" = 120b ] && dir=/dev/shm/120b
  [ -d $dir ] || ( time $B synth --preset $1 --seed 1 --out $dir --quiet ) 2>&1 | grep -E "real|rror" >&2
  echo $dir
}

# gtest_summary LOG: a gtest log's verdict lines and failures.
gtest_summary() { grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|tests from .* ran" "$1" | head -12; }

# prefill_builds MODEL_DIR LENS TIMEOUT NAMES..: `bench --backend cuda --weights mxfp4` of the
# prompt lengths LENS (comma-separated) with each build build/NAME/osprey in turn, at most TIMEOUT
# seconds each, into $OUT/prefill_<model>_<i>_<NAME>.txt; prints each table's prefill rows.
prefill_builds() {
  local d=$1 lens=$2 to=$3 n i=0 f; shift 3
  for n in "$@"; do
    i=$((i + 1)); f=$OUT/prefill_$(basename $d)_${i}_$n.txt
    echo "-- $(basename $d) $n"
    timeout $to build/$n/osprey bench --backend cuda --model $d --weights mxfp4 --prefill-lens $lens --prefill-reps 4 \
      --batches 1 --contexts 2048 --steps 4 > $f 2>&1
    grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror" $f | head -12
  done
}

# decode_builds MODEL_DIR BATCHES TIMEOUT NAMES..: `bench --backend cuda --weights mxfp4` decode
# steps at 8k context (BATCHES comma-separated, 32 steps after a 16-token prompt) with each build
# build/NAME/osprey in turn, at most TIMEOUT seconds each, into $OUT/decode_<model>_<i>_<NAME>.txt;
# prints each run's load time and step rows.
decode_builds() {
  local d=$1 b=$2 to=$3 n i=0 f; shift 3
  for n in "$@"; do
    i=$((i + 1)); f=$OUT/decode_$(basename $d)_${i}_$n.txt
    echo "-- $(basename $d) $n"
    timeout $to build/$n/osprey bench --backend cuda --model $d --weights mxfp4 --prefill-lens 16 --batches $b \
      --contexts 8192 --steps 32 > $f 2>&1
    grep -E "loaded in|^\| [0-9]+ \| [0-9]+ \||rror" $f | head -6
  done
}

# prefill_only MODEL_DIR LENS TIMEOUT NAMES..: as prefill_builds, but the prefill alone (`--prefill-reps
# 3 --batches ""`, no decode step: for the 120b, whose load is most of the time), into
# $OUT/prefill_<model>_<i>_<NAME>.txt; prints each run's W4A8 buffer line, KV blocks and prefill rows.
prefill_only() {
  local d=$1 lens=$2 to=$3 n i=0 f; shift 3
  for n in "$@"; do
    i=$((i + 1)); f=$OUT/prefill_$(basename $d)_${i}_$n.txt
    echo "-- $(basename $d) $n"
    timeout $to build/$n/osprey bench --backend cuda --model $d --weights mxfp4 --prefill-lens $lens --prefill-reps 3 \
      --batches "" --steps 1 > $f 2>&1
    grep -E "ahead|KV blocks|^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror" $f | head -6
  done
}

# greedy_equal MODEL_DIR A B: 16 greedy tokens after a 2,000-token prompt (a W4A8 chunk: about 250
# rows an expert on the 20b) with build/A/osprey and build/B/osprey, into $OUT/generate_<NAME>.txt
# (.err: the log); prints both streams, then "equal" or "DIFFERENT".
greedy_equal() {
  local d=$1 b
  echo "== greedy tokens after a 2,000-token prompt (W4A8 chunk), $2 then $3"
  for b in $2 $3; do
    timeout 60 build/$b/osprey generate --backend cuda --model $d --tokens $(seq -s, 1000 2999) --max-tokens 16 \
      --greedy --ignore-eos 2> $OUT/generate_$b.err | tee $OUT/generate_$b.txt
  done
  cmp -s $OUT/generate_$2.txt $OUT/generate_$3.txt && echo "equal" || echo "DIFFERENT"
}

# moe_builds STEPS TIMEOUT BUILD:MODEL:BATCHES..: `bench --moe-batches BATCHES` (one layer's expert
# GEMMs at the shapes bench/shapes/MODEL) with build/BUILD/osprey, each at most TIMEOUT seconds, into
# $OUT/moe_<BUILD>_<MODEL>.txt; prints each table's rows.
moe_builds() {
  local steps=$1 to=$2 bm b r m; shift 2
  for bm in "$@"; do
    b=${bm%%:*}; r=${bm#*:}; m=${r%%:*}
    echo "== moe $b $m"
    timeout $to build/$b/osprey bench --backend cuda --model bench/shapes/$m --prefill-lens "" --batches "" \
      --moe-batches ${r#*:} --steps $steps > $OUT/moe_${b}_$m.txt 2>&1
    grep -E "^\| [0-9]|rror" $OUT/moe_${b}_$m.txt
  done
}

# agreement LABEL A B: prints how many leading tokens the comma-separated streams A and B share.
agreement() {
  python3 -c "import sys; a=sys.argv[2].split(','); b=sys.argv[3].split(','); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), len(a)); print(f'{sys.argv[1]}: cuda and cpu agree on the first {n} of {len(a)} tokens')" "$@"
}

# cuda_vs_cpu "MODELS" "MODES" "SEEDS" [PROMPT]: for each synthetic checkpoint under $M (written
# first if missing, seed 7), ";"-separated generate arguments and seed, `generate --backend cuda`
# against its CPU emulation (24 tokens after PROMPT, default 5,6,7,8): greedy decoding, or seeded
# sampling on the GPU against the host sampler. CPU_PREC=fp8 compares `--weights fp8` with the fp8
# emulation; the default, mxfp4, the engine's default path with its emulation.
cuda_vs_cpu() {
  local models=$1 modes=$2 seeds=$3 prompt=${4:-5,6,7,8} p mode sd cp=${CPU_PREC:-mxfp4}
  IFS=';' read -ra mode_list <<< "$modes"
  for p in $models; do
    [ -d $M/$p ] || $B synth --preset $p --seed 7 --out $M/$p --quiet
    for mode in "${mode_list[@]}"; do for sd in $seeds; do
      local G C seed="--seed $sd"
      case " $mode " in *" --greedy "*|*" --temperature 0 "*) seed="";; esac  # greedy takes no seed (refused)
      G=$($B generate --backend cuda --weights $cp --model $M/$p --tokens $prompt --max-tokens 24 $mode $seed --ignore-eos 2>/dev/null)
      C=$($B --threads 16 generate --precision $cp --model $M/$p --tokens $prompt --max-tokens 24 $mode $seed --ignore-eos 2>/dev/null)
      agreement "$p $mode seed $sd" "$G" "$C"
    done; done
  done
}

# ncu_decode_step BATCH FIRST OUT [BENCH ARGS..]: ncu kernel times of one 20b decode step at 8k
# context (after the graph's warm-up step), summed by kernel (tests/cuda/ncu_decode_summary.py,
# FIRST launches of the first layer listed), into OUT.
ncu_decode_step() {
  local nb=$1 first=$2 out=$3; shift 3
  OSPREY_PROFILE_DECODE=1 ncu --profile-from-start off --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    $B bench --backend cuda --model $M/20b --prefill-lens 16 --contexts 8192 --batches $nb --steps 1 "$@" 2>/dev/null > /tmp/ncu_$nb.csv
  python3 "$(dirname "${BASH_SOURCE[0]}")/ncu_decode_summary.py" /tmp/ncu_$nb.csv $first | tee $out
}
