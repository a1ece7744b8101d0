// Composite ops (composite.h).
#include "ops/composite.h"

#include <cstring>
#include <vector>

#include "core/check.h"
#include "ops/device_array.h"

namespace dsinfer {

ExpertGroups group_by_expert(Backend& be, const RoutedExpertsArgs& a) {
  const int64_t n = a.x.size(0), k = a.indices.size(1);
  const int64_t experts = static_cast<int64_t>(a.experts.size());
  DSINFER_CHECK(a.indices.is_contiguous() && a.weights.is_contiguous() && a.weights.size(0) == n &&
                    a.weights.size(1) == k && experts > 0,
                "routed_experts: contiguous [n, k] choices");
  std::vector<int32_t> idx(n * k);
  std::vector<float> wts(n * k);
  if (a.weights.as<const uint8_t>() == a.indices.as<const uint8_t>() + n * k * 4) {  // one read for both
    std::vector<int32_t> both(2 * n * k);
    be.copy_to_host(both.data(), a.indices.data, both.size() * 4);
    std::memcpy(idx.data(), both.data(), n * k * 4);
    std::memcpy(wts.data(), both.data() + n * k, n * k * 4);
  } else {
    be.copy_to_host(idx.data(), a.indices.data, n * k * 4);
    be.copy_to_host(wts.data(), a.weights.data, n * k * 4);
  }
  // The table's experts by their index in it; a choice of another rank's expert adds nothing here.
  for (int32_t& e : idx) {
    DSINFER_CHECK(e >= 0, "routed_experts: expert {}", e);
    e = e >= a.first_expert && e < a.first_expert + experts ? e - a.first_expert : -1;
  }
  ExpertGroups g;
  g.first.assign(experts + 1, 0);  // a counting sort in one pass over the choices
  for (int32_t e : idx)
    if (e >= 0) ++g.first[e + 1];
  for (int64_t e = 0; e < experts; ++e) g.first[e + 1] += g.first[e];
  g.token.resize(g.rows());
  g.weight.resize(g.rows());
  g.slot_row.assign(n * k, -1);
  std::vector<int64_t> next(g.first.begin(), g.first.end() - 1);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      if (idx[t * k + j] < 0) continue;
      const int64_t at = next[idx[t * k + j]]++;
      g.token[at] = static_cast<int32_t>(t), g.weight[at] = wts[t * k + j];
      g.slot_row[t * k + j] = static_cast<int32_t>(at);
    }
  return g;
}

// The routed experts' tokens gathered expert after expert (group_by_expert's order), every
// expert's w1/w3, SwiGLU and w2 as grouped calls, each expert's output added into acc in ascending
// order.
void routed_experts_by_expert(Backend& be, const RoutedExpertsArgs& a) {
  const int64_t n = a.x.size(0), dim = a.x.size(1);
  const int64_t experts = static_cast<int64_t>(a.experts.size());
  if (n == 0) return;
  const ExpertGroups groups = group_by_expert(be, a);
  const std::vector<int64_t>& first = groups.first;
  const int64_t m = groups.rows(), ff = a.experts[0].w1.out;
  if (m == 0) return;
  const DeviceArray<int32_t> drows(be, std::span<const int32_t>(groups.token));
  const DeviceArray<float> drow_w(be, std::span<const float>(groups.weight));
  auto xe = DeviceArray<uint16_t>::uninitialized(be, m * dim), g = DeviceArray<uint16_t>::uninitialized(be, m * ff);
  auto u = DeviceArray<uint16_t>::uninitialized(be, m * ff), act = DeviceArray<uint16_t>::uninitialized(be, m * ff);
  auto o = DeviceArray<uint16_t>::uninitialized(be, m * dim);
  be.gather_rows({a.x, drows.view(DType::kI32, {m}), xe.view(DType::kBF16, {m, dim})});
  std::vector<LinearArgs> up, down;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t r0 = first[e], me = first[e + 1] - first[e];
    if (me == 0) continue;
    const ExpertWeights& ew = a.experts[e];
    const TensorView xin = xe.view(DType::kBF16, {me, dim}, r0 * dim);
    up.push_back({xin, &ew.w1, g.view(DType::kBF16, {me, ff}, r0 * ff)});
    up.push_back({xin, &ew.w3, u.view(DType::kBF16, {me, ff}, r0 * ff)});
    down.push_back({act.view(DType::kBF16, {me, ff}, r0 * ff), &ew.w2, o.view(DType::kBF16, {me, dim}, r0 * dim)});
  }
  be.grouped_linear({up});
  be.swiglu({g.view(DType::kBF16, {m, ff}), u.view(DType::kBF16, {m, ff}), drow_w.view(DType::kF32, {m}),
             a.swiglu_limit, act.view(DType::kBF16, {m, ff})});
  be.grouped_linear({down});
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t r0 = first[e], me = first[e + 1] - first[e];
    if (me == 0) continue;
    be.scatter_add({o.view(DType::kBF16, {me, dim}, r0 * dim), drows.view(DType::kI32, {me}, r0), a.acc, {}});
  }
}

}  // namespace dsinfer
