// How a kernel body waits for the work it depends on. Every decode-path kernel body is a
// __device__ function of its block index and a Sync, run two ways:
// - as its own kernel (the kernel-per-op path): the block index is blockIdx and Sync is PdlSync,
//   whose wait() is PDL's griddepcontrol.wait (launch.cuh: it returns once the kernel before has
//   finished and its writes are visible);
// - as one phase of the persistent decode kernel (decode_persistent.cu): the persistent grid's
//   blocks take the phase's virtual blocks in turn and Sync is PhaseSync, whose wait() returns
//   once every block of the grid has finished the phase before.
// A body reads only weights before its wait (and, under the rules launch.cuh states, what kernels
// two or more back wrote), so a block of the persistent kernel streams its next phase's weights
// while other blocks still finish the phase before: that is what removes a decode step's kernel
// boundaries.
#pragma once
#include <cstdint>

#include "kernels/cuda/launch.cuh"

namespace osprey::cuda {

// A body's block: its index in the virtual grid (x, y, z) and the grid's extent.
struct VBlock {
  int x = 0, y = 0, z = 0;
  int nx = 1, ny = 1, nz = 1;
  __device__ static VBlock this_block() {
    return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), int(gridDim.x), int(gridDim.y), int(gridDim.z)};
  }
};

// Kernels launched without PDL: nothing to wait for or to release.
struct NoSync {
  __device__ void wait() const {}
  __device__ void release() const {}
};

struct PdlSync {
  __device__ void wait() const { pdl_wait(); }
  __device__ void release() const { pdl_launch_dependents(); }
};

// The persistent kernel's phase counters: counter[p] counts the blocks that have finished phase
// p, so once counter[p - 1] reaches the grid's size every block has finished phase p - 1 and
// phase p may read what it wrote. (One counter for all phases is not enough: a block with no work
// in a phase arrives at it at once, and its arrival would count towards the phase before.) One
// thread a block polls with acquire loads (a poller per warp made the counter's L2 line a hot spot
// that slowed every other access) and the block's barrier orders the other threads after it;
// every thread of the block calls it, at the same point.
__device__ inline uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline void wait_counter(const uint32_t* counter, uint32_t target) {
  if (threadIdx.x == 0)
    while (load_acquire(counter) < target) __nanosleep(32);
  __syncthreads();
}

struct PhaseSync {
  const uint32_t* counter = nullptr;
  uint32_t target = 0;
  __device__ void wait() const { wait_counter(counter, target); }
  __device__ void release() const {}
};

}  // namespace osprey::cuda
