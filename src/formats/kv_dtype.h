// How a KV cache holds keys and values (--kv-cache-dtype), on the GPU engine and in its CPU
// emulation:
// - Bf16: each value rounded to BF16 (core/bf16.h).
// - Fp16: each value rounded to FP16, clipped at +-65,504 (core/fp16.h f32_to_f16_satfinite). The
//   same two bytes with three more mantissa bits; the GPU's tensor-core attention then also takes
//   Q and P as FP16 (docs/FIDELITY.md: on the trained model this path is indistinguishable from the
//   fp32-KV BF16 reference, where BF16 operands are not). Head_dim 64 only on the GPU.
// - Fp8: E4M3 codes with a power-of-two exponent per (position, KV head) row (formats/kv_fp8.h).
#pragma once
#include <string>
#include <string_view>

#include "core/bf16.h"
#include "core/fp16.h"

namespace osprey {

enum class KvDtype { Bf16, Fp16, Fp8 };

inline const char* kv_dtype_name(KvDtype d) {
  return d == KvDtype::Fp16 ? "fp16" : d == KvDtype::Fp8 ? "fp8" : "bf16";
}

// A value as a 16-bit cache holds it (Bf16 or Fp16).
inline float kv_round16(float x, KvDtype d) {
  return d == KvDtype::Fp16 ? f16_to_f32(f32_to_f16_satfinite(x)) : bf16_to_f32(f32_to_bf16(x));
}

}  // namespace osprey
