// Speculative rejection sampling: the tokens it emits follow the distribution plain sampling draws
// from, whatever the drafts were. Pearson's chi-square against the exact law, at a significance of
// 1e-4 (the seeds are fixed, so each run is the same draw).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "runtime/bigram_checkpoint.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace dsinfer {
namespace {

// The chi-square quantile of `dof` degrees of freedom at 1 - 1e-4 (Wilson-Hilferty).
double chi_square_limit(int64_t dof) {
  const double k = static_cast<double>(dof), z = 3.719;
  return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

// softmax(logits / temperature) over the top_k largest, as a dense vector.
std::vector<double> top_k_law(const std::vector<float>& logits, float temperature, int top_k) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<double> law(logits.size(), 0.0);
  double sum = 0;
  for (int i = 0; i < top_k; ++i) sum += law[order[i]] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  for (double& p : law) p /= sum;
  return law;
}

// Observed counts against n * law over the cells where law > 0; adds the statistic and the degrees of freedom.
void add_chi_square(const std::vector<int64_t>& counts, const std::vector<double>& law, double* stat, int64_t* dof) {
  const int64_t n = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int64_t cells = 0;
  for (size_t i = 0; i < law.size(); ++i) {
    if (law[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "a token outside the law: " << i;
      continue;
    }
    const double expected = static_cast<double>(n) * law[i], d = static_cast<double>(counts[i]) - expected;
    *stat += d * d / expected;
    ++cells;
  }
  *dof += cells - 1;
}

// Drafts from a flatter law over partly other tokens: some accepted, some replaced from the
// residual. The emitted tokens follow the target's law; the drafts the draft's.
TEST(Sampler, RejectionSamplingFollowsTheTargetsLaw) {
  const std::vector<float> target = {2.0f, 1.5f, 1.2f, 0.4f, -0.3f, -1.0f, 0.9f, -2.0f};
  const std::vector<float> draft = {1.0f, 1.4f, -0.5f, 0.8f, 0.6f, 1.1f, -1.5f, 0.0f};
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 5;
  std::vector<int64_t> emitted(target.size()), drafted(target.size());
  int64_t accepted = 0;
  const int64_t n = 40000;
  for (int64_t seed = 0; seed < n; ++seed) {
    SamplerState s(params, static_cast<uint64_t>(seed), {});
    TokenDistribution q;
    const int32_t d = s.draw_draft(draft, &q);
    const std::optional<int32_t> t = s.verify_draft(target, d, q);
    ASSERT_TRUE(t.has_value());
    ++drafted[d], ++emitted[*t];
    accepted += *t == d;
  }
  const std::vector<double> p = top_k_law(target, 0.9f, 5), q = top_k_law(draft, 0.9f, 5);
  for (const auto& [counts, law] : {std::pair{emitted, p}, std::pair{drafted, q}}) {
    double stat = 0;
    int64_t dof = 0;
    add_chi_square(counts, law, &stat, &dof);
    EXPECT_LT(stat, chi_square_limit(dof)) << dof << " degrees of freedom";
  }
  // Accepted with probability sum_x min(p(x), q(x)) (the rest replaced): both branches ran.
  double overlap = 0;
  for (size_t i = 0; i < p.size(); ++i) overlap += std::min(p[i], q[i]);
  EXPECT_NEAR(static_cast<double>(accepted) / n, overlap, 4 * std::sqrt(overlap * (1 - overlap) / n));
  EXPECT_GT(overlap, 0.3);
  EXPECT_LT(overlap, 0.8);
}

// Greedy verification is plain greedy decoding: the target's first maximum, the draft or not.
TEST(Sampler, GreedyVerificationPicksTheTargetsMaximum) {
  SamplingParams params;
  params.temperature = 0;
  SamplerState s(params, 1, {});
  TokenDistribution q;
  EXPECT_EQ(s.draw_draft(std::vector<float>{0.5f, 2.0f, 2.0f}, &q), 1);
  EXPECT_TRUE(q.ids.empty());
  EXPECT_EQ(s.verify_draft(std::vector<float>{3.0f, 1.0f, 3.0f}, 1, q), 0);
  EXPECT_EQ(s.verify_draft(std::vector<float>{0.0f, 1.0f, 0.5f}, 1, q), 1);
}

// Seeded requests on a model whose next token depends on its current one, with a drafter whose
// first draft is drawn from about the model's law at four times the temperature (flatter) and whose later ones
// from unrelated noise rows: every emitted token, drafted or not, follows the law of its own row of
// logits (read back from its logprobs), at temperature 1 over the top 3.
TEST(Engine, SpeculativeSamplingFollowsTheModelsLaw) {
  testing::BigramModel bigram(0.25f);
  ASSERT_TRUE(bigram.model);
  Engine engine(*bigram.model, *bigram.tok, {512, 64, {5, 0, 0}});
  // Tokens grouped by the law they were drawn from: its three tokens and their log-probabilities.
  std::map<std::vector<float>, std::map<int32_t, int64_t>> groups;
  const int requests = 1000;
  for (int i = 0; i < requests; ++i) {
    EngineRequest r;
    r.prompt = bigram.tok->encode("Once upon a time");
    r.sampling.temperature = 1;
    r.sampling.top_k = 3;
    r.sampling.seed = static_cast<uint64_t>(i);
    r.max_tokens = 6;
    r.logprobs = 3;
    r.on_output = [&](const RequestOutput& o) {
      for (const SampledLogprobs& lp : o.logprobs) {
        std::vector<float> key;
        for (const TokenLogprob& t : lp.top) key.insert(key.end(), {static_cast<float>(t.token), t.logprob});
        ++groups[key][lp.chosen.token];
      }
    };
    ASSERT_TRUE(engine.submit(std::move(r)).ok());
  }
  for (int steps = 0; engine.step();) ASSERT_LT(++steps, 5000);
  const EngineStats stats = engine.stats();
  EXPECT_GT(stats.accepted_tokens, stats.verify_steps / 2);
  EXPECT_LT(stats.accepted_tokens, stats.drafted_tokens / 2);
  double stat = 0;
  int64_t dof = 0, tested = 0;
  for (const auto& [key, counts] : groups) {
    std::vector<float> logits;  // log-probabilities: the logits up to a shift
    std::vector<int64_t> observed;
    for (size_t i = 0; i < key.size(); i += 2) {
      logits.push_back(key[i + 1]);
      const auto it = counts.find(static_cast<int32_t>(key[i]));
      observed.push_back(it == counts.end() ? 0 : it->second);
    }
    int64_t n = 0, others = 0;
    for (const auto& [token, count] : counts) n += count;
    others = n - std::accumulate(observed.begin(), observed.end(), int64_t{0});
    EXPECT_EQ(others, 0) << "tokens outside the top 3 of their row";
    const std::vector<double> law = top_k_law(logits, 1.0f, 3);
    if (n * *std::min_element(law.begin(), law.end()) < 5) continue;  // too few for Pearson's approximation
    add_chi_square(observed, law, &stat, &dof);
    tested += n;
  }
  EXPECT_GT(tested, requests * 6 * 8 / 10);
  EXPECT_LT(stat, chi_square_limit(dof)) << dof << " degrees of freedom, " << tested << " tokens";
  std::printf(
      "%ld tokens in %zu laws: chi-square %.1f, %ld degrees of freedom (limit %.1f); %ld drafts, %ld accepted\n",
      static_cast<long>(tested), groups.size(), stat, static_cast<long>(dof), chi_square_limit(dof),
      static_cast<long>(stats.drafted_tokens), static_cast<long>(stats.accepted_tokens));
}

}  // namespace
}  // namespace dsinfer
