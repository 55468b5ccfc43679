// Token sampling on the GPU (sample.cuh). Each row is cut into chunks of kChunk tokens, a block
// per (chunk, row), so a single row is spread over the GPU:
//   1. the row's maximum logit (over every token, as the host takes it);
//   2. rows with top-k or top-p are sorted, in one radix sort over all rows of (row, logit,
//      token) keys, descending by logit and ascending by token among equal logits as the host's
//      sort. Up to 2^20 such tokens (a few rows), every token; beyond, a histogram of the logits
//      (2,048 bins of their order keys; the count, and for top-p an estimate of the probability
//      mass, per bin) finds a logit threshold above which the candidates the row can keep must
//      lie (top-p: a margin of 1e-3 of the mass and one more non-empty bin), and only those are
//      gathered and sorted (the host waits once for their number, the sort's length);
//   3. each candidate's weight exp((logit - max) / T) in double, and each chunk's sum (top-p
//      rows: the histogram pass also sums every token's weight in token order, the host's total);
//   4. top-p rows: the chunk where the running sum reaches top_p of the total claims the cut and
//      finds it with a block scan (the cut and the kept mass);
//   5. the chunk where the running sum passes u times the kept mass claims the draw likewise.
// The claims compare sequential sums of the chunk sums, the same in every block of a row, so
// exactly one chunk claims each search; the histogram only bounds which candidates are sorted, so
// its atomically summed masses do not change the token.
#include <cfloat>
#include <climits>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/sample.cuh"

