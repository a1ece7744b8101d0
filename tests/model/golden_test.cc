// End to end against the official reference's goldens (spec fixtures): teacher-forced with the
// golden run's own selections replayed, every step's logits within the noise floor and the argmax
// equal wherever the golden's top-1/top-2 margin is clear; layer-by-layer differences reported.
// Without replay the greedy tokens are a smoke test: each mismatch must sit on a near-tie.
// Built twice: on the CPU backend (golden_test) and, with DSINFER_GOLDEN_ON_CUDA, on the CUDA
// backend (golden_cuda_test, skipped without a GPU), whose tensor-core kernels sum in fp32 in their
// own order (the numerics contract of docs/DEVELOPERS.md): there the logits' bound is 0.6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/float_formats.h"
#include "io/json.h"
#include "model/test_backend.h"
#include "test_util.h"
#include "testing/golden_run.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_GOLDEN_ON_CUDA
constexpr double kMaxLogitError = 0.6;
#else
constexpr double kMaxLogitError = 0.5;  // measured floor between faithful implementations: 0.19-0.37
#endif
constexpr double kClearMargin = 0.75;  // about twice that floor

using testing::make_test_backend;
using testing::test_backend_available;

struct Fixture {
  std::filesystem::path dir;
  std::unique_ptr<Backend> backend = make_test_backend();
  LocalCommunicator comm;
  std::unique_ptr<Model> model;
  std::optional<SafetensorsFile> golden, debug;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<float> logits;  // [b, steps, V]
  std::vector<int32_t> tokens;
  int64_t batch = 0, steps = 0, vocab = 0;

  explicit Fixture(const char* name) : dir(testing::data_dir() / name) {
    auto m = Model::load(dir / "checkpoint", *backend, comm);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (m.ok()) model = std::move(*m);
    golden.emplace(std::move(*SafetensorsFile::open(dir / "golden.safetensors")));
    debug.emplace(std::move(*SafetensorsFile::open(dir / "golden_debug.safetensors")));
    auto meta = read_json_file(dir / "golden.json");
    for (const Json& p : (*meta)["prompts"]) prompts.push_back(p.get<std::vector<int32_t>>());
    const SafetensorsEntry* e = golden->find("logits");
    batch = e->shape[0], steps = e->shape[1], vocab = e->shape[2];
    logits.resize(e->numel());
    std::memcpy(logits.data(), golden->data(*e).data(), e->data_bytes);
    const SafetensorsEntry* t = golden->find("tokens");
    tokens.resize(t->numel());
    std::memcpy(tokens.data(), golden->data(*t).data(), t->data_bytes);
  }
  double margin(int64_t b, int64_t s) const {
    std::vector<float> row(&logits[(b * steps + s) * vocab], &logits[(b * steps + s + 1) * vocab]);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
    return row[0] - row[1];
  }
};

double max_abs_bf16_diff(const SafetensorsFile& golden, const SafetensorsFile& ours, const std::string& name) {
  const SafetensorsEntry *a = golden.find(name), *b = ours.find(name);
  if (!a || !b || a->data_bytes != b->data_bytes) return -1;
  double m = 0;
  for (int64_t i = 0; i < a->numel(); ++i) {
    uint16_t x, y;
    std::memcpy(&x, golden.data(*a).data() + 2 * i, 2);
    std::memcpy(&y, ours.data(*b).data() + 2 * i, 2);
    m = std::max(m, double{std::fabs(bf16_to_f32(x) - bf16_to_f32(y))});
  }
  return m;
}

