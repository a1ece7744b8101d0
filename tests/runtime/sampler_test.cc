// The sampler: greedy, reproducibility by seed, the sampled distributions and every cut.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#include "core/hash.h"
#include "core/token_draw.h"

namespace dsinfer {
namespace {

std::map<int32_t, double> frequencies(const SamplingParams& p, const std::vector<float>& logits, int draws) {
  std::map<int32_t, double> f;
  for (int i = 0; i < draws; ++i) {
    SamplerState fresh(p, 1000 + i, {});  // one draw per seed: nothing accumulates between draws
    f[*fresh.sample(logits)] += 1.0 / draws;
  }
  return f;
}

const std::vector<float> kLogits = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f};

TEST(Sampler, GreedyPicksTheFirstMaximum) {
  SamplingParams p;
  p.temperature = 0;
  SamplerState s(p, 7, {});
  EXPECT_EQ(s.sample(kLogits), 1);
}

TEST(Sampler, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  const SampledLogprobs lp = token_logprobs(kLogits, 2, 3);
  EXPECT_EQ(lp.chosen.token, 2);
  EXPECT_NEAR(lp.chosen.logprob, kLogits[2] - std::log(z), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 1);  // 2.0 twice: the lower id first
  EXPECT_EQ(lp.top[1].token, 3);
  EXPECT_EQ(lp.top[2].token, 0);
  for (const TokenLogprob& t : lp.top) EXPECT_NEAR(t.logprob, kLogits[t.token] - std::log(z), 1e-6);
  EXPECT_TRUE(token_logprobs(kLogits, 4, 0).top.empty());
  EXPECT_EQ(token_logprobs(kLogits, 4, 99).top.size(), kLogits.size());
  // Large logits do not overflow the normaliser.
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(token_logprobs(big, 0, 0).chosen.logprob, -std::log(2.0), 1e-6);
}

TEST(Sampler, TemperatureOneFollowsTheSoftmax) {
  SamplingParams p;
  const auto f = frequencies(p, kLogits, 40000);
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(f.count(i) ? f.at(i) : 0.0, std::exp(kLogits[i]) / z, 0.01) << i;
}

TEST(Sampler, TopKTopPAndMinPCut) {
  SamplingParams p;
  p.top_k = 2;  // tokens 1 and 3 (equal logits) only, half each
  auto f = frequencies(p, kLogits, 20000);
  EXPECT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[1], 0.5, 0.02);
  p = {};
  p.top_p = 0.5f;  // 1 and 3 hold 0.36 + 0.36 of the mass: both needed, nothing else
  f = frequencies(p, kLogits, 20000);
  EXPECT_EQ(f.size(), 2u);
  p = {};
  p.min_p = 0.5f;  // keep p >= 0.5 * p_max: tokens 1, 3 (and not 0: e^-1 < 0.5)
  f = frequencies(p, kLogits, 20000);
  EXPECT_EQ(f.size(), 2u);
  p.temperature = 4.0f;  // flatter: token 0 now passes the min-p cut too
  f = frequencies(p, kLogits, 20000);
  EXPECT_TRUE(f.count(0));
}

// The law `sample` draws from and a draft's law are core/token_draw.h's kept masses (the cuts
// themselves: tests/core/token_draw_test.cc), a draft's among its 64 likeliest; without
// penalties `sample` is draw_token with the request's next random bits, as a device's draw is.
TEST(Sampler, TheLawsAreTheDrawsMasses) {
  std::vector<float> logits(20000);
  uint64_t state = 5;
  for (float& l : logits) l = static_cast<float>(std::floor(splitmix64_uniform(state) * 400) / 40);  // ties
  for (const auto& [top_p, top_k, min_p] :
       {std::tuple{0.05f, 0, 0.0f}, {0.97f, 0, 0.0f}, {0.9f, 3000, 0.0f}, {0.9f, 0, 0.002f}, {1.0f, 0, 0.01f}}) {
    SamplingParams p;
    p.top_p = top_p, p.top_k = top_k, p.min_p = min_p;
    const auto expect_law = [&](const TokenDistribution& got, int32_t k) {
      DrawParams d{.temperature = p.temperature, .top_k = k, .top_p = p.top_p, .min_p = p.min_p};
      std::vector<uint64_t> masses(logits.size());
      const uint64_t total = draw_masses(logits, d, masses);
      std::vector<int32_t> ids;
      for (size_t t = 0; t < masses.size(); ++t)
        if (masses[t] > 0) ids.push_back(static_cast<int32_t>(t));
      ASSERT_EQ(got.ids, ids) << top_p << " " << top_k << " " << min_p;
      for (size_t i = 0; i < ids.size(); ++i)
        EXPECT_EQ(got.probs[i], static_cast<double>(masses[ids[i]]) / static_cast<double>(total));
    };
    SamplerState s(p, 1, {});
    const std::optional<TokenDistribution> law = s.law(logits);
    ASSERT_TRUE(law.has_value());
    expect_law(*law, top_k);
    TokenDistribution q;
    s.draw_draft(logits, &q);
    expect_law(q, top_k > 0 ? std::min(top_k, SamplerState::kDraftCandidates) : SamplerState::kDraftCandidates);
    // sample: the draw with the stream's next bits, recorded as output.
    SamplerState a(p, 77, {}), b(p, 77, {});
    for (int i = 0; i < 20; ++i) EXPECT_EQ(a.sample(logits), draw_token(logits, b.next_draw()));
    std::printf("top-p %.2f, top-k %d, min-p %.3f: %zu tokens\n", top_p, top_k, min_p, law->ids.size());
  }
}

