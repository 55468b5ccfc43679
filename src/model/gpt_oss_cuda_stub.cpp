// Built when CUDA is not: the backend reports itself missing with a clear error.
#include "core/error.h"
#include "model/gpt_oss_cuda.h"

namespace osprey {

bool cuda_backend_available() { return false; }

struct GptOssCudaModel::Impl {};
GptOssCudaModel::GptOssCudaModel(const GptOssWeights&, int, Precision) {
  fail("this build of osprey has no CUDA backend (rebuild where nvcc is available)");
}
GptOssCudaModel::~GptOssCudaModel() = default;
const GptOssConfig& GptOssCudaModel::config() const { fail("no CUDA backend"); }
void GptOssCudaModel::reset() {}
int GptOssCudaModel::length() const { return 0; }
std::vector<float> GptOssCudaModel::forward(std::span<const int32_t>, bool) { fail("no CUDA backend"); }
int32_t GptOssCudaModel::forward_argmax(std::span<const int32_t>) { fail("no CUDA backend"); }
void GptOssCudaModel::synchronize() {}

}  // namespace osprey

#include "model/gpt_oss_cuda_fp8.h"

namespace osprey {

struct GptOssCudaFp8::Impl {};
GptOssCudaFp8::GptOssCudaFp8(const GptOssWeights&, const Options&) {
  fail("this build of osprey has no CUDA backend (rebuild where nvcc is available)");
}
GptOssCudaFp8::~GptOssCudaFp8() = default;
const GptOssConfig& GptOssCudaFp8::config() const { fail("no CUDA backend"); }
const GptOssCudaFp8::Options& GptOssCudaFp8::options() const { fail("no CUDA backend"); }
int GptOssCudaFp8::length(int) const { return 0; }
void GptOssCudaFp8::release(int) {}
std::vector<float> GptOssCudaFp8::prefill(int, std::span<const int32_t>, bool) { fail("no CUDA backend"); }
int32_t GptOssCudaFp8::prefill_argmax(int, std::span<const int32_t>) { fail("no CUDA backend"); }
int32_t GptOssCudaFp8::prefill_select(int, std::span<const int32_t>, const RowSampling&, const uint32_t*) {
  fail("no CUDA backend");
}
std::vector<int32_t> GptOssCudaFp8::decode_masked(std::span<const int32_t>, std::span<const int32_t>, std::span<const RowSampling>,
                                                  const std::function<void()>&, const std::function<const uint32_t*(size_t)>&) {
  fail("no CUDA backend");
}
std::vector<int32_t> GptOssCudaFp8::decode_argmax(std::span<const int32_t>, std::span<const int32_t>) {
  fail("no CUDA backend");
}
std::vector<std::vector<float>> GptOssCudaFp8::decode_logits(std::span<const int32_t>, std::span<const int32_t>) {
  fail("no CUDA backend");
}
std::vector<int32_t> GptOssCudaFp8::decode_sample(std::span<const int32_t>, std::span<const int32_t>,
                                                  std::span<const RowSampling>) {
  fail("no CUDA backend");
}
void GptOssCudaFp8::fill_random(int, int) {}
void GptOssCudaFp8::synchronize() {}
double GptOssCudaFp8::weight_bytes() const { return 0; }
int64_t GptOssCudaFp8::free_kv_pages() const { return 0; }
double GptOssCudaFp8::measure_copy_bandwidth() { fail("no CUDA backend"); }

}  // namespace osprey
