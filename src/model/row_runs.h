// The runs of a call's rows that the model hands the row-count-sensitive ops one at a time
// (Backend::max_invariant_rows): on a backend whose kernels depend on how many rows a call holds
// (the GPU's: the prefill kernels past 64 rows, the tiled kernels below), a sequence's results then do not
// depend on what else shares its step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace dsinfer {

struct RowRun {
  int64_t first = 0, count = 0;
  bool operator==(const RowRun&) const = default;
};

/// Consecutive chunks of `chunk_rows` rows each share a run while it holds at most `max_rows`;
/// a chunk of more has a run to itself (whatever its kernels, they are the ones it gets alone).
/// Chunks of no rows are skipped.
std::vector<RowRun> row_runs(std::span<const int64_t> chunk_rows, int64_t max_rows);

/// Rows [first, first + count) of t (a view of its first dimension).
TensorView row_slice(const TensorView& t, int64_t first, int64_t count);

}  // namespace dsinfer
