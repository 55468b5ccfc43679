// Kernel launches with programmatic dependent launch (PDL, sm_90): a kernel launched this way may
// start while the kernel before it on the stream is still running; it must call pdl_wait() before
// it reads anything that kernel wrote and before it writes anything (pdl_wait returns once the
// previous kernel has finished and its writes are visible). Work that reads only weights can go
// before the wait: that is what hides a decode step's kernel boundaries. Every kernel launched
// with launch_pdl calls pdl_wait() on every path, so the waits chain. Kernels call
// pdl_launch_dependents() early, which lets the next kernel's blocks be scheduled, and normally
// after their own wait: then kernel n + 1 starts only once kernel n - 1 has finished, so what
// kernels n - 1 and earlier wrote may be read before the wait (the experts' second GEMM reads the
// route's expert list there, the combine the route's choices and the residual). The one kernel
// that releases before its wait is the decode rope kernel (qkv_rope_to_cache with decode_rows),
// whose dependent, the decode attention, reads before its wait only what the step's host copies
// and earlier steps wrote.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

__device__ inline void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ inline void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// Which launches use PDL: OSPREY_PDL = "all" (the default), "none", or a comma-separated list of
// tags (gemm, attn, rope, norm, route, sort, swiglu, quant) to find a kernel that reads before its
// wait (tests/cuda/device_pdl_bisect.sh).
inline bool pdl_enabled(const char* tag) {
  static const std::string sel = [] {
    const char* e = std::getenv("OSPREY_PDL");
    return std::string(e ? e : "all");
  }();
  if (sel == "all") return true;
  if (sel == "none") return false;
  const std::string t(tag);
  size_t at = 0;
  while (at <= sel.size()) {
    const size_t end = std::min(sel.find(',', at), sel.size());
    if (sel.compare(at, end - at, t) == 0) return true;
    at = end + 1;
  }
  return false;
}

template <typename... KernelArgs, typename... Args>
void launch_pdl(const char* tag, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled(tag) ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  OSPREY_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, KernelArgs(std::forward<Args>(args))...));
}

}  // namespace osprey::cuda
