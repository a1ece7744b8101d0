// Histogram: Prometheus-style cumulative buckets of a latency, with its count and sum.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer {

class Histogram {
 public:
  /// Upper bounds in seconds, ascending (+Inf is implicit).
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double seconds);
  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  /// The Prometheus text exposition of this histogram under `name`.
  std::string prometheus(std::string_view name, std::string_view help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); the last is above every bound
  int64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace dsinfer
