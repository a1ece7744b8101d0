// MpiCommunicator under mpirun (ctest runs this binary on 2 and 3 ranks): sums folded in rank
// order, the same bits on every rank; bf16 summed in f32 and rounded once; gathers in rank order;
// a collective that the other ranks do not join in time fails with kUnavailable instead of hanging.
// The step channel carries rank 0's messages, whole and in order, however long rank 0 takes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/float_formats.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_step_channel.h"

namespace dsinfer {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<MpiCommunicator> make(std::chrono::milliseconds timeout = 60s) {
  auto c = MpiCommunicator::create(timeout);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

// Rank r's values: magnitudes from 2^-20 to 2^20, so that the order of a sum changes its bits.
std::vector<float> values_of(int rank, int64_t n) {
  std::mt19937 rng(100 + rank);
  std::vector<float> v(n);
  for (auto& x : v)
    x = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), static_cast<int>(rng() % 41) - 20);
  return v;
}

TEST(MpiCommunicator, F32SumIsTheRankOrderFoldOnEveryRank) {
  auto comm = make();
  ASSERT_TRUE(comm);
  const int64_t n = 4099;
  std::vector<float> x = values_of(comm->rank(), n), want = values_of(0, n);
  for (int r = 1; r < comm->world_size(); ++r) {
    const std::vector<float> other = values_of(r, n);
    for (int64_t i = 0; i < n; ++i) want[i] += other[i];
  }
  ASSERT_TRUE(comm->all_reduce_sum(TensorView::contiguous(x.data(), DType::kF32, {n})).ok());
  EXPECT_EQ(0, std::memcmp(x.data(), want.data(), n * 4)) << "rank " << comm->rank();
}

TEST(MpiCommunicator, Bf16SumIsTakenInF32AndRoundedOnce) {
  auto comm = make();
  ASSERT_TRUE(comm);
  const int64_t n = 1000;
  const auto bf16_of = [&](int rank) {
    std::vector<uint16_t> b;
    for (float v : values_of(rank, n)) b.push_back(f32_to_bf16(v));
    return b;
  };
  std::vector<uint16_t> x = bf16_of(comm->rank()), want(n);
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < comm->world_size(); ++r) {
    const std::vector<uint16_t> other = bf16_of(r);
    for (int64_t i = 0; i < n; ++i) sum[i] = r == 0 ? bf16_to_f32(other[i]) : sum[i] + bf16_to_f32(other[i]);
  }
  for (int64_t i = 0; i < n; ++i) want[i] = f32_to_bf16(sum[i]);
  ASSERT_TRUE(comm->all_reduce_sum(TensorView::contiguous(x.data(), DType::kBF16, {n})).ok());
  EXPECT_EQ(x, want) << "rank " << comm->rank();
}

TEST(MpiCommunicator, GatherConcatenatesInRankOrder) {
  auto comm = make();
  ASSERT_TRUE(comm);
  const int64_t n = 37;
  std::vector<float> x = values_of(comm->rank(), n), out(n * comm->world_size()), want;
  for (int r = 0; r < comm->world_size(); ++r) {
    const std::vector<float> other = values_of(r, n);
    want.insert(want.end(), other.begin(), other.end());
  }
  ASSERT_TRUE(comm->all_gather(TensorView::contiguous(x.data(), DType::kF32, {n}),
                               TensorView::contiguous(out.data(), DType::kF32, {n * comm->world_size()}))
                  .ok());
  EXPECT_EQ(out, want) << "rank " << comm->rank();
}

// Rank 0 gives up after 300 ms; the others join after 2 s (a stuck rank): rank 0's call fails with
// the collective and its rank named, and so does its next call at once; the late ranks' calls
// complete (rank 0's collective was posted).
TEST(MpiCommunicator, ARankThatDoesNotJoinInTimeFailsTheCollective) {
  auto comm = make(300ms);
  ASSERT_TRUE(comm);
  if (comm->world_size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<float> x(16, 1.0f);
  const TensorView v = TensorView::contiguous(x.data(), DType::kF32, {16});
  if (comm->rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    const Status s = comm->all_reduce_sum(v);
    EXPECT_EQ(s.kind(), ErrorKind::kUnavailable) << s.to_string();
    EXPECT_NE(s.message().find("all_reduce_sum on rank 0"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("did not join within 300 ms"), std::string::npos) << s.message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms) << "it waited for the late ranks";
    std::vector<float> out(16 * comm->world_size());
    EXPECT_EQ(comm->all_gather(v, TensorView::contiguous(out.data(), DType::kF32, {16 * comm->world_size()})).kind(),
              ErrorKind::kUnavailable)
        << "a failed communicator stays failed";
  } else {
    std::this_thread::sleep_for(2s);
    EXPECT_TRUE(comm->all_reduce_sum(v).ok());
  }
}

// Rank 0 sends an empty message, a large one and a small one, the last after twice the channel's
// timeout (a server idle between requests): the others receive each whole, in order. A rank sends
// or receives only as its role says.
TEST(MpiStepChannel, RankZerosMessagesReachEveryRankWholeAndInOrder) {
  auto channel = MpiStepChannel::create(300ms);
  ASSERT_TRUE(channel.ok()) << channel.status().message();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<uint8_t> large(1 << 20);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<uint8_t>(i * 31 + 7);
  const std::vector<std::vector<uint8_t>> messages = {{}, large, {1, 2, 3}};
  if (rank == 0) {
    EXPECT_EQ((*channel)->receive().status().kind(), ErrorKind::kInternal);
    for (size_t m = 0; m < messages.size(); ++m) {
      if (m == 2) std::this_thread::sleep_for(600ms);
      EXPECT_TRUE((*channel)->send(messages[m]).ok()) << m;
    }
  } else {
    EXPECT_EQ((*channel)->send(messages[0]).kind(), ErrorKind::kInternal);
    for (size_t m = 0; m < messages.size(); ++m) {
      auto got = (*channel)->receive();
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_EQ(*got, messages[m]) << m;
    }
  }
}

}  // namespace
}  // namespace dsinfer
