// Block dot products: dispatch, activation layouts, and the portable and AVX2 kernels (AVX-512 in
// block_dot_avx512.cc). The AVX2 path turns e4m3 codes into floats with the shift-and-scale trick
// (code bits placed in an fp32's low exponent/mantissa, times 2^120: subnormals come out right),
// multiplies exactly in fp32 and sums in double (exact: < 40 bits of span); fp4 codes become
// small integers through a 16-entry byte shuffle and are summed exactly in int32.
#include "backends/cpu/block_dot.h"

#include <immintrin.h>

#include <cmath>
#include <string_view>
#include <vector>

#include "backends/cpu/block_dot_avx512.h"
#include "core/float_formats.h"
#include "core/quant.h"

namespace dsinfer::cpu {

double fp8_block_sum_exact(const uint8_t* w, const double* x) {
  double s = 0;
  for (int j = 0; j < 32; ++j) s += x[j] * e4m3_to_f32(w[j]);  // exact: products and sum fit a double
  return s;
}

namespace {

constexpr int kBlock = 32;

__attribute__((target("avx2,fma"))) inline __m256 e4m3x8_to_f32(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7F)), 20);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  const __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p120f));
  return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}

// Subnormal e4m3 codes (exponent 0, mantissa != 0) decode to subnormal floats, which cost the FPU
// a microcode assist each (measured: 10x slower on random bytes). Trained weights hold few, so
// blocks that have one take the exact scalar sum instead.
__attribute__((target("avx2,fma"))) bool has_subnormal_e4m3x32(const uint8_t* p) {
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i zero = _mm256_setzero_si256();
  const __m256i exp0 = _mm256_cmpeq_epi8(_mm256_and_si256(c, _mm256_set1_epi8(0x78)), zero);
  const __m256i man0 = _mm256_cmpeq_epi8(_mm256_and_si256(c, _mm256_set1_epi8(0x07)), zero);
  return _mm256_movemask_epi8(_mm256_andnot_si256(man0, exp0)) != 0;
}

__attribute__((target("avx2,fma"))) void e4m3x32_to_f32_scaled(const uint8_t* w, float s, float* out) {
  for (int q = 0; q < 4; ++q) _mm256_storeu_ps(out + 8 * q, _mm256_mul_ps(e4m3x8_to_f32(w + 8 * q), _mm256_set1_ps(s)));
}

__attribute__((target("avx2,fma"))) void fp8_avx2(const uint8_t* w, int64_t k, const double* x, int64_t n,
                                                  float* partials, int64_t stride) {
  const int64_t blocks = k / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    if (has_subnormal_e4m3x32(w + b * kBlock)) {
      for (int64_t i = 0; i < n; ++i)
        partials[(i * blocks + b) * stride] =
            static_cast<float>(fp8_block_sum_exact(w + b * kBlock, x + i * k + b * kBlock));
      continue;
    }
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
      partials[(i * blocks + b) * stride] = static_cast<float>(_mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h))));
    }
  }
}

// Eight 32-element blocks at a time: weights as int16 (2 * e2m1), activations split into int16
// halves x = 512 * hi + lo, pairwise products summed by madd, the eight block sums gathered into
// one vector by a horizontal-add tree. Every sum stays an exact int32.
__attribute__((target("avx2,fma"))) void fp4_avx2(const uint8_t* w, int64_t k, const int16_t* xhi, const int16_t* xlo,
                                                  int64_t n, float* partials, int64_t stride) {
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
      for (int q = 0; q < nb; ++q) partials[(i * blocks + b8 + q) * stride] = out[q];
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

void fp8_scalar(const uint8_t* w, int64_t k, const double* x, int64_t n, float* partials, int64_t stride) {
  const int64_t blocks = (k + kBlock - 1) / kBlock;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < blocks; ++b) {
      double s = 0;
      for (int64_t j = b * kBlock; j < std::min(k, (b + 1) * kBlock); ++j) s += x[i * k + j] * e4m3_to_f32(w[j]);
      partials[(i * blocks + b) * stride] = static_cast<float>(s);
    }
}

void fp4_scalar(const uint8_t* w, int64_t k, const int32_t* x, int64_t n, float* partials, int64_t stride) {
  const int64_t blocks = (k + kBlock - 1) / kBlock;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t s = 0;  // |x| <= 448 * 512, |2w| <= 12: 32 terms stay below 2^31
      for (int64_t j = b * kBlock; j < std::min(k, (b + 1) * kBlock); ++j)
        s += x[i * k + j] * static_cast<int32_t>(2 * e2m1_to_f32(e2m1_packed_code(w, j)));
      partials[(i * blocks + b) * stride] = static_cast<float>(s) * 0x1p-10f;
    }
}

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

}  // namespace

