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

struct PdlSync {
  __device__ void wait() const { pdl_wait(); }
  __device__ void release() const { pdl_launch_dependents(); }
};

// The persistent kernel's phase counter: blocks add 1 each when they finish a phase, so phase p
// (0-based) may read what phases < p wrote once *counter >= p * grid_blocks. Lane 0 of each warp
// polls with acquire loads and the warp synchronizes (which orders the other lanes after it).
__device__ inline uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline void wait_counter(const uint32_t* counter, uint32_t target) {
  if ((threadIdx.x & 31) == 0)
    while (load_acquire(counter) < target) __nanosleep(64);
  __syncwarp();
}
__device__ inline void arrive_counter(uint32_t* counter) {  // the whole block, after its phase's work
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
}

struct PhaseSync {
  const uint32_t* counter = nullptr;
  uint32_t target = 0;
  __device__ void wait() const { wait_counter(counter, target); }
  __device__ void release() const {}
};

}  // namespace osprey::cuda
