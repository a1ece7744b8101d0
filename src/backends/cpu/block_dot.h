// Exact per-block dot products of the block-scaled GEMMs (spec §3.6): for one weight row and n
// activation rows, partial[i][b] = fp32(exact sum over K block b of x_code * w_code), then the
// reference's K-ordered fp32 accumulation of partial * s_x * s_w. Three instruction sets are
// implemented (portable, AVX2, AVX-512); every sum is exact, so all three give the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/isa.h"

namespace dsinfer::cpu {

/// Rows of output handled together: their scale accumulations run as one vector of independent
/// fp32 chains.
inline constexpr int kRowGroup = 16;

/// act_quant of one bf16 row (spec §3.6): for each 32-element block b, scales[b] = the e8m0 power
/// of two of max(amax, 1e-4) / 448 and codes[j] = e4m3(clamp(x[j] / scales[b], +-448)) as doubles.
/// The AVX-512 path gives the same bits (division by a power of two is exact; rounding on the bits).
void act_quant_row(Isa isa, const uint16_t* x, int64_t k, double* codes, float* scales);

/// The activations of one block-scaled GEMM (act_quant codes, unscaled), prepared once in the
/// layout that `isa`'s kernels read. `isa` may be lowered for shapes a kernel does not cover.
struct BlockActivations {
  Isa isa = Isa::kScalar;
  bool fp4 = false;
  int64_t n = 0, k = 0, blocks = 0;
  std::vector<double> f64;      // fp8: code values (times 2^1000 for the AVX-512 kernel)
  std::vector<int32_t> i32;     // fp4: code values times 512 (exact integers)
  std::vector<int16_t> hi, lo;  // fp4 SIMD: i32 = 512 * hi + lo (AVX-512: even then odd elements of each 64)
};
void prepare_block_activations(Isa isa, bool fp4, const double* codes, int64_t n, int64_t k, BlockActivations& out);

/// One weight row (`k` e4m3 codes, or k / 2 packed e2m1 bytes) against every activation row:
/// partials[(i * blocks + b) * stride] for activation row i and K block b.
void block_partials(const BlockActivations& x, const uint8_t* w, float* partials, int64_t stride);

/// out[i][l] = sum over b in order of (partials[(i * blocks + b) * kRowGroup + l] * xs[i * blocks + b]) *
/// ws[b * kRowGroup + l], in fp32 (the reference's per-block scale accumulation), for rows l < rows.
void accumulate_block_scales(Isa isa, const float* partials, const float* xs, const float* ws, int64_t n,
                             int64_t blocks, int rows, float* out);

/// The weight scales of a row group in the layout accumulate_block_scales reads: ws[b * kRowGroup + l]
/// = e8m0(row_l[b]) for rows l < rows, where row_l = scales + l * row_stride (fp4 experts: a scale
/// per row and block) or row_l = scales for every l (row_stride 0: fp8, one scale per 32 x 32 tile).
void block_scales(Isa isa, const uint8_t* scales, int64_t row_stride, int rows, int64_t blocks, float* ws);

/// sum_j w[j] * x[j] in double (exact products). Lane j % 8 of every vector path sums the same
/// terms in the same order, so the AVX2 and AVX-512 results are identical.
double dot_f32_f64(Isa isa, const float* w, const double* x, int64_t k);

/// dot_f32_f64 of the row e4m3_row_to_f32 makes and x, without making it (the same products summed
/// in the same order: the same bits); for batch-1 GEMVs over fp8 weights read as dense.
double dot_e4m3_f64(Isa isa, const uint8_t* w, const uint8_t* block_scales, const double* x, int64_t k);

/// out[j] = e4m3(w[j]) * e8m0(block_scales[j / 32]) (exact in fp32: the dense view of fp8 weights).
void e4m3_row_to_f32(Isa isa, const uint8_t* w, const uint8_t* block_scales, int64_t k, float* out);

}  // namespace dsinfer::cpu
