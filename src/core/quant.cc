// Activation quantisers, written to follow the rounding points of spec §3.4–3.5 one by one.
#include "core/quant.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/float_formats.h"

namespace dsinfer {
namespace {

float group_amax(std::span<const uint16_t> g) {
  float amax = 0.0f;
  for (uint16_t v : g) amax = std::fmax(amax, std::fabs(bf16_to_f32(v)));
  return amax;
}

uint8_t fp4_scale_byte(float amax, Fp4ScaleKind kind) {
  if (kind == Fp4ScaleKind::kE8M0) return e8m0_ceil_pow2(std::fmax(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
  return f32_to_e4m3(std::fmin(std::fmax(amax, 6.0f * 0x1p-9f) / 6.0f, kE4M3Max));
}

float fp4_scale_value(uint8_t byte, Fp4ScaleKind kind) {
  return kind == Fp4ScaleKind::kE8M0 ? e8m0_to_f32(byte) : e4m3_to_f32(byte);
}

// One fp8 group: returns the scale byte, writes the codes.
uint8_t quantize_fp8_group(std::span<const uint16_t> g, uint8_t* codes) {
  const uint8_t sb = e8m0_ceil_pow2(std::fmax(group_amax(g), 1e-4f) * (1.0f / kE4M3Max));
  const float s = e8m0_to_f32(sb);
  for (size_t i = 0; i < g.size(); ++i) codes[i] = f32_to_e4m3(std::clamp(bf16_to_f32(g[i]) / s, -kE4M3Max, kE4M3Max));
  return sb;
}

// One fp4 group: returns the scale byte, writes one code per element (unpacked).
uint8_t quantize_fp4_group(std::span<const uint16_t> g, Fp4ScaleKind kind, uint8_t* codes) {
  const uint8_t sb = fp4_scale_byte(group_amax(g), kind);
  const float s = fp4_scale_value(sb, kind);
  for (size_t i = 0; i < g.size(); ++i) codes[i] = f32_to_e2m1(std::clamp(bf16_to_f32(g[i]) / s, -kE2M1Max, kE2M1Max));
  return sb;
}

void check_fp4_group(int group) {
  DSINFER_CHECK(group > 0 && group % 2 == 0 && group <= 64, "fp4 group {}", group);
}

}  // namespace

float act_quant_scale(float amax) {
  return e8m0_to_f32(e8m0_ceil_pow2(std::fmax(amax, 1e-4f) * (1.0f / kE4M3Max)));
}

float fp4_act_quant_scale(float amax, Fp4ScaleKind kind) {
  return fp4_scale_value(fp4_scale_byte(amax, kind), kind);
}

void act_quant_inplace(std::span<uint16_t> x) {
  DSINFER_CHECK(x.size() % kQuantGroup == 0, "act_quant length {} is not a multiple of {}", x.size(), kQuantGroup);
  uint8_t codes[kQuantGroup];
  for (size_t g0 = 0; g0 < x.size(); g0 += kQuantGroup) {
    std::span<uint16_t> g = x.subspan(g0, kQuantGroup);
    const float s = e8m0_to_f32(quantize_fp8_group(g, codes));
    // q * s is a power-of-two scaling of a 4-bit significand: exact in bf16.
    for (int i = 0; i < kQuantGroup; ++i) g[i] = f32_to_bf16(e4m3_to_f32(codes[i]) * s);
  }
}

void act_quant(std::span<const uint16_t> x, std::span<uint8_t> codes, std::span<uint8_t> scales) {
  DSINFER_CHECK(x.size() % kQuantGroup == 0, "act_quant length {} is not a multiple of {}", x.size(), kQuantGroup);
  DSINFER_CHECK(codes.size() == x.size() && scales.size() == x.size() / kQuantGroup, "act_quant output sizes");
  for (size_t g0 = 0, gi = 0; g0 < x.size(); g0 += kQuantGroup, ++gi)
    scales[gi] = quantize_fp8_group(x.subspan(g0, kQuantGroup), codes.data() + g0);
}

void fp4_act_quant_inplace(std::span<uint16_t> x, int group, Fp4ScaleKind kind) {
  check_fp4_group(group);
  DSINFER_CHECK(x.size() % group == 0, "fp4_act_quant length {} is not a multiple of {}", x.size(), group);
  uint8_t codes[64];
  for (size_t g0 = 0; g0 < x.size(); g0 += group) {
    std::span<uint16_t> g = x.subspan(g0, group);
    const float s = fp4_scale_value(quantize_fp4_group(g, kind, codes), kind);
    for (int i = 0; i < group; ++i) g[i] = f32_to_bf16(e2m1_to_f32(codes[i]) * s);
  }
}

void fp4_act_quant(std::span<const uint16_t> x, int group, Fp4ScaleKind kind, std::span<uint8_t> packed,
                   std::span<uint8_t> scales) {
  check_fp4_group(group);
  DSINFER_CHECK(x.size() % group == 0, "fp4_act_quant length {} is not a multiple of {}", x.size(), group);
  DSINFER_CHECK(packed.size() == x.size() / 2 && scales.size() == x.size() / group, "fp4_act_quant output sizes");
  uint8_t codes[64];
  for (size_t g0 = 0, gi = 0; g0 < x.size(); g0 += group, ++gi) {
    scales[gi] = quantize_fp4_group(x.subspan(g0, group), kind, codes);
    for (int i = 0; i < group; i += 2) packed[(g0 + i) / 2] = static_cast<uint8_t>(codes[i] | (codes[i + 1] << 4));
  }
}

}  // namespace dsinfer
