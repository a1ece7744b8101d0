// Scalar codecs for the number formats of the V4.1 checkpoint and activations (spec §3.3):
// bf16, f16, fp8 e4m3fn, e8m0 scales, fp4 e2m1. Encoders round to nearest, ties to even.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace dsinfer {

constexpr float kE4M3Max = 448.0f;
constexpr float kE2M1Max = 6.0f;
constexpr uint8_t kE4M3NaN = 0x7F;
constexpr uint8_t kE8M0NaN = 0xFF;

// ---- bf16 -------------------------------------------------------------------------------------
inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
/// Round to nearest even; NaN stays a (quiet) NaN with its sign.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
/// bf16(f) as a float: the value `f` takes after one bf16 rounding.
inline float round_to_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

// ---- f16 --------------------------------------------------------------------------------------
float f16_to_f32(uint16_t h);
/// Round to nearest even with subnormals; overflow gives +-inf.
uint16_t f32_to_f16(float f);

// ---- fp8 e4m3fn (OCP) -------------------------------------------------------------------------
namespace detail {
constexpr float e4m3_value(uint8_t code) {
  const uint32_t sign = (code & 0x80u) ? 0x80000000u : 0u;
  const uint32_t e = (code >> 3) & 0xFu, m = code & 0x7u;
  if (e == 0xF && m == 0x7) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (e == 0) {  // subnormal: m * 2^-9, normalised for the fp32 encoding
    if (m == 0) return std::bit_cast<float>(sign);
    int shift = 0;
    uint32_t mm = m;
    while (!(mm & 0x8u)) mm <<= 1, ++shift;  // bring the leading one to bit 3
    return std::bit_cast<float>(sign | ((127u - 6u - shift) << 23) | ((mm & 0x7u) << 20));
  }
  return std::bit_cast<float>(sign | ((e + 120u) << 23) | (m << 20));
}
constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = e4m3_value(static_cast<uint8_t>(i));
  return t;
}
inline constexpr std::array<float, 256> kE4M3Table = make_e4m3_table();
}  // namespace detail

inline float e4m3_to_f32(uint8_t code) {
  return detail::kE4M3Table[code];
}
/// e4m3_to_f32(f32_to_e4m3(f)) for |f| <= 448, computed on the fp32 bits (the hot path of act_quant
/// in the CPU GEMMs): normals round the mantissa to 3 bits, subnormals to multiples of 2^-9.
inline float round_to_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = u & 0x80000000u, mag = u & 0x7FFFFFFFu;
  float a;
  if (mag >= 0x3C800000u) {  // |f| >= 2^-6: keep 3 mantissa bits, ties to even
    a = std::bit_cast<float>((mag + 0x7FFFFu + ((mag >> 20) & 1u)) & 0xFFF00000u);
  } else {                               // the fp32 ulp at 2^14 is 2^-9: adding and removing 2^14 rounds to that grid
    const volatile float big = 0x1p14f;  // volatile: keep the two roundings from being folded
    a = (std::bit_cast<float>(mag) + big) - big;
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(a) | sign);
}
/// Saturating: |f| > 448 (and +-inf) gives +-448; NaN gives NaN (0x7F, sign kept).
uint8_t f32_to_e4m3(float f);

// ---- e8m0 (ue8m0 scales) ----------------------------------------------------------------------
/// 2^(b-127); 0xFF is NaN. Built from the bits (hot in the GEMM inner loops).
inline float e8m0_to_f32(uint8_t b) {
  if (b == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127 is an fp32 subnormal
  if (b == kE8M0NaN) return std::bit_cast<float>(0x7FC00000u);
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 23);
}
/// The e8m0 byte of 2^ceil(log2 t) for a positive normal t, computed on the fp32 bits as the
/// reference's "fast_round_scale" does (exponent field, +1 if any mantissa bit is set).
uint8_t e8m0_ceil_pow2(float t);

// ---- fp4 e2m1 ---------------------------------------------------------------------------------
inline constexpr std::array<float, 16> kE2M1Table = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
inline float e2m1_to_f32(uint8_t code) {
  return kE2M1Table[code & 0xFu];
}
/// Saturating at +-6, ties to the even code (0.25->0, 0.75->1, 2.5->2, 5->4); NaN gives 0.
uint8_t f32_to_e2m1(float f);
/// Element i of a packed fp4 array: low nibble holds the even index.
inline uint8_t e2m1_packed_code(const uint8_t* packed, int64_t i) {
  return (i & 1) ? (packed[i >> 1] >> 4) : (packed[i >> 1] & 0xFu);
}

}  // namespace dsinfer
