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
