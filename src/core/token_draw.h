// The draw of a token from a row of logits at temperature > 0 with top-k, top-p and min-p: one
// definition for the host's sampler and for the backends' draw_tokens op, so that a row drawn on
// a device gives the host's token bit for bit.
//
// A token's weight is exp((logit - max) / temperature) by draw_weight (double operations whose
// every rounding is fixed: no library exp, which differs between a host and a device), and its
// mass the weight in units of 2^-40 (the likeliest token's mass is 2^40). The cuts and the draw
// add masses, integers, so no sum depends on the order a device adds in:
//   - top-k keeps the tokens whose logit is at least the k-th largest (ties at the cut kept together);
//   - top-p keeps, of those, the tokens whose logit is at least v, the largest logit such that the
//     tokens at or above it hold top_p of the top-k mass (ties kept together);
//   - min-p keeps, of those, the tokens whose weight is at least min_p;
//   - the token drawn is the first, in id order, at which the kept masses summed in id order pass
//     floor(bits * S / 2^64), S the kept mass and `bits` 64 uniform random bits.
// Tokens whose weight is below 2^-40 have no mass: they are never drawn (each had less than
// ~1e-12 of the likeliest token's probability).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

#include "core/host_device.h"

namespace dsinfer {

struct DrawParams {
  float temperature = 1.0f;  // > 0
  int32_t top_k = 0;         // 0 or >= the vocabulary: off
  float top_p = 1.0f;        // (0, 1]; 1: off
  float min_p = 0.0f;        // [0, 1]; 0: off
  uint64_t bits = 0;         // uniform random bits: where the draw lands
  bool operator==(const DrawParams&) const = default;
};

/// A draw from row `row` of a matrix of logits (Backend::draw_tokens: the engine's sampled rows).
struct RowDraw {
  int32_t row = 0;
  DrawParams params;
  bool operator==(const RowDraw&) const = default;
};

/// A token's mass is its weight times 2^kDrawMassBits, truncated; a row of up to 2^23 tokens sums
/// below 2^63.
inline constexpr int kDrawMassBits = 40;
inline constexpr int64_t kMaxDrawVocab = int64_t{1} << 23;

/// exp(x) for x <= 0 as the draw defines it, in double operations that round alike on every
/// IEEE machine (no fma, no library call): 0 below -28 (whose mass is 0 anyway), else 2^n times a
/// degree-8 polynomial of the reduced argument.
DSINFER_HOST_DEVICE inline double draw_exp(double x) {
  if (!(x >= -28.0)) return 0.0;
  constexpr double kRound = 0x1.8p52;  // adding and subtracting it rounds to an integer
  const double n = (x * 1.4426950408889634 + kRound) - kRound;
  // r = x - n ln 2, ln 2 in two parts (n times the first is exact): |r| <= 0.35.
  const double r = (x - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  constexpr double kTaylor[] = {1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
  double p = 1.0 / 40320;  // 1/8!, then Horner down to 1: within 3e-10 of e^r
  for (const double c : kTaylor) p = p * r + c;
#if defined(__CUDA_ARCH__)
  const double scale = __longlong_as_double(static_cast<long long>(1023 + static_cast<int>(n)) << 52);
#else
  const double scale = std::bit_cast<double>(static_cast<uint64_t>(1023 + static_cast<int>(n)) << 52);
#endif
  return p * scale;  // n in [-41, 0]: 2^n is a normal double
}

/// A token's weight: exp((logit - max) / temperature), 1 for the likeliest token.
DSINFER_HOST_DEVICE inline double draw_weight(float logit, float max, float temperature) {
  return draw_exp((static_cast<double>(logit) - max) / temperature);
}

/// A weight's mass: weight * 2^40, truncated.
DSINFER_HOST_DEVICE inline uint64_t draw_mass(double weight) {
  return static_cast<uint64_t>(weight * 0x1p40);
}

/// A float's key, ordered as the floats are (-0 just below +0): the cuts compare keys.
DSINFER_HOST_DEVICE inline uint32_t draw_key(float v) {
#if defined(__CUDA_ARCH__)
  const uint32_t b = __float_as_uint(v);
#else
  const uint32_t b = std::bit_cast<uint32_t>(v);
#endif
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

/// floor(bits * total / 2^64): where in [0, total) a draw lands.
DSINFER_HOST_DEVICE inline uint64_t draw_target(uint64_t bits, uint64_t total) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(bits, total);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * total) >> 64);
#endif
}

/// The smallest mass the top-p cut must keep of `total`: ceil(top_p * total), at most total.
DSINFER_HOST_DEVICE inline uint64_t draw_nucleus_mass(float top_p, uint64_t total) {
  const double c = ceil(static_cast<double>(top_p) * static_cast<double>(total));
  return c >= static_cast<double>(total) ? total : static_cast<uint64_t>(c);
}

/// The kept masses of a row, as the draw defines them (the cuts above): masses[t] for each token,
/// 0 for one cut; returns their sum, or 0 when the row holds a NaN or an infinity. The vocabulary
/// is at most kMaxDrawVocab tokens (checked).
uint64_t draw_masses(std::span<const float> logits, const DrawParams& p, std::span<uint64_t> masses);

/// The token draw_masses' `masses` (summing to `total`) give `bits`; -1 when total is 0.
int32_t draw_from(std::span<const uint64_t> masses, uint64_t total, uint64_t bits);

/// The token drawn from `logits` with `p`; -1 when the row holds a NaN or an infinity. (A caller
/// that draws often keeps the masses' buffer: draw_masses, then draw_from.)
int32_t draw_token(std::span<const float> logits, const DrawParams& p);

}  // namespace dsinfer
