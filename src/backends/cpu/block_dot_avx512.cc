// AVX-512 block dots. fp8: each e4m3 code is sign-extended to 64 bits and shifted so that its
// exponent and mantissa land in a double's low exponent bits; that double is the code's value
// times 2^-1016 (subnormal codes included), so with x pre-scaled by 2^1000 every product is the
// exact product times 2^-16 and the 32-term sums stay exact. fp4: e2m1 codes become int16 through
// a byte shuffle and meet the int16 halves of x in vpdpwssd; sums are exact int32.
#include "backends/cpu/block_dot_avx512.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* values
// (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backends/cpu/block_dot.h"
#include "core/float_formats.h"
#include "core/quant.h"

#define DSINFER_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

namespace dsinfer::cpu::avx512 {
namespace {

constexpr int kBlock = 32;
constexpr int kPrefetch = 2048;  // bytes ahead: rows of one GEMM lie back to back

DSINFER_AVX512 inline __m512d e4m3x8_scaled(const uint8_t* p) {
  const __m512i q = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m512i bits = _mm512_and_si512(_mm512_slli_epi64(q, 49), _mm512_set1_epi64(0x80FE000000000000LL));
  return _mm512_castsi512_pd(bits);
}

// Eight vectors of 8 lanes -> one vector of their eight lane sums (exact here: every sum is).
DSINFER_AVX512 inline __m512d sum_lanes8(const __m512d s[8]) {
  __m512d t[4], u[2];
  for (int q = 0; q < 4; ++q)
    t[q] = _mm512_add_pd(_mm512_shuffle_f64x2(s[2 * q], s[2 * q + 1], 0x44),
                         _mm512_shuffle_f64x2(s[2 * q], s[2 * q + 1], 0xEE));
  for (int q = 0; q < 2; ++q)
    u[q] = _mm512_add_pd(_mm512_shuffle_f64x2(t[2 * q], t[2 * q + 1], 0x88),
                         _mm512_shuffle_f64x2(t[2 * q], t[2 * q + 1], 0xDD));
  const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m512i odd = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
  return _mm512_add_pd(_mm512_permutex2var_pd(u[0], even, u[1]), _mm512_permutex2var_pd(u[0], odd, u[1]));
}

// Four vectors of 16 int32 lanes, each two blocks of 8 lanes -> the eight block sums.
DSINFER_AVX512 inline __m256i sum_blocks8(const __m512i v[4]) {
  __m512i t[2];
  for (int q = 0; q < 2; ++q)
    t[q] = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2 * q], v[2 * q + 1], 0x88),
                            _mm512_shuffle_i32x4(v[2 * q], v[2 * q + 1], 0xDD));
  const __m512i lo2 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
  const __m512i hi2 = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  const __m512i z =
      _mm512_add_epi32(_mm512_permutex2var_epi32(t[0], lo2, t[1]), _mm512_permutex2var_epi32(t[0], hi2, t[1]));
  return _mm512_cvtepi64_epi32(_mm512_add_epi64(z, _mm512_srli_epi64(z, 32)));
}

DSINFER_AVX512 inline void scatter8(float* p, int64_t stride, __m256 v) {
  const __m256i idx =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int32_t>(stride)));
  _mm256_i32scatter_ps(p, idx, v, 4);
}

}  // namespace

// Bit b of the result: block b (of 8 from p) holds a subnormal code, whose decoded double would
// be subnormal too and cost a microcode assist per use.
DSINFER_AVX512 inline unsigned subnormal_blocks8(const uint8_t* p) {
  unsigned blocks = 0;
  for (int q = 0; q < 4; ++q) {
    const __m512i c = _mm512_loadu_si512(p + q * 64);
    const __mmask64 sub =
        _mm512_testn_epi8_mask(c, _mm512_set1_epi8(0x78)) & _mm512_test_epi8_mask(c, _mm512_set1_epi8(0x07));
    blocks |= ((sub & 0xFFFFFFFFull) != 0 ? 1u : 0u) << (2 * q);
    blocks |= ((sub >> 32) != 0 ? 1u : 0u) << (2 * q + 1);
  }
  return blocks;
}

DSINFER_AVX512 void fp8_partials(const uint8_t* w, int64_t k, const double* x, int64_t n, float* partials,
                                 int64_t stride) {
  const int64_t blocks = k / kBlock;
  for (int64_t b8 = 0; b8 < blocks; b8 += 8) {
    const unsigned slow = subnormal_blocks8(w + b8 * kBlock);
    for (int q = 0; q < 4; ++q)
      _mm_prefetch(reinterpret_cast<const char*>(w + b8 * kBlock + kPrefetch + 64 * q), _MM_HINT_T0);
    for (int64_t i = 0; i < n; ++i) {
      __m512d s[8];
      for (int q = 0; q < 8; ++q) {
        const uint8_t* wp = w + (b8 + q) * kBlock;
        const double* xp = x + i * k + (b8 + q) * kBlock;
        if (slow >> q & 1) {  // x carries 2^1000: bring the exact sum to the fast path's 2^-16 scale
          s[q] = _mm512_setr_pd(fp8_block_sum_exact(wp, xp) * 0x1p-1016, 0, 0, 0, 0, 0, 0, 0);
          continue;
        }
        __m512d acc = _mm512_mul_pd(e4m3x8_scaled(wp), _mm512_loadu_pd(xp));
        for (int j = 8; j < kBlock; j += 8) acc = _mm512_fmadd_pd(e4m3x8_scaled(wp + j), _mm512_loadu_pd(xp + j), acc);
        s[q] = acc;
      }
      const __m512d sums = _mm512_mul_pd(sum_lanes8(s), _mm512_set1_pd(0x1p16));
      scatter8(partials + (i * blocks + b8) * stride, stride, _mm512_cvtpd_ps(sums));
    }
  }
}