class GoldenReplay : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!test_backend_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(GoldenReplay, LogitsWithinTheNoiseFloor) {
  Fixture f(GetParam());
  ASSERT_TRUE(f.model);
  GoldenRunOptions o;
  o.steps = static_cast<int>(f.steps - 1);
  o.force_tokens = &*f.golden;
  o.replay = &*f.debug;
  o.dump_debug = true;
  auto res = run_golden_experiment(*f.model, f.prompts, o);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  double worst = 0;
  int checked = 0;
  for (int64_t s = 0; s < f.steps; ++s) {
    double step_max = 0;
    for (int64_t b = 0; b < f.batch; ++b) {
      for (int64_t v = 0; v < f.vocab; ++v) {
        const int64_t i = (b * f.steps + s) * f.vocab + v;
        step_max = std::max(step_max, double{std::fabs(res->logits[i] - f.logits[i])});
      }
      if (f.margin(b, s) > kClearMargin) {
        EXPECT_EQ(res->tokens[b * f.steps + s], f.tokens[b * f.steps + s]) << "step " << s << " row " << b;
        ++checked;
      }
    }
    EXPECT_LE(step_max, kMaxLogitError) << "step " << s;
    worst = std::max(worst, step_max);
  }
  // Layer-by-layer differences of the stream, for the record.
  testing::TempDir tmp;
  ASSERT_TRUE(res->debug.write(tmp.path() / "ours.safetensors").ok());
  auto ours = SafetensorsFile::open(tmp.path() / "ours.safetensors");
  ASSERT_TRUE(ours.ok());
  std::string layers;
  for (int l = 0; l < f.model->config().n_layers; ++l)
    layers += fmt::format(" {}:{:.3f}", l, max_abs_bf16_diff(*f.debug, *ours, fmt::format("step00.layer{}.out", l)));
  std::printf(
      "%s replayed: max |d logit| %.4f over %ld steps; argmax checked on %d clear rows\n"
      "  prefill stream max |d| by layer:%s\n",
      GetParam(), worst, static_cast<long>(f.steps), checked, layers.c_str());
}

TEST_P(GoldenReplay, FreeRunningTokensDifferOnlyOnNearTies) {
  Fixture f(GetParam());
  ASSERT_TRUE(f.model);
  GoldenRunOptions o;
  o.steps = static_cast<int>(f.steps - 1);
  o.force_tokens = &*f.golden;  // teacher forced, but our own selections
  o.dump_debug = true;
  auto res = run_golden_experiment(*f.model, f.prompts, o);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  testing::TempDir tmp;
  ASSERT_TRUE(res->debug.write(tmp.path() / "ours.safetensors").ok());
  auto ours = SafetensorsFile::open(tmp.path() / "ours.safetensors");
  ASSERT_TRUE(ours.ok());
  // How often our own selections equal the golden's, row by row (as sets).
  int rows_equal = 0, rows = 0;
  for (const SafetensorsEntry& e : f.debug->entries()) {
    const bool expert = e.name.ends_with(".gate_indices"), topk = e.name.ends_with(".topk_idxs");
    const SafetensorsEntry* m = ours->find(e.name);
    if (!(expert || topk) || !m || m->data_bytes != e.data_bytes || e.numel() == 0) continue;
    const int64_t k = e.shape.back();
    std::vector<int32_t> a(e.numel()), b(e.numel());
    std::memcpy(a.data(), f.debug->data(e).data(), e.data_bytes);
    std::memcpy(b.data(), ours->data(*m).data(), m->data_bytes);
    for (int64_t r = 0; r * k < e.numel(); ++r, ++rows) {
      std::sort(a.begin() + r * k, a.begin() + (r + 1) * k);
      std::sort(b.begin() + r * k, b.begin() + (r + 1) * k);
      rows_equal += std::equal(a.begin() + r * k, a.begin() + (r + 1) * k, b.begin() + r * k);
    }
  }
  std::printf("%s free selections: %d of %d expert / top-k rows equal the golden's (%.1f%%)\n", GetParam(), rows_equal,
              rows, 100.0 * rows_equal / std::max(rows, 1));
  int agree = 0, total = 0;
  for (int64_t b = 0; b < f.batch; ++b)
    for (int64_t s = 0; s < f.steps; ++s, ++total) {
      if (res->tokens[b * f.steps + s] == f.tokens[b * f.steps + s]) {
        ++agree;
        continue;
      }
      // Explained when the golden's own top-2 are close (every mismatch measured so far sits
      // below 0.41); free selections move logits by up to 1.8 between faithful implementations.
      std::printf("  step %ld row %ld: ours %d, golden %d, golden top-2 margin %.3f\n", static_cast<long>(s),
                  static_cast<long>(b), res->tokens[b * f.steps + s], f.tokens[b * f.steps + s], f.margin(b, s));
      EXPECT_LT(f.margin(b, s), 1.0) << "step " << s << " row " << b << " differs on a clear margin";
    }
  std::printf("%s free selections: greedy tokens agree on %d of %d forwards\n", GetParam(), agree, total);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenReplay, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

}  // namespace
}  // namespace dsinfer
