// The model's side work (side_queue: ops a device runs on a second stream, beside the ops after
// them) is marked where it is safe: in front of the CPU, a backend that holds each piece of side
// work back until its join, the latest a device could run it, gives the logits of the CPU run in
// order, bit for bit, on both fixture models (prompts, then decode steps of one and of three
// sequences). So no op between a fork and its join reads what the side work writes, and none
// overwrites or frees what it reads.
#include <gtest/gtest.h>

#include <functional>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "cpu_front.h"
#include "keeping_backend.h"
#include "model/decode_steps.h"
#include "model/model.h"
#include "test_util.h"

namespace dsinfer {
namespace {

class LateSideWork final : public testing::CpuFront {
 public:
  explicit LateSideWork(CpuBackend& cpu) : CpuFront(cpu) {}
  int64_t forks = 0, held = 0;  // side work seen, and the ops it held back

  // Outside side work an op runs now; inside, it is held back until the join.
#define DSINFER_LATE_OP(name, Args)                   \
  void name(const Args& a) override {                 \
    late(a, [this](const Args& x) { cpu_.name(x); }); \
  }
  DSINFER_OPS(DSINFER_LATE_OP)
#undef DSINFER_LATE_OP

 private:
  template <typename A, typename Run>
  void late(const A& a, Run run) {
    if (!in_side_) return run(a);
    ++held;
    held_.push_back([kept = testing::Owned<A>(a), run] { run(kept.get()); });
  }
  template <typename Run>
  void late(const SideQueueArgs& a, Run) {
    switch (a.step) {
      case SideQueue::kFork:
        ASSERT_FALSE(in_side_) << "a fork inside side work";
        in_side_ = true, ++forks;
        return;
      case SideQueue::kResume:
        ASSERT_TRUE(in_side_) << "a resume without a fork";
        in_side_ = false;
        return;
      case SideQueue::kJoin:
        ASSERT_FALSE(in_side_) << "a join inside side work";
        for (const auto& op : held_) op();
        held_.clear();
        return;
    }
  }

  bool in_side_ = false;
  std::vector<std::function<void()>> held_;
};

std::vector<float> decode(const char* fixture, int sequences, bool late_side_work, int64_t* forks) {
  CpuBackend cpu(2);
  LateSideWork late(cpu);
  Backend& be = late_side_work ? static_cast<Backend&>(late) : cpu;
  LocalCommunicator comm;
  auto model = Model::load(testing::data_dir() / fixture / "checkpoint", be, comm);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  ModelRunner runner(**model);
  std::vector<float> logits = testing::prompts_then_decode(runner, /*steps=*/12, sequences);
  *forks = late.forks;
  EXPECT_EQ(late.held > 0, late_side_work);
  return logits;
}

class SideWorkLate : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(SideWorkLate, LogitsAsInOrder) {
  const auto [fixture, sequences] = GetParam();
  int64_t forks = 0;
  const std::vector<float> in_order = decode(fixture, sequences, false, &forks);
  const std::vector<float> late = decode(fixture, sequences, true, &forks);
  EXPECT_GT(forks, 0) << "the model marks no side work";
  ASSERT_EQ(in_order.size(), late.size());
  EXPECT_TRUE(in_order == late) << "side work run at its join gives other logits";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SideWorkLate,
                         ::testing::Combine(::testing::Values("v41-tiny-a", "v41-tiny-b"), ::testing::Values(1, 3)));

}  // namespace
}  // namespace dsinfer
