// A device allocation (RAII, move-only) and host-to-device uploads, shared by the CUDA model paths.
#pragma once
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  DeviceArray() = default;
  explicit DeviceArray(size_t count) : n(count) {
    if (count) OSPREY_CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(T)));
  }
  ~DeviceArray() {
    if (ptr) cudaFree(ptr);
  }
  DeviceArray(DeviceArray&& o) noexcept : ptr(o.ptr), n(o.n) { o.ptr = nullptr, o.n = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(n, o.n);
    return *this;
  }
  void ensure(size_t count) {  // grow-only scratch
    if (count > n) *this = DeviceArray(count);
  }
};

// Page-locked host memory (RAII, move-only): what a host-to-device copy needs to run
// asynchronously beside the host's work.
template <typename T>
struct PinnedHostArray {
  T* ptr = nullptr;
  size_t n = 0;
  PinnedHostArray() = default;
  explicit PinnedHostArray(size_t count) : n(count) {
    if (count) OSPREY_CUDA_CHECK(cudaMallocHost(&ptr, count * sizeof(T)));
  }
  ~PinnedHostArray() {
    if (ptr) cudaFreeHost(ptr);
  }
  PinnedHostArray(PinnedHostArray&& o) noexcept : ptr(o.ptr), n(o.n) { o.ptr = nullptr, o.n = 0; }
  PinnedHostArray& operator=(PinnedHostArray&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(n, o.n);
    return *this;
  }
};

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
