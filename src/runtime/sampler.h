// Sampling of the next token from fp32 logits: penalties, temperature, top-k, top-p, min-p, and a
// per-request seeded RNG so a request reproduces exactly. A pure function of (logits, params,
// state): the engine keeps one SamplerState per request. It also draws a speculative decoder's
// drafts and accepts or replaces them (speculative rejection sampling: the tokens it emits are
// distributed as those `sample` would emit).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/token_draw.h"

namespace dsinfer {

/// The accepted ranges (validate): temperature [0, 100], top_k >= 0, top_p (0, 1], min_p [0, 1],
/// repetition_penalty [0.01, 100], frequency and presence penalties [-2, 2].
inline constexpr float kMinRepetitionPenalty = 0.01f, kMaxRepetitionPenalty = 100.0f;

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // HF style, over prompt and output tokens
  float frequency_penalty = 0.0f;   // OpenAI style, over output tokens
  float presence_penalty = 0.0f;    // OpenAI style, over output tokens
  std::optional<uint64_t> seed;     // none: drawn from the engine's seed sequence

  /// kInvalidArgument naming the field when out of range.
  Status validate() const;
};

/// A sampled token's log-probability under the model (log_softmax of the raw logits, before
/// penalties and temperature, as OpenAI and vLLM report them) and the most likely alternatives.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};
struct SampledLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first; ties by the lower id
};
/// The tokens a draw can pick and their probabilities (summing to 1).
struct TokenDistribution {
  std::vector<int32_t> ids;
  std::vector<double> probs;
  double prob(int32_t token) const;  // 0 for a token outside `ids`
};

/// No NaN and no infinity among `logits`.
bool all_finite(std::span<const float> logits);

SampledLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n);

class SamplerState {
 public:
  SamplerState(const SamplingParams& params, uint64_t fallback_seed, std::span<const int32_t> prompt);
  /// Picks the next token and records it as output; none when the logits, after the penalties,
  /// are not all finite (a NaN or an infinity would otherwise decide the pick: greedy took id 0).
  std::optional<int32_t> sample(std::span<const float> logits);
  /// Records a token chosen elsewhere (a forced continuation) as output, for the penalties.
  void accept(int32_t token);
  /// The distribution `sample` draws from at temperature > 0 (penalties, then core/token_draw.h's
  /// cuts and masses); none where the penalised logits are not all finite.
  std::optional<TokenDistribution> law(std::span<const float> logits);

  /// A draft token drawn from a drafter's `logits` with the temperature, top-k, top-p and min-p
  /// among its kDraftCandidates likeliest (no penalties: the draft's distribution may be any; the
  /// cap bounds the host's work on a flat row), its distribution in `q`; greedy: the first
  /// maximum, `q` left empty. Nothing is recorded as output.
  static constexpr int32_t kDraftCandidates = 64;
  int32_t draw_draft(std::span<const float> logits, TokenDistribution* q);
  /// The next token where a speculative decoder proposed `draft` (drawn from `q` by draw_draft):
  /// greedy, what `sample` picks; otherwise the draft with probability min(1, p(draft) / q(draft)),
  /// else a token drawn from max(p - q, 0) renormalised, where p is the distribution `sample` draws
  /// from, so the token is distributed as `sample`'s. Recorded as output; none where `sample` gives none.
  std::optional<int32_t> verify_draft(std::span<const float> logits, int32_t draft, const TokenDistribution& q);
  const SamplingParams& params() const { return params_; }
  /// The next draw's parameters, its random bits taken from this request's stream: a draw of
  /// core/token_draw.h (on a device: Backend::draw_tokens) with them picks what `sample` would
  /// where there are no penalties. Record the token with accept().
  DrawParams next_draw();
  /// Whether draws on a device give `sample`'s tokens: temperature > 0 and no penalties.
  bool draws_on_device() const { return params_.temperature > 0.0f && !has_penalties(); }
  /// Greedy without penalties: `sample` picks the first maximum of the raw logits.
  bool picks_greedily() const { return params_.temperature == 0.0f && !has_penalties(); }

 private:
  double uniform();             // [0, 1), splitmix64 stream
  bool has_penalties() const {  // any penalty on
    return params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;
  }
  DrawParams draw_params() const;  // the request's cuts, no bits
  /// The penalised logits in work_; false when they are not all finite.
  bool penalise(std::span<const float> logits);
  /// The distribution at temperature > 0 of the logits in work_ after top-k (at most
  /// max_candidates), top-p and min-p: core/token_draw.h's masses, in id order.
  TokenDistribution shape(int32_t max_candidates = std::numeric_limits<int32_t>::max());
  int32_t draw(const TokenDistribution& d);
  int32_t draw(const DrawParams& p);  // core/token_draw.h's draw from work_
  SamplingParams params_;
  uint64_t rng_;
  std::unordered_map<int32_t, int> output_counts_;
  std::vector<int32_t> seen_;  // prompt and output tokens, for the repetition penalty
  std::vector<float> work_;
  std::vector<uint64_t> masses_;  // the draw's, by token
};

}  // namespace dsinfer
