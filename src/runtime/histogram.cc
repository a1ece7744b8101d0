#include "runtime/histogram.h"

#include <algorithm>

#include <fmt/format.h>

namespace dsinfer {

void Histogram::observe(double seconds) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), seconds);
  ++counts_[it - bounds_.begin()];
  ++count_;
  sum_ += seconds;
}

std::string Histogram::prometheus(std::string_view name, std::string_view help) const {
  std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

}  // namespace dsinfer
