// The MoE router (spec §8.1) and the row gather / scatter-add around each expert.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/float_formats.h"
#include "ops/composite.h"

namespace dsinfer {

void CpuBackend::router(const RouterArgs& a) {
  const int64_t n = a.x.size(0), dim = a.x.size(1), experts = a.weight.size(0), k = a.indices.size(1);
  const bool w_f32 = a.weight.dtype == DType::kF32;
  pool_->parallel_for(n, 1, [&](int64_t tb, int64_t te) {
    std::vector<float> s(experts), key(experts), xf(dim);
    std::vector<double> dots(experts);
    std::vector<int32_t> order(experts);
    for (int64_t t = tb; t < te; ++t) {
      const uint16_t* x = cpu::bf16_row(a.x, t);
      for (int64_t j = 0; j < dim; ++j) xf[j] = bf16_to_f32(x[j]);
      if (w_f32)
        cpu::ordered_row_dots(a.weight.as<const float>(), a.weight.stride[0], experts, xf.data(), dim, dots.data());
      else
        cpu::ordered_row_dots(a.weight.as<const uint16_t>(), a.weight.stride[0], experts, xf.data(), dim, dots.data());
      for (int64_t e = 0; e < experts; ++e) s[e] = static_cast<float>(dots[e]) / static_cast<float>(a.gate_temp);
      switch (a.score) {
        case RouterScore::kSqrtSoftplus:
          for (float& v : s) v = std::sqrt(v > 20.0f ? v : std::log1p(std::exp(v)));  // torch softplus
          break;
        case RouterScore::kSigmoid:
          for (float& v : s) v = cpu::sigmoid(v);
          break;
        case RouterScore::kSoftmax: {
          const float mx = *std::max_element(s.begin(), s.end());
          float sum = 0;
          for (float& v : s) v = std::exp(v - mx), sum += v;
          for (float& v : s) v = v / sum;
          break;
        }
      }
      const bool image = a.is_image.data && a.is_image.as<const uint8_t>()[t];
      const TensorView& bias = image && a.bias_vl.data ? a.bias_vl : a.bias;
      for (int64_t e = 0; e < experts; ++e) key[e] = bias.data ? s[e] + bias.as<const float>()[e] : s[e];
      int32_t* idx = a.indices.as<int32_t>() + t * k;
      if (a.given_indices) {
        std::copy(idx, idx + k, order.begin());
      } else {
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int32_t x, int32_t y) { return key[x] > key[y] || (key[x] == key[y] && x < y); });
      }
      float* w = a.weights.as<float>() + t * k;
      for (int64_t j = 0; j < k; ++j) idx[j] = order[j], w[j] = s[order[j]];  // unbiased scores
      if (a.norm_topk_prob && k > 1) {
        // torch's CPU sum order for 6 terms is ((((w0 + w4) + w5) + w1) + w2) + w3; sequential for <= 3.
        float sum = 0;
        if (k == 6)
          sum = ((((w[0] + w[4]) + w[5]) + w[1]) + w[2]) + w[3];
        else
          for (int64_t j = 0; j < k; ++j) sum = sum + w[j];
        for (int64_t j = 0; j < k; ++j) w[j] = w[j] / (sum + 1e-20f);
      }
      for (int64_t j = 0; j < k; ++j) w[j] = w[j] * static_cast<float>(a.route_scale);
    }
  });
}

namespace {

// Row r of t, rows of t's type.
uint8_t* row_bytes(const TensorView& t, int64_t r) {
  return t.as<uint8_t>() + dtype_bytes(t.dtype, r * t.stride[0]);
}

}  // namespace

void CpuBackend::gather_rows(const GatherRowsArgs& a) {
  const int64_t m = a.rows.size(0), d = a.src.size(1);
  DSINFER_CHECK(a.out.size(0) == m && a.out.size(1) == d && a.out.dtype == a.src.dtype, "gather_rows shapes");
  for (int64_t i = 0; i < m; ++i) {
    const int32_t r = a.rows.as<const int32_t>()[i];
    DSINFER_CHECK(r >= 0 && r < a.src.size(0), "gather_rows: row {} of {}", r, a.src.size(0));
    std::memcpy(row_bytes(a.out, i), row_bytes(a.src, r), dtype_bytes(a.src.dtype, d));
  }
}

void CpuBackend::scatter_rows(const ScatterRowsArgs& a) {
  const int64_t m = a.rows.size(0), d = a.src.size(1);
  DSINFER_CHECK(a.src.size(0) == m && a.out.size(1) == d && a.out.dtype == a.src.dtype, "scatter_rows shapes");
  for (int64_t i = 0; i < m; ++i) {
    const int32_t r = a.rows.as<const int32_t>()[i];
    DSINFER_CHECK(r >= 0 && r < a.out.size(0), "scatter_rows: row {} of {}", r, a.out.size(0));
    std::memcpy(row_bytes(a.out, r), row_bytes(a.src, i), dtype_bytes(a.src.dtype, d));
  }
}

void CpuBackend::scatter_add(const ScatterAddArgs& a) {
  const int64_t m = a.rows.size(0), d = a.src.size(1);
  DSINFER_CHECK(a.src.size(0) == m && a.acc.size(1) == d, "scatter_add shapes");
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = a.rows.as<const int32_t>()[i];
    const uint16_t* src = cpu::bf16_row(a.src, i);
    float* acc = a.acc.as<float>() + r * a.acc.stride[0];
    for (int64_t j = 0; j < d; ++j) acc[j] += bf16_to_f32(src[j]);
    if (a.out.data) {
      uint16_t* out = cpu::bf16_row_mut(a.out, r);
      for (int64_t j = 0; j < d; ++j) out[j] = f32_to_bf16(acc[j]);
    }
  }
}

void CpuBackend::routed_experts(const RoutedExpertsArgs& a) {
  routed_experts_by_expert(*this, a);
}

}  // namespace dsinfer
