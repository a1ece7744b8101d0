// Every CpuBackend op against a simple loop written here, on random inputs with odd sizes.
// Exact ops are compared bit for bit; the others within the stated tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>

#include "backends/cpu/block_dot.h"
#include "backends/cpu/cpu_backend.h"
#include "core/float_formats.h"
#include "core/quant.h"
#include "ops/device_array.h"
#include "test_util.h"

namespace dsinfer {
namespace {

TensorView view(const void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(const_cast<void*>(p), t, shape);
}
float f(uint16_t b) {
  return bf16_to_f32(b);
}
std::vector<float> random_f32(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}
int ulps(uint16_t a, uint16_t b) {
  const auto key = [](uint16_t x) { return x & 0x8000 ? -static_cast<int>(x & 0x7FFF) : static_cast<int>(x); };
  return std::abs(key(a) - key(b));
}

class CpuOps : public ::testing::Test {
 protected:
  CpuBackend be{2};
};

// Block-scaled GEMM reference: integer partials (codes x 2^9 are integers), one fp32 rounding.
std::vector<uint16_t> reference_block_gemm(const std::vector<uint16_t>& x, int64_t n, int64_t k, int64_t o,
                                           const std::vector<uint8_t>& w, const std::vector<uint8_t>& ws, bool fp4) {
  std::vector<uint8_t> xc(n * k), xs(n * k / 32);
  for (int64_t i = 0; i < n; ++i)
    act_quant(std::span(x).subspan(i * k, k), std::span(xc).subspan(i * k, k),
              std::span(xs).subspan(i * k / 32, k / 32));
  std::vector<uint16_t> out(n * o);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < o; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < k / 32; ++b) {
        long long sum = 0;  // exact: both factors are multiples of 2^-10 below 2^9
        for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
          const double wv = fp4 ? e2m1_to_f32(e2m1_packed_code(&w[r * k / 2], j)) : e4m3_to_f32(w[r * k + j]);
          sum += std::llround(e4m3_to_f32(xc[i * k + j]) * 512.0) * std::llround(wv * 1024.0);
        }
        const float partial = static_cast<float>(std::ldexp(static_cast<double>(sum), -19));
        const float sw = e8m0_to_f32(fp4 ? ws[r * (k / 32) + b] : ws[(r / 32) * ((k + 31) / 32) + b]);
        acc = acc + (partial * e8m0_to_f32(xs[i * k / 32 + b])) * sw;
      }
      out[i * o + r] = f32_to_bf16(acc);
    }
  return out;
}

TEST_F(CpuOps, Fp8AndFp4LinearAreExact) {
  const int64_t n = 3, k = 96, o = 45;  // 45 outputs: a partial 32-row scale block
  const std::vector<uint16_t> x = testing::random_bf16(n * k, 1);
  std::mt19937 rng(2);
  for (bool fp4 : {false, true}) {
    std::vector<uint8_t> w(fp4 ? o * k / 2 : o * k), ws(fp4 ? o * k / 32 : ((o + 31) / 32) * (k / 32));
    for (auto& b : w) b = static_cast<uint8_t>(rng() & (fp4 ? 0xFF : 0x7F)) | (fp4 ? 0 : (rng() & 0x80));
    for (auto& b : w)
      if (!fp4 && (b & 0x7F) == 0x7F) b = 0x7E;  // no NaN codes
    for (auto& b : ws) b = static_cast<uint8_t>(110 + rng() % 14);
    LinearWeight lw{fp4 ? LinearFormat::kFp4 : LinearFormat::kFp8, o, k,
                    view(w.data(), DType::kU8, {o, fp4 ? k / 2 : k}),
                    view(ws.data(), DType::kU8, {fp4 ? o : (o + 31) / 32, k / 32})};
    std::vector<uint16_t> out(n * o);
    be.linear({view(x.data(), DType::kBF16, {n, k}), &lw, view(out.data(), DType::kBF16, {n, o})});
    EXPECT_EQ(out, reference_block_gemm(x, n, k, o, w, ws, fp4)) << (fp4 ? "fp4" : "fp8");
  }
}

