// Block dot products. The AVX2 path turns e4m3 codes into floats with the shift-and-scale trick
// (code bits placed in an fp32's low exponent/mantissa, times 2^120: subnormals come out right),
// multiplies exactly in fp32 and sums in double (exact: < 40 bits of span); fp4 codes become
// small integers through a 16-entry byte shuffle and are summed exactly in int32.
#include "backends/cpu/block_dot.h"

#include <immintrin.h>

#include <cmath>

#include "core/float_formats.h"

namespace dsinfer::cpu {
namespace {

constexpr int kBlock = 32;

struct E4M3Doubles {
  double v[256];
  E4M3Doubles() {
    for (int i = 0; i < 256; ++i) v[i] = e4m3_to_f32(static_cast<uint8_t>(i));
  }
};
const double* e4m3_doubles() {
  static const E4M3Doubles t;
  return t.v;
}

__attribute__((target("avx2,fma"))) inline __m256 e4m3x8_to_f32(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7F)), 20);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  const __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p120f));
  return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}

__attribute__((target("avx2,fma"))) void fp8_avx2(const uint8_t* w, int64_t k, const double* x, int64_t n,
                                                  float* partials) {
  const int64_t blocks = k / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    __m256d wd[8];
    for (int q = 0; q < 4; ++q) {
      const __m256 wf = e4m3x8_to_f32(w + b * kBlock + q * 8);
      wd[2 * q] = _mm256_cvtps_pd(_mm256_castps256_ps128(wf));
      wd[2 * q + 1] = _mm256_cvtps_pd(_mm256_extractf128_ps(wf, 1));
    }
    for (int64_t i = 0; i < n; ++i) {
      const double* xr = x + i * k + b * kBlock;
      __m256d acc0 = _mm256_mul_pd(wd[0], _mm256_loadu_pd(xr));
      __m256d acc1 = _mm256_mul_pd(wd[1], _mm256_loadu_pd(xr + 4));
      for (int q = 2; q < 8; q += 2) {
        acc0 = _mm256_fmadd_pd(wd[q], _mm256_loadu_pd(xr + 4 * q), acc0);
        acc1 = _mm256_fmadd_pd(wd[q + 1], _mm256_loadu_pd(xr + 4 * q + 4), acc1);
      }
      const __m256d s = _mm256_add_pd(acc0, acc1);
      const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
      partials[i * blocks + b] = static_cast<float>(_mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h))));
    }
  }
}

// Eight 32-element blocks at a time: weights as int16 (2 * e2m1), activations split into int16
// halves x = 512 * hi + lo, pairwise products summed by madd, the eight block sums gathered into
// one vector by a horizontal-add tree. Every sum stays an exact int32.
__attribute__((target("avx2,fma"))) void fp4_avx2(const uint8_t* w, int64_t k, const int16_t* xhi, const int16_t* xlo,
                                                  int64_t n, float* partials) {
  const int64_t blocks = k / kBlock;
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  for (int64_t b8 = 0; b8 < blocks; b8 += 8) {
    const int nb = static_cast<int>(std::min<int64_t>(8, blocks - b8));
    for (int64_t i = 0; i < n; ++i) {
      // The weights are decoded again per activation row: at batch 1 (the case that streams the
      // weights) that keeps them in registers instead of a spilled array.
      __m256i acc[8];
      for (int q = 0; q < 8; ++q) {
        if (q >= nb) {
          acc[q] = _mm256_setzero_si256();
          continue;
        }
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (b8 + q) * kBlock / 2));
        const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(packed, _mm_set1_epi8(0x0F)));
        const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, hi));  // elements 0..15 (low nibble = even)
        const __m256i w1 = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(lo, hi));
        const int64_t off = i * k + (b8 + q) * kBlock;
        const __m256i* h = reinterpret_cast<const __m256i*>(xhi + off);
        const __m256i* l = reinterpret_cast<const __m256i*>(xlo + off);
        const __m256i sh = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(h)),
                                            _mm256_madd_epi16(w1, _mm256_loadu_si256(h + 1)));
        const __m256i sl = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(l)),
                                            _mm256_madd_epi16(w1, _mm256_loadu_si256(l + 1)));
        acc[q] = _mm256_add_epi32(_mm256_slli_epi32(sh, 9), sl);
      }
      const __m256i t0 = _mm256_hadd_epi32(acc[0], acc[1]), t1 = _mm256_hadd_epi32(acc[2], acc[3]);
      const __m256i t2 = _mm256_hadd_epi32(acc[4], acc[5]), t3 = _mm256_hadd_epi32(acc[6], acc[7]);
      const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
      const __m256i sums =
          _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(0x1p-10f)));  // exact
      for (int q = 0; q < nb; ++q) partials[i * blocks + b8 + q] = out[q];
    }
  }
}

