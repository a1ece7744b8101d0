// The draw's reference: the cuts found by radix selection over the logits' keys (the largest key
// whose tokens at or above it reach a count or a mass), a byte of the key at a time.
#include "core/token_draw.h"

#include <algorithm>
#include <array>
#include <vector>

#include "core/check.h"

namespace dsinfer {
namespace {

/// The largest key v >= floor such that the tokens whose key is at least v (and at least floor)
/// weigh at least `target` together; `weight(t)` is token t's count or mass. The total of the
/// tokens at or above floor must reach target.
template <typename Weight>
uint32_t largest_key_reaching(std::span<const float> logits, uint32_t floor, uint64_t target, Weight weight) {
  uint32_t prefix = 0;  // the chosen bytes of the key, high first
  uint64_t above = 0;   // the weight of the tokens whose key is above every key with this prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t high = shift == 24 ? 0 : ~uint32_t{0} << (shift + 8);
    std::array<uint64_t, 256> bins{};
    for (size_t t = 0; t < logits.size(); ++t)
      if (const uint32_t k = draw_key(logits[t]); k >= floor && (k & high) == prefix)
        bins[(k >> shift) & 255] += weight(t);
    int byte = 255;
    while (byte > 0 && above + bins[byte] < target) above += bins[byte--];
    prefix |= static_cast<uint32_t>(byte) << shift;
  }
  return prefix;
}

}  // namespace

uint64_t draw_masses(std::span<const float> logits, const DrawParams& p, std::span<uint64_t> masses) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  DSINFER_CHECK(vocab > 0 && vocab <= kMaxDrawVocab && masses.size() == logits.size() && p.temperature > 0,
                "draw_masses: 1 to 2^23 logits, a mass for each, temperature > 0");
  if (!std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); })) return 0;
  const float max = *std::max_element(logits.begin(), logits.end());
  // top-k on the keys alone; then the masses of the tokens it keeps, the others' 0.
  uint32_t cut = 0;
  if (p.top_k > 0 && p.top_k < vocab)
    cut = largest_key_reaching(logits, 0, static_cast<uint64_t>(p.top_k), [](size_t) { return uint64_t{1}; });
  uint64_t kept = 0;
  for (int64_t t = 0; t < vocab; ++t)
    kept += masses[t] = draw_key(logits[t]) >= cut ? draw_mass(draw_weight(logits[t], max, p.temperature)) : 0;
  if (p.top_p < 1.0f)
    cut = largest_key_reaching(logits, cut, draw_nucleus_mass(p.top_p, kept), [&](size_t t) { return masses[t]; });
  uint64_t total = 0;
  for (int64_t t = 0; t < vocab; ++t) {
    if (masses[t] == 0) continue;
    if (draw_key(logits[t]) < cut || !(draw_weight(logits[t], max, p.temperature) >= p.min_p)) masses[t] = 0;
    total += masses[t];
  }
  return total;
}

int32_t draw_from(std::span<const uint64_t> masses, uint64_t total, uint64_t bits) {
  if (total == 0) return -1;
  const uint64_t target = draw_target(bits, total);
  uint64_t sum = 0;
  for (size_t t = 0; t < masses.size(); ++t)
    if ((sum += masses[t]) > target) return static_cast<int32_t>(t);
  DSINFER_CHECK(false, "draw_from: the masses sum to less than their total");
  return -1;
}

int32_t draw_token(std::span<const float> logits, const DrawParams& p) {
  std::vector<uint64_t> masses(logits.size());
  return draw_from(masses, draw_masses(logits, p, masses), p.bits);
}

}  // namespace dsinfer
