// Activation quantisers of the reference (spec §3.4, §3.5), on bf16 rows.
// The fake-quant forms (in place) are model semantics: they run before every fp8/fp4 GEMM, on the
// window KV (fp8), the compressed KV (fp4, e4m3 scales) and the indexer q/k (fp4, e8m0 scales).
// The (codes, scales) forms produce what a real low-precision kernel consumes.
#pragma once

#include <cstdint>
#include <span>

namespace dsinfer {

/// Group width of act_quant and of the fp4 indexer quantiser; also the fp8 weight block edge.
constexpr int kQuantGroup = 32;
/// Group width of the compressed-KV fp4 quantiser (e4m3 scales).
constexpr int kFp4KvGroup = 16;

/// How fp4_act_quant rounds its per-group scale.
enum class Fp4ScaleKind : uint8_t {
  kE8M0,  // power of two, 2^ceil(log2(amax/6)); indexer q/k, groups of 32
  kE4M3,  // e4m3(amax/6), not a power of two; compressed KV, groups of 16
};

/// fp8 e4m3 fake-quant in groups of 32 with power-of-two scales; x.size() % 32 == 0.
void act_quant_inplace(std::span<uint16_t> x_bf16);
/// The same as codes [n] (e4m3) and scales [n/32] (e8m0 bytes).
void act_quant(std::span<const uint16_t> x_bf16, std::span<uint8_t> codes, std::span<uint8_t> scales_e8m0);

/// fp4 e2m1 fake-quant in groups of `group` (32 for kE8M0, 16 for kE4M3); x.size() % group == 0.
void fp4_act_quant_inplace(std::span<uint16_t> x_bf16, int group, Fp4ScaleKind kind);
/// The same as packed codes [n/2] (low nibble = even index) and scales [n/group]
/// (e8m0 bytes for kE8M0, e4m3 bytes for kE4M3).
void fp4_act_quant(std::span<const uint16_t> x_bf16, int group, Fp4ScaleKind kind, std::span<uint8_t> packed_codes,
                   std::span<uint8_t> scales);

/// The per-group scale the quantisers use, as a float (exposed for tests and kernels).
float act_quant_scale(float amax);
float fp4_act_quant_scale(float amax, Fp4ScaleKind kind);

}  // namespace dsinfer