// A grouped call: inputs shared by pointer and by content (the routed experts of one token),
// distinct inputs, fp8 and fp4 weights and a dense op in one list; each output as if alone.
TEST_F(CpuOps, GroupedLinearEqualsEachOpAlone) {
  const int64_t n = 2, k = 256, o = 40;
  const std::vector<uint16_t> x0 = testing::random_bf16(n * k, 11), x1 = x0, x2 = testing::random_bf16(n * k, 12);
  std::mt19937 rng(13);
  std::vector<std::vector<uint8_t>> w(4), ws(4);
  std::vector<LinearWeight> lw;
  for (int e = 0; e < 4; ++e) {
    const bool fp4 = e % 2 == 1;
    w[e].resize(fp4 ? o * k / 2 : o * k);
    ws[e].resize(fp4 ? o * k / 32 : ((o + 31) / 32) * (k / 32));
    for (auto& b : w[e]) b = static_cast<uint8_t>(rng());
    for (auto& b : w[e])
      if (!fp4 && (b & 0x7F) == 0x7F) b = 0x7E;  // no NaN codes
    for (auto& b : ws[e]) b = static_cast<uint8_t>(110 + rng() % 14);
    lw.push_back({fp4 ? LinearFormat::kFp4 : LinearFormat::kFp8, o, k,
                  view(w[e].data(), DType::kU8, {o, fp4 ? k / 2 : k}),
                  view(ws[e].data(), DType::kU8, {fp4 ? o : (o + 31) / 32, k / 32})});
  }
  const std::vector<uint16_t> wd = testing::random_bf16(o * k, 14);
  const LinearWeight dense{LinearFormat::kBf16, o, k, view(wd.data(), DType::kBF16, {o, k}), {}};
  const std::vector<const std::vector<uint16_t>*> xs = {&x0, &x0, &x1, &x2, &x1};
  const std::vector<const LinearWeight*> ws_of = {&lw[0], &lw[1], &lw[2], &lw[3], &dense};
  std::vector<std::vector<uint16_t>> grouped(5, std::vector<uint16_t>(n * o)), alone = grouped;
  std::vector<LinearArgs> ops;
  for (size_t j = 0; j < 5; ++j)
    ops.push_back({view(xs[j]->data(), DType::kBF16, {n, k}), ws_of[j], view(grouped[j].data(), DType::kBF16, {n, o})});
  be.grouped_linear({ops});
  for (size_t j = 0; j < 5; ++j) {
    be.linear({view(xs[j]->data(), DType::kBF16, {n, k}), ws_of[j], view(alone[j].data(), DType::kBF16, {n, o})});
    EXPECT_EQ(grouped[j], alone[j]) << "op " << j;
  }
  for (size_t j = 0; j < 4; ++j)
    EXPECT_EQ(grouped[j], reference_block_gemm(*xs[j], n, k, o, w[j], ws[j], j % 2 == 1)) << "op " << j;
}

TEST_F(CpuOps, DenseLinearFormats) {
  const int64_t n = 5, k = 67, o = 33;
  const std::vector<uint16_t> x = testing::random_bf16(n * k, 3), w = testing::random_bf16(o * k, 4);
  LinearWeight lw{LinearFormat::kBf16, o, k, view(w.data(), DType::kBF16, {o, k}), {}};
  std::vector<uint16_t> out(n * o);
  std::vector<float> out32(n * o);
  be.linear({view(x.data(), DType::kBF16, {n, k}), &lw, view(out.data(), DType::kBF16, {n, o})});
  lw.format = LinearFormat::kBf16AsF32;
  be.linear({view(x.data(), DType::kBF16, {n, k}), &lw, view(out32.data(), DType::kF32, {n, o})});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < o; ++r) {
      long double s = 0;
      for (int64_t j = 0; j < k; ++j) s += static_cast<long double>(f(x[i * k + j])) * f(w[r * k + j]);
      EXPECT_EQ(out32[i * o + r], static_cast<float>(s));
      EXPECT_EQ(out[i * o + r], f32_to_bf16(static_cast<float>(s)));
    }
}

TEST_F(CpuOps, RmsNormAndSwiglu) {
  const int64_t n = 3, d = 1031;  // n * d > 2 * 1024: the element-wise ops split over threads
  const std::vector<uint16_t> x = testing::random_bf16(n * d, 5), w = testing::random_bf16(d, 6);
  std::vector<uint16_t> out(n * d);
  be.rms_norm({view(x.data(), DType::kBF16, {n, d}), view(w.data(), DType::kBF16, {d}), 1e-20,
               view(out.data(), DType::kBF16, {n, d})});
  for (int64_t i = 0; i < n; ++i) {
    float ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += f(x[i * d + j]) * f(x[i * d + j]);
    const float r = 1.0f / std::sqrt(ss / d + 1e-20f);
    for (int64_t j = 0; j < d; ++j) EXPECT_LE(ulps(out[i * d + j], f32_to_bf16(f(x[i * d + j]) * r * f(w[j]))), 1);
  }
  const std::vector<uint16_t> g = testing::random_bf16(n * d, 7, 8.0f), u = testing::random_bf16(n * d, 8, 8.0f);
  const std::vector<float> rw = {0.5f, 1.25f, 2.0f};
  be.swiglu({view(g.data(), DType::kBF16, {n, d}), view(u.data(), DType::kBF16, {n, d}),
             view(rw.data(), DType::kF32, {n}), 10.0f, view(out.data(), DType::kBF16, {n, d})});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const float gv = std::min(f(g[i * d + j]), 10.0f), uv = std::clamp(f(u[i * d + j]), -10.0f, 10.0f);
      EXPECT_EQ(out[i * d + j], f32_to_bf16(gv / (1.0f + std::exp(-gv)) * uv * rw[i])) << i << " " << j;
    }
}

