// perplexity: windows sharing one token predict every token after the first once, each token's
// negative log-likelihood from its own row of logits; bad arguments are named.
#include "runtime/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/tiny_model.h"
#include "tiny_model_fixture.h"

namespace dsinfer {
namespace {

TEST(Perplexity, WindowsPredictEveryTokenOnceFromItsOwnRow) {
  testing::TinyModel tiny(2);
  ASSERT_TRUE(tiny.ok());
  Model& model = *tiny.model;
  const int64_t V = model.config().vocab_size, n = 40;
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(3 + (53 * i + 7) % (V - 4)));
  // The expected sum: each window's tokens a piece at a time, the last-token logits of each.
  const auto expected = [&](int64_t window) {
    double sum = 0;
    for (int64_t first = 0; first + 1 < n; first += window - 1) {
      const int64_t len = std::min(window, n - first);
      SequenceState seq = model.new_sequence();
      for (int64_t i = 0; i + 1 < len; ++i) {
        std::vector<ForwardChunk> chunk{{&seq, i, {tokens[first + i]}, false, len}};
        std::vector<float> logits(V);
        EXPECT_TRUE(model.forward(chunk, logits).ok());
        double z = 0;
        for (float v : logits) z += std::exp(static_cast<double>(v));
        sum += std::log(z) - logits[tokens[first + i + 1]];
      }
    }
    return sum;
  };
  for (const auto& [window, piece] : {std::pair<int64_t, int64_t>{16, 5}, {2, 1}, {64, 7}}) {
    auto r = perplexity(model, tokens, window, piece);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->predicted, n - 1) << window;
    const double want = expected(window);
    EXPECT_NEAR(r->nll_sum, want, 1e-9 * std::abs(want)) << window;
    EXPECT_NEAR(r->perplexity(), std::exp(want / (n - 1)), 1e-9 * r->perplexity());
  }
  EXPECT_FALSE(perplexity(model, std::vector<int32_t>{5}, 16, 4).ok());
  const auto refused = perplexity(model, tokens, model.config().max_seq_len + 1, 4);
  EXPECT_NE(refused.status().message().find("must be 2 to the context"), std::string::npos);
  EXPECT_FALSE(perplexity(model, tokens, 1, 4).ok());
  EXPECT_FALSE(perplexity(model, tokens, 16, 0).ok());
}

}  // namespace
}  // namespace dsinfer
