// CpuBackend: the readable reference implementation of every op, exact to the reference's
// rounding points (spec §3–§9). Multi-threaded over independent rows, heads or outputs only, so
// results do not depend on the thread count or on which other rows share the batch.
#pragma once

#include <cmath>
#include <memory>
#include <type_traits>

#include "backends/cpu/isa.h"
#include "core/float_formats.h"
#include "core/threading.h"
#include "ops/backend.h"

namespace dsinfer {

struct CpuBackendOptions {
  /// The widest instruction set the block dot products may use (the best this CPU has up to it).
  /// The CLI reads it from DSINFER_CPU_ISA=scalar|avx2|avx512 (cpu::isa_by_name). Every set gives
  /// the same bits.
  cpu::Isa isa_cap = cpu::Isa::kAvx512;
};

class CpuBackend final : public Backend {
 public:
  /// n_threads <= 0: one per hardware thread.
  explicit CpuBackend(int n_threads = 0, const CpuBackendOptions& options = {})
      : pool_(std::make_unique<ThreadPool>(n_threads)), isa_(cpu::best_isa(options.isa_cap)) {}
  Device device() const override { return Device::kCpu; }
  ThreadPool& pool() { return *pool_; }
  ThreadPool* host_threads() override { return pool_.get(); }
  cpu::Isa isa() const { return isa_; }  // the block dot products'

  DSINFER_OVERRIDE_MEMORY  // host memory, 64-byte aligned (memory.cc)

  DSINFER_OVERRIDE_OPS  // routed_experts: composite.h (the host groups the tokens by expert)

 private:
  std::unique_ptr<ThreadPool> pool_;
  cpu::Isa isa_;
};

/// Elementwise helpers shared by the CPU kernels.
namespace cpu {
inline const uint16_t* bf16_row(const TensorView& t, int64_t row) {
  return t.as<const uint16_t>() + row * t.stride[0];
}
inline uint16_t* bf16_row_mut(const TensorView& t, int64_t row) {
  return t.as<uint16_t>() + row * t.stride[0];
}
/// Query row i's pool row of paged position p (PagedTable).
inline int64_t paged_row(const PagedTable& t, int64_t i, int64_t p) {
  const int32_t* blocks = t.blocks.as<const int32_t>() + (t.blocks.ndim == 2 ? i * t.blocks.stride[0] : 0);
  return t.base + int64_t{blocks[p / t.rows_per_block]} * t.rows_per_block + p % t.rows_per_block;
}
inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

/// out[r] = sum over j in order of double(row(r)[j]) * x[j] for `rows` rows of `width` values (fp32,
/// or bf16 as uint16_t): each sum is one fixed-order chain of double adds (the bits the GPU kernels
/// match); eight rows run side by side so that eight chains are in flight instead of one.
template <typename RowFn>
void ordered_dots(RowFn row, int64_t rows, const float* x, int64_t width, double* out) {
  using W = std::remove_cv_t<std::remove_pointer_t<decltype(row(0))>>;
  const auto value = [](W v) {
    if constexpr (sizeof(W) == 2)
      return double{bf16_to_f32(v)};
    else
      return double{v};
  };
  constexpr int64_t kLanes = 8;
  int64_t r0 = 0;
  for (; r0 + kLanes <= rows; r0 += kLanes) {
    const W* w[kLanes];
    for (int64_t q = 0; q < kLanes; ++q) w[q] = row(r0 + q);
    double acc[kLanes] = {};
    for (int64_t j = 0; j < width; ++j)
      for (int64_t q = 0; q < kLanes; ++q) acc[q] += value(w[q][j]) * x[j];
    for (int64_t q = 0; q < kLanes; ++q) out[r0 + q] = acc[q];
  }
  for (; r0 < rows; ++r0) {
    const W* w = row(r0);
    double acc = 0;
    for (int64_t j = 0; j < width; ++j) acc += value(w[j]) * x[j];
    out[r0] = acc;
  }
}

/// ordered_dots over rows `stride` elements apart.
template <typename W>
void ordered_row_dots(const W* w, int64_t stride, int64_t rows, const float* x, int64_t width, double* out) {
  ordered_dots([&](int64_t r) { return w + r * stride; }, rows, x, width, out);
}
}  // namespace cpu

}  // namespace dsinfer
