// CudaBackend: argument checks and the mapping of each op's views onto its kernel's parameters.
#include "backends/cuda/cuda_backend.h"

#include <cublas_v2.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/common/launch_policy.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/dspark/markov.h"
#include "backends/cuda/kernels/elementwise/elementwise.h"
#include "backends/cuda/kernels/moe/router.h"
#include "backends/cuda/kernels/sampling/draw_tokens.h"
#include "backends/cuda/kernels/sampling/greedy_pick.h"
#include "backends/cuda/linear_dispatch.h"
#include "core/check.h"

namespace dsinfer {
namespace {

const uint16_t* bf16(const TensorView& t) {
  return t.as<const uint16_t>();
}

int size_of(const TensorView& t, int d) {  // the kernels' parameters are int
  return static_cast<int>(t.size(d));
}

cuda::PagedTableParams paged_table(const PagedTable& t) {
  if (!t.blocks.data) return {};
  return {.blocks = t.blocks.as<const int32_t>(),
          .blocks_stride = t.blocks.ndim == 2 ? t.blocks.stride[0] : 0,
          .rows_per_block = static_cast<int>(t.rows_per_block),
          .base = t.base};
}

// 16-bit words an element of a row the row kernels copy (2- and 4-byte types).
int64_t words_of(const TensorView& t, const char* op) {
  const int64_t bytes = dtype_bytes(t.dtype, 1);
  DSINFER_CHECK(bytes == 2 || bytes == 4, "{}: rows of 2- or 4-byte elements", op);
  return bytes / 2;
}

}  // namespace

// A step whose routed experts read the router's choice back cannot be captured (no copy to the
// host while a stream captures): the graphs ask the experts' tables, whose decision is made once
// per table in the first decode step, which is never captured.
CudaBackend::CudaBackend(const CudaBackendOptions& options, cudaStream_t stream)
    : options_(options),
      stream_(stream),
      graphs_(stream_, options.graph_tokens, [this] { return !experts_.reads_choice(); }) {
  const int rows = options_.gemv_rows;
  DSINFER_CHECK(options_.routed_tokens >= 0 && options_.routed_tokens <= kDeviceRoutedTokens &&
                    (rows == 0 || rows == 1 || rows == 8),
                "CudaBackend: routed_tokens {} (0 to {}), gemv_rows {} (0, 1 or 8)", options_.routed_tokens,
                kDeviceRoutedTokens, rows);
  cuda::keep_freed_memory();
  cuda::common::dependent_launches() = options_.dependent_launches;
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  if (side_.stream) {
    cudaStreamSynchronize(side_.stream);
    cudaEventDestroy(side_.forked);
    cudaEventDestroy(side_.done);
    cudaStreamDestroy(side_.stream);
  }
  for (StreamScratch* set : {&main_scratch_, &side_scratch_})
    if (set->cublas) cublasDestroy(set->cublas);
}

// Up to a decode step's rows every row-wise op runs kernels whose per-row sums do not depend on
// the rows beside them; from kTensorCoreRows the linears take other kernels (wgmma, cuBLAS),
// chosen by the row count.
int64_t CudaBackend::max_invariant_rows() const {
  return cuda::kTensorCoreRows - 1;
}

CudaBackend::Stats CudaBackend::stats() const {
  Stats s = stats_;
  s.uploads += graphs_.uploads(), s.graph_steps = graphs_.launches(), s.graph_instantiations = graphs_.instantiations();
  return s;
}

void CudaBackend::check_device(std::initializer_list<const TensorView*> views, const char* op) {
  for (const TensorView* v : views)
    DSINFER_CHECK(!v->data || v->device == Device::kCuda, "CudaBackend::{}: a view is in host memory", op);
}

void CudaBackend::launched(cudaError_t e, const char* op) {
  ++stats_.ops;
  cuda::check_cuda(e, op);
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
  p.partial = static_cast<double*>(scratch(scratch_->hc_mix, cuda::hc_mixes_workspace_bytes(p)));
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
  p.scores = static_cast<float*>(scratch(scratch_->attn_scores, cuda::sparse_attn_workspace_bytes(p)));
  launched(cuda::launch_sparse_attn(p), "sparse_attn");
}

void CudaBackend::indexer_scores(const IndexerScoresArgs& a) {
  check_device({&a.q, &a.keys, &a.weights, &a.visible, &a.out, &a.key_table.blocks}, "indexer_scores");
  DSINFER_CHECK(a.q.stride[1] == a.q.size(2), "indexer_scores: heads contiguous");
  launched(cuda::launch_indexer_scores({.q = bf16(a.q),
                                        .q_stride = a.q.stride[0],
                                        .keys = bf16(a.keys),
                                        .key_table = paged_table(a.key_table),
                                        .weights = bf16(a.weights),
                                        .visible = a.visible.as<const int32_t>(),
                                        .out = a.out.as<float>(),
                                        .out_stride = a.out.stride[0],
                                        .weight_scale = a.weight_scale,
                                        .n = size_of(a.q, 0),
                                        .heads = size_of(a.q, 1),
                                        .d = size_of(a.q, 2),
                                        .T = size_of(a.out, 1),
                                        .stream = stream_}),
           "indexer_scores");
}

void CudaBackend::candidate_blocks(const CandidateBlocksArgs& a) {
  check_device({&a.scores, &a.visible, &a.blocks}, "candidate_blocks");
  const int64_t T = a.scores.size(1);
  DSINFER_CHECK(a.blocks.size(1) == std::min(a.topk_blocks, (T + a.block_size - 1) / a.block_size),
                "candidate_blocks: {} block numbers a row", a.blocks.size(1));
  launched(cuda::launch_candidate_blocks({.scores = a.scores.as<const float>(),
                                          .score_stride = a.scores.stride[0],
                                          .visible = a.visible.as<const int32_t>(),
                                          .blocks = a.blocks.as<int32_t>(),
                                          .blocks_stride = a.blocks.stride[0],
                                          .n = size_of(a.scores, 0),
                                          .T = size_of(a.scores, 1),
                                          .block_size = static_cast<int>(a.block_size),
                                          .topk_blocks = static_cast<int>(a.topk_blocks),
                                          .stream = stream_}),
           "candidate_blocks");
}

void CudaBackend::candidate_mask(const CandidateMaskArgs& a) {
  check_device({&a.blocks, &a.mask}, "candidate_mask");
  launched(cuda::launch_candidate_mask({.blocks = a.blocks.as<const int32_t>(),
                                        .blocks_stride = a.blocks.stride[0],
                                        .mask = a.mask.as<uint8_t>(),
                                        .mask_stride = a.mask.stride[0],
                                        .n = size_of(a.mask, 0),
                                        .T = size_of(a.mask, 1),
                                        .kb = size_of(a.blocks, 1),
                                        .block_size = static_cast<int>(a.block_size),
                                        .stream = stream_}),
           "candidate_mask");
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
  check_device({&a.positions, &a.table.blocks, &a.out}, "paged_rows");
  launched(cuda::launch_paged_rows({.positions = a.positions.as<const int32_t>(),
                                    .pos_stride = a.positions.stride[0],
                                    .table = paged_table(a.table),
                                    .out = a.out.as<int32_t>(),
                                    .out_stride = a.out.stride[0],
                                    .n = size_of(a.positions, 0),
                                    .k = size_of(a.positions, 1),
                                    .stream = stream_}),
           "paged_rows");
}

// The feed-forward and the MoE (routed_experts: routed_experts.cc).
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
  launched(cuda::launch_router({.x = bf16(a.x),
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
                                .logits = static_cast<float*>(
                                    scratch(scratch_->router_logits, size_t{1} * n * experts * sizeof(float))),
                                .n = n,
                                .dim = size_of(a.x, 1),
                                .experts = experts,
                                .k = size_of(a.indices, 1),
                                .stream = stream_}),
           "router");
}

