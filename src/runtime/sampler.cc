// Sampler: penalties, then greedy or temperature + top-k + top-p + min-p + inverse-CDF draw.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/first_maximum.h"
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

double TokenDistribution::prob(int32_t token) const {
  const auto it = std::find(ids.begin(), ids.end(), token);
  return it == ids.end() ? 0.0 : probs[it - ids.begin()];
}

bool SamplerState::penalise(std::span<const float> logits) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  work_.assign(logits.begin(), logits.end());
  const SamplingParams& p = params_;
  if (p.repetition_penalty != 1.0f)
    for (int32_t t : seen_)
      if (t >= 0 && t < vocab)
        work_[t] = work_[t] > 0 ? work_[t] / p.repetition_penalty : work_[t] * p.repetition_penalty;
  for (const auto& [t, n] : output_counts_)
    if (t >= 0 && t < vocab) work_[t] -= p.frequency_penalty * static_cast<float>(n) + p.presence_penalty;
  return all_finite(work_);
}

TokenDistribution SamplerState::shape(int32_t max_candidates) {
  const SamplingParams& p = params_;
  const int32_t vocab = static_cast<int32_t>(work_.size());
  const int32_t top_k = std::min(p.top_k > 0 ? p.top_k : vocab, max_candidates);
  const auto likelier = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  // The candidates: the top_k likeliest, in order, or every token, ordered below only as far as
  // the nucleus cut needs (a nucleus is usually far smaller than the vocabulary).
  int32_t k = vocab, sorted = 0;
  if (top_k < vocab) {
    k = sorted = top_k;
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), likelier);
    order_.resize(k);
  }
  // Softmax weights in double (the likeliest weighs 1), then the nucleus and min-p cuts on them.
  const double mx = sorted > 0 ? work_[order_[0]] : *std::max_element(work_.begin(), work_.end());
  weight_.resize(vocab);
  double sum = 0;
  for (int32_t t : order_) sum += weight_[t] = std::exp((work_[t] - mx) / p.temperature);
  int32_t keep = k;
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (int32_t i = 0, end = 64; keep == k && i < k; end *= 16) {
      end = std::min(end, k);
      if (sorted < end) {  // the next likeliest, after those in order
        std::partial_sort(order_.begin() + sorted, order_.begin() + end, order_.end(), likelier);
        sorted = end;
      }
      for (; i < end; ++i) {
        cum += weight_[order_[i]] / sum;
        if (cum >= p.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
  }
  TokenDistribution d;
  double kept = 0;
  for (int32_t i = 0; i < keep; ++i)
    if (const int32_t t = order_[i]; weight_[t] >= p.min_p) {  // min-p: the likeliest weighs 1
      d.ids.push_back(t);
      d.probs.push_back(weight_[t]);
      kept += weight_[t];
    }
  for (double& q : d.probs) q /= kept;
  return d;
}

int32_t SamplerState::draw(const TokenDistribution& d) {
  double u = uniform();
  for (size_t i = 0; i < d.ids.size(); ++i) {
    if (u < d.probs[i]) return d.ids[i];
    u -= d.probs[i];
  }
  return d.ids.back();  // u beyond the rounded sum
}

std::optional<TokenDistribution> SamplerState::law(std::span<const float> logits) {
  if (!penalise(logits)) return std::nullopt;
  return shape();
}

std::optional<int32_t> SamplerState::sample(std::span<const float> logits) {
  if (picks_greedily()) {
    const std::optional<int32_t> best = first_maximum(logits);
    if (best) accept(*best);
    return best;
  }
  if (!penalise(logits)) return std::nullopt;
  const int32_t chosen = params_.temperature == 0.0f
                             ? static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin())
                             : draw(shape());  // greedy: the first maximum
  accept(chosen);
  return chosen;
}

int32_t SamplerState::draw_draft(std::span<const float> logits, TokenDistribution* q) {
  *q = {};
  if (params_.temperature == 0.0f)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  work_.assign(logits.begin(), logits.end());
  *q = shape(kDraftCandidates);
  return draw(*q);
}

std::optional<int32_t> SamplerState::verify_draft(std::span<const float> logits, int32_t draft,
                                                  const TokenDistribution& q) {
  if (params_.temperature == 0.0f) return sample(logits);
  const std::optional<TokenDistribution> law_p = law(logits);
  if (!law_p) return std::nullopt;
  const TokenDistribution& p = *law_p;
  const double pd = p.prob(draft), qd = q.prob(draft);
  int32_t chosen = draft;
  if (!(qd > 0 && uniform() * qd < pd)) {  // rejected: the residual max(p - q, 0) over p's tokens
    std::vector<double> qv(logits.size(), 0.0);
    for (size_t i = 0; i < q.ids.size(); ++i) qv[q.ids[i]] = q.probs[i];
    TokenDistribution r;
    double sum = 0;
    for (size_t i = 0; i < p.ids.size(); ++i)
      if (const double m = p.probs[i] - qv[p.ids[i]]; m > 0) {
        r.ids.push_back(p.ids[i]);
        r.probs.push_back(m);
        sum += m;
      }
    for (double& m : r.probs) m /= sum;
    // p == q up to rounding leaves no residual: p itself is then the right law.
    chosen = r.ids.empty() ? draw(p) : draw(r);
  }
  accept(chosen);
  return chosen;
}

void SamplerState::accept(int32_t token) {
  ++output_counts_[token];
  if (params_.repetition_penalty != 1.0f) seen_.push_back(token);
}

}  // namespace dsinfer
