// The draw of core/token_draw.h: its exp, the softmax it follows, each cut against a reference
// that sorts every token, ties at the cuts, where the bits land, and rows that are not finite.
#include "core/token_draw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "core/hash.h"

namespace dsinfer {
namespace {

TEST(TokenDraw, ExpIsCloseToTheLibrarysAndZeroBelowTheMassFloor) {
  for (double x = -28.0; x <= 0.0; x += 0.00137) {
    const double want = std::exp(x);
    EXPECT_NEAR(draw_exp(x), want, want * 1e-9) << x;
  }
  EXPECT_EQ(draw_exp(0.0), 1.0);
  EXPECT_EQ(draw_exp(-28.5), 0.0);
  EXPECT_EQ(draw_exp(-std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(draw_exp(std::nan("")), 0.0);
  EXPECT_EQ(draw_mass(1.0), uint64_t{1} << kDrawMassBits);
  EXPECT_EQ(draw_mass(draw_exp(-28.0)), 0u);  // e^-28 < 2^-40
}

TEST(TokenDraw, KeysOrderAsTheFloats) {
  const std::vector<float> v = {-std::numeric_limits<float>::max(), -2.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 3.0f,
                                std::numeric_limits<float>::max()};
  for (size_t i = 0; i + 1 < v.size(); ++i) EXPECT_LT(draw_key(v[i]), draw_key(v[i + 1])) << i;
}

// Where the draw lands: bits 0 on the first token with mass, the largest bits on the last.
TEST(TokenDraw, TheBitsPlaceTheDrawInIdOrder) {
  const std::vector<float> logits = {0.0f, -100.0f, 0.0f, 0.0f};  // token 1 has no mass
  DrawParams p;
  p.bits = 0;
  EXPECT_EQ(draw_token(logits, p), 0);
  p.bits = ~uint64_t{0};
  EXPECT_EQ(draw_token(logits, p), 3);
  p.bits = uint64_t{1} << 63;  // half way: the second third is token 2
  EXPECT_EQ(draw_token(logits, p), 2);
}

TEST(TokenDraw, FollowsTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f};
  for (const float temperature : {1.0f, 0.5f, 3.0f}) {
    std::map<int32_t, double> f;
    uint64_t state = 11;
    constexpr int kDraws = 40000;
    for (int i = 0; i < kDraws; ++i)
      f[draw_token(logits, {.temperature = temperature, .bits = splitmix64(state)})] += 1.0 / kDraws;
    double z = 0;
    for (float l : logits) z += std::exp(l / temperature);
    for (int t = 0; t < 5; ++t)
      EXPECT_NEAR(f[t], std::exp(logits[t] / temperature) / z, 0.01) << t << " at " << temperature;
  }
}

// The reference: every token sorted (likeliest first), the cuts on the sorted order with ties
// kept together, in the draw's masses.
std::vector<uint64_t> sorted_reference(const std::vector<float>& logits, const DrawParams& p) {
  const size_t n = logits.size();
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const float max = logits[order[0]];
  std::vector<uint64_t> mass(n);
  for (size_t t = 0; t < n; ++t) mass[t] = draw_mass(draw_weight(logits[t], max, p.temperature));
  // The cut: the first position whose value's tokens, with every token before, fill the target.
  const auto keep_through = [&](size_t end, uint64_t target, bool count) {
    uint64_t sum = 0;
    size_t i = 0;
    while (i < end) {
      size_t j = i;
      for (; j < end && logits[order[j]] == logits[order[i]]; ++j) sum += count ? 1 : mass[order[j]];
      if (sum >= target) return j;
      i = j;
    }
    return end;
  };
  size_t end = n;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) end = keep_through(n, p.top_k, true);
  if (p.top_p < 1.0f) {
    uint64_t kept = 0;
    for (size_t i = 0; i < end; ++i) kept += mass[order[i]];
    end = keep_through(end, draw_nucleus_mass(p.top_p, kept), false);
  }
  std::vector<uint64_t> want(n, 0);
  for (size_t i = 0; i < end; ++i)
    if (draw_weight(logits[order[i]], max, p.temperature) >= p.min_p) want[order[i]] = mass[order[i]];
  return want;
}

TEST(TokenDraw, TheCutsAreThoseOfAFullSort) {
  std::vector<float> logits(20000);
  uint64_t state = 5;
  for (float& l : logits) l = static_cast<float>(std::floor(splitmix64_uniform(state) * 400) / 40);  // ties
  struct Case {
    float temperature, top_p;
    int32_t top_k;
    float min_p;
  };
  for (const Case& c :
       {Case{1.0f, 0.05f, 0, 0.0f}, Case{1.0f, 0.5f, 0, 0.0f}, Case{0.7f, 0.97f, 0, 0.0f}, Case{1.0f, 0.9f, 3000, 0.0f},
        Case{1.0f, 1.0f, 1, 0.0f}, Case{1.0f, 1.0f, 50, 0.0f}, Case{2.0f, 0.9f, 0, 0.002f}, Case{1.0f, 1.0f, 0, 0.01f},
        Case{0.05f, 0.3f, 7, 0.5f}, Case{100.0f, 0.99f, 0, 0.0f}}) {
    const DrawParams p{.temperature = c.temperature, .top_k = c.top_k, .top_p = c.top_p, .min_p = c.min_p};
    std::vector<uint64_t> got(logits.size());
    const uint64_t total = draw_masses(logits, p, got);
    const std::vector<uint64_t> want = sorted_reference(logits, p);
    EXPECT_EQ(got, want) << c.temperature << " " << c.top_p << " " << c.top_k << " " << c.min_p;
    EXPECT_EQ(total, std::accumulate(want.begin(), want.end(), uint64_t{0}));
    // Each draw lands on a kept token.
    for (int i = 0; i < 200; ++i) {
      DrawParams d = p;
      d.bits = splitmix64(state);
      const int32_t t = draw_token(logits, d);
      ASSERT_GE(t, 0);
      EXPECT_GT(want[t], 0u);
    }
  }
}

TEST(TokenDraw, TiesAtACutAreKeptTogether) {
  const std::vector<float> logits = {3.0f, 1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  std::vector<uint64_t> m(logits.size());
  draw_masses(logits, {.top_k = 2}, m);  // the 2nd largest is 2.0, which three tokens hold
  EXPECT_EQ(std::count_if(m.begin(), m.end(), [](uint64_t v) { return v > 0; }), 4);
  EXPECT_EQ(m[1], 0u);
  EXPECT_EQ(m[5], 0u);
  draw_masses(logits, {.top_k = 1}, m);
  EXPECT_EQ(std::count_if(m.begin(), m.end(), [](uint64_t v) { return v > 0; }), 1);
  EXPECT_GT(m[0], 0u);
}

TEST(TokenDraw, RowsThatAreNotFiniteDrawNothing) {
  for (const float bad :
       {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    const std::vector<float> logits = {1.0f, bad, 0.0f};
    std::vector<uint64_t> m(3);
    EXPECT_EQ(draw_masses(logits, {}, m), 0u);
    EXPECT_EQ(draw_token(logits, {}), -1);
  }
}

}  // namespace
}  // namespace dsinfer
