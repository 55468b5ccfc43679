// Token sampling on the GPU (sample.cuh). Each row is cut into chunks of kChunk candidates, one
// block per (chunk, row), so a single row is spread over the GPU:
//   1. rows with top-k or top-p: one radix sort of (row, logit) keys over all rows (descending,
//      stable: equal logits keep ascending token order, as the host's sort does);
//   2. the row's maximum logit (over every token, as the host takes it);
//   3. each candidate's weight exp((logit - max) / T) in double, and each chunk's sum;
//   4. top-p rows: the chunk where the running sum reaches top_p of the total claims the cut and
//      finds it with a block scan (the cut and the kept mass);
//   5. the chunk where the running sum passes u times the kept mass claims the draw likewise.
// The claims compare sequential sums of the chunk sums, the same in every block of a row, so
// exactly one chunk claims each search.
#include <cfloat>
#include <climits>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/sample.cuh"

namespace osprey::cuda {

namespace {

constexpr int kThreads = 256, kPerThread = 16, kChunk = kThreads * kPerThread;

// A 32-bit key whose unsigned order is the logits' order; -0.0 keys as +0.0 (the host's
// comparison finds them equal, so they tie and keep token order).
__device__ inline uint32_t order_key(float x) {
  uint32_t b = __float_as_uint(x);
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ inline float key_value(uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

__device__ inline bool row_sorted(const SampleRow& p, int V) { return (p.top_k > 0 && p.top_k < V) || p.top_p < 1.0f; }
__device__ inline int row_candidates(const SampleRow& p, int V) { return p.top_k > 0 && p.top_k < V ? p.top_k : V; }

// keys [rows * V]: row r's keys above every later row's, so a descending sort keeps rows in order.
__global__ void sort_input_kernel(const float* logits, int rows, int V, uint64_t* keys, int32_t* index) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows) * V) return;
  const int r = int(i / size_t(V));
  keys[i] = (uint64_t(rows - 1 - r) << 32) | order_key(logits[i]);
  index[i] = int32_t(i - size_t(r) * V);
}

__global__ void __launch_bounds__(kThreads) row_max_kernel(const float* logits, int V, const SampleRow* params,
                                                            uint32_t* row_max) {
  using Reduce = cub::BlockReduce<uint32_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int r = blockIdx.y, c0 = blockIdx.x * kChunk, c1 = min(V, c0 + kChunk);
  if (params[r].temperature <= 0.0f) return;
  const float* l = logits + size_t(r) * V;
  uint32_t m = 0;
  for (int j = c0 + threadIdx.x; j < c1; j += kThreads) m = max(m, order_key(l[j]));
  m = Reduce(tmp).Reduce(m, [](uint32_t a, uint32_t b) { return max(a, b); });
  if (threadIdx.x == 0) atomicMax(row_max + r, m);
}

// w[r][j] = exp((candidate j - max) / T) for the row's candidates (sorted or in token order);
// chunk_sum[r][chunk] = their sum (0 for chunks past the candidates).
__global__ void __launch_bounds__(kThreads) weights_kernel(const float* logits, const uint64_t* sorted_keys, int V,
                                                            const SampleRow* params, const uint32_t* row_max,
                                                            double* w, double* chunk_sum) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int r = blockIdx.y, G = gridDim.x;
  const SampleRow p = params[r];
  if (p.temperature <= 0.0f) return;
  const bool sorted = row_sorted(p, V);
  const int n = row_candidates(p, V), c0 = blockIdx.x * kChunk, c1 = min(n, c0 + kChunk);
  const float m = key_value(row_max[r]);
  const double t = p.temperature;
  double local = 0;
  for (int j = c0 + threadIdx.x; j < c1; j += kThreads) {
    const size_t at = size_t(r) * V + j;
    const float x = sorted ? key_value(uint32_t(sorted_keys[at])) : logits[at];
    const double e = exp(double(x - m) / t);  // as the host: float difference, double quotient
    w[at] = e;
    local += e;
  }
  local = Reduce(tmp).Sum(local);
  if (threadIdx.x == 0) chunk_sum[size_t(r) * G + blockIdx.x] = local;
}

