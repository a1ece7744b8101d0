// Exact per-block dot products of the block-scaled GEMMs (spec §3.6): for one weight row and n
// activation rows, partials[i][b] = fp32(exact sum over K block b of x_code * w_code). An AVX2
// version is picked at run time; both produce the same bits (every sum is exact).
#pragma once

#include <cstdint>

namespace dsinfer::cpu {

/// fp8 weights: w [k] e4m3 codes; x [n, k] activation code values as doubles (unscaled).
void fp8_block_partials(const uint8_t* w, int64_t k, const double* x, int64_t n, float* partials);
/// fp4 weights: w [k / 2] packed e2m1; x [n, k] activation code values times 512 (integers), also
/// split as x = 512 * x_hi + x_lo (split_fp4_activations) for the int16 SIMD path.
void fp4_block_partials(const uint8_t* w, int64_t k, const int32_t* x, const int16_t* x_hi, const int16_t* x_lo,
                        int64_t n, float* partials);
void split_fp4_activations(const int32_t* x, int64_t count, int16_t* hi, int16_t* lo);

/// The portable versions (also what the AVX2 ones are tested against).
void fp8_block_partials_scalar(const uint8_t* w, int64_t k, const double* x, int64_t n, float* partials);
void fp4_block_partials_scalar(const uint8_t* w, int64_t k, const int32_t* x, int64_t n, float* partials);

/// sum_j w[j] * x[j] in double (exact products; AVX2 when available).
double dot_f32_f64(const float* w, const double* x, int64_t k);

}  // namespace dsinfer::cpu
