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
int GptOssCudaFp8::kv_blocks() const { return 0; }
double GptOssCudaFp8::kv_block_bytes() const { return 0; }
void GptOssCudaFp8::set_blocks(int, std::span<const int32_t>, std::span<const int32_t>) { fail("no CUDA backend"); }
std::vector<std::vector<float>> GptOssCudaFp8::forward_logits(std::span<const Chunk>) { fail("no CUDA backend"); }
std::vector<float> GptOssCudaFp8::last_hidden(size_t) { fail("no CUDA backend"); }
std::vector<int32_t> GptOssCudaFp8::forward_select(std::span<const Chunk>, std::span<const RowSampling>, const Masks*) {
  fail("no CUDA backend");
}
std::vector<float> GptOssCudaFp8::forward_all_logits(const Chunk&) { fail("no CUDA backend"); }
void GptOssCudaFp8::randomize_kv() {}
bool GptOssCudaFp8::persistent_decode(int) const { return false; }
void GptOssCudaFp8::record_timeline() { fail("no CUDA backend"); }
const GptOssCudaFp8::Timeline& GptOssCudaFp8::decode_timeline() const { fail("no CUDA backend"); }
void GptOssCudaFp8::synchronize() {}
double GptOssCudaFp8::weight_bytes() const { return 0; }
double GptOssCudaFp8::measure_copy_bandwidth() { fail("no CUDA backend"); }
double GptOssCudaFp8::device_memory_bytes() { fail("no CUDA backend"); }
std::string GptOssCudaFp8::device_name() { fail("no CUDA backend"); }

}  // namespace osprey

#include "model/attention_timing.h"

namespace osprey {

PrefillAttentionTiming time_prefill_attention(const PrefillAttentionShape&, int) { fail("no CUDA backend"); }

}  // namespace osprey

#include "model/moe_timing.h"

namespace osprey {

MoeGemmTiming time_moe_gemm_mxfp4(const MoeGemmShape&, int) { fail("no CUDA backend"); }
MoeGemmTiming time_moe_gemm_mxfp4_wgmma(const MoeGemmShape&, int) { fail("no CUDA backend"); }
MoeGemmTiming time_moe_gemm_fp8(const MoeGemmShape&, int) { fail("no CUDA backend"); }

}  // namespace osprey
