#!/bin/bash
# Serving at load on the GPU machine (issue 13), one call per PART:
#   PART=new   the CUDA tests of the ragged step and the engine's prefix cache, then `osprey serve
#              --backend cuda` (one forward per step, paged KV placed by the engine, prefix caching,
#              131,072-token context) on the 20b synthetic checkpoint under the issue's workloads.
#   PART=long  only the streams beside a 100k-token prompt, and 4000 in / 200 out.
#   PART=base  the same workloads against BASE (the binary before the redesign, carried as
#              .devcarry/osprey_base), then both at maximum load (1000 in / 1000 out).
# Usage: PART=new|base bash tests/cuda/device_serving.sh
source tests/cuda/device_env.sh
BASE=$PWD/.devcarry/osprey_base
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
PORT=8130
start() {  # start BIN LOG ARGS...: serve the 20b and wait for /health
  local bin=$1 log=$2; shift 2
  $bin serve --backend cuda --model $M/20b --port $PORT --served-model-name 20b "$@" > $OUT/$log 2>&1 &
  SP=$!
  for i in $(seq 1 600); do curl -sf http://127.0.0.1:$PORT/health > /dev/null && break; sleep 0.5; done
  grep -E "KV|serving" $OUT/$log | head -4
}
stop() { kill $SP; wait $SP 2>/dev/null; }
load() {  # load LABEL ARGS...: one bench serve run, summarised
  local label=$1; shift
  $B bench serve --url http://127.0.0.1:$PORT "$@" > $OUT/bench_$label.json 2>/dev/null
  python3 - $OUT/bench_$label.json "$label" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))['runs'][0]
extra = f", e2e each {['%.0f' % x for x in r['e2e_ms']]} ms" if 'e2e_ms' in r else ''
print(f"{sys.argv[2]}: {r['succeeded']}/{r['requests']} ok in {r['seconds']:.1f} s, total {r['total_tokens_per_s']:.0f} tok/s, "
      f"output {r['output_tokens_per_s']:.0f} tok/s, TTFT p50 {r['ttft_p50_ms']:.0f} p99 {r['ttft_p99_ms']:.0f} ms, "
      f"ITL p50 {r['itl_p50_ms']:.1f} p99 {r['itl_p99_ms']:.1f} ms{extra}" + (f" [first error: {r['first_error']}]" if 'first_error' in r else ''))
PY
}
workloads() {  # the issue's table, in order
  local tag=$1
  load ${tag}_512x128_c64 --concurrency 64 --input-len 512 --output-len 128 --num-prompts 128
  load ${tag}_4000x200_c64 --concurrency 64 --input-len 4000 --output-len 200 --num-prompts 128 --seed 2
  load ${tag}_prefix4500 --concurrency 1 --input-len 4520 --output-len 1 --num-prompts 3 --shared-prefix 4500 --seed 3
}
long_prompt() {  # 16 streams alone, then beside a 100k-token prompt that arrives first
  load new_streams_alone --concurrency 16 --input-len 256 --output-len 256 --num-prompts 16 --seed 5
  ( $B bench serve --url http://127.0.0.1:$PORT --concurrency 1 --input-len 100000 --output-len 8 --num-prompts 1 --seed 6 > $OUT/bench_new_long.json 2>/dev/null ) &
  LP=$!
  sleep 0.5
  load new_streams_with_100k --concurrency 16 --input-len 256 --output-len 256 --num-prompts 16 --seed 5
  wait $LP
  python3 -c "import json; r=json.load(open('$OUT/bench_new_long.json'))['runs'][0]; print('100k prompt:', r['succeeded'], 'ok, TTFT', round(r['ttft_p50_ms']), 'ms', r.get('first_error',''))"
}
if [ "${PART:-new}" = long ]; then
  start $B serve_new.log --max-batch 64
  long_prompt
  load new_4000x200_c64 --concurrency 64 --input-len 4000 --output-len 200 --num-prompts 128 --seed 2
  stop
elif [ "${PART:-new}" = new ]; then
  echo "== CUDA tests"
  timeout 300 $T 2>&1 | grep -E "^\[  (PASSED|FAILED) |FAILED \]|Failure|Expected|Which is|actual" | head -40
  echo "== new: serve --backend cuda (defaults)"
  start $B serve_new.log --max-batch 64
  workloads new
  curl -s http://127.0.0.1:$PORT/metrics | grep -E "^vllm:(num_requests|kv_cache_usage|prefix_cache|cache_config)|^osprey_(prefix_cache|kv_cache)" > $OUT/metrics_new.txt
  cat $OUT/metrics_new.txt
  long_prompt
  stop
else
  echo "== base: serve --backend cuda as before the redesign (its default context is 4096; 8192 fits the 4.5k prompt)"
  start $BASE serve_base.log --max-batch 64 --max-seq-len 8192
  workloads base
  stop
  echo "== maximum load: 1000 in / 1000 out, concurrency 128"
  start $BASE serve_base128.log --max-batch 128 --max-seq-len 4096
  load base_1000x1000_c128 --concurrency 128 --input-len 1000 --output-len 1000 --num-prompts 128 --seed 4
  stop
  start $B serve_new128.log --max-batch 128
  load new_1000x1000_c128 --concurrency 128 --input-len 1000 --output-len 1000 --num-prompts 128 --seed 4
  stop
fi
