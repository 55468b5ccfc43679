// Token sampling on the GPU (sample.cuh): one block per row walks the row's candidates (the logits
// in index order, or sorted by a segmented radix sort when the row has top-k or top-p) in
// contiguous per-thread ranges: a block sum, a block scan to find the range where a running sum
// crosses its target, and a walk of that range, as Sampler::sample_from's loops do sequentially.
#include <cfloat>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/cuda/sample.cuh"

namespace osprey::cuda {

namespace {

constexpr int kSampleThreads = 1024;

__global__ void iota_rows_kernel(int32_t* iota, int32_t* offsets, int rows, int V) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size_t(rows) * V) iota[i] = int32_t(i % size_t(V));
  if (i <= size_t(rows)) offsets[i] = int32_t(i * size_t(V));
}

__global__ void __launch_bounds__(kSampleThreads) sample_row_kernel(const float* logits, int V, const SampleRow* params,
                                                                      const float* sorted_keys,
                                                                      const int32_t* sorted_order, int32_t* out) {
  using Reduce = cub::BlockReduce<double, kSampleThreads>;
  using Scan = cub::BlockScan<double, kSampleThreads>;
  using MaxReduce = cub::BlockReduce<float, kSampleThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
    typename MaxReduce::TempStorage max;
  } tmp;
  __shared__ double sh_value;
  __shared__ float sh_max;
  __shared__ int sh_index;
  const int r = blockIdx.x, tid = threadIdx.x;
  const SampleRow p = params[r];
  if (p.temperature <= 0.0f) return;  // greedy: out[r] is the argmax already
  const float* l = logits + size_t(r) * V;

  // The maximum over every logit (as the host takes it, whatever top-k keeps).
  float m = -FLT_MAX;
  for (int i = tid; i < V; i += kSampleThreads) m = fmaxf(m, l[i]);
  m = MaxReduce(tmp.max).Reduce(m, [](float a, float b) { return fmaxf(a, b); });
  if (tid == 0) sh_max = m;
  __syncthreads();
  m = sh_max;

  const bool top_k = p.top_k > 0 && p.top_k < V, sorted = top_k || p.top_p < 1.0f;
  const int n = top_k ? p.top_k : V;  // candidates, in the host's order
  const float* cand = sorted ? sorted_keys + size_t(r) * V : l;
  const double inv_t = double(p.temperature);
  auto prob = [&](int i) { return exp(double(cand[i] - m) / inv_t); };
  // This thread's contiguous range of candidates.
  const int per = (n + kSampleThreads - 1) / kSampleThreads, b = min(n, tid * per), e = min(n, b + per);
  auto block_sum = [&](double v) {
    v = Reduce(tmp.reduce).Sum(v);
    if (tid == 0) sh_value = v;
    __syncthreads();
    const double s = sh_value;
    __syncthreads();
    return s;
  };
  // The first candidate i < end whose running sum of term(i) from `start` reaches the target
  // (reach(sum) true), or `fallback`.
  auto first_reaching = [&](int end, auto&& term, auto&& reach, int fallback) {
    const int hi = min(e, end);
    double local = 0;
    for (int i = b; i < hi; ++i) local += term(i);
    double before;
    Scan(tmp.scan).ExclusiveSum(local, before);
    if (tid == 0) sh_index = fallback;
    __syncthreads();
    double run = before;
    for (int i = b; i < hi; ++i) {
      run += term(i);
      if (reach(run)) {
        atomicMin(&sh_index, i);
        break;
      }
    }
    __syncthreads();
    const int found = sh_index;
    __syncthreads();
    return found;
  };

  double local = 0;
  for (int i = b; i < e; ++i) local += prob(i);
  const double sum = block_sum(local);
  int keep = n;
  if (p.top_p < 1.0f) {  // the smallest prefix whose probability mass reaches top_p
    const double top_p = p.top_p;
    keep = 1 + first_reaching(n, [&](int i) { return prob(i) / sum; }, [&](double c) { return c >= top_p; }, n - 1);
  }
  local = 0;
  for (int i = b; i < min(e, keep); ++i) local += prob(i);
  const double target = p.u * block_sum(local);
  const int pick = first_reaching(keep, prob, [&](double c) { return c > target; }, keep - 1);
  if (tid == 0) out[r] = sorted ? sorted_order[size_t(r) * V + pick] : pick;
}

}  // namespace

SampleScratch::~SampleScratch() {
  cudaFree(keys);
  cudaFree(order);
  cudaFree(iota);
  cudaFree(offsets);
  cudaFree(params);
  cudaFree(cub);
}

void SampleScratch::reserve(int rows_, int V_) {
  if (rows_ <= rows && V_ == V) return;
  cudaFree(keys), cudaFree(order), cudaFree(iota), cudaFree(offsets), cudaFree(params), cudaFree(cub);
  keys = nullptr, order = nullptr, iota = nullptr, offsets = nullptr, params = nullptr, cub = nullptr;
  rows = rows_, V = V_;
  const size_t n = size_t(rows) * V;
  if (n > size_t(INT32_MAX)) fail_plain("sample_rows: " + std::to_string(rows) + " rows of " + std::to_string(V) + " logits is too many to sort");
  OSPREY_CUDA_CHECK(cudaMalloc(&keys, n * sizeof(float)));
  OSPREY_CUDA_CHECK(cudaMalloc(&order, n * sizeof(int32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&iota, n * sizeof(int32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&offsets, size_t(rows + 1) * sizeof(int32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&params, size_t(rows) * sizeof(SampleRow)));
  iota_rows_kernel<<<unsigned((n + 255) / 256), 256>>>(iota, offsets, rows, V);
  OSPREY_CUDA_CHECK(cudaGetLastError());
  cub_bytes = 0;
  OSPREY_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, cub_bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int(n), rows, offsets, offsets + 1));
  OSPREY_CUDA_CHECK(cudaMalloc(&cub, cub_bytes));
  OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
}

void sample_rows(const float* logits, int rows, int V, const SampleRow* params, int32_t* out, SampleScratch& scratch,
                 cudaStream_t s) {
  if (rows == 0) return;
  bool any_sorted = false;
  for (int r = 0; r < rows; ++r)
    any_sorted |= params[r].temperature > 0.0f && ((params[r].top_k > 0 && params[r].top_k < V) || params[r].top_p < 1.0f);
  scratch.reserve(rows, V);
  OSPREY_CUDA_CHECK(cudaMemcpyAsync(scratch.params, params, size_t(rows) * sizeof(SampleRow), cudaMemcpyHostToDevice, s));
  if (any_sorted) {
    // Descending and stable: equal logits keep ascending token order, as the host's sort does.
    size_t bytes = scratch.cub_bytes;
    OSPREY_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        scratch.cub, bytes, logits, scratch.keys, scratch.iota, scratch.order, rows * V, rows, scratch.offsets,
        scratch.offsets + 1, 0, int(sizeof(float) * 8), s));
  }
  sample_row_kernel<<<unsigned(rows), kSampleThreads, 0, s>>>(logits, V, scratch.params, scratch.keys, scratch.order,
                                                            out);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace osprey::cuda
