// The MoE sublayer (spec §8): route, run each routed expert on its tokens in ascending expert id,
// accumulate in fp32, add the shared expert last, round once to bf16. The routing decision stays
// in the backend's memory; Backend::routed_experts reads it where it must.
#include <fmt/format.h>

#include "model/forward_batch.h"

namespace dsinfer {

Status Model::moe(int l, Batch& b, const TensorView& x, const TensorView& out) {
  const ModelConfig& c = config_;
  const MoeWeights& w = weights_.layers[l].ffn;
  const int64_t n = b.n, dim = c.dim, ff = c.moe_inter_dim, k = c.activated_experts(l);
  // The choice (ids, then weights as f32 bits) in one array: one read brings both to the host.
  std::vector<int32_t> routed(2 * n * k);
  bool replayed = false;
  for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
    const LayerReplay* rp = b.replay(ci, l);
    if (!rp || rp->experts.empty()) continue;
    std::copy(rp->experts.begin(), rp->experts.end(), routed.begin() + b.offset[ci] * k);
    replayed = true;
  }
  DeviceArray<int32_t> droute = replayed ? b.upload(routed) : b.scratch<int32_t>(2 * n * k);
  // The route as side work beside the shared expert, which does not depend on it (side_queue).
  const ScoreFunc sf = c.score_function();
  SideWork route(b.be, [&] {
    b.router({x, w.gate, w.bias, w.bias_vl, TensorView{},
              sf == ScoreFunc::kSoftmax   ? RouterScore::kSoftmax
              : sf == ScoreFunc::kSigmoid ? RouterScore::kSigmoid
                                          : RouterScore::kSqrtSoftplus,
              c.gate_temp, c.route_scale, c.norm_topk_prob, replayed, droute.view(DType::kI32, {n, k}),
              droute.view(DType::kF32, {n, k}, n * k)});
  });

  // The shared expert, added last: out = bf16(y + shared).
  DeviceArray<uint16_t> so = b.scratch<uint16_t>(n * dim);
  {
    DeviceArray<uint16_t> sg = b.scratch<uint16_t>(n * ff), su = b.scratch<uint16_t>(n * ff);
    DeviceArray<uint16_t> sact = b.scratch<uint16_t>(n * ff);
    const LinearArgs shared_up[] = {{x, &w.shared.w1, sg.view(DType::kBF16, {n, ff})},
                                    {x, &w.shared.w3, su.view(DType::kBF16, {n, ff})}};
    b.grouped_linear(shared_up);
    b.be.swiglu({sg.view(DType::kBF16, {n, ff}), su.view(DType::kBF16, {n, ff}), TensorView{},
                 static_cast<float>(c.swiglu_limit), sact.view(DType::kBF16, {n, ff})});
    b.linear({sact.view(DType::kBF16, {n, ff}), &w.shared.w2, so.view(DType::kBF16, {n, dim})});
  }

  route.join();
  for (size_t ci = 0; ci < b.chunks.size(); ++ci)
    b.record(ci, layer_name(l) + ".gate_indices", DType::kI32, {b.size(ci), k}, droute, b.offset[ci] * k);
  DeviceArray<float> y = b.zeros<float>(n * dim);
  b.routed_experts({x, droute.view(DType::kI32, {n, k}), droute.view(DType::kF32, {n, k}, n * k), w.experts,
                    static_cast<float>(c.swiglu_limit), y.view(DType::kF32, {n, dim}), w.first_expert});
  DSINFER_RETURN_IF_ERROR(comm_.all_reduce_sum(y.view(DType::kF32, {n, dim})));  // experts live on their ranks
  b.be.scatter_add(
      {so.view(DType::kBF16, {n, dim}), b.token_rows().view(DType::kI32, {n}), y.view(DType::kF32, {n, dim}), out});
  return {};
}

}  // namespace dsinfer