namespace osprey::cuda {

namespace {

constexpr int kThreads = 256, kPerThread = 16, kChunk = kThreads * kPerThread;
constexpr int kBinShift = 21, kBins = 1 << (32 - kBinShift), kThresholdThreads = 1024;
static_assert(kBins == 2 * kThresholdThreads, "the threshold kernel gives each thread two bins");

// A 32-bit key whose unsigned order is the logits' order; -0.0 keys as +0.0 (the host's
// comparison finds them equal, so they tie and keep token order).
__device__ inline uint32_t order_key(float x) {
  uint32_t b = __float_as_uint(x);
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ inline float key_value(uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

__host__ __device__ inline bool row_top_k(const SampleRow& p, int V) { return p.top_k > 0 && p.top_k < V; }
__host__ __device__ inline bool row_sorted(const SampleRow& p, int V) { return row_top_k(p, V) || p.top_p < 1.0f; }

// Sorted candidates: (row, logit key, token) in one 64-bit key, rows first so that a descending
// sort keeps them in order; among equal logits the lower token has the larger inverted id.
struct SortedKeys {
  const uint64_t* keys;
  int index_bits;
  __device__ float logit(size_t at) const { return key_value(uint32_t(keys[at] >> index_bits)); }
  __device__ int token(size_t at) const { return int(~keys[at] & ((uint64_t(1) << index_bits) - 1)); }
};

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

// Per sorted row: tokens per bin of the order key's top bits, and (top-p rows) their mass.
// Top-p rows also sum every token's weight per chunk in token order (chunk_all: the host's total).
__global__ void __launch_bounds__(kThreads) histogram_kernel(const float* logits, int V, const SampleRow* params,
                                                              const uint32_t* row_max, uint32_t* hist_count,
                                                              float* hist_mass, double* chunk_all) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ uint32_t count[kBins];
  __shared__ float mass[kBins];  // an estimate (float atomics): it only bounds the candidates
  const int r = blockIdx.y, c0 = blockIdx.x * kChunk, c1 = min(V, c0 + kChunk);
  const SampleRow p = params[r];
  if (p.temperature <= 0.0f || !row_sorted(p, V)) return;
  const bool by_mass = !row_top_k(p, V);
  for (int i = threadIdx.x; i < kBins; i += kThreads) count[i] = 0, mass[i] = 0;
  __syncthreads();
  const float* l = logits + size_t(r) * V;
  const float m = key_value(row_max[r]);
  const double t = p.temperature;
  double local = 0;
  for (int j = c0 + threadIdx.x; j < c1; j += kThreads) {
    const uint32_t b = order_key(l[j]) >> kBinShift;
    atomicAdd(&count[b], 1u);
    if (by_mass) {
      const double e = exp(double(l[j] - m) / t);  // as the host: float difference, double quotient
      atomicAdd(&mass[b], float(e));
      local += e;
    }
  }
  if (by_mass) {  // a fixed order: the same total in every run
    local = Reduce(tmp).Sum(local);
    if (threadIdx.x == 0) chunk_all[size_t(r) * gridDim.x + blockIdx.x] = local;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBins; i += kThreads)
    if (count[i]) {
      atomicAdd(&hist_count[size_t(r) * kBins + i], count[i]);
      if (by_mass) atomicAdd(&hist_mass[size_t(r) * kBins + i], mass[i]);
    }
}

// One block per sorted row: walking the bins from the top, the first where the count reaches
// top_k (top-k rows) or the estimated mass reaches top_p of the total with a margin of 1e-3
// (top-p rows; then one more non-empty bin). Its lower edge is the row's threshold key;
// cand[r] = the tokens at or above it.
__global__ void __launch_bounds__(kThresholdThreads) threshold_kernel(int V, const SampleRow* params,
                                                                       const uint32_t* hist_count,
                                                                       const float* hist_mass, uint32_t* threshold,
                                                                       int32_t* cand) {
  using CountScan = cub::BlockScan<int, kThresholdThreads>;
  using MassScan = cub::BlockScan<double, kThresholdThreads>;
  __shared__ union {
    typename CountScan::TempStorage count;
    typename MassScan::TempStorage mass;
  } tmp;
  __shared__ int sh_rank, sh_next;
  const int r = blockIdx.x, tid = threadIdx.x;
  const SampleRow p = params[r];
  if (p.temperature <= 0.0f || !row_sorted(p, V)) return;
  const bool by_count = row_top_k(p, V);
  // This thread's two bins, by descending rank (rank 0: the highest logits).
  const int rank0 = 2 * tid, bin0 = kBins - 1 - rank0;
  const uint32_t* hc = hist_count + size_t(r) * kBins;
  const float* hm = hist_mass + size_t(r) * kBins;
  const int n0 = int(hc[bin0]), n1 = int(hc[bin0 - 1]);
  int count_before;
  CountScan(tmp.count).ExclusiveSum(n0 + n1, count_before);
  __syncthreads();
  double mass_before = 0, total = 0;
  const double m0 = by_count ? 0.0 : hm[bin0], m1 = by_count ? 0.0 : hm[bin0 - 1];
  MassScan(tmp.mass).ExclusiveSum(m0 + m1, mass_before, total);
  const int cum[2] = {count_before + n0, count_before + n0 + n1};
  const double cum_mass[2] = {mass_before + m0, mass_before + m0 + m1};
  if (tid == 0) sh_rank = kBins - 1, sh_next = INT_MAX;  // not reached (rounding): every bin
  __syncthreads();
  const double target = double(p.top_p) * total * (1.0 + 1e-3);
  for (int i = 0; i < 2; ++i)
    if (by_count ? cum[i] >= p.top_k : cum_mass[i] >= target) {
      atomicMin(&sh_rank, rank0 + i);
      break;
    }
  __syncthreads();
  int rank = sh_rank;
  if (!by_count) {  // one more non-empty bin: the exact sums may reach the target a little later
    if (n0 > 0 && rank0 > rank) atomicMin(&sh_next, rank0);
    else if (n1 > 0 && rank0 + 1 > rank) atomicMin(&sh_next, rank0 + 1);
    __syncthreads();
    if (sh_next != INT_MAX) rank = sh_next;
  }
  if (rank == rank0 || rank == rank0 + 1) {
    threshold[r] = uint32_t(kBins - 1 - rank) << kBinShift;
    cand[r] = cum[rank - rank0];
  }
}

// The tokens at or above each sorted row's threshold, as sort keys at the row's offset; with
// `all` every token, in token order (then a stable sort need not compare the token bits).
__global__ void __launch_bounds__(kThreads) gather_kernel(const float* logits, int rows, int V, int index_bits,
                                                           bool all, const SampleRow* params, const uint32_t* threshold,
                                                           const int32_t* offset, int32_t* fill, uint64_t* keys) {
  const int r = blockIdx.y, c0 = blockIdx.x * kChunk, c1 = min(V, c0 + kChunk), lane = threadIdx.x & 31;
  const SampleRow p = params[r];
  if (p.temperature <= 0.0f || !row_sorted(p, V)) return;
  const float* l = logits + size_t(r) * V;
  const uint32_t th = threshold[r];
  const uint64_t row_bits = uint64_t(rows - 1 - r) << (32 + index_bits), mask = (uint64_t(1) << index_bits) - 1;
  for (int j0 = c0; j0 < c1; j0 += kThreads) {  // the same trip count in every thread: whole warps vote
    const int j = j0 + int(threadIdx.x);
    const uint32_t key = j < c1 ? order_key(l[j]) : 0;
    const bool take = j < c1 && key >= th;
    const uint64_t sort_key = row_bits | (uint64_t(key) << index_bits) | (~uint64_t(j) & mask);
    if (all) {
      if (take) keys[size_t(offset[r]) + j] = sort_key;
      continue;
    }
    const unsigned vote = __ballot_sync(0xffffffffu, take);
    int base = 0;
    if (lane == 0 && vote) base = atomicAdd(fill + r, __popc(vote));
    base = __shfl_sync(0xffffffffu, base, 0);
    if (take) keys[size_t(offset[r]) + base + __popc(vote & ((1u << lane) - 1))] = sort_key;
  }
}

// The number of candidates in the sampler's order: top-k, the gathered ones, or every token.
__device__ inline int row_candidates(const SampleRow& p, int V, const int32_t* cand, int r) {
  return row_top_k(p, V) ? p.top_k : p.top_p < 1.0f ? cand[r] : V;
}

// w[r][j] = exp((candidate j - max) / T) for the row's candidates (sorted or in token order);
// chunk_sum[r][chunk] = their sum (0 for chunks past the candidates).
__global__ void __launch_bounds__(kThreads) weights_kernel(const float* logits, SortedKeys sorted, int V,
                                                            const SampleRow* params, const uint32_t* row_max,
                                                            const int32_t* offset, const int32_t* cand, double* w,
                                                            double* chunk_sum) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int r = blockIdx.y, G = gridDim.x;
  const SampleRow p = params[r];
  if (p.temperature <= 0.0f) return;
  const bool is_sorted = row_sorted(p, V);
  const int n = row_candidates(p, V, cand, r), c0 = blockIdx.x * kChunk, c1 = min(n, c0 + kChunk);
  const float* l = logits + size_t(r) * V;
  const float m = key_value(row_max[r]);
  const double t = p.temperature;
  double local = 0;
  for (int j = c0 + threadIdx.x; j < c1; j += kThreads) {
    const float x = is_sorted ? sorted.logit(size_t(offset[r]) + j) : l[j];
    const double e = exp(double(x - m) / t);  // as the host: float difference, double quotient
    w[size_t(r) * V + j] = e;
    local += e;
  }
  local = Reduce(tmp).Sum(local);
  if (threadIdx.x == 0) chunk_sum[size_t(r) * G + blockIdx.x] = local;
}

// kCut: the smallest prefix of a top-p row's candidates whose mass reaches top_p of the total
// (cut[r] = its length, kept[r] = its mass). Otherwise the draw: the first candidate before the
// cut whose running sum passes u times the kept mass; out[r] = its token.
template <bool kCut>
__global__ void __launch_bounds__(kThreads) find_kernel(const double* w, const double* chunk_sum,
                                                         const double* chunk_all, SortedKeys sorted, int V,
                                                         const SampleRow* params, const int32_t* offset,
                                                         const int32_t* cand, int32_t* cut, double* kept, int32_t* out) {
  using Scan = cub::BlockScan<double, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int sh_first;
  const int r = blockIdx.y, c = blockIdx.x, G = gridDim.x, tid = threadIdx.x;
  const SampleRow p = params[r];
  const bool top_p = p.top_p < 1.0f, top_k = row_top_k(p, V);
  if (p.temperature <= 0.0f || (kCut && !top_p)) return;
  const int n = row_candidates(p, V, cand, r), limit = (!kCut && top_p) ? cut[r] : n;
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
  if (kCut) {  // the first candidate whose running sum is >= target (of every token's mass, as the host)
    double all = total;
    if (!top_k && n < V) {  // not every token is a candidate: the histogram pass summed them all
      all = 0;
      for (int i = 0; i < G; ++i) all += chunk_all[size_t(r) * G + i];
    }
    target = double(p.top_p) * all;
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
    out[r] = row_sorted(p, V) ? sorted.token(size_t(offset[r]) + j) : j;
  }
}

int bit_width(unsigned x) { return x == 0 ? 0 : 32 - __builtin_clz(x); }
// Up to this many tokens in sorted rows, all of them are sorted (no histogram, no wait).
constexpr size_t kSortAllTokens = size_t(1) << 20;

}  // namespace

SampleScratch::~SampleScratch() { release(); }

void SampleScratch::release() {
  for (void* p : {(void*)keys_in, (void*)keys, (void*)w, (void*)chunk_sum, (void*)chunk_all, (void*)hist_count,
                  (void*)hist_mass, (void*)row_max, (void*)threshold, (void*)cand, (void*)offset, (void*)fill,
                  (void*)cut, (void*)kept, (void*)params, cub})
    cudaFree(p);
  keys_in = keys = nullptr, w = chunk_sum = chunk_all = kept = nullptr, hist_mass = nullptr;
  hist_count = row_max = threshold = nullptr, cand = offset = fill = cut = nullptr, params = nullptr, cub = nullptr;
}

void SampleScratch::reserve(int rows_, int V_) {
  if (rows_ <= rows && V_ == V) return;
  release();
  rows = rows_, V = V_;
  const size_t n = size_t(rows) * V, G = size_t((V + kChunk - 1) / kChunk);
  if (n > size_t(INT32_MAX) || 32 + bit_width(unsigned(V - 1)) + bit_width(unsigned(rows - 1)) > 64)
    fail_plain("sample_rows: " + std::to_string(rows) + " rows of " + std::to_string(V) + " logits is too many to sort");
  OSPREY_CUDA_CHECK(cudaMalloc(&keys_in, n * sizeof(uint64_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&keys, n * sizeof(uint64_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&w, n * sizeof(double)));
  OSPREY_CUDA_CHECK(cudaMalloc(&chunk_sum, size_t(rows) * G * sizeof(double)));
  OSPREY_CUDA_CHECK(cudaMalloc(&chunk_all, size_t(rows) * G * sizeof(double)));
  OSPREY_CUDA_CHECK(cudaMalloc(&hist_count, size_t(rows) * kBins * sizeof(uint32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&hist_mass, size_t(rows) * kBins * sizeof(float)));
  for (uint32_t** p : {&row_max, &threshold}) OSPREY_CUDA_CHECK(cudaMalloc(p, size_t(rows) * sizeof(uint32_t)));
  for (int32_t** p : {&cand, &offset, &fill, &cut}) OSPREY_CUDA_CHECK(cudaMalloc(p, size_t(rows) * sizeof(int32_t)));
  OSPREY_CUDA_CHECK(cudaMalloc(&kept, size_t(rows) * sizeof(double)));
  OSPREY_CUDA_CHECK(cudaMalloc(&params, size_t(rows) * sizeof(SampleRow)));
  cub_bytes = 0;
  OSPREY_CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(nullptr, cub_bytes, keys_in, keys, int(n), 0, 64));
  OSPREY_CUDA_CHECK(cudaMalloc(&cub, cub_bytes));
  host_cand.assign(size_t(rows), 0);
  host_offset.assign(size_t(rows), 0);
}

void sample_rows(const float* logits, int rows, int V, const SampleRow* params, int32_t* out, SampleScratch& scratch,
                 cudaStream_t s) {
  if (rows == 0) return;
  bool any = false, any_top_p = false;
  int sorted_rows = 0;
  for (int r = 0; r < rows; ++r) {
    const SampleRow& p = params[r];
    if (p.temperature <= 0.0f) continue;
    any = true;
    sorted_rows += row_sorted(p, V);
    any_top_p |= p.top_p < 1.0f;
  }
  if (!any) return;  // greedy rows only: out holds their argmax already
  scratch.reserve(rows, V);
  SampleScratch& x = scratch;
  OSPREY_CUDA_CHECK(cudaMemcpyAsync(x.params, params, size_t(rows) * sizeof(SampleRow), cudaMemcpyHostToDevice, s));
  OSPREY_CUDA_CHECK(cudaMemsetAsync(x.row_max, 0, size_t(rows) * sizeof(uint32_t), s));
  const dim3 grid(unsigned((V + kChunk - 1) / kChunk), unsigned(rows));
  row_max_kernel<<<grid, kThreads, 0, s>>>(logits, V, x.params, x.row_max);
  const int index_bits = bit_width(unsigned(V - 1));
  if (sorted_rows > 0) {
    std::vector<int32_t>& cand = x.host_cand;
    OSPREY_CUDA_CHECK(cudaMemsetAsync(x.fill, 0, size_t(rows) * sizeof(int32_t), s));
    const bool all = size_t(sorted_rows) * V <= kSortAllTokens;
    if (all) {
      // Few rows: sorting every token costs less than waiting for the candidates' count.
      OSPREY_CUDA_CHECK(cudaMemsetAsync(x.threshold, 0, size_t(rows) * sizeof(uint32_t), s));
      std::fill(cand.begin(), cand.end(), V);
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(x.cand, cand.data(), size_t(rows) * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    } else {
      OSPREY_CUDA_CHECK(cudaMemsetAsync(x.hist_count, 0, size_t(rows) * kBins * sizeof(uint32_t), s));
      OSPREY_CUDA_CHECK(cudaMemsetAsync(x.hist_mass, 0, size_t(rows) * kBins * sizeof(float), s));
      histogram_kernel<<<grid, kThreads, 0, s>>>(logits, V, x.params, x.row_max, x.hist_count, x.hist_mass, x.chunk_all);
      threshold_kernel<<<unsigned(rows), kThresholdThreads, 0, s>>>(V, x.params, x.hist_count, x.hist_mass,
                                                                    x.threshold, x.cand);
      OSPREY_CUDA_CHECK(cudaGetLastError());
      // The sort's length is the candidates of all sorted rows: the host needs it to launch it.
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(cand.data(), x.cand, size_t(rows) * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
      OSPREY_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    int total = 0;
    for (int r = 0; r < rows; ++r) {
      x.host_offset[size_t(r)] = total;
      total += params[r].temperature > 0.0f && row_sorted(params[r], V) ? cand[size_t(r)] : 0;
    }
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(x.offset, x.host_offset.data(), size_t(rows) * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s));
    gather_kernel<<<grid, kThreads, 0, s>>>(logits, rows, V, index_bits, all, x.params, x.threshold, x.offset, x.fill,
                                            x.keys_in);
    OSPREY_CUDA_CHECK(cudaGetLastError());
    size_t bytes = x.cub_bytes;
    // Radix sorts are stable: with every token gathered in token order, equal logits stay in it.
    OSPREY_CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(x.cub, bytes, x.keys_in, x.keys, total,
                                                                all ? index_bits : 0,
                                                                32 + index_bits + bit_width(unsigned(rows - 1)), s));
  }
  const SortedKeys sorted{x.keys, index_bits};
  weights_kernel<<<grid, kThreads, 0, s>>>(logits, sorted, V, x.params, x.row_max, x.offset, x.cand, x.w, x.chunk_sum);
  if (any_top_p)
    find_kernel<true><<<grid, kThreads, 0, s>>>(x.w, x.chunk_sum, x.chunk_all, sorted, V, x.params, x.offset, x.cand,
                                                x.cut, x.kept, out);
  find_kernel<false><<<grid, kThreads, 0, s>>>(x.w, x.chunk_sum, x.chunk_all, sorted, V, x.params, x.offset, x.cand,
                                               x.cut, x.kept, out);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

namespace {
__global__ void mask_logits_kernel(float* logits, int V, int words, const uint32_t* masks, const int32_t* has) {
  const int r = blockIdx.y;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= V || !has[r]) return;
  if (!((masks[size_t(r) * size_t(words) + size_t(t >> 5)] >> (t & 31)) & 1u)) logits[size_t(r) * size_t(V) + size_t(t)] = -INFINITY;
}
}  // namespace

void mask_logits_rows(float* logits, int rows, int V, const uint32_t* masks, const int32_t* has, cudaStream_t s) {
  if (rows == 0) return;
  const dim3 grid(unsigned((V + 255) / 256), unsigned(rows));
  mask_logits_kernel<<<grid, 256, 0, s>>>(logits, V, (V + 31) / 32, masks, has);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace osprey::cuda