void CudaBackend::markov_draft(const MarkovDraftArgs& a) {
  check_device({&a.base, &a.embed, &a.head, &a.tokens, &a.embeds}, "markov_draft");
  DSINFER_CHECK(a.base.stride[2] == 1 && a.embed.stride[1] == 1 && a.head.stride[1] == 1 && a.tokens.stride[1] == 1 &&
                    a.embeds.stride[1] == 1 && a.head.size(0) == a.base.size(2) && a.embed.size(0) == a.base.size(2),
                "markov_draft: rows of contiguous values over one vocabulary");
  cuda::MarkovDraftParams p{.base = a.base.as<float>(),
                            .block_stride = a.base.stride[0],
                            .row_stride = a.base.stride[1],
                            .embed = bf16(a.embed),
                            .embed_stride = a.embed.stride[0],
                            .head = bf16(a.head),
                            .head_stride = a.head.stride[0],
                            .tokens = a.tokens.as<int32_t>(),
                            .tokens_stride = a.tokens.stride[0],
                            .embeds = a.embeds.as<uint16_t>(),
                            .embeds_stride = a.embeds.stride[0],
                            .blocks = size_of(a.base, 0),
                            .J = size_of(a.base, 1),
                            .V = size_of(a.base, 2),
                            .r = size_of(a.embed, 1),
                            .stream = stream_};
  p.workspace = scratch(scratch_->markov, cuda::markov_draft_workspace_bytes(p));
  launched(cuda::launch_markov_draft(p), "markov_draft");
}

