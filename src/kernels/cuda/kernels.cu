// The element-wise, normalization, attention and routing kernels. Plain, correct first versions:
// one warp or block per row, fp32 math; the GEMMs go to cuBLAS (gemm.cu).
#include <cfloat>

#include "kernels/cuda/argmax_body.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

namespace {

constexpr int kThreads = 256;
inline unsigned blocks_for(size_t n, int threads = kThreads) { return unsigned((n + threads - 1) / threads); }
void check_launch() { OSPREY_CUDA_CHECK(cudaGetLastError()); }

__global__ void embedding_kernel(const bf16* table, const int32_t* tokens, float* out, int H) {
  const int t = blockIdx.x;
  const bf16* row = table + size_t(tokens[t]) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) out[size_t(t) * H + i] = __bfloat162float(row[i]);
}

template <typename Out>
__device__ inline Out from_float(float v);
template <>
__device__ inline bf16 from_float<bf16>(float v) { return __float2bfloat16(v); }
template <>
__device__ inline float from_float<float>(float v) { return v; }

template <typename Out>
__global__ void rmsnorm_kernel(const float* x, const bf16* gain, Out* y, int H, float eps) {
  const int t = blockIdx.x;
  const float* xt = x + size_t(t) * H;
  float ss = 0;
  for (int i = threadIdx.x; i < H; i += blockDim.x) ss += xt[i] * xt[i];
  __shared__ float part[32];
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) part[0] = v;
  }
  __syncthreads();
  const float r = rsqrtf(part[0] / H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) y[size_t(t) * H + i] = from_float<Out>(__bfloat162float(gain[i]) * (xt[i] * r));
}

__global__ void add_bias_kernel(float* y, const bf16* bias, int N, size_t n) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += __bfloat162float(bias[i % N]);
}

__global__ void add_kernel(float* x, const float* y, size_t n) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

// Four columns a thread (N % 4 == 0).
__global__ void add_bias_accumulate4_kernel(float4* x, const float4* y, const bf16* bias, int N, size_t n4) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 a = x[i];
  const float4 b = y[i];
  if (bias) {
    const int c = int((4 * i) % size_t(N));
    a.x = a.x + (b.x + __bfloat162float(bias[c])), a.y = a.y + (b.y + __bfloat162float(bias[c + 1]));
    a.z = a.z + (b.z + __bfloat162float(bias[c + 2])), a.w = a.w + (b.w + __bfloat162float(bias[c + 3]));
  } else {
    a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
  }
  x[i] = a;
}

__global__ void add_bias_accumulate_kernel(float* x, const float* y, const bf16* bias, int N, size_t n) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] + (bias ? y[i] + __bfloat162float(bias[i % N]) : y[i]);
}

__global__ void to_bf16_kernel(const float* src, bf16* dst, size_t n) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __float2bfloat16(src[i]);
}

__global__ void rope_kernel(float* x, const int32_t* positions, const float* inv_freq, float c, int heads, int d) {
  const int t = blockIdx.x, half = d / 2;
  for (int j = threadIdx.x; j < heads * half; j += blockDim.x) {
    float* v = x + (size_t(t) * heads + j / half) * d;
    rotate_pair(v, v, j % half, half, positions[t], inv_freq, c);
  }
}

// The online-softmax core both attention kernels share: keys j = begin, begin + step, .. <= end
// of KV head g fold into the running (m, denom, acc) of one warp. The sink is not here: it is
// the initial (m, denom) a caller passes in, so it is counted exactly once.
template <int D>
__device__ inline void attend_keys(const float (&qv)[(D + 31) / 32], const float* k, const float* v, int g,
                                   int kv_heads, float scale, int begin, int end, int step, float& m, float& denom,
                                   float (&acc)[(D + 31) / 32]) {
  constexpr int PER = (D + 31) / 32;
  const int lane = threadIdx.x & 31;
  for (int j = begin; j <= end; j += step) {
    const float* kp = k + (size_t(j) * kv_heads + g) * D;
    float dot = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int c = lane + 32 * i;
      if (c < D) dot += qv[i] * kp[c];
    }
    const float s = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = __expf(m - m_new), p = __expf(s - m_new);
    denom = denom * corr + p;
    const float* vp = v + (size_t(j) * kv_heads + g) * D;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int c = lane + 32 * i;
      if (c < D) acc[i] = acc[i] * corr + p * vp[c];
    }
    m = m_new;
  }
}