TEST_F(CpuOps, RopeForwardAndInverse) {
  const int64_t n = 3, heads = 5, d = 24, half = 4;
  std::vector<uint16_t> x = testing::random_bf16(n * heads * d, 9);
  const std::vector<uint16_t> orig = x;
  const std::vector<float> c = random_f32(n * half, 10), s = random_f32(n * half, 11);
  be.rope({view(x.data(), DType::kBF16, {n, heads, d}), view(c.data(), DType::kF32, {n, half}),
           view(s.data(), DType::kF32, {n, half}), false});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < d; ++j) {
        const int64_t e = (i * heads + h) * d + j;
        if (j < d - 2 * half) {
          EXPECT_EQ(x[e], orig[e]);  // only the last 2*half dims rotate
          continue;
        }
        const int64_t pair = (j - (d - 2 * half)) / 2;
        const float re = f(orig[e - (j % 2)]), im = f(orig[e - (j % 2) + 1]);
        const float cs = c[i * half + pair], sn = s[i * half + pair];
        const float want = j % 2 == 0 ? re * cs - im * sn : re * sn + im * cs;
        EXPECT_EQ(x[e], f32_to_bf16(want));
      }
}

TEST_F(CpuOps, HyperConnectionOps) {
  const int64_t n = 3, hc = 4, dim = 293, mix = (2 + hc) * hc;  // n * dim > 2 * 256: hc_post splits
  const std::vector<uint16_t> x = testing::random_bf16(n * hc * dim, 12), sub = testing::random_bf16(n * dim, 13);
  const std::vector<float> fn = random_f32(mix * hc * dim, 14, -0.035f, 0.035f), base = random_f32(mix, 15),
                           scale = {0.9f, 1.1f, 1.3f};
  std::vector<float> pre(n * hc), post(n * hc), comb(n * hc * hc);
  be.hc_mixes({view(x.data(), DType::kBF16, {n, hc, dim}), view(fn.data(), DType::kF32, {mix, hc * dim}),
               view(scale.data(), DType::kF32, {3}), view(base.data(), DType::kF32, {mix}), 1e-20, 1e-6, 20,
               view(pre.data(), DType::kF32, {n, hc}), view(post.data(), DType::kF32, {n, hc}),
               view(comb.data(), DType::kF32, {n, hc, hc})});
  for (int64_t t = 0; t < n; ++t) {
    double ss = 0;
    for (int64_t j = 0; j < hc * dim; ++j) ss += double{f(x[t * hc * dim + j])} * f(x[t * hc * dim + j]);
    const double r = 1 / std::sqrt(ss / (hc * dim));
    std::vector<double> m(mix);
    for (int64_t o = 0; o < mix; ++o) {
      for (int64_t j = 0; j < hc * dim; ++j) m[o] += double{fn[o * hc * dim + j]} * f(x[t * hc * dim + j]);
      m[o] *= r;
    }
    for (int64_t j = 0; j < hc; ++j) {
      EXPECT_NEAR(pre[t * hc + j], 1 / (1 + std::exp(-(m[j] * scale[0] + base[j]))) + 1e-6, 1e-6);
      EXPECT_NEAR(post[t * hc + j], 2 / (1 + std::exp(-(m[hc + j] * scale[1] + base[hc + j]))), 2e-6);
    }
    // Sinkhorn output: columns sum to ~1 (it ends on a column normalisation), rows close to 1.
    for (int64_t j = 0; j < hc; ++j) {
      double col = 0, row = 0;
      for (int64_t i = 0; i < hc; ++i) col += comb[t * hc * hc + i * hc + j], row += comb[t * hc * hc + j * hc + i];
      EXPECT_NEAR(col, 1.0, 1e-5);
      EXPECT_NEAR(row, 1.0, 1e-3);
    }
  }
  // One token alone (fewer tokens than threads: the dots are split by rows) gives the same bits.
  std::vector<float> pre1(hc), post1(hc), comb1(hc * hc);
  be.hc_mixes({view(&x[hc * dim], DType::kBF16, {1, hc, dim}), view(fn.data(), DType::kF32, {mix, hc * dim}),
               view(scale.data(), DType::kF32, {3}), view(base.data(), DType::kF32, {mix}), 1e-20, 1e-6, 20,
               view(pre1.data(), DType::kF32, {1, hc}), view(post1.data(), DType::kF32, {1, hc}),
               view(comb1.data(), DType::kF32, {1, hc, hc})});
  EXPECT_EQ(pre1, std::vector<float>(&pre[hc], &pre[2 * hc]));
  EXPECT_EQ(post1, std::vector<float>(&post[hc], &post[2 * hc]));
  EXPECT_EQ(comb1, std::vector<float>(&comb[hc * hc], &comb[2 * hc * hc]));
  std::vector<uint16_t> y(n * dim), z(n * hc * dim);
  be.hc_pre({view(x.data(), DType::kBF16, {n, hc, dim}), view(pre.data(), DType::kF32, {n, hc}),
             view(y.data(), DType::kBF16, {n, dim})});
  be.hc_post({view(sub.data(), DType::kBF16, {n, dim}), view(x.data(), DType::kBF16, {n, hc, dim}),
              view(post.data(), DType::kF32, {n, hc}), view(comb.data(), DType::kF32, {n, hc, hc}),
              view(z.data(), DType::kBF16, {n, hc, dim})});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < dim; ++d) {
      float acc = 0;
      for (int64_t c = 0; c < hc; ++c) acc += pre[t * hc + c] * f(x[(t * hc + c) * dim + d]);
      EXPECT_EQ(y[t * dim + d], f32_to_bf16(acc));
      for (int64_t j = 0; j < hc; ++j) {
        float s = 0;
        for (int64_t i = 0; i < hc; ++i) s += comb[t * hc * hc + i * hc + j] * f(x[(t * hc + i) * dim + d]);
        EXPECT_EQ(z[(t * hc + j) * dim + d], f32_to_bf16(post[t * hc + j] * f(sub[t * dim + d]) + s));
      }
    }
}

