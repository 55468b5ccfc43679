// The collectives the parallel layouts need (issue 17), behind one interface so the sharded
// forward does not depend on the transport: LocalGroup runs the ranks as threads of one process
// (the CPU and the tests); an NCCL communicator (one process per GPU) is the GPU's.
#pragma once
#include <barrier>
#include <cstddef>
#include <memory>
#include <vector>

namespace osprey {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data [n] on every rank becomes the sum over the ranks, added in rank order (every rank gets
  // the same bits).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // in [n] of every rank into out [size][n], in rank order.
  virtual void all_gather(const float* in, size_t n, float* out) = 0;
};

// `size` ranks as threads of this process: rank(r) is the communicator thread r uses. Every rank
// must call the same collectives in the same order (each call is a barrier).
class LocalGroup {
 public:
  explicit LocalGroup(int size);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;
  Communicator& rank(int r);
  int size() const { return int(ranks_.size()); }

 private:
  class Rank;
  std::barrier<> barrier_;
  std::vector<const float*> published_;  // [size]: each rank's buffer of the current collective
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace osprey
