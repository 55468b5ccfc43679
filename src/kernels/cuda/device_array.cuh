// Device and page-locked host allocations (RAII, move-only) and host-to-device uploads, shared by
// the CUDA model paths.
#pragma once
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

// An owned CUDA allocation of `n` T (RAII, move-only), in the memory Mem allocates: the GPU's
// (DeviceArray) or page-locked host memory, what a host-to-device copy needs to run asynchronously
// beside the host's work (PinnedHostArray).
template <typename T, class Mem>
struct CudaArray {
  T* ptr = nullptr;
  size_t n = 0;
  CudaArray() = default;
  explicit CudaArray(size_t count) : n(count) {
    if (count) OSPREY_CUDA_CHECK(Mem::allocate(reinterpret_cast<void**>(&ptr), count * sizeof(T)));
  }
  ~CudaArray() {
    if (ptr) Mem::release(ptr);
  }
  CudaArray(CudaArray&& o) noexcept : ptr(o.ptr), n(o.n) { o.ptr = nullptr, o.n = 0; }
  CudaArray& operator=(CudaArray&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(n, o.n);
    return *this;
  }
  void ensure(size_t count) {  // grow-only scratch
    if (count > n) *this = CudaArray(count);
  }
};
struct DeviceMemory {
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static cudaError_t release(void* p) { return cudaFree(p); }
};
struct PinnedHostMemory {
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
  static cudaError_t release(void* p) { return cudaFreeHost(p); }
};
template <typename T>
using DeviceArray = CudaArray<T, DeviceMemory>;
template <typename T>
using PinnedHostArray = CudaArray<T, PinnedHostMemory>;

template <typename T>
DeviceArray<T> upload(const T* host, size_t count) {
  DeviceArray<T> d(count);
  OSPREY_CUDA_CHECK(cudaMemcpy(d.ptr, host, count * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

inline DeviceArray<bf16> upload_bf16(const osprey::bf16* host, size_t count) {
  DeviceArray<bf16> d(count);
  OSPREY_CUDA_CHECK(cudaMemcpy(d.ptr, host, count * 2, cudaMemcpyHostToDevice));
  return d;
}

inline DeviceArray<float> upload_bf16_as_f32(const osprey::bf16* host, size_t count) {
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) f[i] = bf16_to_f32(host[i]);
  return upload(f.data(), count);
}

}  // namespace osprey::cuda