TEST_F(CpuOps, SparseAttentionWithSink) {
  const int64_t n = 2, heads = 3, d = 40, nw = 70, nc = 9, k = 83;  // two 64-slot blocks, one partial
  const std::vector<uint16_t> q = testing::random_bf16(n * heads * d, 16), win = testing::random_bf16(nw * d, 17),
                              cmp = testing::random_bf16(nc * d, 18);
  const std::vector<float> sink = {0.3f, -1.0f, 2.0f};
  std::vector<int32_t> idx(n * k);
  std::mt19937 rng(19);
  for (auto& v : idx) v = rng() % 5 == 0 ? -1 : static_cast<int32_t>(rng() % (nw + nc));
  std::fill(idx.begin() + k, idx.end(), -1);  // the second query sees nothing: output 0
  std::vector<uint16_t> out(n * heads * d);
  const float scale = 1 / std::sqrt(40.0f);
  be.sparse_attn({view(q.data(), DType::kBF16, {n, heads, d}), view(win.data(), DType::kBF16, {nw, d}),
                  view(cmp.data(), DType::kBF16, {nc, d}), view(idx.data(), DType::kI32, {n, k}),
                  view(sink.data(), DType::kF32, {heads}), scale, view(out.data(), DType::kBF16, {n, heads, d})});
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> s;
    std::vector<const uint16_t*> rows;
    for (int64_t j = 0; j < k; ++j) {
      if (idx[j] < 0) continue;
      rows.push_back(idx[j] < nw ? &win[idx[j] * d] : &cmp[(idx[j] - nw) * d]);
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += double{f(q[h * d + c])} * f(rows.back()[c]);
      s.push_back(dot * scale);
    }
    const double m = *std::max_element(s.begin(), s.end());
    double den = std::exp(sink[h] - m);
    for (double v : s) den += std::exp(v - m);
    for (int64_t c = 0; c < d; ++c) {
      double num = 0;
      for (size_t j = 0; j < s.size(); ++j) num += std::exp(s[j] - m) * f(rows[j][c]);
      EXPECT_NEAR(f(out[h * d + c]), num / den, 4e-3 * std::max(1.0, std::fabs(num / den))) << h << " " << c;
      EXPECT_EQ(out[(heads + h) * d + c], 0);
    }
  }
}

TEST_F(CpuOps, IndexerScoresRoundWhereTheReferenceDoes) {
  const int64_t n = 2, h = 3, d = 32, T = 11;
  const std::vector<uint16_t> q = testing::random_bf16(n * h * d, 20), keys = testing::random_bf16(T * d, 21),
                              w = testing::random_bf16(n * h, 22);
  const std::vector<int32_t> visible = {T, 4};
  std::vector<float> out(n * T);
  const float scale = 0.3f;  // each weight becomes bf16(w * scale) first
  be.indexer_scores({view(q.data(), DType::kBF16, {n, h, d}), view(keys.data(), DType::kBF16, {T, d}),
                     view(w.data(), DType::kBF16, {n, h}), view(visible.data(), DType::kI32, {n}),
                     view(out.data(), DType::kF32, {n, T}), PagedTable{}, scale});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t tau = 0; tau < T; ++tau) {
      if (tau >= visible[t]) {
        EXPECT_TRUE(std::isinf(out[t * T + tau]) && out[t * T + tau] < 0);
        continue;
      }
      float sum = 0;
      for (int64_t hh = 0; hh < h; ++hh) {
        float dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += f(q[(t * h + hh) * d + c]) * f(keys[tau * d + c]);
        const float dv = std::max(round_to_bf16(dot), 0.0f);
        sum += round_to_bf16(dv * round_to_bf16(f(w[t * h + hh]) * scale));
      }
      EXPECT_LE(ulps(f32_to_bf16(out[t * T + tau]), f32_to_bf16(sum)), 1) << t << " " << tau;
    }

  // The same keys in a paged pool of blocks of 4 rows, read through a block table: same bits.
  const int64_t per = 4, nb = (T + per - 1) / per;
  std::vector<uint16_t> pool(2 * nb * per * d, 0x7FC0);  // NaN rows where no key is
  std::vector<int32_t> table(nb);
  for (int64_t j = 0; j < nb; ++j) table[j] = static_cast<int32_t>(2 * nb - 1 - 2 * j);
  for (int64_t tau = 0; tau < T; ++tau)
    std::copy(&keys[tau * d], &keys[(tau + 1) * d], &pool[(table[tau / per] * per + tau % per) * d]);
  std::vector<float> paged(n * T);
  const TensorView pool_view = view(pool.data(), DType::kBF16, {2 * nb * per, d});
  be.indexer_scores({view(q.data(), DType::kBF16, {n, h, d}),
                     pool_view,
                     view(w.data(), DType::kBF16, {n, h}),
                     view(visible.data(), DType::kI32, {n}),
                     view(paged.data(), DType::kF32, {n, T}),
                     {view(table.data(), DType::kI32, {nb}), per, 0},
                     scale});
  EXPECT_EQ(paged, out);

  // A table a query row (a decode batch): row 1's keys lie elsewhere in the pool, after a base.
  std::vector<uint16_t> pool2(pool.size() + 8 * d, 0x7FC0);
  std::vector<int32_t> tables(2 * nb);
  for (int64_t j = 0; j < nb; ++j) tables[j] = table[j], tables[nb + j] = static_cast<int32_t>(2 * j);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t tau = 0; tau < T; ++tau)
      std::copy(&keys[tau * d], &keys[(tau + 1) * d], &pool2[(8 + tables[i * nb + tau / per] * per + tau % per) * d]);
  std::vector<float> per_row(n * T);
  be.indexer_scores({view(q.data(), DType::kBF16, {n, h, d}),
                     view(pool2.data(), DType::kBF16, {static_cast<int64_t>(pool2.size()) / d, d}),
                     view(w.data(), DType::kBF16, {n, h}),
                     view(visible.data(), DType::kI32, {n}),
                     view(per_row.data(), DType::kF32, {n, T}),
                     {view(tables.data(), DType::kI32, {n, nb}), per, 8},
                     scale});
  EXPECT_EQ(per_row, out);
}

