// perplexity (perplexity.h).
#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace dsinfer {

double PerplexityResult::perplexity() const {
  return std::exp(nll_sum / static_cast<double>(predicted));
}

Result<PerplexityResult> perplexity(Model& model, std::span<const int32_t> tokens, int64_t window, int64_t piece,
                                    const std::function<void(int64_t done, int64_t total)>& progress) {
  const int64_t n = static_cast<int64_t>(tokens.size()), V = model.config().vocab_size;
  if (n < 2) return error(ErrorKind::kInvalidArgument, "a perplexity needs at least two tokens");
  if (window < 2 || window > model.config().max_seq_len)
    return error(ErrorKind::kInvalidArgument, fmt::format("the window of {} positions must be 2 to the context of {}",
                                                          window, model.config().max_seq_len));
  if (piece < 1) return error(ErrorKind::kInvalidArgument, "the prefill pieces need at least one token");
  PerplexityResult r;
  std::vector<float> logits;
  for (int64_t first = 0; first + 1 < n; first += window - 1) {
    const int64_t len = std::min(window, n - first);
    SequenceState seq = model.new_sequence();
    for (int64_t start = 0; start < len; start += piece) {
      const int64_t s = std::min(piece, len - start);
      std::vector<ForwardChunk> chunk{{&seq,
                                       start,
                                       {tokens.begin() + first + start, tokens.begin() + first + start + s},
                                       false,
                                       len,
                                       false,
                                       /*all_logits=*/true}};
      logits.resize(s * V);
      DSINFER_RETURN_IF_ERROR(model.forward(chunk, logits));
      // Row i predicts the token after it, the window's last row nothing.
      for (int64_t i = 0; i < s && start + i + 1 < len; ++i) {
        const std::span<const float> row(logits.data() + i * V, V);
        const float mx = *std::max_element(row.begin(), row.end());
        double sum = 0;
        for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
        const double nll = mx + std::log(sum) - row[tokens[first + start + i + 1]];
        if (!std::isfinite(nll))
          return error(ErrorKind::kInternal,
                       fmt::format("the logits are not finite at token {} (NaN or infinity)", first + start + i + 1));
        r.nll_sum += nll;
        ++r.predicted;
      }
      if (progress) progress(r.predicted, n - 1);
    }
  }
  return r;
}

}  // namespace dsinfer