void CudaBackend::greedy_pick(const GreedyPickArgs& a) {
  check_device({&a.logits, &a.picks}, "greedy_pick");
  DSINFER_CHECK(a.logits.dtype == DType::kF32 && a.logits.stride[1] == 1 && a.picks.dtype == DType::kI32 &&
                    a.picks.size(0) == a.logits.size(0) && a.picks.is_contiguous(),
                "greedy_pick: [n, V] f32 rows, [n] int32 picks");
  launched(cuda::launch_greedy_pick({.logits = a.logits.as<const float>(),
                                     .row_stride = a.logits.stride[0],
                                     .picks = a.picks.as<int32_t>(),
                                     .n = size_of(a.logits, 0),
                                     .V = size_of(a.logits, 1),
                                     .stream = stream_}),
           "greedy_pick");
}

void CudaBackend::draw_tokens(const DrawTokensArgs& a) {
  check_device({&a.logits, &a.picks}, "draw_tokens");
  const int64_t n = a.logits.size(0), V = a.logits.size(1);
  DSINFER_CHECK(a.logits.dtype == DType::kF32 && a.logits.stride[1] == 1 && a.picks.dtype == DType::kI32 &&
                    a.picks.size(0) == n && a.picks.is_contiguous() && V > 0 && V <= kMaxDrawVocab,
                "draw_tokens: [n, V] f32 rows (V <= 2^23), [n] int32 picks");
  if (a.draws.empty()) return;
  for (const RowDraw& d : a.draws) DSINFER_CHECK(d.row >= 0 && d.row < n, "draw_tokens: a draw's row is out of range");
  // The kernel reads the draws as uploaded, byte for byte (kernels/sampling/draw_tokens.h).
  static_assert(std::is_trivially_copyable_v<RowDraw>);
  const size_t bytes = a.draws.size() * sizeof(RowDraw);
  auto* on_device = static_cast<RowDraw*>(scratch(scratch_->draws, bytes));
  copy_to_device(on_device, a.draws.data(), bytes);
  launched(cuda::launch_draw_tokens({.logits = a.logits.as<const float>(),
                                     .row_stride = a.logits.stride[0],
                                     .draws = on_device,
                                     .picks = a.picks.as<int32_t>(),
                                     .n = static_cast<int>(a.draws.size()),
                                     .V = static_cast<int>(V),
                                     .stream = stream_}),
           "draw_tokens");
}

