// Sampler: penalties, then greedy or temperature + top-k + top-p + min-p + inverse-CDF draw.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/hash.h"

namespace dsinfer {

Status SamplingParams::validate() const {
  const auto bad = [](std::string_view field, std::string_view why) {
    return error(ErrorKind::kInvalidArgument, fmt::format("'{}' {}", field, why));
  };
  if (!(temperature >= 0.0f) || temperature > 100.0f) return bad("temperature", "must be in [0, 100]");
  if (top_k < 0) return bad("top_k", "must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", "must be in [0, 1]");
  // Logits are divided or multiplied by it: outside [0.01, 100] a finite logit can overflow to
  // inf (1e-45 did), and the draw degenerates.
  if (!(repetition_penalty >= kMinRepetitionPenalty && repetition_penalty <= kMaxRepetitionPenalty))
    return bad("repetition_penalty", "must be in [0.01, 100]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) return bad("frequency_penalty", "must be in [-2, 2]");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) return bad("presence_penalty", "must be in [-2, 2]");
  return {};
}

SamplerState::SamplerState(const SamplingParams& params, uint64_t fallback_seed, std::span<const int32_t> prompt)
    : params_(params), rng_(params.seed.value_or(fallback_seed)), seen_(prompt.begin(), prompt.end()) {}

SampledLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double log_z = mx + std::log(sum);
  const auto logprob = [&](int32_t t) { return static_cast<float>(logits[t] - log_z); };
  SampledLogprobs out;
  out.chosen = {token, logprob(token)};
  const int32_t n = std::clamp<int32_t>(top_n, 0, vocab);
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int32_t i = 0; i < n; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

double SamplerState::uniform() {
  return splitmix64_uniform(rng_);
}

bool all_finite(std::span<const float> logits) {
  return std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); });
}

std::optional<int32_t> SamplerState::sample(std::span<const float> logits) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  work_.assign(logits.begin(), logits.end());
  const SamplingParams& p = params_;
  if (p.repetition_penalty != 1.0f)
    for (int32_t t : seen_)
      if (t >= 0 && t < vocab)
        work_[t] = work_[t] > 0 ? work_[t] / p.repetition_penalty : work_[t] * p.repetition_penalty;
  for (const auto& [t, n] : output_counts_)
    if (t >= 0 && t < vocab) work_[t] -= p.frequency_penalty * static_cast<float>(n) + p.presence_penalty;
  if (!all_finite(work_)) return std::nullopt;

  int32_t chosen = 0;
  if (p.temperature == 0.0f) {
    chosen = static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());  // first maximum
  } else {
    order_.resize(vocab);
    std::iota(order_.begin(), order_.end(), 0);
    const int32_t k = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                      [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); });
    order_.resize(k);
    // Softmax over the kept tokens in double, then the nucleus and min-p cuts on those probabilities.
    const double mx = work_[order_[0]];
    std::vector<double> prob(k);
    double sum = 0;
    for (int32_t i = 0; i < k; ++i) sum += prob[i] = std::exp((work_[order_[i]] - mx) / p.temperature);
    int32_t keep = k;
    double cum = 0;
    for (int32_t i = 0; i < k; ++i) {
      cum += prob[i] / sum;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    while (keep > 1 && prob[keep - 1] < p.min_p * prob[0]) --keep;
    double kept = 0;
    for (int32_t i = 0; i < keep; ++i) kept += prob[i];
    double u = uniform() * kept;
    chosen = order_[keep - 1];
    for (int32_t i = 0; i < keep; ++i) {
      if (u < prob[i]) {
        chosen = order_[i];
        break;
      }
      u -= prob[i];
    }
  }
  accept(chosen);
  return chosen;
}

void SamplerState::accept(int32_t token) {
  ++output_counts_[token];
  if (params_.repetition_penalty != 1.0f) seen_.push_back(token);
}

}  // namespace dsinfer
