// RoPE table construction, every step in fp32 as the reference (correction range in double).
#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace dsinfer {

std::vector<float> rope_frequencies(int rope_dim, int original_seq_len, double base, double factor, double beta_fast,
                                    double beta_slow) {
  const int half = rope_dim / 2;
  std::vector<float> freqs(half);
  const float basef = static_cast<float>(base);
  for (int i = 0; i < half; ++i)
    freqs[i] = 1.0f / std::pow(basef, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
  if (original_seq_len > 0) {
    const auto correction_dim = [&](double rotations) {
      return rope_dim * std::log(original_seq_len / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    const double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
    const double high = std::min(std::ceil(correction_dim(beta_slow)), static_cast<double>(rope_dim - 1));
    const float span = high == low ? 0.001f : static_cast<float>(high - low);
    const float ff = static_cast<float>(factor);
    for (int i = 0; i < half; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / span, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      freqs[i] = freqs[i] / ff * (1.0f - smooth) + freqs[i] * smooth;
    }
  }
  return freqs;
}

void rope_row(std::span<const float> freqs, int64_t pos, float* cos_out, float* sin_out) {
  // torch.outer(arange(seqlen), freqs) promotes the positions to fp32 and rounds each product to
  // fp32; at 66K positions that rounding alone moves an angle by up to 2e-3 rad against an exact
  // product, so the product stays fp32 (positions below 2^24 are exact floats).
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < freqs.size(); ++i) {
    const float angle = p * freqs[i];
    cos_out[i] = std::cos(angle);
    sin_out[i] = std::sin(angle);
  }
}

RopeTable make_rope_table(int rope_dim, int64_t positions, int original_seq_len, double base, double factor,
                          double beta_fast, double beta_slow) {
  RopeTable t;
  t.half = rope_dim / 2;
  t.positions = positions;
  const std::vector<float> freqs = rope_frequencies(rope_dim, original_seq_len, base, factor, beta_fast, beta_slow);
  t.cos.resize(positions * t.half);
  t.sin.resize(positions * t.half);
  for (int64_t p = 0; p < positions; ++p) rope_row(freqs, p, &t.cos[p * t.half], &t.sin[p * t.half]);
  return t;
}

RopeTable make_layer_rope_table(const ModelConfig& c, int layer, int64_t positions) {
  if (c.compress_ratios[layer] == 0)
    return make_rope_table(c.rope_head_dim, positions, 0, c.rope_theta, c.rope_factor, c.beta_fast, c.beta_slow);
  return make_rope_table(c.rope_head_dim, positions, c.original_seq_len, c.compress_rope_theta, c.rope_factor,
                         c.beta_fast, c.beta_slow);
}

}  // namespace dsinfer
