// The engine's greedy pick on the CPU: the sampler's (core/first_maximum.h), -1 for a row that
// is not all finite.
#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/first_maximum.h"

namespace dsinfer {

void CpuBackend::greedy_pick(const GreedyPickArgs& a) {
  const int64_t n = a.logits.size(0), V = a.logits.size(1);
  DSINFER_CHECK(a.logits.dtype == DType::kF32 && a.logits.stride[1] == 1 && a.picks.dtype == DType::kI32 &&
                    a.picks.size(0) == n && a.picks.is_contiguous() && V > 0,
                "greedy_pick: [n, V] f32 rows, [n] int32 picks");
  int32_t* picks = a.picks.as<int32_t>();
  pool_->parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      picks[i] =
          first_maximum({a.logits.as<const float>() + i * a.logits.stride[0], static_cast<size_t>(V)}).value_or(-1);
  });
}

}  // namespace dsinfer
