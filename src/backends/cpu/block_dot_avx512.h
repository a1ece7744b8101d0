// The AVX-512 kernels behind block_dot.h (built with per-function target attributes, picked at
// run time). Layouts are the ones prepare_block_activations writes for Isa::kAvx512.
#pragma once

#include <cstdint>

namespace dsinfer::cpu {

/// sum_j x[j] * e4m3(w[j]) over one 32-element block, exact in double, for every code (the SIMD
/// kernels' path for blocks that hold subnormal codes).
double fp8_block_sum_exact(const uint8_t* w, const double* x);

}  // namespace dsinfer::cpu

namespace dsinfer::cpu::avx512 {

/// k % 256 == 0. x: [n, k] code values times 2^1000.
void fp8_partials(const uint8_t* w, int64_t k, const double* x, int64_t n, float* partials, int64_t stride);
/// k % 256 == 0. hi, lo: [n, k], each 64-element chunk holding its even elements, then its odd ones.
void fp4_partials(const uint8_t* w, int64_t k, const int16_t* hi, const int16_t* lo, int64_t n, float* partials,
                  int64_t stride);
double dot_f32_f64(const float* w, const double* x, int64_t k);
/// block_dot.h's dot_e4m3_f64 for k % 256 == 0.
double dot_e4m3_f64(const uint8_t* w, const uint8_t* block_scales, const double* x, int64_t k);
/// One 32-element block of act_quant (block_dot.h's act_quant_row); false (nothing written) when
/// it holds a NaN, which the portable path handles.
bool act_quant_block(const uint16_t* x, double* codes, float* scale);
void accumulate_block_scales(const float* partials, const float* xs, const float* ws, int64_t n, int64_t blocks,
                             int rows, float* out);
void block_scales(const uint8_t* scales, int64_t row_stride, int rows, int64_t blocks, float* ws);

}  // namespace dsinfer::cpu::avx512
