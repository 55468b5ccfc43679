// The GPU layouts' collectives over NCCL (issue 17): one rank per GPU, device buffers, enqueued
// on a stream (so a CUDA graph can capture them). NCCL is loaded when the first communicator is
// made (dlopen of libnccl.so.2), so the binaries start without it and only a run that needs it
// fails, saying so. NVLink multicast stays off: NCCL_NVLS_ENABLE=0 is set before the first
// communicator unless the environment already sets it (and a value other than 0 is refused).
// Built with the CUDA backend only.
#pragma once
#include <array>
#include <cstddef>

#include <cuda_runtime_api.h>

namespace osprey {

// A communicator's rendezvous: made once (by rank 0) and handed to every rank of the group by
// whatever joins them (a file, a pipe, shared memory).
struct NcclId {
  std::array<char, 128> bytes{};
};

class NcclCommunicator {
 public:
  static NcclId new_id();
  // Rank `rank` of `size` on CUDA device `device` (made current on this thread). Throws Error
  // with NCCL's reason when NCCL is missing or the group cannot form.
  NcclCommunicator(const NcclId& id, int rank, int size, int device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // data [n] (device) becomes the sum over the ranks, the same bits on every rank (NCCL's
  // reduction order, not rank order: the layouts' results match the unsharded ones up to it).
  void all_reduce_sum(float* data, size_t n, cudaStream_t s);
  // in [n] of every rank into out [size][n], in rank order (device buffers).
  void all_gather(const float* in, size_t n, float* out, cudaStream_t s);
  // Point to point (the KV handoff between a prefill and a decode worker): `bytes` to or from
  // rank `peer`; a send and its recv must be posted on both sides. send_recv posts both at once
  // (one NCCL group), as an exchange with a peer, or with this rank itself, needs.
  void send(const void* buf, size_t bytes, int peer, cudaStream_t s);
  void recv(void* buf, size_t bytes, int peer, cudaStream_t s);
  void send_recv(const void* send_buf, void* recv_buf, size_t bytes, int peer, cudaStream_t s);

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 0;
};

}  // namespace osprey
