// Sparse attention with a sink (spec §5.3) and the indexer's bf16 scores (spec §7.2).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/float_formats.h"

namespace dsinfer {

void CpuBackend::sparse_attn(const SparseAttnArgs& a) {
  const int64_t n = a.q.size(0), heads = a.q.size(1), d = a.q.size(2), k = a.idx.size(1);
  const int64_t n_win = a.window.ndim ? a.window.size(0) : 0;
  [[maybe_unused]] const int64_t n_cmp = a.compressed.ndim ? a.compressed.size(0) : 0;
  constexpr int64_t kBlock = 64;  // the reference kernel's online-softmax block
  pool_->parallel_for(n * heads, 1, [&](int64_t wb, int64_t we) {
    std::vector<const uint16_t*> rows(kBlock);
    std::vector<float> s(kBlock), acc(d);
    std::vector<double> part(d), dots(kBlock);
    std::vector<float> qf(d);
    std::vector<int64_t> live_j(kBlock);
    for (int64_t w = wb; w < we; ++w) {
      const int64_t t = w / heads, h = w % heads;
      const uint16_t* q = a.q.as<const uint16_t>() + t * a.q.stride[0] + h * a.q.stride[1];
      const int32_t* idx = a.idx.as<const int32_t>() + t * a.idx.stride[0];
      for (int64_t c = 0; c < d; ++c) qf[c] = bf16_to_f32(q[c]);
      float m = -1e30f, l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b0 = 0; b0 < k; b0 += kBlock) {
        const int64_t len = std::min(kBlock, k - b0);
        float bmax = m;
        int64_t live = 0;  // the block's visible rows, compacted for the dot products
        for (int64_t j = 0; j < len; ++j) {
          const int32_t id = idx[b0 + j];
          DSINFER_DCHECK(id < n_win + n_cmp, "kv index {} out of range", id);
          rows[j] = id < 0       ? nullptr
                    : id < n_win ? cpu::bf16_row(a.window, id)
                                 : cpu::bf16_row(a.compressed, id - n_win);
          s[j] = -std::numeric_limits<float>::infinity();
          if (rows[j]) live_j[live++] = j;
        }
        cpu::ordered_dots([&](int64_t i) { return rows[live_j[i]]; }, live, qf.data(), d, dots.data());
        for (int64_t i = 0; i < live; ++i) {
          const int64_t j = live_j[i];
          s[j] = static_cast<float>(dots[i]) * a.scale;
          bmax = std::fmax(bmax, s[j]);
        }
        const float alpha = std::exp(m - bmax);
        double psum = 0;
        std::fill(part.begin(), part.end(), 0.0);
        for (int64_t j = 0; j < len; ++j) {
          if (!rows[j]) continue;
          const float p = std::exp(s[j] - bmax);
          psum += p;
          const double pb = bf16_to_f32(f32_to_bf16(p));  // P is cast to bf16 for the P.V product
          for (int64_t c = 0; c < d; ++c) part[c] += pb * bf16_to_f32(rows[j][c]);
        }
        l = l * alpha + static_cast<float>(psum);
        for (int64_t c = 0; c < d; ++c) acc[c] = acc[c] * alpha + static_cast<float>(part[c]);
        m = bmax;
      }
      l = l + std::exp(a.sink.as<const float>()[h] - m);
      uint16_t* out = a.out.as<uint16_t>() + t * a.out.stride[0] + h * a.out.stride[1];
      for (int64_t c = 0; c < d; ++c) out[c] = f32_to_bf16(acc[c] / l);
    }
  });
}

void CpuBackend::indexer_scores(const IndexerScoresArgs& a) {
  const int64_t n = a.q.size(0), heads = a.q.size(1), d = a.q.size(2);
  const int64_t T = a.out.size(1);
  // A table a row (a decode batch): each query converts its own keys.
  const bool paged = a.key_table.blocks.data != nullptr, shared_keys = a.key_table.blocks.ndim < 2;
  std::vector<float> wts(n * heads);  // bf16(w * weight_scale): per (token, head), not per key
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h)
      wts[t * heads + h] = round_to_bf16(bf16_to_f32(cpu::bf16_row(a.weights, t)[h]) * a.weight_scale);
  // A work item is a block of keys against a block of queries: the keys are converted to doubles
  // once, column by column, so that their dot products with a head run side by side in registers
  // (each still one fixed-order chain of double adds, as ordered_dots). Columns past a query's
  // visible ones are only filled with -inf, so a prefill costs its visible pairs.
  constexpr int64_t kKeys = 64, kQueries = 32, kLanes = 8;
  const int64_t key_blocks = (T + kKeys - 1) / kKeys, query_blocks = (n + kQueries - 1) / kQueries;
  const int32_t* visible_of = a.visible.as<const int32_t>();
  pool_->parallel_for(query_blocks * key_blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<double> qd(heads * d), kd(d * kKeys), exact(kKeys);
    for (int64_t w = b; w < e; ++w) {
      const int64_t t0 = (w / key_blocks) * kQueries, t1 = std::min(n, t0 + kQueries);
      const int64_t tau0 = (w % key_blocks) * kKeys, end = std::min(T, tau0 + kKeys);
      int64_t converted = 0;  // keys of this block in kd
      for (int64_t t = t0; t < t1; ++t) {
        if (!shared_keys) converted = 0;
        const int64_t visible = std::clamp<int64_t>(visible_of[t], tau0, end), len = visible - tau0;
        float* out = a.out.as<float>() + t * a.out.stride[0];
        std::fill(out + visible, out + end, -std::numeric_limits<float>::infinity());
        if (len == 0) continue;
        for (; converted < len; ++converted) {
          const int64_t tau = tau0 + converted;
          const uint16_t* key = cpu::bf16_row(a.keys, paged ? cpu::paged_row(a.key_table, t, tau) : tau);
          for (int64_t c = 0; c < d; ++c) kd[c * kKeys + converted] = bf16_to_f32(key[c]);
        }
        for (int64_t h = 0; h < heads; ++h) {
          const uint16_t* q = a.q.as<const uint16_t>() + t * a.q.stride[0] + h * a.q.stride[1];
          for (int64_t c = 0; c < d; ++c) qd[h * d + c] = bf16_to_f32(q[c]);
        }
        // The reference sums the bf16 head terms in fp32; the bf16 result is order-free.
        std::fill(exact.begin(), exact.end(), 0.0);
        for (int64_t h = 0; h < heads; ++h) {
          const float wt = wts[t * heads + h];
          for (int64_t j0 = 0; j0 < len; j0 += kLanes) {
            double dots[kLanes] = {};
            for (int64_t c = 0; c < d; ++c) {
              const double qc = qd[h * d + c];
              const double* kc = &kd[c * kKeys + j0];
              for (int64_t j = 0; j < kLanes; ++j) dots[j] += kc[j] * qc;
            }
            for (int64_t j = 0; j < std::min(kLanes, len - j0); ++j) {
              const float dv = std::fmax(round_to_bf16(static_cast<float>(dots[j])), 0.0f);  // bf16, then relu
              exact[j0 + j] += round_to_bf16(dv * wt);
            }
          }
        }
        for (int64_t j = 0; j < len; ++j) out[tau0 + j] = round_to_bf16(static_cast<float>(exact[j]));
      }
    }
  });
}

}  // namespace dsinfer