DSINFER_AVX512 void fp4_partials(const uint8_t* w, int64_t k, const int16_t* hi, const int16_t* lo, int64_t n,
                                 float* partials, int64_t stride) {
  const int64_t blocks = k / kBlock;
  const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12,
                                       0, -1, -2, -3, -4, -6, -8, -12);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t b8 = 0; b8 < blocks; b8 += 8) {
    // 256 weights (128 bytes) as 2 * e2m1 in int16: per 64, the even elements then the odd ones.
    __m512i we[4], wo[4];
    for (int q = 0; q < 2; ++q)
      _mm_prefetch(reinterpret_cast<const char*>(w + b8 * kBlock / 2 + kPrefetch + 64 * q), _MM_HINT_T0);
    for (int q = 0; q < 4; ++q) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + (b8 * kBlock + q * 64) / 2));
      we[q] = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(lut, _mm256_and_si256(packed, nibble)));
      wo[q] = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble)));
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t off = i * k + b8 * kBlock;
      __m512i v[4];
      for (int q = 0; q < 4; ++q) {
        const int16_t* h = hi + off + q * 64;
        const int16_t* l = lo + off + q * 64;
        __m512i sh = _mm512_dpwssd_epi32(_mm512_setzero_si512(), we[q], _mm512_loadu_si512(h));
        sh = _mm512_dpwssd_epi32(sh, wo[q], _mm512_loadu_si512(h + 32));
        __m512i sl = _mm512_dpwssd_epi32(_mm512_setzero_si512(), we[q], _mm512_loadu_si512(l));
        sl = _mm512_dpwssd_epi32(sl, wo[q], _mm512_loadu_si512(l + 32));
        v[q] = _mm512_add_epi32(_mm512_slli_epi32(sh, 9), sl);  // |sum| < 2^31: 32 * 448 * 512 * 12
      }
      const __m256 sums = _mm256_mul_ps(_mm256_cvtepi32_ps(sum_blocks8(v)), _mm256_set1_ps(0x1p-10f));  // exact
      scatter8(partials + (i * blocks + b8) * stride, stride, sums);
    }
  }
}

DSINFER_AVX512 double dot_f32_f64(const float* w, const double* x, int64_t k) {
  __m512d acc = _mm512_setzero_pd();  // lane l: the terms j = l (mod 8), as in the AVX2 version
  int64_t j = 0;
  for (; j + 8 <= k; j += 8)
    acc = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(w + j)), _mm512_loadu_pd(x + j), acc);
  const __m256d s = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; j < k; ++j) sum += double{w[j]} * x[j];
  return sum;
}

// The weights' doubles come from the code bits (value * 2^-1016) times 2^1016 * scale: exactly the
// fp32 value e4m3 * scale while that is a normal fp32 (scales 2^-100 .. 2^7, no subnormal code);
// other blocks take the fp32 values as e4m3_row_to_f32 makes them. Lane l sums the terms j = l
// (mod 8) in order, as dot_f32_f64.
DSINFER_AVX512 double dot_e4m3_f64(const uint8_t* w, const uint8_t* block_scales, const double* x, int64_t k) {
  __m512d acc = _mm512_setzero_pd();
  for (int64_t b8 = 0; b8 < k / kBlock; b8 += 8) {
    const unsigned slow = subnormal_blocks8(w + b8 * kBlock);
    for (int q = 0; q < 4; ++q)
      _mm_prefetch(reinterpret_cast<const char*>(w + b8 * kBlock + kPrefetch + 64 * q), _MM_HINT_T0);
    for (int64_t b = b8; b < b8 + 8; ++b) {
      const uint8_t sb = block_scales[b];
      const uint8_t* wb = w + b * kBlock;
      const double* xb = x + b * kBlock;
      if ((slow >> (b - b8) & 1) == 0 && sb >= 27 && sb <= 134) {
        const __m512d s = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<int64_t>(sb + 889 + 1023) << 52));
        for (int q = 0; q < 4; ++q)
          acc = _mm512_fmadd_pd(_mm512_mul_pd(e4m3x8_scaled(wb + 8 * q), s), _mm512_loadu_pd(xb + 8 * q), acc);
        continue;
      }
      alignas(64) float v[kBlock];
      const float s = e8m0_to_f32(sb);
      for (int j = 0; j < kBlock; ++j) v[j] = e4m3_to_f32(wb[j]) * s;
      for (int q = 0; q < 4; ++q)
        acc = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_load_ps(v + 8 * q)), _mm512_loadu_pd(xb + 8 * q), acc);
    }
  }
  const __m256d s = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

