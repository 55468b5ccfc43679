#include "parallel/communicator.h"

#include <algorithm>

#include "core/error.h"

namespace osprey {

class LocalGroup::Rank final : public Communicator {
 public:
  Rank(LocalGroup& g, int r) : g_(g), r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return g_.size(); }
  void all_reduce_sum(float* data, size_t n) override {
    g_.published_[size_t(r_)] = data;
    g_.barrier_.arrive_and_wait();  // every rank's buffer is published
    sum_.assign(n, 0.0f);
    for (const float* p : g_.published_)
      for (size_t i = 0; i < n; ++i) sum_[i] += p[i];
    g_.barrier_.arrive_and_wait();  // every rank has read every buffer
    std::copy(sum_.begin(), sum_.end(), data);
  }
  void all_gather(const float* in, size_t n, float* out) override {
    g_.published_[size_t(r_)] = in;
    g_.barrier_.arrive_and_wait();
    for (size_t q = 0; q < g_.published_.size(); ++q) std::copy_n(g_.published_[q], n, out + q * n);
    g_.barrier_.arrive_and_wait();
  }

 private:
  LocalGroup& g_;
  int r_;
  std::vector<float> sum_;
};

LocalGroup::LocalGroup(int size) : barrier_(size), published_(size_t(std::max(size, 0))) {
  if (size < 1) fail("LocalGroup: at least one rank");
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

LocalGroup::~LocalGroup() = default;

Communicator& LocalGroup::rank(int r) {
  if (r < 0 || r >= size()) fail("LocalGroup: no rank {} in a group of {}", r, size());
  return *ranks_[size_t(r)];
}

}  // namespace osprey
