// The engine's draws on the CPU: core/token_draw.h's draw, a row a task.
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/check.h"

namespace dsinfer {

void CpuBackend::draw_tokens(const DrawTokensArgs& a) {
  const int64_t n = a.logits.size(0), V = a.logits.size(1);
  DSINFER_CHECK(a.logits.dtype == DType::kF32 && a.logits.stride[1] == 1 && a.picks.dtype == DType::kI32 &&
                    a.picks.size(0) == n && a.picks.is_contiguous() && V > 0 && V <= kMaxDrawVocab,
                "draw_tokens: [n, V] f32 rows (V <= 2^23), [n] int32 picks");
  int32_t* picks = a.picks.as<int32_t>();
  pool_->parallel_for(static_cast<int64_t>(a.draws.size()), 1, [&](int64_t b, int64_t e) {
    std::vector<uint64_t> masses(V);
    for (int64_t i = b; i < e; ++i) {
      const RowDraw& d = a.draws[i];
      DSINFER_CHECK(d.row >= 0 && d.row < n, "draw_tokens: a draw's row is out of range");
      const std::span<const float> row(a.logits.as<const float>() + d.row * a.logits.stride[0], V);
      picks[d.row] = draw_from(masses, draw_masses(row, d.params, masses), d.params.bits);
    }
  });
}

}  // namespace dsinfer