TEST_F(CpuOps, RouterSqrtSoftplusTopkAndWeights) {
  const int64_t n = 3, dim = 45, e = 10, k = 6;
  std::vector<uint16_t> x(n * dim), w(e * dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = f32_to_bf16(random_f32(x.size(), 23, -2, 2)[i]);
  for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(random_f32(w.size(), 24, -0.5f, 0.5f)[i]);
  const std::vector<float> bias = random_f32(e, 25, -0.2f, 0.2f);
  std::vector<int32_t> idx(n * k);
  std::vector<float> wts(n * k);
  be.router({view(x.data(), DType::kBF16, {n, dim}),
             view(w.data(), DType::kBF16, {e, dim}),
             view(bias.data(), DType::kF32, {e}),
             {},
             {},
             RouterScore::kSqrtSoftplus,
             1.0,
             1.5,
             true,
             false,
             view(idx.data(), DType::kI32, {n, k}),
             view(wts.data(), DType::kF32, {n, k})});
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> s(e);
    for (int64_t j = 0; j < e; ++j) {
      double z = 0;
      for (int64_t c = 0; c < dim; ++c) z += double{f(x[t * dim + c])} * f(w[j * dim + c]);
      s[j] = std::sqrt(z > 20 ? z : std::log1p(std::exp(z)));  // torch's softplus threshold
    }
    std::vector<int> order(e);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return s[a] + bias[a] > s[b] + bias[b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += s[order[j]];
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(idx[t * k + j], order[j]);
      EXPECT_NEAR(wts[t * k + j], s[order[j]] / sum * 1.5, 1e-5);
    }
  }
}

// Every code and scale byte, through a table of the real values: each output is the table's entry
// for its code and its 32-block's scale, rows strided as views allow.
TEST_F(CpuOps, DecodeRowsLooksUpEachCodeByItsBlocksScale) {
  std::vector<uint16_t> values(256 * 256);
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 256; ++c)
      values[s * 256 + c] = f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(c)) * e8m0_to_f32(static_cast<uint8_t>(s)));
  const int64_t n = 300, d = 64, stride = 80;
  std::mt19937 rng(31);
  std::vector<uint8_t> codes(n * stride), scales(n * 2);
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  for (auto& s : scales) s = static_cast<uint8_t>(rng());
  std::vector<uint16_t> out(n * d);
  TensorView cv = view(codes.data(), DType::kU8, {n, d});
  cv.stride[0] = stride;
  be.decode_rows({cv, view(scales.data(), DType::kU8, {n, 2}), view(values.data(), DType::kBF16, {256 * 256}),
                  view(out.data(), DType::kBF16, {n, d})});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const float want = e4m3_to_f32(codes[i * stride + j]) * e8m0_to_f32(scales[i * 2 + j / 32]);
      const uint16_t got = out[i * d + j];
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(f(got))) << i << "," << j;
      else
        ASSERT_EQ(got, f32_to_bf16(want)) << i << "," << j;
    }
}