Isa best_isa(Isa cap) {
  static const bool has_avx512 = cpu_has(Isa::kAvx512), has_avx2 = cpu_has(Isa::kAvx2);
  if (cap >= Isa::kAvx512 && has_avx512) return Isa::kAvx512;
  if (cap >= Isa::kAvx2 && has_avx2) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa isa_by_name(const char* name) {
  const std::string_view v = name;
  return v == "scalar" ? Isa::kScalar : v == "avx2" ? Isa::kAvx2 : Isa::kAvx512;
}

void act_quant_row(Isa isa, const uint16_t* x, int64_t k, double* codes, float* scales) {
  for (int64_t b = 0, k0 = 0; k0 < k; ++b, k0 += kBlock) {
    const int64_t len = std::min<int64_t>(kBlock, k - k0);
    if (isa == Isa::kAvx512 && len == kBlock && avx512::act_quant_block(x + k0, codes + k0, &scales[b])) continue;
    float amax = 0;
    for (int64_t j = 0; j < len; ++j) amax = std::fmax(amax, std::fabs(bf16_to_f32(x[k0 + j])));
    const float s = act_quant_scale(amax);
    scales[b] = s;
    for (int64_t j = 0; j < len; ++j)
      codes[k0 + j] = round_to_e4m3(std::fmin(std::fmax(bf16_to_f32(x[k0 + j]) / s, -kE4M3Max), kE4M3Max));
  }
}

void prepare_block_activations(Isa isa, bool fp4, const double* codes, int64_t n, int64_t k, BlockActivations& out) {
  if (isa == Isa::kAvx512 && k % (8 * kBlock) != 0) isa = Isa::kAvx2;
  if (isa == Isa::kAvx2 && k % kBlock != 0) isa = Isa::kScalar;
  out.isa = isa;
  out.fp4 = fp4;
  out.n = n;
  out.k = k;
  out.blocks = (k + kBlock - 1) / kBlock;
  const int64_t count = n * k;
  if (!fp4) {
    const double scale = isa == Isa::kAvx512 ? 0x1p1000 : 1.0;
    out.f64.resize(count);
    for (int64_t j = 0; j < count; ++j) out.f64[j] = codes[j] * scale;
    return;
  }
  out.i32.resize(count);
  for (int64_t j = 0; j < count; ++j) out.i32[j] = static_cast<int32_t>(codes[j] * 512.0);
  if (isa == Isa::kScalar) return;
  out.hi.resize(count);
  out.lo.resize(count);
  for (int64_t j = 0; j < count; ++j) {
    // AVX-512 reads each 64-element chunk as its 32 even elements, then its 32 odd ones (the order
    // in which the packed nibbles come out of the shuffle).
    const int64_t c = j % 64, dst = isa == Isa::kAvx512 ? j - c + (c % 2) * 32 + c / 2 : j;
    out.hi[dst] = static_cast<int16_t>(out.i32[j] >> 9);  // floor: x = 512 * hi + lo with 0 <= lo < 512
    out.lo[dst] = static_cast<int16_t>(out.i32[j] & 511);
  }
}

void block_partials(const BlockActivations& x, const uint8_t* w, float* partials, int64_t stride) {
  switch (x.isa) {
    case Isa::kAvx512:
      if (x.fp4) return avx512::fp4_partials(w, x.k, x.hi.data(), x.lo.data(), x.n, partials, stride);
      return avx512::fp8_partials(w, x.k, x.f64.data(), x.n, partials, stride);
    case Isa::kAvx2:
      if (x.fp4) return fp4_avx2(w, x.k, x.hi.data(), x.lo.data(), x.n, partials, stride);
      return fp8_avx2(w, x.k, x.f64.data(), x.n, partials, stride);
    case Isa::kScalar:
      if (x.fp4) return fp4_scalar(w, x.k, x.i32.data(), x.n, partials, stride);
      return fp8_scalar(w, x.k, x.f64.data(), x.n, partials, stride);
  }
}

void block_scales(Isa isa, const uint8_t* scales, int64_t row_stride, int rows, int64_t blocks, float* ws) {
  if (isa == Isa::kAvx512) return avx512::block_scales(scales, row_stride, rows, blocks, ws);
  for (int l = 0; l < rows; ++l)
    for (int64_t b = 0; b < blocks; ++b) ws[b * kRowGroup + l] = e8m0_to_f32(scales[l * row_stride + b]);
}

void accumulate_block_scales(Isa isa, const float* partials, const float* xs, const float* ws, int64_t n,
                             int64_t blocks, int rows, float* out) {
  if (isa == Isa::kAvx512) return avx512::accumulate_block_scales(partials, xs, ws, n, blocks, rows, out);
  for (int64_t i = 0; i < n; ++i) {
    float acc[kRowGroup] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const float sx = xs[i * blocks + b];
      for (int l = 0; l < kRowGroup; ++l)
        acc[l] = acc[l] + (partials[(i * blocks + b) * kRowGroup + l] * sx) * ws[b * kRowGroup + l];
    }
    for (int l = 0; l < rows; ++l) out[i * kRowGroup + l] = acc[l];
  }
}

double dot_f32_f64(Isa isa, const float* w, const double* x, int64_t k) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::dot_f32_f64(w, x, k);
    case Isa::kAvx2:
      return dot_avx2(w, x, k);
    case Isa::kScalar:
      break;
  }
  double acc = 0;
  for (int64_t j = 0; j < k; ++j) acc += double{w[j]} * x[j];
  return acc;
}

double dot_e4m3_f64(Isa isa, const uint8_t* w, const uint8_t* block_scales, const double* x, int64_t k) {
  if (isa == Isa::kAvx512 && k % (8 * kBlock) == 0) return avx512::dot_e4m3_f64(w, block_scales, x, k);
  thread_local std::vector<float> row;  // called per weight row: no allocation each time
  row.resize(k);
  e4m3_row_to_f32(isa, w, block_scales, k, row.data());
  return dot_f32_f64(isa, row.data(), x, k);
}

void e4m3_row_to_f32(Isa isa, const uint8_t* w, const uint8_t* block_scales, int64_t k, float* out) {
  for (int64_t b = 0; b * kBlock < k; ++b) {
    const float s = e8m0_to_f32(block_scales[b]);
    const int64_t j0 = b * kBlock, j1 = std::min(k, j0 + kBlock);
    if (j1 - j0 == kBlock && isa != Isa::kScalar && !has_subnormal_e4m3x32(w + j0)) {
      e4m3x32_to_f32_scaled(w + j0, s, out + j0);
      continue;
    }
    for (int64_t j = j0; j < j1; ++j) out[j] = e4m3_to_f32(w[j]) * s;
  }
}

}  // namespace dsinfer::cpu
