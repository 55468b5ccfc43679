// NcclCommunicator (issue 17) at world size 1 on device 0, what the one-GPU machine can run: the
// collectives and a send/recv with itself move exactly what they should, NVLink multicast stays
// off, and ranks that do not exist are refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "cuda_test_util.h"
#include "parallel/nccl_communicator.h"

namespace osprey {
namespace {

TEST(Nccl, WorldOfOneMovesWhatItShould) {
  const NcclId id = NcclCommunicator::new_id();
  NcclCommunicator c(id, 0, 1, 0);
  ASSERT_NE(std::getenv("NCCL_NVLS_ENABLE"), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const std::vector<float> h = randf(1000, 1, 3.0f);
  Dev<float> d(h), g(h.size());
  c.all_reduce_sum(d.p, h.size(), s);
  c.all_gather(d.p, h.size(), g.p, s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(d.get(), h);
  EXPECT_EQ(g.get(), h);
  std::vector<uint8_t> bytes(4099);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + 1);
  Dev<uint8_t> a(bytes), b(bytes.size());
  c.send_recv(a.p, b.p, bytes.size(), 0, s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(b.get(), bytes);
  cudaStreamDestroy(s);
  EXPECT_THROW(NcclCommunicator(id, 1, 1, 0), Error);
  EXPECT_THROW(NcclCommunicator(id, 0, 0, 0), Error);
}

}  // namespace
}  // namespace osprey
