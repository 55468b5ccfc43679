// Token sampling on the GPU: the twin of Sampler::sample_from (engine/sampler.h) for rows of
// logits that stay on the device. Temperature, top-k and top-p, with the uniform draw u that the
// request's host generator made, so a request's token stream does not depend on where it is
// sampled. The sums run in double like the host's but in another order (a tree, not a loop), so
// a draw within ~1e-16 of a boundary between two tokens may pick the other one.
#pragma once
#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

// One row's parameters (SamplingParams, flattened); temperature <= 0 marks a greedy row, which
// the sampler leaves as it is in `out`.
struct SampleRow {
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  double u = 0.0;
};

// Device buffers for sample_rows: sorted keys and indices for `rows` x `V` logits, and CUB's
// scratch. Sized on first use, reused.
class SampleScratch {
 public:
  SampleScratch() = default;
  SampleScratch(const SampleScratch&) = delete;
  SampleScratch& operator=(const SampleScratch&) = delete;
  ~SampleScratch();
  void reserve(int rows, int V);
  float* keys = nullptr;          // [rows][V] logits sorted descending per row
  int32_t* order = nullptr;       // [rows][V] their indices (ascending among equal logits)
  int32_t* iota = nullptr;        // [rows][V] 0..V-1 per row (the sort's input values)
  int32_t* offsets = nullptr;     // [rows + 1] segment offsets
  SampleRow* params = nullptr;    // [rows]
  void* cub = nullptr;
  size_t cub_bytes = 0;
  int rows = 0, V = 0;
};

// For each row r with params[r].temperature > 0: out[r] (device) = the token Sampler::sample_from
// would draw from logits [r][V] with those parameters and u. params: host [rows], copied. When a
// row has top-k or top-p, the rows are sorted first (a segmented radix sort: descending, stable,
// so equal logits keep ascending token order as the host's sort does; it orders -0.0 below +0.0,
// which the host's comparison treats as equal). Greedy rows are not written.
void sample_rows(const float* logits, int rows, int V, const SampleRow* params, int32_t* out, SampleScratch& scratch,
                 cudaStream_t s);

}  // namespace osprey::cuda
