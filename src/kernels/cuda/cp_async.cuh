// Asynchronous global-to-shared copies (cp.async, sm_80+) and occupancy queries, shared by the
// streaming GEMM kernels (fp8.cu, moe_gemm_mxfp4.cu).
#pragma once
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

// 16 bytes gmem -> smem, or 16 zero bytes when !ok (gmem is not read then).
__device__ inline void cp_async16(void* smem, const void* gmem, bool ok) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(ok ? 16 : 0) : "memory");
}
// The same to a shared-space address (__cvta_generic_to_shared once, outside the loop).
__device__ inline void cp_async16_shared(unsigned dst, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
// The same, reading `bytes` of the 16 (the rest zeros; 0: gmem is not read).
__device__ inline void cp_async16_shared(unsigned dst, const void* gmem, unsigned bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Blocks of `threads` threads of `kernel` an SM holds with `smem` bytes of dynamic shared memory,
// asked of the runtime once per (kernel, threads, smem): launchers need it on every call.
inline int resident_blocks_per_sm(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t>, int> known;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find({kernel, threads, smem}); it != known.end()) return it->second;
  int n = 0;
  OSPREY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
  known.emplace(std::tuple{kernel, threads, smem}, n);
  return n;
}

// The current device's SM count (asked once).
inline int sm_count() {
  static const int sms = [] {
    int dev = 0, n = 0;
    OSPREY_CUDA_CHECK(cudaGetDevice(&dev));
    OSPREY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  return sms;
}

}  // namespace osprey::cuda