// kCut: the smallest prefix of a top-p row's candidates whose mass reaches top_p of the total
// (cut[r] = its length, kept[r] = its mass). Otherwise the draw: the first candidate before the
// cut whose running sum passes u times the kept mass; out[r] = its token.
template <bool kCut>
__global__ void __launch_bounds__(kThreads) find_kernel(const double* w, const double* chunk_sum, int V,
                                                         const SampleRow* params, const int32_t* sorted_order,
                                                         int32_t* cut, double* kept, int32_t* out) {
  using Scan = cub::BlockScan<double, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int sh_first;
  const int r = blockIdx.y, c = blockIdx.x, G = gridDim.x, tid = threadIdx.x;
  const SampleRow p = params[r];
  const bool top_p = p.top_p < 1.0f;
  if (p.temperature <= 0.0f || (kCut && !top_p)) return;
  const int n = row_candidates(p, V), limit = (!kCut && top_p) ? cut[r] : n;
  const int c0 = c * kChunk, c1 = min(limit, c0 + kChunk);
  if (c0 >= limit) return;
  const double* cs = chunk_sum + size_t(r) * G;
  double before = 0, total = 0;  // the sums of chunks < c and of all, in one sequential order
  for (int i = 0; i < G; ++i) {
    if (i == c) before = total;
    total += cs[i];
  }
  const double after = before + cs[c];
  const bool last = c1 == limit;
  double target;
  if (kCut) {  // the first candidate whose running sum is >= target
    target = double(p.top_p) * total;
    if (!(before < target && (last || after >= target))) return;
  } else {  // the first whose running sum is > target
    target = p.u * (top_p ? kept[r] : total);
    if (!(before <= target && (last || after > target))) return;
  }
  // This chunk claims: each thread takes kPerThread consecutive candidates.
  const double* wr = w + size_t(r) * V;
  const int b = min(c1, c0 + tid * kPerThread), e = min(c1, b + kPerThread);
  double local = 0;
  for (int j = b; j < e; ++j) local += wr[j];
  double run, chunk_total;
  Scan(tmp).ExclusiveSum(local, run, chunk_total);
  run += before;
  if (tid == 0) sh_first = INT_MAX;
  __syncthreads();
  int mine = INT_MAX;
  double mine_run = 0;
  for (int j = b; j < e; ++j) {
    run += wr[j];
    if (kCut ? run >= target : run > target) {
      mine = j, mine_run = run;
      atomicMin(&sh_first, j);
      break;
    }
  }
  __syncthreads();
  const int first = sh_first;
  // No candidate reached the target by this block's sums (a last-bit difference from the chunk
  // sums): the chunk's last candidate, as the host falls back to the last kept one.
  const bool fallback = first == INT_MAX;
  if (fallback ? tid != 0 : mine != first) return;
  const int j = fallback ? c1 - 1 : first;
  if (kCut) {
    cut[r] = j + 1;
    kept[r] = fallback ? before + chunk_total : mine_run;
  } else {
    out[r] = row_sorted(p, V) ? sorted_order[size_t(r) * V + j] : j;
  }
}

int bit_width(unsigned x) { return x == 0 ? 0 : 32 - __builtin_clz(x); }

}  // namespace

SampleScratch::~SampleScratch() { release(); }

void SampleScratch::release() {
  for (void* p : {(void*)keys_in, (void*)keys, (void*)index_in, (void*)order, (void*)w, (void*)chunk_sum,
                  (void*)row_max, (void*)cut, (void*)kept, (void*)params, cub})
    cudaFree(p);
  keys_in = keys = nullptr, index_in = order = nullptr, w = chunk_sum = kept = nullptr, row_max = nullptr;
  cut = nullptr, params = nullptr, cub = nullptr;
}

