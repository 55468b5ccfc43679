// Kernel timing for `osprey bench --backend cuda --attention-lens`: the prefill attention of one
// layer alone, on random keys and values of a BF16 or FP16 cache, in the prompt chunks the model runs.
#pragma once

namespace osprey {

struct PrefillAttentionShape {
  int tokens = 0, chunk = 2048;  // a prompt of `tokens`, prefilled `chunk` tokens at a time
  int heads = 64, kv_heads = 8, head_dim = 64;
  int window = 0;  // 0: full attention
  bool f16 = false;  // the FP16 cache (--kv-cache-dtype fp16): FP16 keys, values, Q and P; else BF16
};

// The best of `reps` runs, in seconds, of flash_prefill over every chunk of the prompt (with the
// split-KV merges the model would run), and the FLOPs of its two products (QK^T and PV) over the
// keys each query sees.
struct PrefillAttentionTiming {
  double seconds = 0, flops = 0;
};
PrefillAttentionTiming time_prefill_attention(const PrefillAttentionShape& shape, int reps);

}  // namespace osprey
