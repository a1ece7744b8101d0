// The DSpark drafter against the official reference's forward_spec (fixture v41-tiny-dspark): fed
// the golden's own main hidden states and anchors (the drafter alone), its rings, drafts, biased
// logits and confidences; then end to end on this run's main hidden states. Built on the CPU
// (golden_test) and on CUDA (golden_cuda_test), where the kernels' fp32 sums widen the bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/float_formats.h"
#include "io/json.h"
#include "model/test_backend.h"
#include "test_util.h"
#include "testing/golden_run.h"

namespace dsinfer {
namespace {

// The fixture's README advises about twice the reference's own drafter-only CUDA noise (0.113 /
// 0.054). A faithful implementation's fp32 sums meet a rounding boundary now and then (here one
// bf16 ulp of one stage's output, amplified by the random weights): on the CPU the measured
// difference is that noise, on both backends the advised bound holds.
constexpr double kBaseBound = 0.25, kConfidenceBound = 0.15;

template <typename T>
std::vector<T> values(const SafetensorsFile& f, const std::string& name, std::vector<int64_t>* shape = nullptr) {
  const SafetensorsEntry* e = f.find(name);
  EXPECT_NE(e, nullptr) << name;
  if (!e) return {};
  std::vector<T> v(e->numel());
  std::memcpy(v.data(), f.data(*e).data(), e->data_bytes);
  if (shape) *shape = e->shape;
  return v;
}

struct DSparkFixture {
  std::filesystem::path dir = testing::data_dir() / "v41-tiny-dspark";
  std::unique_ptr<Backend> backend = testing::make_test_backend();
  LocalCommunicator comm;
  std::unique_ptr<Model> model;
  std::optional<SafetensorsFile> golden, debug;
  std::vector<std::vector<int32_t>> prompts;
  int64_t batch = 0, drafts = 0, block = 0, vocab = 0;

  DSparkFixture() {
    auto m = Model::load(dir / "checkpoint", *backend, comm);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (m.ok()) model = std::move(*m);
    golden.emplace(std::move(*SafetensorsFile::open(dir / "golden.safetensors")));
    debug.emplace(std::move(*SafetensorsFile::open(dir / "golden_debug.safetensors")));
    std::vector<int64_t> shape;
    const std::vector<int32_t> ids = values<int32_t>(*golden, "prompt_ids", &shape);
    for (int64_t b = 0; b < shape[0]; ++b) prompts.emplace_back(&ids[b * shape[1]], &ids[(b + 1) * shape[1]]);
    values<float>(*golden, "spec_base", &shape);
    batch = shape[0], drafts = shape[1], block = shape[2], vocab = shape[3];
  }

  Result<GoldenRunResult> run(bool drafter_alone, bool dump) {
    GoldenRunOptions o;
    o.steps = static_cast<int>(drafts);
    o.force_tokens = &*golden;
    o.replay = &*debug;
    o.dump_debug = dump;
    o.dspark = true;
    if (drafter_alone) o.main_hidden_from = &*golden;
    return run_golden_experiment(*model, prompts, o);
  }