// Side work on a stream of its own (with scratch of its own), forked from the current one and
// joined to it by events (in a capture too: the side stream joins it at a fork, leaves it at a join).
void CudaBackend::side_queue(const SideQueueArgs& a) {
  if (!options_.side_stream) return;
  switch (a.step) {
    case SideQueue::kFork:
      DSINFER_CHECK(!side_.open, "side_queue: a fork inside side work");
      if (!side_.stream) {
        cuda::check_cuda(cudaStreamCreateWithFlags(&side_.stream, cudaStreamNonBlocking), "side stream");
        cuda::check_cuda(cudaEventCreateWithFlags(&side_.forked, cudaEventDisableTiming), "side stream");
        cuda::check_cuda(cudaEventCreateWithFlags(&side_.done, cudaEventDisableTiming), "side stream");
      }
      cuda::check_cuda(cudaEventRecord(side_.forked, stream_), "side fork");
      cuda::check_cuda(cudaStreamWaitEvent(side_.stream, side_.forked), "side fork");
      side_.main = stream_, stream_ = side_.stream, scratch_ = &side_scratch_, side_.open = true;
      return;
    case SideQueue::kResume:
      DSINFER_CHECK(side_.open, "side_queue: a resume without a fork");
      cuda::check_cuda(cudaEventRecord(side_.done, stream_), "side resume");
      stream_ = side_.main, scratch_ = &main_scratch_, side_.open = false, side_.unjoined = true;
      return;
    case SideQueue::kJoin:  // the side stream runs its work in order: its last is the one to wait for
      DSINFER_CHECK(!side_.open, "side_queue: a join inside side work");
      if (side_.unjoined) cuda::check_cuda(cudaStreamWaitEvent(stream_, side_.done), "side join");
      side_.unjoined = false;
      return;
  }
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

void CudaBackend::decode_rows(const DecodeRowsArgs& a) {
  check_device({&a.codes, &a.scales, &a.values, &a.out}, "decode_rows");
  const int64_t d = a.codes.size(1);
  DSINFER_CHECK(a.codes.stride[1] == 1 && a.scales.stride[1] == 1 && a.out.stride[1] == 1 && a.values.is_contiguous() &&
                    a.values.numel() == 256 * 256 && a.scales.size(1) == d / 32 && a.out.size(1) == d,
                "decode_rows: contiguous rows, a table of 256 x 256");
  launched(cuda::launch_decode_rows({.codes = a.codes.as<const uint8_t>(),
                                     .scales = a.scales.as<const uint8_t>(),
                                     .values = a.values.as<const uint16_t>(),
                                     .out = a.out.as<uint16_t>(),
                                     .codes_stride = a.codes.stride[0],
                                     .scales_stride = a.scales.stride[0],
                                     .out_stride = a.out.stride[0],
                                     .n = size_of(a.codes, 0),
                                     .d = size_of(a.codes, 1),
                                     .stream = stream_}),
           "decode_rows");
}

// Rows by index.
void CudaBackend::gather_rows(const GatherRowsArgs& a) {
  check_device({&a.src, &a.rows, &a.out}, "gather_rows");
  DSINFER_CHECK(a.src.stride[1] == 1 && a.out.stride[1] == 1 && a.src.dtype == a.out.dtype,
                "gather_rows: contiguous rows of one type");
  const int64_t w = words_of(a.src, "gather_rows");  // copied as 16-bit words
  launched(cuda::launch_gather_rows({.src = a.src.as<const uint16_t>(),
                                     .src_stride = a.src.stride[0] * w,
                                     .rows = a.rows.as<const int32_t>(),
                                     .out = a.out.as<uint16_t>(),
                                     .out_stride = a.out.stride[0] * w,
                                     .m = size_of(a.rows, 0),
                                     .d = static_cast<int>(a.src.size(1) * w),
                                     .stream = stream_}),
           "gather_rows");
}

void CudaBackend::scatter_rows(const ScatterRowsArgs& a) {
  check_device({&a.src, &a.rows, &a.out}, "scatter_rows");
  DSINFER_CHECK(
      a.src.stride[1] == 1 && a.out.stride[1] == 1 && a.src.size(1) == a.out.size(1) && a.src.dtype == a.out.dtype,
      "scatter_rows: contiguous rows of one width and type");
  const int64_t w = words_of(a.src, "scatter_rows");
  launched(cuda::launch_scatter_rows({.src = a.src.as<const uint16_t>(),
                                      .src_stride = a.src.stride[0] * w,
                                      .rows = a.rows.as<const int32_t>(),
                                      .out = a.out.as<uint16_t>(),
                                      .out_stride = a.out.stride[0] * w,
                                      .m = size_of(a.rows, 0),
                                      .d = static_cast<int>(a.src.size(1) * w),
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

}  // namespace dsinfer