TEST_F(CpuOps, CompressPoolAndEngramGate) {
  const int64_t g = 3, d = 19;
  const std::vector<float> kv = random_f32(g * 2 * d, 26, -3, 3), sc = random_f32(g * 2 * d, 27, -3, 3);
  std::vector<uint16_t> pooled(g * d);
  be.compress_pool({view(kv.data(), DType::kF32, {g, 2, d}), view(sc.data(), DType::kF32, {g, 2, d}),
                    view(pooled.data(), DType::kBF16, {g, d})});
  for (int64_t i = 0; i < g; ++i)
    for (int64_t c = 0; c < d; ++c) {
      const double a = sc[i * 2 * d + c], b = sc[i * 2 * d + d + c];
      const double wa = 1 / (1 + std::exp(b - a));
      EXPECT_LE(ulps(pooled[i * d + c],
                     f32_to_bf16(static_cast<float>(kv[i * 2 * d + c] * wa + kv[i * 2 * d + d + c] * (1 - wa)))),
                1);
    }
  const int64_t n = 2, hc = 4, dim = 33;
  std::vector<uint16_t> x = testing::random_bf16(n * hc * dim, 28);
  const std::vector<uint16_t> orig = x, ekv = testing::random_bf16(n * (hc + 1) * dim, 29);
  const std::vector<float> wgt = random_f32(hc * dim, 30, 0.5f, 1.5f);
  const std::vector<uint8_t> live = {1, 0};
  be.engram_gate({view(x.data(), DType::kBF16, {n, hc, dim}), view(ekv.data(), DType::kBF16, {n, (hc + 1) * dim}),
                  view(wgt.data(), DType::kF32, {hc, dim}), view(live.data(), DType::kU8, {n}), 1e-20});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < hc; ++c) {
      double hh = 0, kk = 0, dot = 0;
      for (int64_t j = 0; j < dim; ++j) {
        const double hv = f(orig[(t * hc + c) * dim + j]), kv2 = f(ekv[t * (hc + 1) * dim + c * dim + j]);
        hh += hv * hv, kk += kv2 * kv2, dot += hv * wgt[c * dim + j] * kv2;
      }
      const double v = dot / std::sqrt(hh / dim) / std::sqrt(kk / dim) / std::sqrt(double(dim));
      const double gate = live[t] ? 1 / (1 + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(v), 1e-6)), v))) : 0;
      for (int64_t j = 0; j < dim; ++j) {
        const double want = f(orig[(t * hc + c) * dim + j]) + gate * f(ekv[t * (hc + 1) * dim + hc * dim + j]);
        EXPECT_LE(ulps(x[(t * hc + c) * dim + j], f32_to_bf16(static_cast<float>(want))), 1);
      }
    }
}

}  // namespace
}  // namespace dsinfer

namespace dsinfer {
namespace {

// Every instruction set this CPU has gives the portable loops' partials and scale sums bit for
// bit, over every e4m3 / e2m1 code including subnormals and signed zeros.
// The dense views: fp8 rows decoded to fp32 equal the scalar decode for every code; the double
// dot products of the two vector paths are identical, and within rounding of the scalar one.
// The routed experts: each token's choices in ascending expert id, as the ops one token and one
// expert at a time give them, bit for bit (the grouping by expert only batches those rows).
TEST_F(CpuOps, RoutedExpertsAddEachTokensExpertsInIdOrder) {
  const int64_t experts = 10, dim = 64, ff = 32, n = 3, k = 4;
  std::mt19937 rng(41);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ExpertWeights> ew(experts);
  const auto fp4 = [&](int64_t out, int64_t in) {
    std::vector<uint8_t>& w = bytes.emplace_back(out * in / 2);  // `bytes` never reallocates (reserved)
    std::vector<uint8_t>& sc = bytes.emplace_back(out * (in / 32));
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    for (auto& b : sc) b = static_cast<uint8_t>(120 + rng() % 6);
    return LinearWeight{LinearFormat::kFp4, out, in, view(w.data(), DType::kU8, {out, in / 2}),
                        view(sc.data(), DType::kU8, {out, in / 32})};
  };
  bytes.reserve(6 * experts);  // the views point into these
  for (auto& e : ew) e.w1 = fp4(ff, dim), e.w3 = fp4(ff, dim), e.w2 = fp4(dim, ff);
  const std::vector<uint16_t> x = testing::random_bf16(n * dim, 42);
  const std::vector<int32_t> idx = {7, 2, 9, 0, 4, 8, 1, 5, 3, 6, 2, 1};
  const std::vector<float> wts = random_f32(n * k, 43, 0.1f, 0.9f);
  std::vector<float> acc(n * dim, 0.5f), want(n * dim, 0.5f);
  be.routed_experts({view(x.data(), DType::kBF16, {n, dim}), view(idx.data(), DType::kI32, {n, k}),
                     view(wts.data(), DType::kF32, {n, k}), ew, 10.0f, view(acc.data(), DType::kF32, {n, dim})});
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int64_t> order(k);
    for (int64_t j = 0; j < k; ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idx[t * k + a] < idx[t * k + b]; });
    for (const int64_t j : order) {
      const ExpertWeights& e = ew[idx[t * k + j]];
      std::vector<uint16_t> g(ff), u(ff), act(ff), o(dim);
      const TensorView xt = view(x.data() + t * dim, DType::kBF16, {1, dim});
      be.linear({xt, &e.w1, view(g.data(), DType::kBF16, {1, ff})});
      be.linear({xt, &e.w3, view(u.data(), DType::kBF16, {1, ff})});
      be.swiglu({view(g.data(), DType::kBF16, {1, ff}), view(u.data(), DType::kBF16, {1, ff}),
                 view(&wts[t * k + j], DType::kF32, {1}), 10.0f, view(act.data(), DType::kBF16, {1, ff})});
      be.linear({view(act.data(), DType::kBF16, {1, ff}), &e.w2, view(o.data(), DType::kBF16, {1, dim})});
      for (int64_t c = 0; c < dim; ++c) want[t * dim + c] += bf16_to_f32(o[c]);
    }
  }
  EXPECT_EQ(acc, want);
}

