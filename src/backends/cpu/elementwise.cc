// Row-wise CPU ops: embedding, RMSNorm, RoPE, fake-quant, SwiGLU, ratio-2 pooling.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/float_formats.h"

namespace dsinfer {

using cpu::bf16_row;
using cpu::bf16_row_mut;

void CpuBackend::embed(const EmbedArgs& a) {
  const int64_t n = a.ids.size(0), dim = a.table.size(1), rows = a.table.size(0);
  DSINFER_CHECK(a.out.size(0) == n && a.out.size(1) == dim, "embed shapes");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = a.ids.as<const int32_t>()[i] - a.vocab_offset;
    uint16_t* out = bf16_row_mut(a.out, i);
    if (local >= 0 && local < rows)
      std::memcpy(out, bf16_row(a.table, local), dim * 2);
    else
      std::memset(out, 0, dim * 2);  // another rank holds this row
  }
}

void CpuBackend::rms_norm(const RmsNormArgs& a) {
  const int64_t n = a.x.size(0), d = a.x.size(1);
  const uint16_t* w = a.weight.as<const uint16_t>();
  pool_->parallel_for(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint16_t* x = bf16_row(a.x, i);
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) ss += double{bf16_to_f32(x[j])} * bf16_to_f32(x[j]);
      const float mean = static_cast<float>(ss) / static_cast<float>(d);
      const float r = 1.0f / std::sqrt(mean + static_cast<float>(a.eps));
      uint16_t* out = bf16_row_mut(a.out, i);
      for (int64_t j = 0; j < d; ++j) {
        const float normed = bf16_to_f32(x[j]) * r;  // formed first, then times the weight
        out[j] = f32_to_bf16(normed * bf16_to_f32(w[j]));
      }
    }
  });
}

void CpuBackend::rope(const RopeArgs& a) {
  const int64_t n = a.x.size(0), heads = a.x.size(1), d = a.x.size(2), half = a.cos.size(1);
  const int64_t first = d - 2 * half;  // RoPE covers the last 2 * half dims
  for (int64_t i = 0; i < n; ++i) {
    const float* c = a.cos.as<const float>() + i * a.cos.stride[0];
    const float* s = a.sin.as<const float>() + i * a.sin.stride[0];
    for (int64_t h = 0; h < heads; ++h) {
      uint16_t* v = a.x.as<uint16_t>() + i * a.x.stride[0] + h * a.x.stride[1] + first;
      for (int64_t k = 0; k < half; ++k) {
        const float re = bf16_to_f32(v[2 * k]), im = bf16_to_f32(v[2 * k + 1]);
        // Four products rounded to fp32, then one add each (no FMA: spec §3.2).
        const float rc = re * c[k], is = im * s[k], rs = re * s[k], ic = im * c[k];
        v[2 * k] = f32_to_bf16(a.inverse ? rc + is : rc - is);
        v[2 * k + 1] = f32_to_bf16(a.inverse ? ic - rs : rs + ic);
      }
    }
  }
}

void CpuBackend::fake_quant(const FakeQuantArgs& a) {
  const int64_t n = a.x.size(0), d = a.x.size(1);
  pool_->parallel_for(n, 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      std::span<uint16_t> row(bf16_row_mut(a.x, i), d);
      switch (a.kind) {
        case FakeQuant::kFp8Group32:
          act_quant_inplace(row);
          break;
        case FakeQuant::kFp4E8M0Group32:
          fp4_act_quant_inplace(row, 32, Fp4ScaleKind::kE8M0);
          break;
        case FakeQuant::kFp4E4M3Group16:
          fp4_act_quant_inplace(row, 16, Fp4ScaleKind::kE4M3);
          break;
      }
    }
  });
}

void CpuBackend::swiglu(const SwigluArgs& a) {
  const int64_t n = a.gate.size(0), f = a.gate.size(1);
  const float lim = a.limit;
  const bool weighted = a.row_weight.data != nullptr;
  // Element-wise, so split over the threads by elements: a decode step's expert rows are few and long.
  pool_->parallel_for(n * f, 1024, [&](int64_t eb, int64_t ee) {
    for (int64_t e = eb; e < ee; ++e) {
      const int64_t i = e / f, j = e % f;
      float gv = bf16_to_f32(bf16_row(a.gate, i)[j]), uv = bf16_to_f32(bf16_row(a.up, i)[j]);
      if (lim > 0) uv = std::clamp(uv, -lim, lim), gv = std::min(gv, lim);
      float act = gv * cpu::sigmoid(gv) * uv;
      if (weighted) act = act * a.row_weight.as<const float>()[i];  // routing weight before the down projection (§8.2)
      bf16_row_mut(a.out, i)[j] = f32_to_bf16(act);
    }
  });
}

void CpuBackend::compress_pool(const CompressPoolArgs& a) {
  const int64_t groups = a.kv.size(0), d = a.kv.size(2);
  for (int64_t g = 0; g < groups; ++g) {
    const float* kv = a.kv.as<const float>() + g * 2 * d;
    const float* sc = a.score.as<const float>() + g * 2 * d;
    uint16_t* out = bf16_row_mut(a.out, g);
    for (int64_t c = 0; c < d; ++c) {
      const float m = std::max(sc[c], sc[d + c]);
      const float e0 = std::exp(sc[c] - m), e1 = std::exp(sc[d + c] - m);
      const float sum = e0 + e1;
      const float pooled = kv[c] * (e0 / sum) + kv[d + c] * (e1 / sum);
      out[c] = f32_to_bf16(pooled);
    }
  }
}

}  // namespace dsinfer