// One warp per (query, head): the running max starts at the sink logit, so the sink is counted
// once; each lane owns the dimensions lane, lane + 32, ... of the head.
template <int D>
__global__ void sink_attention_kernel(const float* q, const float* k, const float* v, const bf16* sinks, float* out,
                                      int T, int first_pos, int heads, int kv_heads, int window, float scale) {
  const int warp = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (warp >= T * heads) return;
  const int t = warp / heads, h = warp % heads;
  const int g = h / (heads / kv_heads), pos = first_pos + t;
  constexpr int PER = (D + 31) / 32;
  float qv[PER], acc[PER];
  const float* qp = q + (size_t(t) * heads + h) * D;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int c = lane + 32 * i;
    qv[i] = c < D ? qp[c] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = __bfloat162float(sinks[h]), denom = 1.0f;  // the sink's exp(sink - m) with m = sink
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  attend_keys<D>(qv, k, v, g, kv_heads, scale, first, pos, 1, m, denom, acc);
  float* op = out + (size_t(t) * heads + h) * D;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int c = lane + 32 * i;
    if (c < D) op[c] = acc[i] / denom;
  }
}

// Decode (one query): a block per head, its 8 warps splitting the keys; each warp keeps a running
// (max, denominator, accumulator) and the block merges them. The sink is counted once: only the
// first split starts from it (max = sink, denominator 1); the others start empty.
template <int D>
__global__ void sink_attention_decode_kernel(const float* q, const float* k, const float* v, const bf16* sinks,
                                             float* out, int pos, int heads, int kv_heads, int window, float scale) {
  constexpr int W = 8, PER = (D + 31) / 32;
  const int h = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = h / (heads / kv_heads);
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  float qv[PER], acc[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int c = lane + 32 * i;
    qv[i] = c < D ? q[size_t(h) * D + c] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = warp == 0 ? __bfloat162float(sinks[h]) : -FLT_MAX, denom = warp == 0 ? 1.0f : 0.0f;
  attend_keys<D>(qv, k, v, g, kv_heads, scale, first + warp, pos, W, m, denom, acc);
  __shared__ float sm[W], sd[W], sacc[W][D];
  if (lane == 0) sm[warp] = m, sd[warp] = denom;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int c = lane + 32 * i;
    if (c < D) sacc[warp][c] = acc[i];
  }
  __syncthreads();
  if (warp != 0) return;
  float M = -FLT_MAX;
  for (int w = 0; w < W; ++w) M = fmaxf(M, sm[w]);
  float den = 0;
  for (int w = 0; w < W; ++w) den += sd[w] * __expf(sm[w] - M);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int c = lane + 32 * i;
    if (c >= D) continue;
    float o = 0;
    for (int w = 0; w < W; ++w) o += sacc[w][c] * __expf(sm[w] - M);
    out[size_t(h) * D + c] = o / den;
  }
}

// One warp per token.
__global__ void topk_softmax_kernel(const float* logits, int32_t* idx, float* w, int E, int k) {
  const int t = blockIdx.x;
  warp_topk_softmax(logits + size_t(t) * E, E, k, idx + size_t(t) * k, w + size_t(t) * k);
}

template <typename Out>
__global__ void swiglu_kernel(const float* t, Out* a, size_t n, float alpha, float limit) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  a[i] = from_float<Out>(swiglu_clamped(t[2 * i], t[2 * i + 1], alpha, limit));
}

__global__ void to_f32_kernel(const bf16* src, float* dst, size_t n) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __bfloat162float(src[i]);
}

template <typename T>
__global__ void gather_kernel(const T* src, const int32_t* rows, T* dst, int H) {
  const int i = blockIdx.x;
  for (int c = threadIdx.x; c < H; c += blockDim.x) dst[size_t(i) * H + c] = src[size_t(rows[i]) * H + c];
}

__global__ void scatter_add_kernel(float* x, const float* y, const int32_t* rows, const float* w, int H) {
  const int i = blockIdx.x;
  for (int c = threadIdx.x; c < H; c += blockDim.x) x[size_t(rows[i]) * H + c] += w[i] * y[size_t(i) * H + c];
}

__constant__ float kFp4[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

__global__ void mxfp4_kernel(const uint8_t* blocks, const uint8_t* scales, bf16* out, size_t n_bytes) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;  // one packed byte: two columns
  if (i >= n_bytes) return;
  const uint8_t b = blocks[i];
  const float s = ldexpf(1.0f, int(scales[i / 16]) - 127);
  out[2 * i] = __float2bfloat16(kFp4[b & 15] * s);
  out[2 * i + 1] = __float2bfloat16(kFp4[b >> 4] * s);
}

// Two stages (argmax_body.cuh): kArgmaxChunks blocks per row each reduce a slice to (value, lowest
// index), then a warp per row reduces the slices (a single block per row left most of the GPU idle).
constexpr int kArgmaxMaxRows = 1024;
__device__ float g_argmax_val[kArgmaxMaxRows * kArgmaxChunks];
__device__ int g_argmax_idx[kArgmaxMaxRows * kArgmaxChunks];

