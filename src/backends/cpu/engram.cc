// The Engram gate and injection (spec §9.7).
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "core/float_formats.h"

namespace dsinfer {

void CpuBackend::decode_rows(const DecodeRowsArgs& a) {
  const int64_t n = a.codes.size(0), d = a.codes.size(1);
  DSINFER_CHECK(d % 32 == 0 && a.scales.size(1) == d / 32 && a.out.size(1) == d && a.values.numel() == 256 * 256,
                "decode_rows shapes");
  const uint16_t* values = a.values.as<const uint16_t>();
  pool_->parallel_for(n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint8_t* codes = a.codes.as<const uint8_t>() + i * a.codes.stride[0];
      const uint8_t* scales = a.scales.as<const uint8_t>() + i * a.scales.stride[0];
      uint16_t* out = a.out.as<uint16_t>() + i * a.out.stride[0];
      for (int64_t j = 0; j < d; ++j) out[j] = values[scales[j / 32] * 256 + codes[j]];
    }
  });
}

void CpuBackend::engram_gate(const EngramGateArgs& a) {
  const int64_t n = a.x.size(0), hc = a.x.size(1), dim = a.x.size(2);
  const float* wgt = a.wgt.as<const float>();
  const float inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  const float eps = static_cast<float>(a.norm_eps);
  pool_->parallel_for(n * hc, 1, [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      const int64_t t = w / hc, c = w % hc;
      uint16_t* x = a.x.as<uint16_t>() + t * a.x.stride[0] + c * dim;
      const uint16_t* kv = cpu::bf16_row(a.kv, t);
      const uint16_t* key = kv + c * dim;
      const uint16_t* value = kv + hc * dim;
      double hh = 0, kk = 0, dot = 0;
      for (int64_t d = 0; d < dim; ++d) {
        const float h = bf16_to_f32(x[d]), k = bf16_to_f32(key[d]);
        hh += double{h} * h, kk += double{k} * k;
        dot += (h * wgt[c * dim + d]) * k;  // (h * wgt) rounded, times key rounded, summed
      }
      const float rstd = (1.0f / std::sqrt(static_cast<float>(hh) / static_cast<float>(dim) + eps)) *
                         (1.0f / std::sqrt(static_cast<float>(kk) / static_cast<float>(dim) + eps));
      const float dv = static_cast<float>(dot) * rstd * inv_sqrt_dim;
      float gate = cpu::sigmoid(std::copysign(std::sqrt(std::fmax(std::fabs(dv), 1e-6f)), dv));
      if (a.live.data && !a.live.as<const uint8_t>()[t]) gate = 0.0f;
      for (int64_t d = 0; d < dim; ++d) x[d] = f32_to_bf16(bf16_to_f32(x[d]) + gate * bf16_to_f32(value[d]));
    }
  });
}

}  // namespace dsinfer