TEST_F(CpuOps, DeviceArrayResizeKeepsAndZeroes) {
  const std::vector<int32_t> host = {1, 2, 3, 4, 5};
  DeviceArray<int32_t> a(be, std::span<const int32_t>(host));
  a.resize(12);
  EXPECT_EQ(a.download(), (std::vector<int32_t>{1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0}));
  a.resize(2);
  a.resize(4);
  EXPECT_EQ(a.download(), (std::vector<int32_t>{1, 2, 0, 0}));
}

TEST(BlockDot, DenseRowsAndDots) {
  const int64_t k = 2 * 256 + 40;
  std::mt19937 rng(5);
  std::vector<uint8_t> w(k), scales(k / 32 + 1);
  for (int64_t j = 0; j < k; ++j) w[j] = static_cast<uint8_t>(j % 256 == 0x7F || j % 256 == 0xFF ? 0 : j % 256);
  for (auto& s : scales) s = static_cast<uint8_t>(110 + rng() % 30);
  std::vector<double> x(k);
  for (auto& v : x) v = std::normal_distribution<double>()(rng);
  std::vector<float> want(k);
  cpu::e4m3_row_to_f32(cpu::Isa::kScalar, w.data(), scales.data(), k, want.data());
  for (int64_t j = 0; j < k; ++j) ASSERT_EQ(want[j], e4m3_to_f32(w[j]) * e8m0_to_f32(scales[j / 32])) << j;
  const double scalar_dot = cpu::dot_f32_f64(cpu::Isa::kScalar, want.data(), x.data(), k);
  std::vector<double> dots;
  for (const cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (isa > cpu::best_isa()) continue;
    std::vector<float> got(k);
    cpu::e4m3_row_to_f32(isa, w.data(), scales.data(), k, got.data());
    EXPECT_EQ(got, want) << static_cast<int>(isa);
    dots.push_back(cpu::dot_f32_f64(isa, want.data(), x.data(), k));
    EXPECT_NEAR(dots.back(), scalar_dot, 1e-12 * std::fabs(scalar_dot) + 1e-300);
  }
  for (const double d : dots) EXPECT_EQ(d, dots.front());
}

// The fused fp8 GEMV dot equals decoding the row to fp32 and dotting it, bit for bit: blocks of
// every code (subnormals included), scales inside and outside the fused path's range (2^-100..2^7),
// k a multiple of 256 (the AVX-512 path) and not.
TEST(BlockDot, FusedE4m3DotEqualsRowThenDot) {
  std::mt19937 rng(17);
  for (const int64_t k : {int64_t{768}, int64_t{544}}) {
    std::vector<uint8_t> w(k), scales(k / 32);
    for (int64_t j = 0; j < k; ++j) w[j] = static_cast<uint8_t>(j < 256 ? j : rng() | 0x08);  // then normal codes
    w[300] = 0x03;                                                                            // but one subnormal
    for (auto& b : w)
      if ((b & 0x7F) == 0x7F) b = 0x7E;  // no NaN codes
    for (int64_t b = 0; b < k / 32; ++b)
      scales[b] = static_cast<uint8_t>(std::array{120, 27, 134, 26, 135, 0, 140}[b % 7]);
    std::vector<double> x(k);
    for (auto& v : x) v = std::normal_distribution<double>()(rng);
    for (const cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
      if (isa > cpu::best_isa()) continue;
      std::vector<float> row(k);
      cpu::e4m3_row_to_f32(isa, w.data(), scales.data(), k, row.data());
      const double want = cpu::dot_f32_f64(isa, row.data(), x.data(), k);
      const double got = cpu::dot_e4m3_f64(isa, w.data(), scales.data(), x.data(), k);
      EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want))
          << "isa " << static_cast<int>(isa) << " k " << k;
    }
  }
}

// Weight scales in the accumulation's layout: every e8m0 byte (2^-127 and NaN included), a scale row
// per weight row or one for the group, partial groups, block counts not a multiple of 4.
TEST(BlockDot, BlockScalesOfEveryIsaAreTheE8m0Values) {
  const int64_t blocks = 70;
  std::vector<uint8_t> scales(cpu::kRowGroup * blocks);
  for (size_t j = 0; j < scales.size(); ++j) scales[j] = static_cast<uint8_t>(j * 7);
  for (const int rows : {16, 5})
    for (const int64_t stride : {blocks, int64_t{0}}) {
      for (const cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
        if (isa > cpu::best_isa()) continue;
        std::vector<float> ws(blocks * cpu::kRowGroup);
        cpu::block_scales(isa, scales.data(), stride, rows, blocks, ws.data());
        for (int l = 0; l < rows; ++l)
          for (int64_t b = 0; b < blocks; ++b) {
            const float want = e8m0_to_f32(scales[l * stride + b]);
            const float got = ws[b * cpu::kRowGroup + l];
            ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
                << "isa " << static_cast<int>(isa) << " row " << l << " block " << b << " stride " << stride;
          }
      }
    }
}

