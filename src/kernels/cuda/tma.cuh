// Host side of the tensor memory accelerator: tensor maps (CUtensorMap) for the kernels' TMA
// loads (sm90.cuh), encoded through the driver's cuTensorMapEncodeTiled (the runtime hands out
// the entry point; no link against libcuda). Every map here reads 128-byte swizzled boxes.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    OSPREY_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (!p || q != cudaDriverEntryPointSuccess) fail_plain("the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A tensor of `rank` dimensions (dims innermost first, strides in bytes of dimensions 1..rank-1)
// read in boxes of `box` elements, 128-byte swizzled (the innermost box row is 128 bytes at most);
// `what` names the caller in the error.
inline CUtensorMap tma_map_swizzled(CUtensorMapDataType type, uint32_t rank, const void* base, const uint64_t* dims,
                                    const uint64_t* strides, const uint32_t* box, const char* what) {
  CUtensorMap m;
  const cuuint32_t steps[5] = {1, 1, 1, 1, 1};
  const CUresult r = tensor_map_encoder()(&m, type, rank, const_cast<void*>(base), dims, strides, box, steps,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string shape;
    for (uint32_t i = 0; i < rank; ++i) shape += (i ? " x " : "") + std::to_string(dims[rank - 1 - i]);
    fail_plain(std::string(what) + ": cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ") for a " + shape +
               " tensor");
  }
  return m;
}

}  // namespace osprey::cuda
