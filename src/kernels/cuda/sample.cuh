// Token sampling on the GPU: the twin of Sampler::sample_from (engine/sampler.h) for rows of
// logits that stay on the device. Temperature, top-k and top-p, with the uniform draw u that the
// request's host generator made, so a request's token stream does not depend on where it is
// sampled. The sums run in double like the host's but in another order (per chunk, then across
// chunks), so a draw within ~1e-16 of a boundary between two tokens may pick the other one.
#pragma once
#include <vector>

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

// Device buffers for sample_rows, sized on first use (and again for more rows), reused.
class SampleScratch {
 public:
  SampleScratch() = default;
  SampleScratch(const SampleScratch&) = delete;
  SampleScratch& operator=(const SampleScratch&) = delete;
  ~SampleScratch();
  void reserve(int rows, int V);
  uint64_t* keys_in = nullptr;     // [rows * V] gathered candidates' (row, logit, token) keys
  uint64_t* keys = nullptr;        // [rows * V] sorted: descending, rows in order
  double* w = nullptr;             // [rows][V] candidate weights exp((logit - max) / T)
  double* chunk_sum = nullptr;     // [rows][chunks] their sums per chunk of candidates
  double* chunk_all = nullptr;     // [rows][chunks] top-p rows: every token's weight per chunk
  uint32_t* hist_count = nullptr;  // [rows][2048] tokens per bin of the logits' order keys
  float* hist_mass = nullptr;      // [rows][2048] top-p rows: their weight (an estimate)
  uint32_t* row_max = nullptr;     // [rows] the maximum logit, as an order key
  uint32_t* threshold = nullptr;   // [rows] the order key at and above which candidates are gathered
  int32_t* cand = nullptr;         // [rows] how many there are
  int32_t* offset = nullptr;       // [rows] where each row's candidates start in keys
  int32_t* fill = nullptr;         // [rows] gathering cursor
  int32_t* cut = nullptr;          // [rows] top-p rows: candidates kept
  double* kept = nullptr;          // [rows] top-p rows: their mass
  SampleRow* params = nullptr;    // [rows]
  void* cub = nullptr;
  size_t cub_bytes = 0;
  int rows = 0, V = 0;
  std::vector<int32_t> host_cand, host_offset;  // [rows]

 private:
  void release();
};

// For each row r with params[r].temperature > 0: out[r] (device) = the token Sampler::sample_from
// would draw from logits [r][V] with those parameters and u. params: host [rows], copied. When a
// row has top-k or top-p, the tokens that can be kept (found from a histogram of the logits) are
// sorted first, in one radix sort over all rows: descending, equal logits in ascending token
// order as the host's sort; -0.0 ties with +0.0 as in the host's comparison. The host waits once
// for the number of candidates. Each row is spread over the GPU in chunks (a block per chunk),
// not left to one SM. Greedy rows are not written.
void sample_rows(const float* logits, int rows, int V, const SampleRow* params, int32_t* out, SampleScratch& scratch,
                 cudaStream_t s);

// Token masks (grammars, forced calls): for each row r with has[r] != 0, logits[r][t] = -inf where
// bit t % 32 of word t / 32 of masks[r] ((V + 31) / 32 words per row) is 0. masks, has: device.
// CPU twin: apply_token_mask (engine/sampler.h).
void mask_logits_rows(float* logits, int rows, int V, const uint32_t* masks, const int32_t* has, cudaStream_t s);

}  // namespace osprey::cuda
