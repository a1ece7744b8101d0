// Runs of rows (row_runs.h).
#include "model/row_runs.h"

namespace dsinfer {

std::vector<RowRun> row_runs(std::span<const int64_t> chunk_rows, int64_t max_rows) {
  std::vector<RowRun> runs;
  int64_t at = 0;
  bool open = false;  // whether the last run may take the next chunk
  for (const int64_t rows : chunk_rows) {
    if (rows == 0) continue;
    if (open && rows <= max_rows - runs.back().count) {
      runs.back().count += rows;
    } else {
      runs.push_back({at, rows});
      open = rows <= max_rows;
    }
    at += rows;
  }
  return runs;
}

TensorView row_slice(const TensorView& t, int64_t first, int64_t count) {
  TensorView v = t;
  v.data = t.as<uint8_t>() + dtype_bytes(t.dtype, first * t.stride[0]);
  v.shape[0] = count;
  return v;
}

}  // namespace dsinfer