void SampleScratch::reserve(int rows_, int V_) {
  if (rows_ <= rows && V_ == V) return;
  release();
  rows = rows_, V = V_;
  const size_t n = size_t(rows) * V, G = size_t((V + kChunk - 1) / kChunk);
  if (n > size_t(INT32_MAX))
    fail_plain("sample_rows: " + std::to_string(rows) + " rows of " + std::to_string(V) + " logits is too many to sort");
  OSPREY_CUDA_CHECK(cudaMalloc(&keys_in, n * sizeof(uint64_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&keys, n * sizeof(uint64_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&index_in, n * sizeof(int32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&order, n * sizeof(int32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&w, n * sizeof(double)));
  OSPREY_CUDA_CHECK(cudaMalloc(&chunk_sum, size_t(rows) * G * sizeof(double)));
  OSPREY_CUDA_CHECK(cudaMalloc(&row_max, size_t(rows) * sizeof(uint32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&cut, size_t(rows) * sizeof(int32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&kept, size_t(rows) * sizeof(double)));
  OSPREY_CUDA_CHECK(cudaMalloc(&params, size_t(rows) * sizeof(SampleRow)));
  cub_bytes = 0;
  OSPREY_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, cub_bytes, keys_in, keys, index_in, order,
                                                               int(n), 0, 32 + bit_width(unsigned(rows - 1))));
  OSPREY_CUDA_CHECK(cudaMalloc(&cub, cub_bytes));
}

void sample_rows(const float* logits, int rows, int V, const SampleRow* params, int32_t* out, SampleScratch& scratch,
                 cudaStream_t s) {
  if (rows == 0) return;
  bool any = false, any_sorted = false, any_top_p = false;
  for (int r = 0; r < rows; ++r) {
    const SampleRow& p = params[r];
    if (p.temperature <= 0.0f) continue;
    any = true;
    any_sorted |= (p.top_k > 0 && p.top_k < V) || p.top_p < 1.0f;
    any_top_p |= p.top_p < 1.0f;
  }
  if (!any) return;  // greedy rows only: out holds their argmax already
  scratch.reserve(rows, V);
  OSPREY_CUDA_CHECK(cudaMemcpyAsync(scratch.params, params, size_t(rows) * sizeof(SampleRow), cudaMemcpyHostToDevice, s));
  OSPREY_CUDA_CHECK(cudaMemsetAsync(scratch.row_max, 0, size_t(rows) * sizeof(uint32_t), s));
  const size_t n = size_t(rows) * V;
  if (any_sorted) {
    sort_input_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(logits, rows, V, scratch.keys_in, scratch.index_in);
    OSPREY_CUDA_CHECK(cudaGetLastError());
    size_t bytes = scratch.cub_bytes;
    OSPREY_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(scratch.cub, bytes, scratch.keys_in, scratch.keys,
                                                                 scratch.index_in, scratch.order, int(n), 0,
                                                                 32 + bit_width(unsigned(rows - 1)), s));
  }
  const dim3 grid(unsigned((V + kChunk - 1) / kChunk), unsigned(rows));
  row_max_kernel<<<grid, kThreads, 0, s>>>(logits, V, scratch.params, scratch.row_max);
  weights_kernel<<<grid, kThreads, 0, s>>>(logits, scratch.keys, V, scratch.params, scratch.row_max, scratch.w,
                                           scratch.chunk_sum);
  if (any_top_p)
    find_kernel<true><<<grid, kThreads, 0, s>>>(scratch.w, scratch.chunk_sum, V, scratch.params, scratch.order,
                                                scratch.cut, scratch.kept, out);
  find_kernel<false><<<grid, kThreads, 0, s>>>(scratch.w, scratch.chunk_sum, V, scratch.params, scratch.order,
                                               scratch.cut, scratch.kept, out);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace osprey::cuda
