// A text's perplexity under the model: exp of the mean negative log-likelihood of each token given
// those before it. The tokens go in windows of `window` positions, each a fresh sequence
// prefilled in pieces of `piece` tokens with every token's logits; consecutive windows share one
// token, so every token after the first is predicted exactly once.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/status.h"
#include "model/model.h"

namespace dsinfer {

struct PerplexityResult {
  double nll_sum = 0;     // natural log
  int64_t predicted = 0;  // tokens predicted (all but the first)
  double perplexity() const;
};

/// kInvalidArgument for fewer than two tokens, a window below 2 or past the model's context, or a
/// piece below 1; kInternal when the logits are not finite. `progress(done, total)` after each
/// piece, in predicted tokens.
Result<PerplexityResult> perplexity(Model& model, std::span<const int32_t> tokens, int64_t window, int64_t piece,
                                    const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace dsinfer
