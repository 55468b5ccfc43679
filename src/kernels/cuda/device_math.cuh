// Device-side math shared by several kernels (included by .cu files only).
#pragma once

namespace osprey::cuda {

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Warp-wide (value, index) maximum; ties go to the lower index.
__device__ inline void warp_argmax(float& best, int& bi) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
  }
}

// gpt-oss clamped SwiGLU of one (gate, up) pair: min(g, limit) * sigmoid(alpha g) * (clamp(u) + 1).
__device__ inline float swiglu_clamped(float g, float u, float alpha, float limit) {
  g = fminf(g, limit);
  u = fminf(fmaxf(u, -limit), limit);
  return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

}  // namespace osprey::cuda
