// The MoE sublayer (spec §8): route, run each routed expert on its tokens in ascending expert id,
// accumulate in fp32, add the shared expert last, round once to bf16.
#include <fmt/format.h>

#include "core/float_formats.h"
#include "model/forward_batch.h"

namespace dsinfer {

void Model::moe(int l, Batch& b, const TensorView& x, const TensorView& out) {
  const ModelConfig& c = config_;
  const MoeWeights& w = weights_.layers[l].ffn;
  const int64_t n = b.n, dim = c.dim, ff = c.moe_inter_dim, k = c.activated_experts(l);
  std::vector<int32_t> idx(n * k);
  std::vector<float> wts(n * k);
  bool replayed = false;
  for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
    const auto* rp = b.chunks[ci].replay;
    if (!rp || !rp->count(l) || rp->at(l).experts.empty()) continue;
    std::copy(rp->at(l).experts.begin(), rp->at(l).experts.end(), idx.begin() + b.offset[ci] * k);
    replayed = true;
  }
  const ScoreFunc sf = c.score_function();
  backend_.router({x, w.gate, w.bias, w.bias_vl, TensorView{},
                   sf == ScoreFunc::kSoftmax   ? RouterScore::kSoftmax
                   : sf == ScoreFunc::kSigmoid ? RouterScore::kSigmoid
                                               : RouterScore::kSqrtSoftplus,
                   c.gate_temp, c.route_scale, c.norm_topk_prob, replayed, tv(idx.data(), DType::kI32, {n, k}),
                   tv(wts.data(), DType::kF32, {n, k})});
  for (size_t ci = 0; ci < b.chunks.size(); ++ci)
    b.record(ci, fmt::format("layer{}.gate_indices", l), DType::kI32, {b.size(ci), k}, &idx[b.offset[ci] * k]);

  std::vector<float> y(n * dim, 0.0f);
  std::vector<int64_t> rows;
  std::vector<float> row_w;
  for (int64_t e = 0; e < static_cast<int64_t>(w.experts.size()); ++e) {
    rows.clear(), row_w.clear();
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j)
        if (idx[t * k + j] == e) rows.push_back(t), row_w.push_back(wts[t * k + j]);
    if (rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(rows.size());
    std::vector<uint16_t> xe(m * dim), g(m * ff), u(m * ff), act(m * ff), o(m * dim);
    for (int64_t i = 0; i < m; ++i) std::memcpy(&xe[i * dim], x.as<const uint16_t>() + rows[i] * x.stride[0], dim * 2);
    const ExpertWeights& ew = w.experts[e];
    backend_.linear({tv(xe.data(), DType::kBF16, {m, dim}), &ew.w1, tv(g.data(), DType::kBF16, {m, ff})});
    backend_.linear({tv(xe.data(), DType::kBF16, {m, dim}), &ew.w3, tv(u.data(), DType::kBF16, {m, ff})});
    backend_.swiglu({tv(g.data(), DType::kBF16, {m, ff}), tv(u.data(), DType::kBF16, {m, ff}),
                     tv(row_w.data(), DType::kF32, {m}), static_cast<float>(c.swiglu_limit),
                     tv(act.data(), DType::kBF16, {m, ff})});
    backend_.linear({tv(act.data(), DType::kBF16, {m, ff}), &ew.w2, tv(o.data(), DType::kBF16, {m, dim})});
    for (int64_t i = 0; i < m; ++i)
      for (int64_t d = 0; d < dim; ++d) y[rows[i] * dim + d] += bf16_to_f32(o[i * dim + d]);
  }
  comm_.all_reduce_sum(tv(y.data(), DType::kF32, {n, dim}));  // routed experts live on their ranks

  std::vector<uint16_t> g(n * ff), u(n * ff), act(n * ff), o(n * dim);
  backend_.linear({x, &w.shared.w1, tv(g.data(), DType::kBF16, {n, ff})});
  backend_.linear({x, &w.shared.w3, tv(u.data(), DType::kBF16, {n, ff})});
  backend_.swiglu({tv(g.data(), DType::kBF16, {n, ff}), tv(u.data(), DType::kBF16, {n, ff}), TensorView{},
                   static_cast<float>(c.swiglu_limit), tv(act.data(), DType::kBF16, {n, ff})});
  backend_.linear({tv(act.data(), DType::kBF16, {n, ff}), &w.shared.w2, tv(o.data(), DType::kBF16, {n, dim})});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < dim; ++d)
      out.as<uint16_t>()[t * out.stride[0] + d] = f32_to_bf16(y[t * dim + d] + bf16_to_f32(o[t * dim + d]));
}

}  // namespace dsinfer
