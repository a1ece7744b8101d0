// The MoE sublayer (spec §8): route, run each routed expert on its tokens in ascending expert id,
// accumulate in fp32, add the shared expert last, round once to bf16. The routing decision comes
// to the host, which groups the tokens by expert.
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "core/float_formats.h"
#include "model/forward_batch.h"

namespace dsinfer {

void Model::moe(int l, Batch& b, const TensorView& x, const TensorView& out) {
  const ModelConfig& c = config_;
  const MoeWeights& w = weights_.layers[l].ffn;
  const int64_t n = b.n, dim = c.dim, ff = c.moe_inter_dim, k = c.activated_experts(l);
  // The choice (ids, then weights as f32 bits) in one array: one download brings both.
  std::vector<int32_t> routed(2 * n * k);
  bool replayed = false;
  for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
    const auto* rp = b.chunks[ci].replay;
    if (!rp || !rp->count(l) || rp->at(l).experts.empty()) continue;
    std::copy(rp->at(l).experts.begin(), rp->at(l).experts.end(), routed.begin() + b.offset[ci] * k);
    replayed = true;
  }
  DeviceArray<int32_t> droute = replayed ? b.upload(routed) : b.scratch<int32_t>(2 * n * k);
  const ScoreFunc sf = c.score_function();
  backend_.router({x, w.gate, w.bias, w.bias_vl, TensorView{},
                   sf == ScoreFunc::kSoftmax   ? RouterScore::kSoftmax
                   : sf == ScoreFunc::kSigmoid ? RouterScore::kSigmoid
                                               : RouterScore::kSqrtSoftplus,
                   c.gate_temp, c.route_scale, c.norm_topk_prob, replayed, droute.view(DType::kI32, {n, k}),
                   droute.view(DType::kF32, {n, k}, n * k)});
  routed = droute.download();
  const std::vector<int32_t> idx(routed.begin(), routed.begin() + n * k);
  std::vector<float> wts(n * k);
  std::memcpy(wts.data(), routed.data() + n * k, n * k * sizeof(float));
  for (size_t ci = 0; ci < b.chunks.size(); ++ci)
    b.record(ci, fmt::format("layer{}.gate_indices", l), DType::kI32, {b.size(ci), k}, &idx[b.offset[ci] * k]);

  // The routed experts' tokens gathered expert after expert (ascending id), every expert's
  // w1/w3, SwiGLU and w2 as grouped calls, each expert's output added into y in ascending order.
  // The rows are sorted by counting (tokens ascending within an expert), one pass over the choices.
  const int64_t experts = static_cast<int64_t>(w.experts.size());
  std::vector<int64_t> first(experts + 1, 0);  // expert e owns rows [first[e], first[e + 1])
  for (int32_t e : idx) {
    DSINFER_CHECK(e >= 0 && e < experts, "layer {}: expert {} of {}", l, e, experts);
    ++first[e + 1];
  }
  for (int64_t e = 0; e < experts; ++e) first[e + 1] += first[e];
  std::vector<int32_t> rows(n * k);
  std::vector<float> row_w(n * k);
  std::vector<int64_t> next(first.begin(), first.end() - 1);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = next[idx[t * k + j]]++;
      rows[at] = static_cast<int32_t>(t), row_w[at] = wts[t * k + j];
    }
  const int64_t m = static_cast<int64_t>(rows.size());
  DeviceArray<float> y = b.zeros<float>(n * dim);
  const DeviceArray<int32_t> drows = b.upload(rows);
  const DeviceArray<float> drow_w = b.upload(row_w);
  DeviceArray<uint16_t> xe = b.scratch<uint16_t>(m * dim), g = b.scratch<uint16_t>(m * ff);
  DeviceArray<uint16_t> u = b.scratch<uint16_t>(m * ff), act = b.scratch<uint16_t>(m * ff);
  DeviceArray<uint16_t> o = b.scratch<uint16_t>(m * dim);
  backend_.gather_rows({x, drows.view(DType::kI32, {m}), xe.view(DType::kBF16, {m, dim})});
  std::vector<LinearArgs> up, down;
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const int64_t r0 = first[e], me = first[e + 1] - first[e];
    if (me == 0) continue;
    const ExpertWeights& ew = w.experts[e];
    const TensorView xin = xe.view(DType::kBF16, {me, dim}, r0 * dim);
    up.push_back({xin, &ew.w1, g.view(DType::kBF16, {me, ff}, r0 * ff)});
    up.push_back({xin, &ew.w3, u.view(DType::kBF16, {me, ff}, r0 * ff)});
    down.push_back({act.view(DType::kBF16, {me, ff}, r0 * ff), &ew.w2, o.view(DType::kBF16, {me, dim}, r0 * dim)});
  }
  backend_.grouped_linear({up});
  backend_.swiglu({g.view(DType::kBF16, {m, ff}), u.view(DType::kBF16, {m, ff}), drow_w.view(DType::kF32, {m}),
                   static_cast<float>(c.swiglu_limit), act.view(DType::kBF16, {m, ff})});
  backend_.grouped_linear({down});
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const int64_t r0 = first[e], me = first[e + 1] - first[e];
    if (me == 0) continue;
    backend_.scatter_add({o.view(DType::kBF16, {me, dim}, r0 * dim),
                          drows.view(DType::kI32, {me}, r0),
                          y.view(DType::kF32, {n, dim}),
                          {}});
  }
  comm_.all_reduce_sum(y.view(DType::kF32, {n, dim}));  // routed experts live on their ranks

  // The shared expert, added last; out = bf16(y + shared).
  DeviceArray<uint16_t> sg = b.scratch<uint16_t>(n * ff), su = b.scratch<uint16_t>(n * ff);
  DeviceArray<uint16_t> sact = b.scratch<uint16_t>(n * ff), so = b.scratch<uint16_t>(n * dim);
  const LinearArgs shared_up[] = {{x, &w.shared.w1, sg.view(DType::kBF16, {n, ff})},
                                  {x, &w.shared.w3, su.view(DType::kBF16, {n, ff})}};
  backend_.grouped_linear({shared_up});
  backend_.swiglu({sg.view(DType::kBF16, {n, ff}), su.view(DType::kBF16, {n, ff}), TensorView{},
                   static_cast<float>(c.swiglu_limit), sact.view(DType::kBF16, {n, ff})});
  backend_.linear({sact.view(DType::kBF16, {n, ff}), &w.shared.w2, so.view(DType::kBF16, {n, dim})});
  std::vector<int32_t> all(n);
  for (int64_t t = 0; t < n; ++t) all[t] = static_cast<int32_t>(t);
  const DeviceArray<int32_t> dall = b.upload(all);
  backend_.scatter_add(
      {so.view(DType::kBF16, {n, dim}), dall.view(DType::kI32, {n}), y.view(DType::kF32, {n, dim}), out});
}

}  // namespace dsinfer
