// Sampler: penalties, then greedy or core/token_draw.h's draw (temperature, top-k, top-p, min-p).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/first_maximum.h"
#include "core/hash.h"
#include "core/token_draw.h"

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

DrawParams SamplerState::draw_params() const {
  return {.temperature = params_.temperature, .top_k = params_.top_k, .top_p = params_.top_p, .min_p = params_.min_p};
}

DrawParams SamplerState::next_draw() {
  DrawParams d = draw_params();
  d.bits = splitmix64(rng_);
  return d;
}

TokenDistribution SamplerState::shape(int32_t max_candidates) {
  DrawParams p = draw_params();
  const int64_t vocab = static_cast<int64_t>(work_.size());
  if (max_candidates < vocab && (p.top_k == 0 || p.top_k > max_candidates)) p.top_k = max_candidates;
  masses_.resize(work_.size());
  const uint64_t total = draw_masses(work_, p, masses_);
  TokenDistribution d;
  for (int64_t t = 0; t < vocab; ++t)
    if (masses_[t] > 0) {
      d.ids.push_back(static_cast<int32_t>(t));
      d.probs.push_back(static_cast<double>(masses_[t]) / static_cast<double>(total));
    }
  return d;
}

int32_t SamplerState::draw(const DrawParams& p) {
  masses_.resize(work_.size());
  return draw_from(masses_, draw_masses(work_, p, masses_), p.bits);
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
                             : draw(next_draw());  // greedy: the first maximum
  accept(chosen);
  return chosen;
}

int32_t SamplerState::draw_draft(std::span<const float> logits, TokenDistribution* q) {
  *q = {};
  if (params_.temperature == 0.0f)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  work_.assign(logits.begin(), logits.end());
  *q = shape(kDraftCandidates);
  if (q->ids.empty()) *q = {{0}, {1.0}};  // a row that is not all finite: a draft of token 0, which verification judges
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
