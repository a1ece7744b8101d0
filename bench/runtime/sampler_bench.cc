// The host's cost of picking a token from a row of V4.1's 129,280 logits: greedy, temperature with
// a nucleus, top-k, the whole softmax, and a speculative draft drawn and verified (two shapings).
#include <benchmark/benchmark.h>

#include <vector>

#include "core/hash.h"
#include "runtime/sampler.h"

namespace dsinfer {
namespace {

std::vector<float> logits() {
  std::vector<float> v(129280);
  uint64_t state = 3;
  // A peaked row: a few likely tokens over a long tail, as a language model's.
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(8 * splitmix64_uniform(state)) - (i % 97 ? 6 : 0);
  return v;
}

void run(benchmark::State& state, SamplingParams p) {
  const std::vector<float> row = logits();
  SamplerState s(p, 1, {});
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(row));
}

void BM_Greedy(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0;
  run(state, p);
}
void BM_TopP095(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.7f, p.top_p = 0.95f;
  run(state, p);
}
void BM_TopK50(benchmark::State& state) {
  SamplingParams p;
  p.top_k = 50;
  run(state, p);
}
void BM_FullSoftmax(benchmark::State& state) {
  run(state, SamplingParams{});
}
void BM_DraftAndVerifyTopP095(benchmark::State& state) {
  const std::vector<float> row = logits();
  SamplingParams p;
  p.temperature = 0.7f, p.top_p = 0.95f;
  SamplerState s(p, 1, {});
  TokenDistribution q;
  for (auto _ : state) benchmark::DoNotOptimize(s.verify_draft(row, s.draw_draft(row, &q), q));
}

BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP095)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK50)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FullSoftmax)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DraftAndVerifyTopP095)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsinfer
