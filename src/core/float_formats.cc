// Encoders of float_formats.h. Each one scales into an integer grid by an exact power of two and
// rounds once with nearbyint (round to nearest even), so the only rounding is the format's own.
#include "core/float_formats.h"

#include <cmath>

namespace dsinfer {
namespace {

// Splits a positive normal float into (E, significand in [1, 2)) exactly.
inline float split_exponent(float a, int* exponent) {
  int e = 0;
  const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
  *exponent = e - 1;
  return fr * 2.0f;
}

}  // namespace

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) ? 0x80000000u : 0u;
  const int e = (h >> 10) & 0x1F;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | (static_cast<uint32_t>(e + 112) << 23) | (m << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7E00u;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7C00u;  // rounds past the largest finite 65504
  if (a < 0x1p-14f) return sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24f));
  int e = 0;
  const float sig = split_exponent(a, &e);
  int q = static_cast<int>(std::nearbyint((sig - 1.0f) * 1024.0f));
  if (q == 1024) q = 0, ++e;
  return sign | static_cast<uint16_t>(((e + 15) << 10) | q);
}

uint8_t f32_to_e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | kE4M3NaN;
  const float a = std::fabs(f);
  if (a >= kE4M3Max) return sign | 0x7E;
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));  // 8 -> 0x08, fine
  int e = 0;
  const float sig = split_exponent(a, &e);
  int q = static_cast<int>(std::nearbyint((sig - 1.0f) * 8.0f));
  if (q == 8) q = 0, ++e;
  return sign | static_cast<uint8_t>(((e + 7) << 3) | q);
}

uint8_t e8m0_ceil_pow2(float t) {
  const uint32_t u = std::bit_cast<uint32_t>(t);
  uint32_t exponent = (u >> 23) & 0xFFu;
  if (u & 0x7FFFFFu) ++exponent;
  return static_cast<uint8_t>(exponent);
}

uint8_t f32_to_e2m1(float f) {
  if (std::isnan(f)) return 0;
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  const float a = std::fmin(std::fabs(f), kE2M1Max);
  // The grid step is 0.5 below 2, 1 in [2, 4), 2 in [4, 6]; codes are consecutive along the grid.
  if (a < 2.0f) return sign | static_cast<uint8_t>(std::nearbyint(a * 2.0f));  // 0..4
  if (a < 4.0f) return sign | static_cast<uint8_t>(2 + std::nearbyint(a));     // 4..6
  return sign | static_cast<uint8_t>(4 + std::nearbyint(a * 0.5f));            // 6..7
}

}  // namespace dsinfer
