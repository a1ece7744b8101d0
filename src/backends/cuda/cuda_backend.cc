// CudaBackend: argument checks and the mapping of each op's views onto its kernel's parameters.
#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <cublas_v2.h>
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/elementwise/elementwise.h"

#include "backends/cuda/kernels/linear/linear.h"
#include "backends/cuda/kernels/moe/router.h"
#include "core/check.h"
#include "ops/composite.h"
#include "ops/device_array.h"

namespace dsinfer {
namespace {

using cuda::check_cuda;

const uint16_t* bf16(const TensorView& t) {
  return t.as<const uint16_t>();
}

int size_of(const TensorView& t, int d) {  // the kernels' parameters are int
  return static_cast<int>(t.size(d));
}

}  // namespace

CudaBackend::CudaBackend(const CudaBackendOptions& options, cudaStream_t stream) : options_(options), stream_(stream) {
  const int rows = options_.gemv_rows;
  DSINFER_CHECK(options_.routed_tokens >= 0 && (rows == 0 || rows == 1 || rows == 8),
                "CudaBackend: routed_tokens {} (>= 0), gemv_rows {} (0, 1 or 8)", options_.routed_tokens, rows);
  int device = 0;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaGetDevice(&device), "device");
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, device), "memory pool");
  uint64_t keep_all = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all), "memory pool");
  staging_.half_bytes = size_t{16} << 20;
  check_cuda(cudaMallocHost(&staging_.host, 2 * staging_.half_bytes), "pinned staging");
  for (cudaEvent_t& e : staging_.done) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
  capture_.enabled = options_.step_graphs;
}

void* CudaBackend::allocate(size_t bytes) {
  ++stats_.allocations;
  void* p = nullptr;
  if (capture_.active) {
    const size_t aligned = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    capture_.needed += aligned;
    if (capture_.used + aligned <= capture_.arena_bytes) {
      p = capture_.arena + capture_.used;
      capture_.used += aligned, ++capture_.live;
      return p;
    }
  }
  if (capture_.active) capture_.keepable = false;  // a graph allocation: freed with the graph, not reused
  check_cuda(cudaMallocAsync(&p, bytes ? bytes : 1, stream_), "allocation");
  return p;
}

void CudaBackend::deallocate(void* p) {
  if (in_arena(p)) {
    --capture_.live;
    return;
  }
  check_cuda(cudaFreeAsync(p, stream_), "free");
}

void CudaBackend::zero(void* p, size_t bytes) {
  check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "memset");
}

void CudaBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  ++stats_.uploads;
  if (capture_.active && capture_upload(dst, host_src, bytes)) return;
  Staging& st = staging_;
  DSINFER_CHECK(!capture_.active || st.used + bytes <= st.half_bytes,
                "CudaBackend: a captured step's uploads must fit the pinned ring's half");
  if (bytes > st.half_bytes) {  // from pageable memory: returns once the source is staged
    check_cuda(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
    return;
  }
  if (st.used + bytes > st.half_bytes) {  // move to the other half once its copies are done
    check_cuda(cudaEventRecord(st.done[st.half], stream_), "copy to device");
    st.half ^= 1, st.used = 0;
    check_cuda(cudaEventSynchronize(st.done[st.half]), "copy to device");
  }
  uint8_t* staged = st.host + st.half * st.half_bytes + st.used;
  std::memcpy(staged, host_src, bytes);
  check_cuda(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  st.used += (bytes + 255) / 256 * 256;
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  DSINFER_CHECK(!capture_.active, "CudaBackend: a captured step may not read device memory back");
  ++stats_.downloads;
  const auto t0 = std::chrono::steady_clock::now();
  check_cuda(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
  check_cuda(cudaStreamSynchronize(stream_), "copy to host");
  stats_.download_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CudaBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
  ++stats_.device_copies;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy on device");
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  cudaFreeHost(staging_.host);
  for (cudaEvent_t e : staging_.done) cudaEventDestroy(e);
  for (Scratch* s : {&quant_values_, &quant_codes_, &quant_scales_, &dense_x_, &hc_mix_, &tc_weights_, &tc_inputs_,
                     &attn_scores_, &router_logits_})
    cudaFree(s->data);
  if (cublas_) cublasDestroy(cublas_);
  for (RouteTable& t : route_tables_) cudaFree(t.device);
  for (const auto& [id, g] : capture_.graphs) cudaGraphExecDestroy(g.exec);
  cudaFree(capture_.arena);
  cudaFreeHost(capture_.uploads);
  if (capture_.ready) cudaEventDestroy(capture_.ready);
  if (capture_.stream) cudaStreamDestroy(capture_.stream);
}

void CudaBackend::check_device(std::initializer_list<const TensorView*> views, const char* op) {
  for (const TensorView* v : views)
    DSINFER_CHECK(!v->data || v->device == Device::kCuda, "CudaBackend::{}: a view is in host memory", op);
}

void CudaBackend::launched(cudaError_t e, const char* op) {
  ++stats_.ops;
  check_cuda(e, op);
}

void* CudaBackend::scratch(Scratch& s, size_t bytes) {
  if (bytes > s.bytes) {
    if (capture_.active)  // the graph's earlier nodes read the old buffer: freed once it ran, not kept
      capture_.retired.push_back(s.data), capture_.keepable = false;
    else
      cudaFree(s.data);
    ++capture_.generation;  // kept graphs name the old buffer
    s.data = nullptr;
    check_cuda(cudaMalloc(&s.data, bytes), "scratch allocation");
    s.bytes = bytes;
  }
  return s.data;
}

// Row-wise ops.
void CudaBackend::embed(const EmbedArgs& a) {
  check_device({&a.ids, &a.table, &a.out}, "embed");
  DSINFER_CHECK(a.table.is_contiguous() && a.out.stride[1] == 1, "embed: contiguous rows only");
  launched(cuda::launch_embed({.ids = a.ids.as<const int32_t>(),
                               .table = bf16(a.table),
                               .rows = a.table.size(0),
                               .vocab_offset = a.vocab_offset,
                               .out = a.out.as<uint16_t>(),
                               .out_stride = a.out.stride[0],
                               .n = size_of(a.ids, 0),
                               .dim = size_of(a.table, 1),
                               .stream = stream_}),
           "embed");
}

void CudaBackend::rms_norm(const RmsNormArgs& a) {
  check_device({&a.x, &a.weight, &a.out}, "rms_norm");
  launched(cuda::launch_rms_norm({.x = bf16(a.x),
                                  .x_stride = a.x.stride[0],
                                  .weight = bf16(a.weight),
                                  .out = a.out.as<uint16_t>(),
                                  .out_stride = a.out.stride[0],
                                  .n = size_of(a.x, 0),
                                  .d = size_of(a.x, 1),
                                  .eps = static_cast<float>(a.eps),
                                  .stream = stream_}),
           "rms_norm");
}

void CudaBackend::rope(const RopeArgs& a) {
  check_device({&a.x, &a.cos, &a.sin}, "rope");
  DSINFER_CHECK(a.sin.stride[0] == a.cos.stride[0], "rope: cos and sin tables of one layout");
  launched(cuda::launch_rope({.x = a.x.as<uint16_t>(),
                              .x_stride = a.x.stride[0],
                              .head_stride = a.x.stride[1],
                              .cos = a.cos.as<const float>(),
                              .sin = a.sin.as<const float>(),
                              .table_stride = a.cos.stride[0],
                              .n = size_of(a.x, 0),
                              .heads = size_of(a.x, 1),
                              .d = size_of(a.x, 2),
                              .half = size_of(a.cos, 1),
                              .inverse = a.inverse,
                              .stream = stream_}),
           "rope");
}

void CudaBackend::fake_quant(const FakeQuantArgs& a) {
  check_device({&a.x}, "fake_quant");
  const int64_t n = a.x.size(0), d = a.x.size(1);
  if (a.kind == FakeQuant::kFp8Group32) {
    // One launch over contiguous rows, else one per (contiguous) row.
    const bool contiguous = a.x.stride[0] == d;
    for (int64_t i = 0; i < (contiguous ? 1 : n); ++i) {
      uint16_t* x = a.x.as<uint16_t>() + i * a.x.stride[0];
      launched(cuda::launch_act_quant({.x = x, .fake = x, .n = contiguous ? n * d : d, .stream = stream_}),
               "fake_quant (fp8)");
    }
    return;
  }
  const bool e4m3 = a.kind == FakeQuant::kFp4E4M3Group16;
  launched(cuda::launch_fp4_fake_quant({.x = a.x.as<uint16_t>(),
                                        .stride = a.x.stride[0],
                                        .n = static_cast<int>(n),
                                        .d = static_cast<int>(d),
                                        .group = e4m3 ? 16 : 32,
                                        .e4m3_scale = e4m3,
                                        .stream = stream_}),
           "fake_quant (fp4)");
}

// Hyper-connections.
void CudaBackend::hc_mixes(const HcMixesArgs& a) {
  check_device({&a.x, &a.fn, &a.scale, &a.base, &a.pre, &a.post, &a.comb}, "hc_mixes");
  cuda::HcMixesParams p{.x = bf16(a.x),
                        .x_stride = a.x.stride[0],
                        .fn = a.fn.as<const float>(),
                        .scale = a.scale.as<const float>(),
                        .base = a.base.as<const float>(),
                        .norm_eps = static_cast<float>(a.norm_eps),
                        .hc_eps = static_cast<float>(a.hc_eps),
                        .sinkhorn_iters = a.sinkhorn_iters,
                        .pre = a.pre.as<float>(),
                        .post = a.post.as<float>(),
                        .comb = a.comb.as<float>(),
                        .n = size_of(a.x, 0),
                        .hc = size_of(a.x, 1),
                        .dim = size_of(a.x, 2),
                        .stream = stream_};
  p.partial = static_cast<double*>(scratch(hc_mix_, cuda::hc_mixes_workspace_bytes(p)));
  launched(cuda::launch_hc_mixes(p), "hc_mixes");
}

void CudaBackend::hc_pre(const HcPreArgs& a) {
  check_device({&a.x, &a.pre, &a.out}, "hc_pre");
  launched(cuda::launch_hc_pre({.x = bf16(a.x),
                                .x_stride = a.x.stride[0],
                                .pre = a.pre.as<const float>(),
                                .out = a.out.as<uint16_t>(),
                                .out_stride = a.out.stride[0],
                                .n = size_of(a.x, 0),
                                .hc = size_of(a.x, 1),
                                .dim = size_of(a.x, 2),
                                .stream = stream_}),
           "hc_pre");
}

void CudaBackend::hc_post(const HcPostArgs& a) {
  check_device({&a.sub, &a.residual, &a.post, &a.comb, &a.out}, "hc_post");
  launched(cuda::launch_hc_post({.sub = bf16(a.sub),
                                 .sub_stride = a.sub.stride[0],
                                 .residual = bf16(a.residual),
                                 .residual_stride = a.residual.stride[0],
                                 .post = a.post.as<const float>(),
                                 .comb = a.comb.as<const float>(),
                                 .out = a.out.as<uint16_t>(),
                                 .out_stride = a.out.stride[0],
                                 .n = size_of(a.residual, 0),
                                 .hc = size_of(a.residual, 1),
                                 .dim = size_of(a.residual, 2),
                                 .stream = stream_}),
           "hc_post");
}

// Attention and the indexer.
void CudaBackend::sparse_attn(const SparseAttnArgs& a) {
  check_device({&a.q, &a.window, &a.compressed, &a.idx, &a.sink, &a.out}, "sparse_attn");
  DSINFER_CHECK(a.q.stride[1] == a.q.size(2) && a.out.stride[1] == a.out.size(2), "sparse_attn: heads contiguous");
  cuda::SparseAttnParams p{.q = bf16(a.q),
                           .q_stride = a.q.stride[0],
                           .window = bf16(a.window),
                           .compressed = bf16(a.compressed),
                           .n_win = a.window.ndim ? size_of(a.window, 0) : 0,
                           .n_cmp = a.compressed.ndim ? size_of(a.compressed, 0) : 0,
                           .idx = a.idx.as<const int32_t>(),
                           .idx_stride = a.idx.stride[0],
                           .sink = a.sink.as<const float>(),
                           .scale = a.scale,
                           .out = a.out.as<uint16_t>(),
                           .out_stride = a.out.stride[0],
                           .n = size_of(a.q, 0),
                           .heads = size_of(a.q, 1),
                           .d = size_of(a.q, 2),
                           .k = size_of(a.idx, 1),
                           .stream = stream_};
  p.scores = static_cast<float*>(scratch(attn_scores_, cuda::sparse_attn_workspace_bytes(p)));
  launched(cuda::launch_sparse_attn(p), "sparse_attn");
}

void CudaBackend::indexer_scores(const IndexerScoresArgs& a) {
  check_device({&a.q, &a.keys, &a.weights, &a.visible, &a.out, &a.key_rows}, "indexer_scores");
  DSINFER_CHECK(a.q.stride[1] == a.q.size(2), "indexer_scores: heads contiguous");
  const bool paged = a.key_rows.data != nullptr;
  launched(cuda::launch_indexer_scores({.q = bf16(a.q),
                                        .q_stride = a.q.stride[0],
                                        .keys = bf16(a.keys),
                                        .key_rows = paged ? a.key_rows.as<const int32_t>() : nullptr,
                                        .weights = bf16(a.weights),
                                        .visible = a.visible.as<const int32_t>(),
                                        .out = a.out.as<float>(),
                                        .out_stride = a.out.stride[0],
                                        .weight_scale = a.weight_scale,
                                        .n = size_of(a.q, 0),
                                        .heads = size_of(a.q, 1),
                                        .d = size_of(a.q, 2),
                                        .T = paged         ? size_of(a.key_rows, 0)
                                             : a.keys.ndim ? size_of(a.keys, 0)
                                                           : 0,
                                        .stream = stream_}),
           "indexer_scores");
}

void CudaBackend::candidate_blocks(const CandidateBlocksArgs& a) {
  check_device({&a.scores, &a.visible, &a.mask}, "candidate_blocks");
  launched(cuda::launch_candidate_blocks({.scores = a.scores.as<const float>(),
                                          .score_stride = a.scores.stride[0],
                                          .visible = a.visible.as<const int32_t>(),
                                          .mask = a.mask.as<uint8_t>(),
                                          .mask_stride = a.mask.stride[0],
                                          .n = size_of(a.scores, 0),
                                          .T = size_of(a.scores, 1),
                                          .block_size = static_cast<int>(a.block_size),
                                          .topk_blocks = static_cast<int>(a.topk_blocks),
                                          .stream = stream_}),
           "candidate_blocks");
}

void CudaBackend::topk(const TopkArgs& a) {
  check_device({&a.scores, &a.mask, &a.visible, &a.out}, "topk");
  const bool masked = a.mask.data != nullptr;
  launched(cuda::launch_topk({.scores = a.scores.as<const float>(),
                              .score_stride = a.scores.stride[0],
                              .mask = masked ? a.mask.as<const uint8_t>() : nullptr,
                              .mask_stride = masked ? a.mask.stride[0] : 0,
                              .visible = a.visible.as<const int32_t>(),
                              .out = a.out.as<int32_t>(),
                              .out_stride = a.out.stride[0],
                              .n = size_of(a.scores, 0),
                              .T = size_of(a.scores, 1),
                              .k = size_of(a.out, 1),
                              .stream = stream_}),
           "topk");
}

void CudaBackend::paged_rows(const PagedRowsArgs& a) {
  check_device({&a.positions, &a.blocks, &a.out}, "paged_rows");
  launched(cuda::launch_paged_rows({.positions = a.positions.as<const int32_t>(),
                                    .pos_stride = a.positions.stride[0],
                                    .blocks = a.blocks.as<const int32_t>(),
                                    .out = a.out.as<int32_t>(),
                                    .out_stride = a.out.stride[0],
                                    .n = size_of(a.positions, 0),
                                    .k = size_of(a.positions, 1),
                                    .rows_per_block = static_cast<int>(a.rows_per_block),
                                    .base = a.base,
                                    .stream = stream_}),
           "paged_rows");
}

// The feed-forward and the MoE.
void CudaBackend::swiglu(const SwigluArgs& a) {
  check_device({&a.gate, &a.up, &a.row_weight, &a.out}, "swiglu");
  launched(cuda::launch_swiglu({.gate = bf16(a.gate),
                                .up = bf16(a.up),
                                .gate_stride = a.gate.stride[0],
                                .up_stride = a.up.stride[0],
                                .row_weight = a.row_weight.as<const float>(),
                                .limit = a.limit,
                                .out = a.out.as<uint16_t>(),
                                .out_stride = a.out.stride[0],
                                .n = size_of(a.gate, 0),
                                .f = size_of(a.gate, 1),
                                .stream = stream_}),
           "swiglu");
}

void CudaBackend::router(const RouterArgs& a) {
  check_device({&a.x, &a.weight, &a.bias, &a.bias_vl, &a.is_image, &a.indices, &a.weights}, "router");
  const int n = size_of(a.x, 0), experts = size_of(a.weight, 0);
  launched(cuda::launch_router(
               {.x = bf16(a.x),
                .x_stride = a.x.stride[0],
                .weight = a.weight.data,
                .weight_f32 = a.weight.dtype == DType::kF32,
                .w_stride = a.weight.stride[0],
                .bias = a.bias.as<const float>(),
                .bias_vl = a.bias_vl.as<const float>(),
                .is_image = a.is_image.as<const uint8_t>(),
                .score = a.score == RouterScore::kSqrtSoftplus ? cuda::RouterScoreKind::kSqrtSoftplus
                         : a.score == RouterScore::kSigmoid    ? cuda::RouterScoreKind::kSigmoid
                                                               : cuda::RouterScoreKind::kSoftmax,
                .gate_temp = static_cast<float>(a.gate_temp),
                .route_scale = static_cast<float>(a.route_scale),
                .norm_topk_prob = a.norm_topk_prob,
                .given_indices = a.given_indices,
                .indices = a.indices.as<int32_t>(),
                .weights = a.weights.as<float>(),
                .logits = static_cast<float*>(scratch(router_logits_, size_t{1} * n * experts * sizeof(float))),
                .n = n,
                .dim = size_of(a.x, 1),
                .experts = experts,
                .k = size_of(a.indices, 1),
                .stream = stream_}),
           "router");
}

// The compressor and Engram.
void CudaBackend::compress_pool(const CompressPoolArgs& a) {
  check_device({&a.kv, &a.score, &a.out}, "compress_pool");
  DSINFER_CHECK(a.kv.is_contiguous() && a.score.is_contiguous() && a.out.is_contiguous(),
                "compress_pool: contiguous views only");
  launched(cuda::launch_compress_pool({.kv = a.kv.as<const float>(),
                                       .score = a.score.as<const float>(),
                                       .out = a.out.as<uint16_t>(),
                                       .groups = size_of(a.kv, 0),
                                       .d = size_of(a.kv, 2),
                                       .stream = stream_}),
           "compress_pool");
}

void CudaBackend::engram_gate(const EngramGateArgs& a) {
  check_device({&a.x, &a.kv, &a.wgt, &a.live}, "engram_gate");
  launched(cuda::launch_engram_gate({.x = a.x.as<uint16_t>(),
                                     .x_stride = a.x.stride[0],
                                     .kv = bf16(a.kv),
                                     .kv_stride = a.kv.stride[0],
                                     .wgt = a.wgt.as<const float>(),
                                     .live = a.live.as<const uint8_t>(),
                                     .norm_eps = static_cast<float>(a.norm_eps),
                                     .n = size_of(a.x, 0),
                                     .hc = size_of(a.x, 1),
                                     .dim = size_of(a.x, 2),
                                     .stream = stream_}),
           "engram_gate");
}

// Rows by index.
void CudaBackend::gather_rows(const GatherRowsArgs& a) {
  check_device({&a.src, &a.rows, &a.out}, "gather_rows");
  DSINFER_CHECK(a.src.stride[1] == 1 && a.out.stride[1] == 1, "gather_rows: contiguous rows only");
  launched(cuda::launch_gather_rows({.src = bf16(a.src),
                                     .src_stride = a.src.stride[0],
                                     .rows = a.rows.as<const int32_t>(),
                                     .out = a.out.as<uint16_t>(),
                                     .out_stride = a.out.stride[0],
                                     .m = size_of(a.rows, 0),
                                     .d = size_of(a.src, 1),
                                     .stream = stream_}),
           "gather_rows");
}

void CudaBackend::scatter_rows(const ScatterRowsArgs& a) {
  check_device({&a.src, &a.rows, &a.out}, "scatter_rows");
  DSINFER_CHECK(a.src.stride[1] == 1 && a.out.stride[1] == 1 && a.src.size(1) == a.out.size(1),
                "scatter_rows: contiguous rows of one width");
  launched(cuda::launch_scatter_rows({.src = bf16(a.src),
                                      .src_stride = a.src.stride[0],
                                      .rows = a.rows.as<const int32_t>(),
                                      .out = a.out.as<uint16_t>(),
                                      .out_stride = a.out.stride[0],
                                      .m = size_of(a.rows, 0),
                                      .d = size_of(a.src, 1),
                                      .stream = stream_}),
           "scatter_rows");
}

void CudaBackend::scatter_add(const ScatterAddArgs& a) {
  check_device({&a.src, &a.rows, &a.acc, &a.out}, "scatter_add");
  const bool out = a.out.data != nullptr;
  launched(cuda::launch_scatter_add({.src = bf16(a.src),
                                     .src_stride = a.src.stride[0],
                                     .rows = a.rows.as<const int32_t>(),
                                     .acc = a.acc.as<float>(),
                                     .acc_stride = a.acc.stride[0],
                                     .out = out ? a.out.as<uint16_t>() : nullptr,
                                     .out_stride = out ? a.out.stride[0] : 0,
                                     .m = size_of(a.rows, 0),
                                     .d = size_of(a.src, 1),
                                     .stream = stream_}),
           "scatter_add");
}

CudaBackend::Quantized CudaBackend::quant_scratch(int64_t rows, int64_t k) {
  return {static_cast<uint16_t*>(scratch(quant_values_, rows * k * 2)),
          static_cast<uint8_t*>(scratch(quant_codes_, rows * k)),
          static_cast<float*>(scratch(quant_scales_, rows * (k / 32) * 4))};
}

// The device's table of the experts' weights (w1 and w3 of expert e at 2e and 2e + 1, then w2 of
// expert e at 2E + e), made at a layer's first call; found again by the experts' address and their
// first and last weights (a decode step looks up every layer's: no walk over all the experts).
const CudaBackend::RouteTable& CudaBackend::route_table(std::span<const ExpertWeights> experts) {
  for (const RouteTable& t : route_tables_)
    if (t.experts == experts.data() && t.host.size() == 3 * experts.size() &&
        t.host.front().w == experts.front().w1.weight.as<const uint8_t>() &&
        t.host.back().w == experts.back().w2.weight.as<const uint8_t>())
      return t;
  std::vector<cuda::RoutedWeight> host(3 * experts.size());
  const LinearWeight& w1 = experts[0].w1;
  bool ok = is_block_scaled(w1.format) && experts.size() <= static_cast<size_t>(INT32_MAX / 3);
  for (size_t e = 0; e < experts.size(); ++e) {
    const ExpertWeights& ew = experts[e];
    for (const auto& [w, at] : {std::pair{&ew.w1, 2 * e}, {&ew.w3, 2 * e + 1}, {&ew.w2, 2 * experts.size() + e}}) {
      const LinearWeight& ref = w == &ew.w2 ? experts[0].w2 : w1;
      ok = ok && w->format == ref.format && w->in == ref.in && w->out == ref.out &&
           w->weight.stride[0] == ref.weight.stride[0] && w->scale.stride[0] == ref.scale.stride[0] &&
           w->weight.device == Device::kCuda && w->scale.device == Device::kCuda;
      host[at] = {w->weight.as<const uint8_t>(), w->scale.as<const uint8_t>()};
    }
  }
  ok = ok && experts[0].w2.format == w1.format && experts[0].w2.in == w1.out;
  RouteTable t{experts.data(), std::move(host), nullptr, ok};
  check_cuda(cudaMalloc(&t.device, t.host.size() * sizeof(cuda::RoutedWeight)), "route table");
  check_cuda(cudaMemcpy(t.device, t.host.data(), t.host.size() * sizeof(cuda::RoutedWeight), cudaMemcpyHostToDevice),
             "route table");
  route_tables_.push_back(std::move(t));
  return route_tables_.back();
}

void CudaBackend::routed_experts(const RoutedExpertsArgs& a) {
  const int64_t n = a.x.size(0), k = a.indices.size(1), experts = static_cast<int64_t>(a.experts.size());
  const cuda::LinearKernel kernel = options_.linear_kernel;
  const bool exact_gemv =
      kernel == cuda::LinearKernel::kAuto || kernel == cuda::LinearKernel::kFma || kernel == cuda::LinearKernel::kGemv;
  const bool few = n >= 1 && (n == 1 || n <= options_.routed_tokens);
  const RouteTable* routes =
      few && experts > 0 && 2 * k <= cuda::kMaxLinearGroups && exact_gemv && a.x.dtype == DType::kBF16
          ? &route_table(a.experts)
          : nullptr;
  if (!routes || !routes->ok) {
    if (few) capture_.enabled = false;  // this model's decode steps read the choice back
    routed_experts_by_expert(*this, a);
    return;
  }
  const RouteTable& table = *routes;
  check_device({&a.x, &a.indices, &a.weights, &a.acc}, "routed_experts");
  DSINFER_CHECK(a.indices.is_contiguous() && a.weights.is_contiguous() && a.acc.dtype == DType::kF32 &&
                    a.acc.is_contiguous() && a.x.stride[1] == 1,
                "routed_experts: contiguous choices, an f32 accumulator");
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
  auto gate = DeviceArray<uint16_t>::uninitialized(*this, k * ff),
       up = DeviceArray<uint16_t>::uninitialized(*this, k * ff);
  auto act = DeviceArray<uint16_t>::uninitialized(*this, k * ff),
       o = DeviceArray<uint16_t>::uninitialized(*this, k * dim);
  const auto routed_gemv = [&](const uint16_t* x, int64_t rows, int64_t in, const LinearWeight& w, int per_route,
                               const cuda::RoutedWeight* entries, const std::vector<uint16_t*>& outs) {
    const auto [values, codes, scales] = quant_scratch(rows, in);
    cuda::QuantizeInputParams q;
    q.x = x, q.x_stride = in, q.values = values, q.codes = codes, q.scales = scales, q.n = static_cast<int>(rows);
    q.k = static_cast<int>(in), q.stream = stream_;
    launched(cuda::launch_quantize_input(q), "routed experts (input quantisation)");
    cuda::BlockLinearParams p;
    for (size_t g = 0; g < outs.size(); ++g) {
      const int64_t r = rows == 1 ? 0 : static_cast<int64_t>(g);  // the one token's row, or slot g's
      p.op[g] = {values + r * in, scales + r * (in / 32), nullptr, nullptr, outs[g], codes + r * in};
    }
    p.groups = static_cast<int>(outs.size()), p.n = 1, p.k = static_cast<int>(in), p.out = static_cast<int>(w.out);
    p.fp4 = w.format == LinearFormat::kFp4, p.w_stride = w.weight.stride[0], p.s_stride = w.scale.stride[0];
    p.y_stride = w.out, p.kernel = options_.linear_kernel, p.gemv_rows = options_.gemv_rows, p.stream = stream_;
    p.routes = a.indices.as<const int32_t>(), p.route_table = entries, p.per_route = per_route;
    p.route_count = static_cast<int>(experts);
    launched(cuda::launch_block_linear(p), "routed experts");
  };
  std::vector<uint16_t*> up_outs, down_outs;
  for (int64_t j = 0; j < k; ++j) {
    up_outs.push_back(gate.data() + j * ff), up_outs.push_back(up.data() + j * ff);
    down_outs.push_back(o.data() + j * dim);
  }
  routed_gemv(bf16(a.x), 1, dim, w1, 2, table.device, up_outs);
  swiglu({gate.view(DType::kBF16, {k, ff}), up.view(DType::kBF16, {k, ff}),
          TensorView::contiguous(a.weights.data, DType::kF32, {k}, Device::kCuda), a.swiglu_limit,
          act.view(DType::kBF16, {k, ff})});
  routed_gemv(act.data(), k, ff, w2, 1, table.device + 2 * experts, down_outs);
  cuda::RoutedCombineParams c;
  c.o = o.data(), c.indices = a.indices.as<const int32_t>(), c.acc = a.acc.as<float>(), c.k = static_cast<int>(k);
  c.dim = static_cast<int>(dim), c.stream = stream_;
  launched(cuda::launch_routed_combine(c), "routed experts (sum)");
}

}  // namespace dsinfer
