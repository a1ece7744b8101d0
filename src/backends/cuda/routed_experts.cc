// The routed experts on the CUDA backend (routed_experts.h): the experts' device tables, and a
// step's tokens' experts on the device's choice: one token on its own (its experts as the groups
// of one launch a matrix), more sorted by expert on the device and run as one grouped launch a
// matrix. The tiled kernel's per-row sums do not depend on the rows beside them, so a token's
// outputs are the same bits on either path; fp4 experts (V4.1's) run grouped at every step size, on
// the wgmma kernel's decode tiles. With the fma or gemv kernel forced (they take one
// row a group) every token runs on its own; with the exact kernels, up to kExactTokenByToken.
// A prefill chunk's tokens (many_routed_tokens) are sorted by expert on the device too, and each
// matrix kind runs as one grouped launch of the wgmma kernel. Tables the device cannot index, and
// step sizes between the two (DSINFER_CUDA_ROUTED_TOKENS below 64), read the choice back and group
// the tokens by expert on the host.
#include "backends/cuda/routed_experts.h"

#include <algorithm>
#include <initializer_list>
#include <span>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/elementwise/elementwise.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "backends/cuda/kernels/moe/config.h"
#include "backends/cuda/kernels/moe/router.h"
#include "backends/cuda/linear_dispatch.h"
#include "core/check.h"
#include "ops/composite.h"
#include "ops/device_array.h"