TEST(Sampler, SeedsReproduce) {
  SamplingParams p;
  p.seed = 42;
  SamplerState a(p, 1, {}), b(p, 2, {});  // the request's seed wins over the engine's
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(kLogits), b.sample(kLogits));
  p.seed.reset();
  SamplerState c(p, 1, {}), d(p, 2, {});
  int differ = 0;
  for (int i = 0; i < 50; ++i) differ += c.sample(kLogits) != d.sample(kLogits);
  EXPECT_GT(differ, 0);
}

TEST(Sampler, PenaltiesDiscourageRepeats) {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 1.5f;
  SamplerState s(p, 1, {});
  EXPECT_EQ(s.sample(kLogits), 1);
  EXPECT_EQ(s.sample(kLogits), 3);  // 1 now scores 2 - 1.5
  p.frequency_penalty = 0;
  p.repetition_penalty = 3.0f;  // the prompt's tokens count too
  const std::vector<int32_t> prompt = {1, 3};
  SamplerState r(p, 1, prompt);
  EXPECT_EQ(r.sample(kLogits), 0);
}

TEST(Sampler, ValidationNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(p.validate().message().find("'top_p'"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_EQ(p.validate().kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(SamplingParams{}.validate().ok());
}

// The probe's repetition_penalty 1e-45 turned every penalised logit into inf and the draw into a
// run of BOS; 1e308 reaches the sampler as an infinity.
TEST(Sampler, RepetitionPenaltyIsBounded) {
  SamplingParams p;
  for (float bad : {1e-45f, 0.0099f, 100.5f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    p.repetition_penalty = bad;
    const Status s = p.validate();
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("'repetition_penalty' must be in [0.01, 100]"), std::string::npos) << s.message();
  }
  for (float good : {0.01f, 1.0f, 100.0f}) {
    p.repetition_penalty = good;
    EXPECT_TRUE(p.validate().ok()) << good;
  }
}

// NaN or infinite logits give no token (the engine ends the request with an error), never the
// first id that a comparison with NaN leaves standing.
// Greedy's pick over rows of every length around its eight lanes, with ties and the maximum in
// any lane or in the tail: std::max_element's first maximum; a NaN or an infinity anywhere: none.
TEST(Sampler, GreedyScansEveryLengthAndLane) {
  SamplingParams p;
  p.temperature = 0;
  uint64_t state = 9;
  for (size_t n = 1; n <= 41; ++n)
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> row(n);
      for (float& v : row) v = static_cast<float>(std::floor(splitmix64_uniform(state) * 6) - 3);  // ties
      SamplerState s(p, 1, {});
      EXPECT_EQ(s.sample(row), std::max_element(row.begin(), row.end()) - row.begin()) << n;
      for (const float bad :
           {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
        std::vector<float> broken = row;
        broken[static_cast<size_t>(splitmix64_uniform(state) * static_cast<double>(n))] = bad;
        EXPECT_FALSE(SamplerState(p, 1, {}).sample(broken).has_value()) << n;
      }
    }
}

TEST(Sampler, NonFiniteLogitsGiveNoToken) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    for (const std::vector<float>& logits : {std::vector<float>{nan, nan, nan}, std::vector<float>{0.5f, nan, 1.0f},
                                             std::vector<float>{0.5f, inf, 1.0f}}) {
      SamplerState s(p, 3, {});
      EXPECT_FALSE(s.sample(logits).has_value()) << temperature;
    }
    SamplerState ok(p, 3, {});
    EXPECT_TRUE(ok.sample(kLogits).has_value());
  }
  // Finite logits that the penalty pushes past float's range count too.
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 0.01f;
  const std::vector<int32_t> prompt = {0};
  SamplerState s(p, 3, prompt);
  EXPECT_FALSE(s.sample(std::vector<float>{3e38f, 1.0f}).has_value());
  EXPECT_FALSE(all_finite(std::vector<float>{1.0f, -inf}));
  EXPECT_TRUE(all_finite(kLogits));
}

}  // namespace
}  // namespace dsinfer