__global__ void argmax_partial_kernel(const float* logits, int V) {
  argmax_partial_body(logits, V, g_argmax_val, g_argmax_idx, VBlock::this_block(), NoSync{});
}

__global__ void argmax_final_kernel(int32_t* out, int rows) {
  argmax_final_body(g_argmax_val, g_argmax_idx, out, rows, VBlock::this_block(), NoSync{});
}

__global__ void argmax_kernel(const float* logits, int32_t* out, int V) {
  const int r = blockIdx.x;
  const float* l = logits + size_t(r) * V;
  float best = -FLT_MAX;
  int bi = INT32_MAX;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    if (l[i] > best || (l[i] == best && i < bi)) best = l[i], bi = i;
  __shared__ float sv[kThreads];
  __shared__ int si[kThreads];
  sv[threadIdx.x] = best;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      const float ov = sv[threadIdx.x + o];
      const int oi = si[threadIdx.x + o];
      if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) sv[threadIdx.x] = ov, si[threadIdx.x] = oi;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = si[0];
}

__global__ void linear_f32_small_kernel(const float* W, const float* x, const bf16* bias, float* y, int T, int N, int K) {
  const int w = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (w >= T * N) return;
  const int t = w / N, n = w % N;
  const float acc = warp_dot_f32(W + size_t(n) * K, x + size_t(t) * K, K);
  if (lane == 0) y[size_t(t) * N + n] = acc + (bias ? __bfloat162float(bias[n]) : 0.0f);
}

__global__ void fill_random_bf16_kernel(bf16* dst, size_t n, uint64_t seed, float amp) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    dst[i] = __float2bfloat16(amp * (float(z >> 40) * (2.0f / 16777216.0f) - 1.0f));
  }
}

__global__ void fill_random_e4m3_kernel(uint8_t* dst, size_t n, uint64_t seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const uint8_t b = uint8_t(z >> 56);
    dst[i] = (b & 0x7f) == 0x7f ? uint8_t(b ^ 1) : b;  // never NaN
  }
}

}  // namespace

void fill_random_e4m3(uint8_t* dst, size_t n, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  fill_random_e4m3_kernel<<<4096, 256, 0, s>>>(dst, n, seed);
  check_launch();
}

void linear_f32_small(const float* W, const float* x, const bf16* bias, float* y, int T, int N, int K, cudaStream_t s) {
  if (T == 0) return;
  linear_f32_small_kernel<<<unsigned((size_t(T) * N * 32 + 255) / 256), 256, 0, s>>>(W, x, bias, y, T, N, K);
  check_launch();
}

void fill_random_bf16(bf16* dst, size_t n, uint64_t seed, float amp, cudaStream_t s) {
  if (n == 0) return;
  fill_random_bf16_kernel<<<4096, 256, 0, s>>>(dst, n, seed, amp);
  check_launch();
}

