// Hyper-connection ops (spec §4): the Sinkhorn-normalised mixes and the pre/post collapses.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/float_formats.h"

namespace dsinfer {

void CpuBackend::hc_mixes(const HcMixesArgs& a) {
  const int64_t n = a.x.size(0), hc = a.x.size(1), dim = a.x.size(2), width = hc * dim;
  const int64_t mix = (2 + hc) * hc;
  DSINFER_CHECK(a.fn.size(0) == mix && a.fn.size(1) == width, "hc_mixes fn shape");
  const float* fn = a.fn.as<const float>();
  const float* scale = a.scale.as<const float>();
  const float* base = a.base.as<const float>();
  const float eps = static_cast<float>(a.hc_eps);
  // x as fp32 and its RMS factor r, then the mixes' dots; the rest is per token.
  const auto load_row = [&](int64_t t, float* xf) {
    const uint16_t* x = a.x.as<const uint16_t>() + t * a.x.stride[0];
    double ss = 0;
    for (int64_t j = 0; j < width; ++j) xf[j] = bf16_to_f32(x[j]), ss += double{xf[j]} * xf[j];
    return 1.0f / std::sqrt(static_cast<float>(ss) / static_cast<float>(width) + static_cast<float>(a.norm_eps));
  };
  const auto finish = [&](int64_t t, const double* dots, float r) {
    std::vector<float> m(mix), c(hc * hc);
    for (int64_t o = 0; o < mix; ++o) m[o] = static_cast<float>(dots[o]) * r;
    float* pre = a.pre.as<float>() + t * hc;
    float* post = a.post.as<float>() + t * hc;
    for (int64_t j = 0; j < hc; ++j) {
      pre[j] = cpu::sigmoid(m[j] * scale[0] + base[j]) + eps;
      post[j] = 2.0f * cpu::sigmoid(m[hc + j] * scale[1] + base[hc + j]);
    }
    for (int64_t i = 0; i < hc * hc; ++i) c[i] = m[2 * hc + i] * scale[2] + base[2 * hc + i];
    // Row softmax, + eps, then a column normalisation; iters - 1 more row/column rounds.
    for (int64_t i = 0; i < hc; ++i) {
      float mx = c[i * hc];
      for (int64_t j = 1; j < hc; ++j) mx = std::fmax(mx, c[i * hc + j]);
      float sum = 0;
      for (int64_t j = 0; j < hc; ++j) c[i * hc + j] = std::exp(c[i * hc + j] - mx), sum += c[i * hc + j];
      for (int64_t j = 0; j < hc; ++j) c[i * hc + j] = c[i * hc + j] / sum + eps;
    }
    const auto normalise_columns = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0;
        for (int64_t i = 0; i < hc; ++i) sum += c[i * hc + j];
        for (int64_t i = 0; i < hc; ++i) c[i * hc + j] = c[i * hc + j] / (sum + eps);
      }
    };
    normalise_columns();
    for (int it = 1; it < a.sinkhorn_iters; ++it) {
      for (int64_t i = 0; i < hc; ++i) {
        float sum = 0;
        for (int64_t j = 0; j < hc; ++j) sum += c[i * hc + j];
        for (int64_t j = 0; j < hc; ++j) c[i * hc + j] = c[i * hc + j] / (sum + eps);
      }
      normalise_columns();
    }
    std::copy(c.begin(), c.end(), a.comb.as<float>() + t * hc * hc);
  };
  if (n < pool_->size()) {
    // Fewer tokens than threads (decode): the dots, 24 rows of hc * dim each, spread by rows in
    // the kernel's groups of 8.
    std::vector<float> xf(n * width), r(n);
    std::vector<double> dots(n * mix);
    for (int64_t t = 0; t < n; ++t) r[t] = load_row(t, &xf[t * width]);
    const int64_t groups = (mix + 7) / 8;
    pool_->parallel_for(n * groups, 1, [&](int64_t gb, int64_t ge) {
      for (int64_t g = gb; g < ge; ++g) {
        const int64_t t = g / groups, o0 = g % groups * 8, rows = std::min<int64_t>(8, mix - o0);
        cpu::ordered_row_dots(fn + o0 * width, width, rows, &xf[t * width], width, &dots[t * mix + o0]);
      }
    });
    for (int64_t t = 0; t < n; ++t) finish(t, &dots[t * mix], r[t]);
    return;
  }
  pool_->parallel_for(n, 1, [&](int64_t tb, int64_t te) {
    std::vector<float> xf(width);
    std::vector<double> dots(mix);
    for (int64_t t = tb; t < te; ++t) {
      const float r = load_row(t, xf.data());
      cpu::ordered_row_dots(fn, width, mix, xf.data(), width, dots.data());
      finish(t, dots.data(), r);
    }
  });
}

void CpuBackend::hc_pre(const HcPreArgs& a) {
  const int64_t n = a.x.size(0), hc = a.x.size(1), dim = a.x.size(2);
  for (int64_t t = 0; t < n; ++t) {
    const uint16_t* x = a.x.as<const uint16_t>() + t * a.x.stride[0];
    const float* p = a.pre.as<const float>() + t * hc;
    uint16_t* out = cpu::bf16_row_mut(a.out, t);
    for (int64_t d = 0; d < dim; ++d) {
      float y = 0.0f;  // sequential over copies, from 0 (spec §4.2)
      for (int64_t c = 0; c < hc; ++c) y = y + p[c] * bf16_to_f32(x[c * dim + d]);
      out[d] = f32_to_bf16(y);
    }
  }
}

void CpuBackend::hc_post(const HcPostArgs& a) {
  const int64_t n = a.residual.size(0), hc = a.residual.size(1), dim = a.residual.size(2);
  DSINFER_CHECK(hc <= 8, "hc_post: {} copies", hc);
  // Each (token, position d) reads column d of the copies and writes column d of the output, so
  // the output may alias the residual and the work splits over the threads by columns.
  pool_->parallel_for(n * dim, 256, [&](int64_t cb, int64_t ce) {
    for (int64_t col = cb; col < ce; ++col) {
      const int64_t t = col / dim, d = col % dim;
      const uint16_t* r = a.residual.as<const uint16_t>() + t * a.residual.stride[0];
      const float* post = a.post.as<const float>() + t * hc;
      const float* comb = a.comb.as<const float>() + t * hc * hc;
      const float sub = bf16_to_f32(cpu::bf16_row(a.sub, t)[d]);
      float y[8];
      for (int64_t j = 0; j < hc; ++j) {
        float s = 0.0f;  // S_j = sum_i comb[i][j] * R[i]: the column of comb picks the output copy
        for (int64_t i = 0; i < hc; ++i) s = s + comb[i * hc + j] * bf16_to_f32(r[i * dim + d]);
        y[j] = post[j] * sub + s;
      }
      uint16_t* out = a.out.as<uint16_t>() + t * a.out.stride[0];
      for (int64_t j = 0; j < hc; ++j) out[j * dim + d] = f32_to_bf16(y[j]);  // after reading r: out may alias it
    }
  });
}

}  // namespace dsinfer