DSINFER_AVX512 bool act_quant_block(const uint16_t* x, double* codes, float* scale) {
  const __m512i raw = _mm512_loadu_si512(x);
  const __m512 v[2] = {
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(raw)), 16)),
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(raw, 1)), 16))};
  if (_mm512_cmp_ps_mask(v[0], v[0], _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v[1], v[1], _CMP_UNORD_Q)) return false;
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
  const float s = act_quant_scale(amax);
  *scale = s;
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  for (int h = 0; h < 2; ++h) {
    const __m512 q = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(v[h], _mm512_set1_ps(s)), _mm512_set1_ps(-kE4M3Max)),
                                   _mm512_set1_ps(kE4M3Max));
    // round_to_e4m3 on 16 lanes: 3 mantissa bits (ties to even) from 2^-6 up, the 2^-9 grid below.
    const __m512i u = _mm512_castps_si512(q);
    const __m512i mag = _mm512_and_si512(u, abs_mask);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(mag, 20), _mm512_set1_epi32(1));
    const __m512i normal = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(0x7FFFF)), odd),
                                            _mm512_set1_epi32(0xFFF00000));
    const __m512 big = _mm512_set1_ps(0x1p14f);
    const __m512i small = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(mag), big), big));
    const __mmask16 is_normal = _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(0x3C800000));
    const __m512i r =
        _mm512_or_si512(_mm512_mask_blend_epi32(is_normal, small, normal), _mm512_andnot_si512(abs_mask, u));
    const __m512 rf = _mm512_castsi512_ps(r);
    _mm512_storeu_pd(codes + 16 * h, _mm512_cvtps_pd(_mm512_castps512_ps256(rf)));
    _mm512_storeu_pd(codes + 16 * h + 8,
                     _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(rf), 1))));
  }
  return true;
}

DSINFER_AVX512 void accumulate_block_scales(const float* partials, const float* xs, const float* ws, int64_t n,
                                            int64_t blocks, int rows, float* out) {
  static_assert(kRowGroup == 16, "one __m512 of rows");
  for (int64_t i = 0; i < n; ++i) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const __m512 p = _mm512_loadu_ps(partials + (i * blocks + b) * kRowGroup);
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(p, _mm512_set1_ps(xs[i * blocks + b])),
                                             _mm512_loadu_ps(ws + b * kRowGroup)));
    }
    _mm512_mask_storeu_ps(out + i * kRowGroup, static_cast<__mmask16>((1u << rows) - 1), acc);
  }
}

// e8m0 bytes, one per 32-bit lane -> their fp32 values, as e8m0_to_f32 gives them.
DSINFER_AVX512 inline __m512 e8m0x16_to_f32(__m512i e) {
  __m512i bits = _mm512_slli_epi32(e, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  bits =
      _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(0x7FC00000));
  return _mm512_castsi512_ps(bits);
}

DSINFER_AVX512 void block_scales(const uint8_t* scales, int64_t row_stride, int rows, int64_t blocks, float* ws) {
  static_assert(kRowGroup == 16, "one __m512 of rows");
  int64_t b = 0;
  if (row_stride == 0) {  // one scale row for the group: each block's scale in every lane
    for (; b + 16 <= blocks; b += 16) {
      const __m512 v =
          e8m0x16_to_f32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + b))));
      for (int j = 0; j < 16; ++j)
        _mm512_storeu_ps(ws + (b + j) * kRowGroup, _mm512_permutexvar_ps(_mm512_set1_epi32(j), v));
    }
    for (; b < blocks; ++b) _mm512_storeu_ps(ws + b * kRowGroup, _mm512_set1_ps(e8m0_to_f32(scales[b])));
    return;
  }
  // A scale per row: one gather reads 4 consecutive block scales of each of the 16 rows. Lanes of
  // missing rows get 1.0 (their partials are stale; a tiny scale could make them subnormal).
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(static_cast<int32_t>(row_stride)));
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; b + 4 <= blocks; b += 4) {
    const __m512i four = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, offsets, scales + b, 1);
    for (int j = 0; j < 4; ++j) {
      const __m512i e = _mm512_and_si512(_mm512_srli_epi32(four, 8 * j), _mm512_set1_epi32(0xFF));
      _mm512_storeu_ps(ws + (b + j) * kRowGroup, _mm512_mask_blend_ps(live, one, e8m0x16_to_f32(e)));
    }
  }
  for (; b < blocks; ++b)
    for (int l = 0; l < kRowGroup; ++l)
      ws[b * kRowGroup + l] = l < rows ? e8m0_to_f32(scales[l * row_stride + b]) : 1.0f;
}

}  // namespace dsinfer::cpu::avx512
