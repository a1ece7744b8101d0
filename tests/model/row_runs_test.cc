// Runs of rows (model/row_runs.h): how a call's chunks are cut, and that a model whose backend
// takes few rows a call computes the same logits as one whose backend takes any number (the CPU
// backend is exact, so any slip in the runs' rows shows as different bits).
#include "model/row_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <ostream>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "cpu_front.h"
#include "model/model.h"
#include "ops/communicator.h"
#include "test_util.h"

namespace dsinfer {

void PrintTo(const RowRun& r, std::ostream* os) {
  *os << "{" << r.first << ", " << r.count << "}";
}

namespace {

TEST(RowRuns, ChunksShareARunUpToTheBoundAndALargerOneHasItsOwn) {
  const std::vector<int64_t> rows = {1, 1, 2, 1, 7, 3, 0, 1, 1, 1, 1};
  EXPECT_EQ(row_runs(rows, 3), (std::vector<RowRun>{{0, 2}, {2, 3}, {5, 7}, {12, 3}, {15, 3}, {18, 1}}));
  EXPECT_EQ(row_runs(rows, INT64_MAX), (std::vector<RowRun>{{0, 19}}));
  EXPECT_EQ(row_runs(rows, 1),
            (std::vector<RowRun>{{0, 1}, {1, 1}, {2, 2}, {4, 1}, {5, 7}, {12, 3}, {15, 1}, {16, 1}, {17, 1}, {18, 1}}));
  EXPECT_TRUE(row_runs(std::vector<int64_t>{}, 3).empty());
}

// The CPU backend with a bound on the rows of the row-wise ops, counting their calls.
class FewRowsBackend final : public testing::CpuFront {
 public:
  FewRowsBackend(CpuBackend& cpu, int64_t max_rows) : CpuFront(cpu), max_rows_(max_rows) {}
  int64_t hc_mixes_calls = 0, most_router_rows = 0;

  int64_t max_invariant_rows() const override { return max_rows_; }

#define DSINFER_FORWARD_OP(name, Args) \
  void name(const Args& a) override {  \
    count(a);                          \
    cpu_.name(a);                      \
  }
  DSINFER_OPS(DSINFER_FORWARD_OP)
#undef DSINFER_FORWARD_OP

 private:
  template <typename A>
  void count(const A&) {}
  void count(const HcMixesArgs&) {
    ++hc_mixes_calls;
  }
  void count(const RouterArgs& a) {
    most_router_rows = std::max(most_router_rows, a.x.size(0));
  }

  int64_t max_rows_;
};

// Three prompts prefilled in one call, then steps of five decoding sequences with a fourth
// prompt's pieces (all their logits) between them; every call's logits, in order.
std::vector<float> logits_of_a_mixed_run(Backend& backend) {
  LocalCommunicator comm;
  auto loaded = Model::load(testing::data_dir() / "v41-tiny-a" / "checkpoint", backend, comm);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return {};
  Model& model = **loaded;
  const int64_t V = model.config().vocab_size;
  const auto prompt = [](int seq, int64_t len) {
    std::vector<int32_t> p{1};
    for (int64_t t = 1; t < len; ++t) p.push_back(static_cast<int32_t>(20 + (37 * t + 53 * seq) % 280));
    return p;
  };
  std::deque<SequenceState> seqs;
  std::vector<ForwardChunk> first;
  for (int q = 0; q < 5; ++q) {
    seqs.push_back(model.new_sequence());
    const std::vector<int32_t> p = prompt(q, 4 + 3 * q);
    first.push_back({&seqs.back(), 0, p, false, static_cast<int64_t>(p.size())});
  }
  std::vector<float> all(first.size() * V);
  EXPECT_TRUE(model.forward(first, all).ok());
  SequenceState& late = seqs.emplace_back(model.new_sequence());
  const std::vector<int32_t> late_prompt = prompt(9, 11);
  int64_t late_done = 0;
  for (int s = 0; s < 6; ++s) {
    std::vector<ForwardChunk> step;
    for (int q = 0; q < 5; ++q) step.push_back({&seqs[q], seqs[q].length, {17 + 5 * s + q}, true});
    int64_t rows = 5;
    if (late_done < static_cast<int64_t>(late_prompt.size())) {
      const int64_t len = std::min<int64_t>(s + 1, static_cast<int64_t>(late_prompt.size()) - late_done);
      step.insert(step.begin() + 2,
                  ForwardChunk{&late,
                               late_done,
                               {late_prompt.begin() + late_done, late_prompt.begin() + late_done + len},
                               false,
                               static_cast<int64_t>(late_prompt.size()),
                               false,
                               true});
      late_done += len, rows += len;
    }
    std::vector<float> logits(rows * V);
    const Status st = model.forward(step, logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

TEST(RowRuns, AModelOnFewRowsACallGivesTheSameLogits) {
  CpuBackend cpu(2);
  FewRowsBackend any(cpu, INT64_MAX), few(cpu, 3);
  const std::vector<float> expected = logits_of_a_mixed_run(any), got = logits_of_a_mixed_run(few);
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
  // The calls were cut: the first call's prompts (4 to 16 rows) each alone, the steps in runs of
  // at most 3 rows (a piece of more alone).
  EXPECT_EQ(any.most_router_rows, 4 + 7 + 10 + 13 + 16);
  EXPECT_EQ(few.most_router_rows, 16);
  EXPECT_GT(few.hc_mixes_calls, any.hc_mixes_calls);
}

}  // namespace
}  // namespace dsinfer