// act_quant of rows holding every bf16 bit pattern (NaN, inf, subnormal, signed zeros), shuffled
// so that blocks mix magnitudes: every instruction set gives the scalar path's codes and scales.
TEST(BlockDot, ActQuantRowOfEveryIsaEqualsScalar) {
  std::vector<uint16_t> x(65536 + 40);  // + 40: a partial last block
  std::iota(x.begin(), x.begin() + 65536, 0);
  std::mt19937 rng(41);
  std::shuffle(x.begin(), x.end(), rng);
  for (int run = 0; run < 2; ++run) {
    if (run == 1)  // blocks of ordinary magnitudes, many codes below e4m3's normal range
      for (auto& v : x)
        v = f32_to_bf16(std::ldexp(std::normal_distribution<float>()(rng), static_cast<int>(rng() % 24) - 12));
    const int64_t k = static_cast<int64_t>(x.size()), blocks = (k + 31) / 32;
    std::vector<double> want(k);
    std::vector<float> want_s(blocks);
    cpu::act_quant_row(cpu::Isa::kScalar, x.data(), k, want.data(), want_s.data());
    for (const cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
      if (isa > cpu::best_isa()) continue;
      std::vector<double> got(k);
      std::vector<float> got_s(blocks);
      cpu::act_quant_row(isa, x.data(), k, got.data(), got_s.data());
      for (int64_t b = 0; b < blocks; ++b)
        ASSERT_EQ(std::bit_cast<uint32_t>(got_s[b]), std::bit_cast<uint32_t>(want_s[b])) << "block " << b;
      for (int64_t j = 0; j < k; ++j)
        ASSERT_EQ(std::bit_cast<uint64_t>(got[j]), std::bit_cast<uint64_t>(want[j]))
            << "isa " << static_cast<int>(isa) << " element " << j << " bf16 " << x[j];
    }
  }
}

TEST(BlockDot, EveryIsaEqualsScalar) {
  const int64_t k = 512 + 64, n = 3, blocks = k / 32;  // 18 blocks: not a multiple of 8
  std::mt19937 rng(31);
  std::vector<uint8_t> w8(k + 64), w4(k / 2 + 64);  // rows start at different offsets
  for (size_t j = 0; j < w8.size(); ++j)
    w8[j] = static_cast<uint8_t>(j % 256 == 0x7F || j % 256 == 0xFF ? 0x7E : j % 256);
  for (auto& b : w4) b = static_cast<uint8_t>(rng());
  std::vector<double> codes(n * k);
  for (auto& c : codes) c = e4m3_to_f32(static_cast<uint8_t>(rng() % 0x7F | (rng() & 0x80)));
  std::vector<float> xs(n * blocks), ws(blocks * cpu::kRowGroup);
  for (auto& v : xs) v = std::ldexp(1.0f + static_cast<float>(rng() % 100) / 128, static_cast<int>(rng() % 20) - 10);
  for (auto& v : ws) v = std::ldexp(1.0f, static_cast<int>(rng() % 30) - 15);
  for (const int64_t kk : {k, int64_t{512}})  // 512: the AVX-512 kernels take whole groups of 8 blocks
    for (const bool fp4 : {false, true}) {
      const int64_t nb = kk / 32;
      auto run = [&](cpu::Isa isa) {
        cpu::BlockActivations x;
        std::vector<double> c(n * kk);
        for (int64_t i = 0; i < n; ++i) std::copy_n(&codes[i * k], kk, &c[i * kk]);
        cpu::prepare_block_activations(isa, fp4, c.data(), n, kk, x);
        std::vector<float> partials(n * nb * cpu::kRowGroup), out(n * cpu::kRowGroup);
        for (int l = 0; l < 5; ++l)
          cpu::block_partials(x, fp4 ? &w4[l * 8] : &w8[l * 16], &partials[l], cpu::kRowGroup);
        for (int l = 5; l < cpu::kRowGroup; ++l)
          cpu::block_partials(x, fp4 ? w4.data() : w8.data(), &partials[l], cpu::kRowGroup);
        cpu::accumulate_block_scales(isa, partials.data(), xs.data(), ws.data(), n, nb, 13, out.data());
        std::vector<float> kept;
        for (int64_t i = 0; i < n; ++i)
          kept.insert(kept.end(), &out[i * cpu::kRowGroup], &out[i * cpu::kRowGroup + 13]);
        return std::make_pair(partials, kept);
      };
      const auto want = run(cpu::Isa::kScalar);
      for (const cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
        if (isa > cpu::best_isa()) continue;
        const auto got = run(isa);
        EXPECT_EQ(got.first, want.first) << "isa " << static_cast<int>(isa) << " fp4 " << fp4 << " k " << kk;
        EXPECT_EQ(got.second, want.second) << "isa " << static_cast<int>(isa) << " fp4 " << fp4 << " k " << kk;
      }
    }
}

}  // namespace
}  // namespace dsinfer
