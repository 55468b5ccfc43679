#!/bin/bash
# Structured outputs on the GPU machine (one call): the mask kernel and the masked decode against
# their CPU twins, the grammar mask benchmark on the host CPU, and batch-64 serving of the 20b
# synthetic checkpoint with every request a structured output (json_object) against the same
# load unconstrained, interleaved twice. Usage: bash tests/cuda/device_structured.sh
source tests/cuda/device_env.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
if [ -z "${SERVE_ONLY:-}" ]; then
  echo "== CUDA tests: token masks, masked decode, sampling"
  $T --gtest_filter='CudaSample.*:CudaFp8Model.*' 2>&1 | grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" | tail -12
  echo "== bench grammar (host CPU, single thread)"
  $B bench grammar --cases bench/grammar/schemas.jsonl --tokens 400 2>&1 | tee $OUT/bench_grammar.txt
fi
echo "== 20b synthetic, serve --backend cuda, batch 64"
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
$B serve --backend cuda --model $M/20b --port 8124 --max-batch 64 --max-seq-len 1024 --served-model-name 20b > $OUT/serve_20b.log 2>&1 &
SP=$!
for i in $(seq 1 600); do curl -sf http://127.0.0.1:8124/health > /dev/null && break; sleep 0.5; done
grep -E "KV|pages|serving" $OUT/serve_20b.log | head -5
# metrics NAME: the step-time and mask-time sums and counts, and the grammar cache counters.
metrics() { curl -s http://127.0.0.1:8124/metrics | grep -E "^osprey_(engine_step_seconds|constraint_mask_seconds)_(sum|count) |^osprey_(grammar_masks_[a-z]+_total|constraint_masked_rows_total|steps_total) " > $OUT/metrics_$1.txt; }
delta() {
  python3 - "$OUT/metrics_$1.txt" "$OUT/metrics_$2.txt" "$3" <<'PY'
import sys
def load(p): return {l.split()[0]: float(l.split()[1]) for l in open(p)}
a, b = load(sys.argv[1]), load(sys.argv[2])
d = {k: b.get(k, 0) - a.get(k, 0) for k in b}
steps = d.get("osprey_engine_step_seconds_count", 0)
ms = d.get("osprey_constraint_mask_seconds_count", 0)
print(f"  {sys.argv[3]}: {steps:.0f} steps, mean step {1e3 * d.get('osprey_engine_step_seconds_sum', 0) / max(steps, 1):.2f} ms; "
      f"mask compute in {ms:.0f} steps, mean {1e3 * d.get('osprey_constraint_mask_seconds_sum', 0) / max(ms, 1):.3f} ms; "
      f"masked rows {d.get('osprey_constraint_masked_rows_total', 0):.0f}; grammar masks cached {d.get('osprey_grammar_masks_cached_total', 0):.0f}, "
      f"computed {d.get('osprey_grammar_masks_computed_total', 0):.0f}")
PY
}
for round in 1 2 3; do
  for rf in none json_object; do
    extra=""; [ $rf = json_object ] && extra="--response-format json_object"
    metrics before
    $B bench serve --url http://127.0.0.1:8124 --api chat $extra --concurrency 64 --input-len 128 --output-len 256 \
      --num-prompts 128 > $OUT/serve_${rf}_$round.json 2>/dev/null
    metrics after
    delta before after "round $round $rf"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(f\"round $round $rf: {r['succeeded']}/{r['requests']} ok, output {r['output_tokens_per_s']:.0f} tok/s, ITL p50 {r['itl_p50_ms']:.1f} ms, TTFT p50 {r['ttft_p50_ms']:.0f} ms\")" $OUT/serve_${rf}_$round.json
  done
done
curl -s http://127.0.0.1:8124/v1/chat/completions -H 'content-type: application/json' -d '{"model":"20b","messages":[{"role":"user","content":"x"}],"max_tokens":200,"temperature":1,"seed":3,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false}}}}' \
  | python3 -c "import json,sys; c=json.load(sys.stdin)['choices'][0]; v=json.loads(c['message']['content']); print('json_schema on 20b random weights:', c['finish_reason'], v, 'valid' if isinstance(v.get('name'),str) and len(v['name'])<=20 and isinstance(v.get('age'),int) and 0<=v['age']<=120 and set(v)=={'name','age'} else 'INVALID')"
kill $SP; wait $SP 2>/dev/null
