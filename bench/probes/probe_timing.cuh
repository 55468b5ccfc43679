// What the kernel probes (bench/probes/*.cu) share: the median time of a launch, and an FNV-1a
// checksum of a device buffer, so that two builds of a kernel can be compared bit for bit and
// timed in one call.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/ops.cuh"

namespace osprey::probe {

// The first n elements of device buffer p, byte by byte.
template <class T>
uint64_t checksum(const T* p, size_t n) {
  std::vector<T> h(n);
  OSPREY_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  const uint8_t* b = reinterpret_cast<const uint8_t*>(h.data());
  uint64_t x = 1469598103934665603ull;
  for (size_t i = 0; i < n * sizeof(T); ++i) x = (x ^ b[i]) * 1099511628211ull;
  return x;
}
template <class T>
uint64_t checksum(const cuda::DeviceArray<T>& a, size_t n) {
  return checksum(a.ptr, n);
}

// Microseconds of launch(): the median of `reps` runs after 3 warm-ups, each timed by events.
template <class F>
float median_us(F&& launch, int reps = 20) {
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t a, b;
  OSPREY_CUDA_CHECK(cudaEventCreate(&a));
  OSPREY_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    OSPREY_CUDA_CHECK(cudaEventRecord(a));
    launch();
    OSPREY_CUDA_CHECK(cudaEventRecord(b));
    OSPREY_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    OSPREY_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0f);
  }
  OSPREY_CUDA_CHECK(cudaGetLastError());
  OSPREY_CUDA_CHECK(cudaEventDestroy(a));
  OSPREY_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace osprey::probe
