// Sampling of the next token from fp32 logits: penalties, temperature, top-k, top-p, min-p, and a
// per-request seeded RNG so a request reproduces exactly. A pure function of (logits, params,
// state): the engine keeps one SamplerState per request.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"

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
  const SamplingParams& params() const { return params_; }

 private:
  double uniform();  // [0, 1), splitmix64 stream
  SamplingParams params_;
  uint64_t rng_;
  std::unordered_map<int32_t, int> output_counts_;
  std::vector<int32_t> seen_;  // prompt and output tokens, for the repetition penalty
  std::vector<float> work_;
  std::vector<int32_t> order_;
};

}  // namespace dsinfer