  // The golden's top-1 / top-2 margin of draft row j of call d of row b.
  double margin(int64_t b, int64_t d, int64_t j) const {
    const std::vector<float> base = values<float>(*golden, "spec_base");
    const float* row = &base[((b * drafts + d) * block + j) * vocab];
    std::vector<float> v(row, row + vocab);
    std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
    return v[0] - v[1];
  }
};

// Max |a - b| over the draft rows whose drafted prefix (the tokens before them in their block)
// agrees with the golden's: a flipped draft changes the Markov bias of every later row.
struct RowsCompared {
  double base = 0, confidence = 0;
  int rows = 0, of = 0;
};
RowsCompared compare_rows(const DSparkFixture& f, const GoldenRunResult& res) {
  const std::vector<int32_t> out = values<int32_t>(*f.golden, "spec_out");
  const std::vector<float> base = values<float>(*f.golden, "spec_base");
  const std::vector<float> confidence = values<float>(*f.golden, "spec_confidence");
  const int64_t B = f.block, V = f.vocab;
  RowsCompared c;
  for (int64_t b = 0; b < f.batch; ++b)
    for (int64_t d = 0; d < f.drafts; ++d)
      for (int64_t j = 0; j < B; ++j, ++c.of) {
        const int64_t call = b * f.drafts + d;
        if (!std::equal(&out[call * (B + 1)], &out[call * (B + 1) + j + 1], &res.spec_out[call * (B + 1)])) continue;
        ++c.rows;
        for (int64_t v = 0; v < V; ++v) {
          const int64_t i = (call * B + j) * V + v;
          c.base = std::max(c.base, double{std::fabs(res.spec_base[i] - base[i])});
        }
        c.confidence =
            std::max(c.confidence, double{std::fabs(res.spec_confidence[call * B + j] - confidence[call * B + j])});
      }
  return c;
}

class DSparkGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::test_backend_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(DSparkGolden, DrafterAloneMatchesTheReference) {
  DSparkFixture f;
  ASSERT_TRUE(f.model);
  ASSERT_TRUE(f.model->has_drafter());
  auto res = f.run(/*drafter_alone=*/true, /*dump=*/true);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  const std::vector<int32_t> out = values<int32_t>(*f.golden, "spec_out");
  const int64_t B = f.block;
  // Drafts: equal wherever the golden's margin is clear of the bound, while the prefix agrees.
  int equal = 0, checked = 0;
  for (int64_t b = 0; b < f.batch; ++b)
    for (int64_t d = 0; d < f.drafts; ++d) {
      const int64_t call = b * f.drafts + d;
      EXPECT_EQ(res->spec_out[call * (B + 1)], out[call * (B + 1)]) << "anchor of call " << d << " row " << b;
      for (int64_t j = 0; j < B; ++j) {
        if (!std::equal(&out[call * (B + 1)], &out[call * (B + 1) + j + 1], &res->spec_out[call * (B + 1)])) break;
        const bool same = res->spec_out[call * (B + 1) + j + 1] == out[call * (B + 1) + j + 1];
        equal += same, ++checked;
        if (f.margin(b, d, j) > 2 * kBaseBound) {
          EXPECT_TRUE(same) << "call " << d << " row " << b << " draft " << j << " on a clear margin";
        }
      }
    }
  const RowsCompared c = compare_rows(f, *res);
  EXPECT_LE(c.base, kBaseBound);
  EXPECT_LE(c.confidence, kConfidenceBound);
  // The rings: every stage's after every call (slot = position % window), as the reference wrote them.
  testing::TempDir tmp;
  ASSERT_TRUE(res->debug.write(tmp.path() / "ours.safetensors").ok());
  auto ours = SafetensorsFile::open(tmp.path() / "ours.safetensors");
  ASSERT_TRUE(ours.ok());
  double ring = 0;
  int rings = 0;
  for (int64_t step = 0; step <= f.drafts; ++step)
    for (int i = 0; i < 3; ++i, ++rings) {
      const std::string name = fmt::format("step{:02d}.spec.stage{}.window_kv", step, i);
      const std::vector<uint16_t> a = values<uint16_t>(*f.debug, name), b = values<uint16_t>(*ours, name);
      ASSERT_EQ(a.size(), b.size()) << name;
      for (size_t k = 0; k < a.size(); ++k)
        ring = std::max(ring, double{std::fabs(bf16_to_f32(a[k]) - bf16_to_f32(b[k]))});
    }
#ifndef DSINFER_GOLDEN_ON_CUDA
  EXPECT_EQ(ring, 0.0) << "the rings are the reference's bits on the CPU";
#endif
  std::printf(
      "v41-tiny-dspark drafter alone: drafts %d of %d equal; on %d of %d rows with agreeing prefixes max "
      "|d base| %.4g, |d confidence| %.4g; %d rings max |d| %.4g\n",
      equal, checked, c.rows, c.of, c.base, c.confidence, rings, ring);
}

TEST_F(DSparkGolden, EndToEndWithTheReferenceSelections) {
  DSparkFixture f;
  ASSERT_TRUE(f.model);
  auto res = f.run(/*drafter_alone=*/false, /*dump=*/false);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  // This run's main hidden states of the decode forwards against the golden's.
  const std::vector<float> hidden = values<float>(*f.golden, "main_hidden_decode");
  double worst_hidden = 0;
  for (size_t i = 0; i < hidden.size(); ++i)
    worst_hidden = std::max(worst_hidden, double{std::fabs(bf16_to_f32(res->main_hidden_decode[i]) - hidden[i])});
  const RowsCompared c = compare_rows(f, *res);
  // The README's end-to-end measurements (the target's own noise included): main_hidden 0.55,
  // base 0.50 and confidence 1.15 on agreeing rows; twice that.
  EXPECT_LE(worst_hidden, 1.1);
  EXPECT_LE(c.base, 1.0);
  EXPECT_LE(c.confidence, 2.3);
  std::printf(
      "v41-tiny-dspark end to end: main hidden max |d| %.4g; on %d of %d rows with agreeing prefixes max "
      "|d base| %.4g, |d confidence| %.4g\n",
      worst_hidden, c.rows, c.of, c.base, c.confidence);
}

}  // namespace
}  // namespace dsinfer
