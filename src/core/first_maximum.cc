// first_maximum (first_maximum.h).
#include "core/first_maximum.h"

#include <algorithm>
#include <cstring>

namespace dsinfer {

// Eight running maxima and a bit test for infinities and NaNs (no chain of dependent compares:
// the compiler vectorises it), then the first index holding the maximum.
std::optional<int32_t> first_maximum(std::span<const float> row) {
  constexpr size_t kLanes = 8;
  const size_t n = row.size();
  if (n == 0) return std::nullopt;
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, row[0]);
  uint32_t not_finite = 0;
  const auto visit = [&](size_t i, size_t lane) {
    const float v = row[i];
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    not_finite |= (bits & 0x7f800000u) == 0x7f800000u;  // exponent all ones: an infinity or a NaN
    lane_max[lane] = v > lane_max[lane] ? v : lane_max[lane];
  };
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t lane = 0; lane < kLanes; ++lane) visit(i + lane, lane);
  for (; i < n; ++i) visit(i, 0);
  if (not_finite) return std::nullopt;
  const float mx = *std::max_element(lane_max, lane_max + kLanes);
  return static_cast<int32_t>(std::find(row.begin(), row.end(), mx) - row.begin());
}

}  // namespace dsinfer