__attribute__((target("avx2,fma"))) double dot_avx2(const float* w, const double* x, int64_t k) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= k; j += 8) {
    const __m256 wf = _mm256_loadu_ps(w + j);
    a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(wf)), _mm256_loadu_pd(x + j), a0);
    a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(wf, 1)), _mm256_loadu_pd(x + j + 4), a1);
  }
  const __m256d s = _mm256_add_pd(a0, a1);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  double acc = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; j < k; ++j) acc += double{w[j]} * x[j];
  return acc;
}

bool have_avx2() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}
bool use_avx2(int64_t k) {
  return have_avx2() && k % kBlock == 0;
}

}  // namespace

void fp8_block_partials_scalar(const uint8_t* w, int64_t k, const double* x, int64_t n, float* partials) {
  const double* t = e4m3_doubles();
  const int64_t blocks = (k + kBlock - 1) / kBlock;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < blocks; ++b) {
      double s = 0;
      for (int64_t j = b * kBlock; j < std::min(k, (b + 1) * kBlock); ++j) s += x[i * k + j] * t[w[j]];
      partials[i * blocks + b] = static_cast<float>(s);
    }
}

void fp4_block_partials_scalar(const uint8_t* w, int64_t k, const int32_t* x, int64_t n, float* partials) {
  const int64_t blocks = (k + kBlock - 1) / kBlock;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t s = 0;  // |x| <= 448 * 512, |2w| <= 12: 32 terms stay below 2^31
      for (int64_t j = b * kBlock; j < std::min(k, (b + 1) * kBlock); ++j)
        s += x[i * k + j] * static_cast<int32_t>(2 * e2m1_to_f32(e2m1_packed_code(w, j)));
      partials[i * blocks + b] = static_cast<float>(s) * 0x1p-10f;
    }
}

double dot_f32_f64(const float* w, const double* x, int64_t k) {
  if (have_avx2()) return dot_avx2(w, x, k);
  double acc = 0;
  for (int64_t j = 0; j < k; ++j) acc += double{w[j]} * x[j];
  return acc;
}

void fp8_block_partials(const uint8_t* w, int64_t k, const double* x, int64_t n, float* partials) {
  if (use_avx2(k)) return fp8_avx2(w, k, x, n, partials);
  fp8_block_partials_scalar(w, k, x, n, partials);
}

void fp4_block_partials(const uint8_t* w, int64_t k, const int32_t* x, const int16_t* x_hi, const int16_t* x_lo,
                        int64_t n, float* partials) {
  if (use_avx2(k)) return fp4_avx2(w, k, x_hi, x_lo, n, partials);
  fp4_block_partials_scalar(w, k, x, n, partials);
}

void split_fp4_activations(const int32_t* x, int64_t count, int16_t* hi, int16_t* lo) {
  for (int64_t j = 0; j < count; ++j) {
    hi[j] = static_cast<int16_t>(x[j] >> 9);  // floor: x = 512 * hi + lo with 0 <= lo < 512
    lo[j] = static_cast<int16_t>(x[j] & 511);
  }
}

}  // namespace dsinfer::cpu