void embedding(const bf16* table, const int32_t* tokens, float* out, int T, int H, cudaStream_t s) {
  embedding_kernel<<<T, kThreads, 0, s>>>(table, tokens, out, H);
  check_launch();
}
void rmsnorm_to_bf16(const float* x, const bf16* gain, bf16* y, int T, int H, float eps, cudaStream_t s) {
  rmsnorm_kernel<bf16><<<T, kThreads, 0, s>>>(x, gain, y, H, eps);
  check_launch();
}
void rmsnorm_to_f32(const float* x, const bf16* gain, float* y, int T, int H, float eps, cudaStream_t s) {
  rmsnorm_kernel<float><<<T, kThreads, 0, s>>>(x, gain, y, H, eps);
  check_launch();
}
void add_bias(float* y, const bf16* bias, int T, int N, cudaStream_t s) {
  if (!bias) return;
  const size_t n = size_t(T) * N;
  add_bias_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, bias, N, n);
  check_launch();
}
void add_inplace(float* x, const float* y, size_t n, cudaStream_t s) {
  add_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  check_launch();
}
void add_bias_accumulate(float* x, const float* y, const bf16* bias, int T, int N, cudaStream_t s) {
  const size_t n = size_t(T) * N;
  if (n == 0) return;
  const bool vec = N % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(y) & 15) == 0;
  if (vec)
    add_bias_accumulate4_kernel<<<blocks_for(n / 4), kThreads, 0, s>>>(reinterpret_cast<float4*>(x),
                                                                        reinterpret_cast<const float4*>(y), bias, N, n / 4);
  else
    add_bias_accumulate_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, bias, N, n);
  check_launch();
}
void to_bf16(const float* src, bf16* dst, size_t n, cudaStream_t s) {
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, dst, n);
  check_launch();
}
void rope(float* x, const int32_t* positions, const float* inv_freq, float c, int T, int heads, int d, cudaStream_t s) {
  rope_kernel<<<T, kThreads, 0, s>>>(x, positions, inv_freq, c, heads, d);
  check_launch();
}
void sink_attention(const float* q, const float* k, const float* v, const bf16* sinks, float* out, int T, int first_pos,
                    int heads, int kv_heads, int d, int window, float scale, cudaStream_t s) {
  const size_t threads = size_t(T) * heads * 32;
  const unsigned grid = unsigned((threads + kThreads - 1) / kThreads);
  if (T == 1) {  // decode: split the keys over 8 warps per head
    switch (d) {
#define OSPREY_DECODE_CASE(D)                                                                                     \
  case D:                                                                                                         \
    sink_attention_decode_kernel<D><<<heads, 256, 0, s>>>(q, k, v, sinks, out, first_pos, heads, kv_heads, window, scale); \
    break;
      OSPREY_DECODE_CASE(16)
      OSPREY_DECODE_CASE(32)
      OSPREY_DECODE_CASE(64)
      OSPREY_DECODE_CASE(128)
#undef OSPREY_DECODE_CASE
      default: fail_plain("sink_attention: head_dim " + std::to_string(d) + " is not compiled (16, 32, 64, 128)");
    }
    check_launch();
    return;
  }
  switch (d) {
#define OSPREY_ATTN_CASE(D)                                                                                   \
  case D:                                                                                                     \
    sink_attention_kernel<D><<<grid, kThreads, 0, s>>>(q, k, v, sinks, out, T, first_pos, heads, kv_heads, window, scale); \
    break;
    OSPREY_ATTN_CASE(16)
    OSPREY_ATTN_CASE(32)
    OSPREY_ATTN_CASE(64)
    OSPREY_ATTN_CASE(128)
#undef OSPREY_ATTN_CASE
    default: fail_plain("sink_attention: head_dim " + std::to_string(d) + " is not compiled (16, 32, 64, 128)");
  }
  check_launch();
}
void topk_softmax(const float* logits, int32_t* idx, float* w, int T, int E, int k, cudaStream_t s) {
  if (k > 16) fail_plain("top-k above 16 is not supported");
  topk_softmax_kernel<<<T, 32, 0, s>>>(logits, idx, w, E, k);
  check_launch();
}
void swiglu_to_bf16(const float* t, bf16* a, int n, int I, float alpha, float limit, cudaStream_t s) {
  const size_t m = size_t(n) * I;
  if (m) swiglu_kernel<bf16><<<blocks_for(m), kThreads, 0, s>>>(t, a, m, alpha, limit);
  check_launch();
}
void swiglu_to_f32(const float* t, float* a, int n, int I, float alpha, float limit, cudaStream_t s) {
  const size_t m = size_t(n) * I;
  if (m) swiglu_kernel<float><<<blocks_for(m), kThreads, 0, s>>>(t, a, m, alpha, limit);
  check_launch();
}
void gather_rows(const bf16* src, const int32_t* rows, bf16* dst, int n, int H, cudaStream_t s) {
  if (n == 0) return;
  gather_kernel<bf16><<<n, kThreads, 0, s>>>(src, rows, dst, H);
  check_launch();
}
void gather_rows(const float* src, const int32_t* rows, float* dst, int n, int H, cudaStream_t s) {
  if (n == 0) return;
  gather_kernel<float><<<n, kThreads, 0, s>>>(src, rows, dst, H);
  check_launch();
}
void to_f32(const bf16* src, float* dst, size_t n, cudaStream_t s) {
  if (n) to_f32_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, dst, n);
  check_launch();
}
void scatter_add_weighted(float* x, const float* y, const int32_t* rows, const float* w, int n, int H, cudaStream_t s) {
  if (n == 0) return;
  scatter_add_kernel<<<n, kThreads, 0, s>>>(x, y, rows, w, H);
  check_launch();
}
void mxfp4_to_bf16(const uint8_t* blocks, const uint8_t* scales, bf16* out, int rows, int cols, cudaStream_t s) {
  const size_t n = size_t(rows) * cols / 2;
  mxfp4_kernel<<<blocks_for(n), kThreads, 0, s>>>(blocks, scales, out, n);
  check_launch();
}
void argmax_rows(const float* logits, int32_t* out, int rows, int V, cudaStream_t s) {
  if (rows <= 0) return;
  if (rows > kArgmaxMaxRows || V < 64 * kArgmaxChunks) {  // small vocabularies or many rows: a block per row
    argmax_kernel<<<rows, kThreads, 0, s>>>(logits, out, V);
    check_launch();
    return;
  }
  argmax_partial_kernel<<<dim3(unsigned(rows), kArgmaxChunks), 256, 0, s>>>(logits, V);
  check_launch();
  argmax_final_kernel<<<unsigned((rows * 32 + 255) / 256), 256, 0, s>>>(out, rows);
  check_launch();
}

}  // namespace osprey::cuda