namespace dsinfer {
namespace cuda {

ExpertTables::~ExpertTables() {
  for (ExpertTable& t : tables_) cudaFree(t.device), cudaFree(t.maps);
}

namespace {

// The experts' weights as the wgmma kernel's tensor maps (linear_wgmma.cu), in device memory; null
// if some weight's layout keeps them from the TMA.
void* weight_maps(std::span<const ExpertWeights> experts) {
  struct alignas(64) Map {
    uint8_t bytes[kTensorMapBytes];
  };
  const size_t count = experts.size();
  std::vector<Map> host(3 * count);
  for (size_t e = 0; e < count; ++e) {
    const ExpertWeights& ew = experts[e];
    for (const auto& [w, at] : {std::pair{&ew.w1, 2 * e}, {&ew.w3, 2 * e + 1}, {&ew.w2, 2 * count + e}}) {
      const bool fp4 = w->format == LinearFormat::kFp4;
      if (!wgmma_weight_map(host[at].bytes, w->weight.as<const uint8_t>(), static_cast<int>(w->out),
                            static_cast<int>(w->in), w->weight.stride[0], fp4))
        return nullptr;
    }
  }
  void* device = nullptr;
  check_cuda(cudaMalloc(&device, host.size() * sizeof(Map)), "expert tensor maps");
  check_cuda(cudaMemcpy(device, host.data(), host.size() * sizeof(Map), cudaMemcpyHostToDevice), "expert tensor maps");
  return device;
}

}  // namespace

const ExpertTable& ExpertTables::find(const RoutedExpertsArgs& a) {
  const std::span<const ExpertWeights> experts = a.experts;
  const void* first_w1 = experts.empty() ? nullptr : experts.front().w1.weight.data;
  const void* last_w2 = experts.empty() ? nullptr : experts.back().w2.weight.data;
  const int64_t k = a.indices.size(1);
  for (const ExpertTable& t : tables_)
    if (t.experts == experts.data() && t.count == experts.size() && t.first_w1 == first_w1 && t.last_w2 == last_w2 &&
        t.k == k && t.x_dtype == a.x.dtype)
      return t;
  ExpertTable t{.experts = experts.data(),
                .count = experts.size(),
                .first_w1 = first_w1,
                .last_w2 = last_w2,
                .k = k,
                .x_dtype = a.x.dtype,
                .on_device = experts_on_device(a)};
  if (t.on_device) {
    const size_t e_count = experts.size();
    std::vector<RoutedWeight> host(3 * e_count);
    for (size_t e = 0; e < e_count; ++e) {
      const ExpertWeights& ew = experts[e];
      for (const auto& [w, at] : {std::pair{&ew.w1, 2 * e}, {&ew.w3, 2 * e + 1}, {&ew.w2, 2 * e_count + e}})
        host[at] = {w->weight.as<const uint8_t>(), w->scale.as<const uint8_t>()};
    }
    check_cuda(cudaMalloc(&t.device, host.size() * sizeof(RoutedWeight)), "route table");
    check_cuda(cudaMemcpy(t.device, host.data(), host.size() * sizeof(RoutedWeight), cudaMemcpyHostToDevice),
               "route table");
    t.maps = weight_maps(experts);
  }
  // Capture consults this (CudaStepGraphs' may_capture): the first decode step makes the tables
  // as it runs uncaptured, so the answer is known before any capture begins.
  reads_choice_ = reads_choice_ || !t.on_device;
  tables_.push_back(t);
  return tables_.back();
}

}  // namespace cuda

void CudaBackend::routed_experts(const RoutedExpertsArgs& a) {
  // A rank's share of the experts (expert parallelism) runs on CPU ranks only for now.
  DSINFER_CHECK(a.first_expert == 0, "routed_experts: a table from expert {} (expert parallelism) on the GPU",
                a.first_expert);
  const int64_t n = a.x.size(0), k = a.indices.size(1), experts = static_cast<int64_t>(a.experts.size());
  const cuda::LinearKernel forced = options_.linear_kernel;
  const bool many = cuda::many_routed_tokens(n, forced);
  // Grouped by expert on the host, whose sums' launch takes up to moe_config::kMaxK experts a token
  // (V4.1 chooses 6), else expert by expert.
  const auto on_host = [&] {
    k <= cuda::moe_config::kMaxK ? routed_experts_grouped_on_host(a) : routed_experts_by_expert(*this, a);
  };
  if (!many && !cuda::few_routed_tokens(n, options_.routed_tokens)) return on_host();
  const cuda::ExpertTable* table = &experts_.find(a);
  if (!table->on_device) return many ? on_host() : routed_experts_by_expert(*this, a);
  check_device({&a.x, &a.indices, &a.weights, &a.acc}, "routed_experts");
  DSINFER_CHECK(a.indices.is_contiguous() && a.weights.is_contiguous() && a.acc.dtype == DType::kF32 &&
                    a.acc.is_contiguous() && a.x.stride[1] == 1,
                "routed_experts: contiguous choices, an f32 accumulator");
  const bool tiled = forced == cuda::LinearKernel::kAuto || forced == cuda::LinearKernel::kTiled;
  // fp4 experts the wgmma kernel can read run grouped at one token too: its decode tiles take every
  // step of up to kFewRows tokens alike. (Where it turns them down, the tiled kernel's bits are
  // those of the path below.)
  const bool wgmma_decode =
      forced == cuda::LinearKernel::kAuto && table->maps != nullptr && a.experts[0].w1.format == LinearFormat::kFp4;
  if (many || (tiled && (n > 1 || wgmma_decode)) || (forced == cuda::LinearKernel::kExact && n > kExactTokenByToken) ||
      forced == cuda::LinearKernel::kMma) {
    grouped_routed_experts(a, *table);
    return;
  }
  if (n > 1) {  // token after token: each its own experts' GEMVs on the device's choice, as below
    const auto row = [](TensorView v, int64_t t) {
      v.data = v.as<uint8_t>() + dtype_bytes(v.dtype, t * v.stride[0]);
      v.shape[0] = 1;
      return v;
    };
    for (int64_t t = 0; t < n; ++t)
      routed_experts({row(a.x, t), row(a.indices, t), row(a.weights, t), a.experts, a.swiglu_limit, row(a.acc, t)});
    return;
  }
  const LinearWeight &w1 = a.experts[0].w1, &w2 = a.experts[0].w2;
  const int64_t dim = w1.in, ff = w1.out;
  // The step's temporaries: scratch buffers, the same memory every call (and every captured step).
  auto* gate = static_cast<uint16_t*>(scratch(scratch_->routed_gate, k * ff * 2));
  auto* up = static_cast<uint16_t*>(scratch(scratch_->routed_up, k * ff * 2));
  auto* act = static_cast<uint16_t*>(scratch(scratch_->routed_act, k * ff * 2));
  auto* o = static_cast<uint16_t*>(scratch(scratch_->routed_out, k * dim * 2));
  const auto routed_gemv = [&](const uint16_t* x, int64_t rows, int64_t in, const LinearWeight& w, int per_route,
                               const cuda::RoutedWeight* entries, const std::vector<uint16_t*>& outs) {
    cuda::BlockLinearParams p = block_params(w, static_cast<int64_t>(outs.size()), 1);
    p.x_bf16_stride = in, p.routes = a.indices.as<const int32_t>(), p.route_table = entries;
    p.per_route = per_route, p.route_count = static_cast<int>(experts);
    // Group g's input: the one token's row, or slot g's.
    const auto row_of = [&](size_t g) { return rows == 1 ? 0 : static_cast<int64_t>(g); };
    if (cuda::tiled_quantises_input(p) && cuda::bf16_rows_aligned(x, in)) {
      for (size_t g = 0; g < outs.size(); ++g) p.op[g] = {.y = outs[g], .x_bf16 = x + row_of(g) * in};
    } else {
      const auto [values, codes, scales] = quantize_rows(x, rows, in, "routed experts (input quantisation)");
      for (size_t g = 0; g < outs.size(); ++g) {
        const int64_t r = row_of(g);
        p.op[g] = {values + r * in, scales + r * (in / 32), nullptr, nullptr, outs[g], codes + r * in};
      }
    }
    launched(cuda::launch_block_linear(p), "routed experts");
  };
  std::vector<uint16_t*> up_outs, down_outs;
  for (int64_t j = 0; j < k; ++j) {
    up_outs.push_back(gate + j * ff), up_outs.push_back(up + j * ff);
    down_outs.push_back(o + j * dim);
  }
  routed_gemv(a.x.as<const uint16_t>(), 1, dim, w1, 2, table->device, up_outs);
  swiglu({TensorView::contiguous(gate, DType::kBF16, {k, ff}, Device::kCuda),
          TensorView::contiguous(up, DType::kBF16, {k, ff}, Device::kCuda),
          TensorView::contiguous(a.weights.data, DType::kF32, {k}, Device::kCuda), a.swiglu_limit,
          TensorView::contiguous(act, DType::kBF16, {k, ff}, Device::kCuda)});
  routed_gemv(act, k, ff, w2, 1, table->device + 2 * experts, down_outs);
  launched(cuda::launch_routed_combine({.o = o,
                                        .indices = a.indices.as<const int32_t>(),
                                        .acc = a.acc.as<float>(),
                                        .k = static_cast<int>(k),
                                        .dim = static_cast<int>(dim),
                                        .stream = stream_}),
           "routed experts (sum)");
}

void CudaBackend::grouped_routed_experts(const RoutedExpertsArgs& a, const cuda::ExpertTable& table) {
  const int64_t n = a.x.size(0), k = a.indices.size(1), experts = static_cast<int64_t>(a.experts.size());
  const LinearWeight &w1 = a.experts[0].w1, &w2 = a.experts[0].w2;
  const int64_t dim = w1.in, ff = w1.out, m = n * k, max_groups = std::min(experts, m);
  // The step's temporaries: scratch buffers, the same memory every call (and every captured step).
  auto* gate = static_cast<uint16_t*>(scratch(scratch_->routed_gate, m * ff * 2));
  auto* up = static_cast<uint16_t*>(scratch(scratch_->routed_up, m * ff * 2));
  auto* o = static_cast<uint16_t*>(scratch(scratch_->routed_out, m * dim * 2));
  auto* order = static_cast<uint8_t*>(scratch(scratch_->routed_order, m * 12 + max_groups * sizeof(cuda::ExpertGroup)));
  auto* token = reinterpret_cast<int32_t*>(order);
  auto* weight = reinterpret_cast<float*>(order + m * 4);
  auto* row = reinterpret_cast<int32_t*>(order + m * 8);
  auto* groups = reinterpret_cast<cuda::ExpertGroup*>(order + m * 12);
  launched(cuda::launch_group_routes({.indices = a.indices.as<const int32_t>(),
                                      .weights = a.weights.as<const float>(),
                                      .token = token,
                                      .weight = weight,
                                      .row = row,
                                      .groups = groups,
                                      .n = static_cast<int>(n),
                                      .k = static_cast<int>(k),
                                      .experts = static_cast<int>(experts),
                                      .max_groups = static_cast<int>(max_groups),
                                      .stream = stream_}),
           "routed experts (grouping)");
  // One launch a matrix kind over every used expert's rows; `outs` matrices share the input.
  const auto expert_params = [&](const LinearWeight& w, int64_t first, int parts) {
    cuda::BlockLinearParams p = block_params(w, max_groups * parts, m);
    p.route_table = table.device + first, p.per_route = parts, p.route_count = static_cast<int>(experts);
    if (table.maps) p.route_maps = static_cast<const uint8_t*>(table.maps) + first * cuda::kTensorMapBytes;
    p.expert_groups = groups, p.max_group_rows = static_cast<int>(n);  // an expert takes a token once
    return p;
  };
  const auto grouped = [&](cuda::BlockLinearParams p, const Quantized& x, std::initializer_list<uint16_t*> outs) {
    const bool wgmma = cuda::wgmma_takes(p);
    int part = 0;
    for (uint16_t* y : outs)
      p.op[part++] = wgmma
                         ? cuda::LinearOperands{.y = y, .x_operand = x.values}
                         : cuda::LinearOperands{.x_values = x.values, .x_scales = x.scales, .y = y, .x_codes = x.codes};
    launched(cuda::launch_block_linear(p), "routed experts");
  };
  const char* what = "routed experts (input quantisation)";
  // w1 and w3 on the tokens' rows in the experts' order, gathered by their quantisation.
  const cuda::BlockLinearParams up_p = expert_params(w1, 0, 2);
  grouped(up_p, quantize_rows(a.x.as<const uint16_t>(), m, dim, what, cuda::wgmma_takes(up_p), token, a.x.stride[0]),
          {gate, up});
  // w2 on SwiGLU's result: quantised by the SwiGLU kernel itself for the wgmma kernel.
  const cuda::BlockLinearParams down_p = expert_params(w2, 2 * experts, 1);
  if (cuda::wgmma_takes(down_p)) {
    const Quantized operand = quant_scratch(m, ff);  // in the values' buffer (quantize_rows's layout)
    launched(cuda::launch_swiglu({.gate = gate,
                                  .up = up,
                                  .gate_stride = ff,
                                  .up_stride = ff,
                                  .row_weight = weight,
                                  .limit = a.swiglu_limit,
                                  .operand = operand.values,
                                  .n = static_cast<int>(m),
                                  .f = static_cast<int>(ff),
                                  .stream = stream_}),
             "routed experts (swiglu)");
    grouped(down_p, operand, {o});
  } else {
    auto* act = static_cast<uint16_t*>(scratch(scratch_->routed_act, m * ff * 2));
    swiglu({TensorView::contiguous(gate, DType::kBF16, {m, ff}, Device::kCuda),
            TensorView::contiguous(up, DType::kBF16, {m, ff}, Device::kCuda),
            TensorView::contiguous(weight, DType::kF32, {m}, Device::kCuda), a.swiglu_limit,
            TensorView::contiguous(act, DType::kBF16, {m, ff}, Device::kCuda)});
    grouped(down_p, quantize_rows(act, m, ff, what), {o});
  }
  for (int64_t t0 = 0; t0 < n; t0 += cuda::kMaxCombineTokens) {  // in pieces of the launch's most tokens
    launched(cuda::launch_routed_combine({.o = o,
                                          .rows = row + t0 * k,
                                          .indices = a.indices.as<const int32_t>() + t0 * k,
                                          .acc = a.acc.as<float>() + t0 * dim,
                                          .n = static_cast<int>(std::min(n - t0, cuda::kMaxCombineTokens)),
                                          .k = static_cast<int>(k),
                                          .dim = static_cast<int>(dim),
                                          .stream = stream_}),
             "routed experts (sum)");
  }
}

void CudaBackend::routed_experts_grouped_on_host(const RoutedExpertsArgs& a) {
  const int64_t n = a.x.size(0), dim = a.x.size(1), k = a.indices.size(1);
  if (n == 0) return;
  check_device({&a.x, &a.indices, &a.weights, &a.acc}, "routed_experts");
  DSINFER_CHECK(a.x.dtype == DType::kBF16 && a.acc.dtype == DType::kF32 && a.acc.is_contiguous() &&
                    a.indices.is_contiguous() && a.acc.size(1) == dim,
                "routed_experts: bf16 rows, an f32 accumulator");
  const ExpertGroups groups = group_by_expert(*this, a);
  const int64_t m = groups.rows(), ff = a.experts[0].w1.out;
  if (m == 0) return;
  const DeviceArray<int32_t> tokens(*this, std::span<const int32_t>(groups.token));
  const DeviceArray<int32_t> slot_rows(*this, std::span<const int32_t>(groups.slot_row));
  const DeviceArray<float> weights(*this, std::span<const float>(groups.weight));
  const auto rows = [this](int64_t count) { return DeviceArray<uint16_t>::uninitialized(*this, count); };
  DeviceArray<uint16_t> xe = rows(m * dim), gate = rows(m * ff), up = rows(m * ff), act = rows(m * ff),
                        o = rows(m * dim);
  gather_rows({a.x, tokens.view(DType::kI32, {m}), xe.view(DType::kBF16, {m, dim})});

  // Expert e's rows of an [m, cols] array.
  const auto part = [&](const DeviceArray<uint16_t>& v, size_t e, int64_t cols) {
    return v.view(DType::kBF16, {groups.rows_of(e), cols}, groups.first[e] * cols);
  };
  const size_t experts = a.experts.size();
  for (size_t e = 0; e < experts; ++e) {
    if (groups.rows_of(e) == 0) continue;
    const LinearArgs ops[] = {{part(xe, e, dim), &a.experts[e].w1, part(gate, e, ff)},
                              {part(xe, e, dim), &a.experts[e].w3, part(up, e, ff)}};
    grouped_linear({ops});
  }
  swiglu({gate.view(DType::kBF16, {m, ff}), up.view(DType::kBF16, {m, ff}), weights.view(DType::kF32, {m}),
          a.swiglu_limit, act.view(DType::kBF16, {m, ff})});
  for (size_t e = 0; e < experts; ++e) {
    if (groups.rows_of(e) == 0) continue;
    linear({part(act, e, ff), &a.experts[e].w2, part(o, e, dim)});
  }
  // Each token's experts added in ascending id (the order of routed_experts_by_expert's adds), in
  // pieces of the launch's most tokens.
  for (int64_t t0 = 0; t0 < n; t0 += cuda::kMaxCombineTokens) {
    const int64_t count = std::min(n - t0, cuda::kMaxCombineTokens);
    launched(cuda::launch_routed_combine({.o = o.data(),
                                          .rows = slot_rows.data() + t0 * k,
                                          .indices = a.indices.as<const int32_t>() + t0 * k,
                                          .acc = a.acc.as<float>() + t0 * dim,
                                          .n = static_cast<int>(count),
                                          .k = static_cast<int>(k),
                                          .dim = static_cast<int>(dim),
                                          .stream = stream_}),
             "routed experts (sum)");
  }
}

}  // namespace dsinfer
