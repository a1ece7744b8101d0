// The DSpark drafter's Markov chain on the CPU (spec §10.4): each bias value a dot product in
// double rounded once to fp32, added to the head's fp32 logit as the reference adds them.
#include "backends/cpu/cpu_backend.h"

namespace dsinfer {

void CpuBackend::markov_draft(const MarkovDraftArgs& a) {
  const int64_t blocks = a.base.size(0), J = a.base.size(1), V = a.base.size(2), r = a.embed.size(1);
  DSINFER_CHECK(a.head.size(0) == V && a.embed.size(0) == V && a.head.size(1) == r && a.tokens.size(0) == blocks &&
                    a.tokens.size(1) == J + 1 && a.embeds.size(0) == blocks * J && a.embeds.size(1) == r,
                "markov_draft shapes");
  std::vector<double> e(r);
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t* tokens = a.tokens.as<int32_t>() + b * a.tokens.stride[0];
    for (int64_t j = 0; j < J; ++j) {
      const int32_t id = tokens[j];
      DSINFER_CHECK(id >= 0 && id < V, "markov_draft: token {} outside the vocab of {}", id, V);
      const uint16_t* row = cpu::bf16_row(a.embed, id);
      std::copy(row, row + r, cpu::bf16_row_mut(a.embeds, b * J + j));
      for (int64_t i = 0; i < r; ++i) e[i] = bf16_to_f32(row[i]);
      float* base = a.base.as<float>() + b * a.base.stride[0] + j * a.base.stride[1];
      pool_->parallel_for(V, 1024, [&](int64_t v0, int64_t v1) {
        for (int64_t v = v0; v < v1; ++v) {
          const uint16_t* h = cpu::bf16_row(a.head, v);
          double dot = 0;
          for (int64_t i = 0; i < r; ++i) dot += e[i] * bf16_to_f32(h[i]);
          base[v] = base[v] + static_cast<float>(dot);
        }
      });
      int64_t best = 0;  // the first of equal maxima, as torch's argmax
      for (int64_t v = 1; v < V; ++v)
        if (base[v] > base[best]) best = v;
      tokens[j + 1] = static_cast<int32_t>(best);
    }
  }
}

}  // namespace dsinfer
