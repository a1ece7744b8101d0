// Argument structs of the backend ops: plain views and scalars, a shape comment on each field.
// bf16 tensors hold uint16_t bit patterns. Row strides are in elements. Two args are equal when
// they name the same memory, layouts and scalars: the op they describe is the same call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "core/quant.h"
#include "core/tensor.h"
#include "core/token_draw.h"
#include "ops/linear_weight.h"

namespace dsinfer {

struct EmbedArgs {
  TensorView ids;        // [n] int32
  TensorView table;      // [V_local, dim] bf16: rows [vocab_offset, vocab_offset + V_local) of the vocab
  int64_t vocab_offset;  // ids outside the local rows give zero rows (summed over ranks)
  TensorView out;        // [n, dim] bf16
  bool operator==(const EmbedArgs&) const = default;
};

struct RmsNormArgs {
  TensorView x;       // [n, d] bf16
  TensorView weight;  // [d] bf16
  double eps;
  TensorView out;  // [n, d] bf16, may alias x
  bool operator==(const RmsNormArgs&) const = default;
};

/// out = x · W^T in W's format (spec §3.6): fp8/fp4 quantise x with act_quant first.
struct LinearArgs {
  TensorView x;  // [n, in] bf16 (or f32 for kBf16AsF32); may be a strided row view
  const LinearWeight* w;
  TensorView out;  // [n, out] bf16 (f32 for kBf16AsF32); may be a strided row view
  bool operator==(const LinearArgs&) const = default;
};

/// Several linears at once (the routed experts of a step; w1 and w3 of one input): the same
/// results as one `linear` call each, in one launch where the backend can.
struct GroupedLinearArgs {
  std::span<const LinearArgs> ops;
  bool operator==(const GroupedLinearArgs& o) const {
    return std::equal(ops.begin(), ops.end(), o.ops.begin(), o.ops.end());
  }
};

/// Interleaved RoPE on the last `rope_dim` dims of each head vector (spec §3.2).
struct RopeArgs {
  TensorView x;    // [n, heads, d] bf16, rotated in place
  TensorView cos;  // [n, rope_dim / 2] f32: the table rows of each token's position
  TensorView sin;  // [n, rope_dim / 2] f32
  bool inverse;
  bool operator==(const RopeArgs&) const = default;
};

enum class FakeQuant : uint8_t { kFp8Group32, kFp4E8M0Group32, kFp4E4M3Group16 };
struct FakeQuantArgs {
  TensorView x;  // [n, d] bf16, quantised and dequantised in place (groups along d)
  FakeQuant kind;
  bool operator==(const FakeQuantArgs&) const = default;
};

struct HcMixesArgs {
  TensorView x;      // [n, hc, dim] bf16: the residual stream
  TensorView fn;     // [(2 + hc) * hc, hc * dim] f32
  TensorView scale;  // [3] f32
  TensorView base;   // [(2 + hc) * hc] f32
  double norm_eps, hc_eps;
  int sinkhorn_iters;
  TensorView pre;   // [n, hc] f32
  TensorView post;  // [n, hc] f32
  TensorView comb;  // [n, hc, hc] f32
  bool operator==(const HcMixesArgs&) const = default;
};

struct HcPreArgs {
  TensorView x;    // [n, hc, dim] bf16
  TensorView pre;  // [n, hc] f32
  TensorView out;  // [n, dim] bf16
  bool operator==(const HcPreArgs&) const = default;
};

struct HcPostArgs {
  TensorView sub;       // [n, dim] bf16: the sublayer output
  TensorView residual;  // [n, hc, dim] bf16
  TensorView post;      // [n, hc] f32
  TensorView comb;      // [n, hc, hc] f32
  TensorView out;       // [n, hc, dim] bf16, may alias residual
  bool operator==(const HcPostArgs&) const = default;
};

/// Where the positions of paged caches lie in their pool (CacheStore): position p of query row i
/// is row base + table[p / per] * per + p % per (per = rows_per_block), where table is `blocks`
/// itself (one sequence's table for every row) or its row i (a sequence a row: a decode batch).
struct PagedTable {
  TensorView blocks;  // [b] or [n, b] int32 block ids
  int64_t rows_per_block = 0, base = 0;
  bool operator==(const PagedTable&) const = default;
};

/// Attention of each query over its own list of KV rows, with a sink (spec §5.3). Row index i
/// < window.size(0) reads window[i], else compressed[i - window.size(0)]; -1 is an empty slot.
struct SparseAttnArgs {
  TensorView q;           // [n, h, d] bf16
  TensorView window;      // [n_win, d] bf16
  TensorView compressed;  // [n_cmp, d] bf16 (may be empty)
  TensorView idx;         // [n, k] int32, slot order as the reference builds it
  TensorView sink;        // [h] f32
  float scale;
  TensorView out;  // [n, h, d] bf16
  bool operator==(const SparseAttnArgs&) const = default;
};

/// Indexer scores (spec §7.2): I[t, tau] = bf16(sum_h bf16(relu(bf16(q[t,h] . K[tau])) * w[t,h])).
struct IndexerScoresArgs {
  TensorView q;               // [n, h_idx, d_idx] bf16 (fp4 fake-quantised)
  TensorView keys;            // [T, d_idx] bf16, or the pool key_table reads
  TensorView weights;         // [n, h_idx] bf16, scaled by weight_scale (rounded to bf16) before use
  TensorView visible;         // [n] int32: columns >= visible[t] are -inf (pass T to mask nothing)
  TensorView out;             // [n, T] f32 holding bf16 values (-inf where masked)
  PagedTable key_table;       // key tau of query t is its row of `keys` (a paged pool); no blocks: row tau
  float weight_scale = 1.0f;  // d_idx^-1/2 * h_idx^-1/2 (spec §7.2)
  bool operator==(const IndexerScoresArgs&) const = default;
};

/// The indexer's candidate pool (spec §7.5) for n queries: blocks of `block_size` columns of a
/// score row scored by their maximum, the block holding column visible - 1 pinned, the best
/// `topk_blocks` kept (equal maxima: the lower block), blocks of only -inf dropped. Written as the
/// kept blocks' numbers, not as a mask over the columns, so a prefill's pool grows linearly with
/// its length (at most topk_blocks numbers a query).
struct CandidateBlocksArgs {
  TensorView scores;   // [n, T] f32 (-inf: masked), -inf at columns >= visible
  TensorView visible;  // [n] int32
  int64_t topk_blocks = 0, block_size = 0;
  TensorView blocks;  // [n, min(topk_blocks, ceil(T / block_size))] int32 out: ascending, then -1s
  bool operator==(const CandidateBlocksArgs&) const = default;
};

/// The candidate pool of CandidateBlocksArgs as a mask over the columns: 1 inside a listed block.
struct CandidateMaskArgs {
  TensorView blocks;  // [n, kb] int32: block numbers, -1 for none
  int64_t block_size = 0;
  TensorView mask;  // [n, T] u8 out
  bool operator==(const CandidateMaskArgs&) const = default;
};

/// The indexer's top-k (spec §7.4): per row the k largest scores (equal scores: the lower column;
/// where `mask` is given, a column it holds 0 for scores -inf), listed by ascending column, and
/// columns >= visible replaced by -1 (they sort last, so the -1s end the row).
struct TopkArgs {
  TensorView scores;   // [n, T] f32, -inf at columns >= visible (as indexer_scores writes them)
  TensorView mask;     // [n, T] u8, or empty
  TensorView visible;  // [n] int32
  TensorView out;      // [n, k] int32, k <= T
  bool operator==(const TopkArgs&) const = default;
};

/// The DSpark drafter's Markov chain (spec §10.4), greedy: for j = 0 .. J - 1 and every block b,
/// e = embed[tokens[b][j]]; base[b][j] += fp32(e . head^T) (fp32 math); tokens[b][j + 1] = the
/// column of the largest base[b][j] (equal values: the lower column); embeds[b * J + j] = e.
struct MarkovDraftArgs {
  TensorView base;    // [blocks, J, V] f32: the head's logits in, with the Markov bias out
  TensorView embed;   // [V, r] bf16: markov_head.embed
  TensorView head;    // [V, r] bf16, fp32 math: markov_head.head
  TensorView tokens;  // [blocks, J + 1] int32: column 0 in (the anchors), the drafts out
  TensorView embeds;  // [blocks * J, r] bf16 out, any row stride
  bool operator==(const MarkovDraftArgs&) const = default;
};

/// The engine's greedy pick, on the device so that a step reads back a token a row instead of the
/// row's logits: picks[i] = the first column holding row i's largest value (as the sampler's
/// greedy pick), or -1 when the row holds a NaN or an infinity.
struct GreedyPickArgs {
  TensorView logits;  // [n, V] f32
  TensorView picks;   // [n] int32 out
  bool operator==(const GreedyPickArgs&) const = default;
};

/// The engine's draws at temperature > 0 on the device, so that a sampled row reads back a token
/// instead of its logits: picks[d.row] = the token core/token_draw.h draws from logits row d.row
/// with d.params (the host's draw_token, bit for bit), or -1 when that row holds a NaN or an
/// infinity, for each d in `draws` (distinct rows); the other picks are left as they are.
struct DrawTokensArgs {
  TensorView logits;  // [n, V] f32, V <= kMaxDrawVocab
  std::span<const RowDraw> draws;
  TensorView picks;  // [n] int32, the drawn rows' written
  bool operator==(const DrawTokensArgs& o) const {
    return logits == o.logits && std::equal(draws.begin(), draws.end(), o.draws.begin(), o.draws.end()) &&
           picks == o.picks;
  }
};

/// Positions of a paged cache to rows of its pool: out[i][j] = -1 for position -1, else row i's
/// row of position p in `table`.
struct PagedRowsArgs {
  TensorView positions;  // [n, k] int32
  PagedTable table;
  TensorView out;  // [n, k] int32, any row stride
  bool operator==(const PagedRowsArgs&) const = default;
};

/// a = silu(min(g, limit)) * clamp(u, -limit, limit) * row_weight, rounded once to bf16 (spec §8.2).
struct SwigluArgs {
  TensorView gate;        // [n, f] bf16 (w1 output)
  TensorView up;          // [n, f] bf16 (w3 output)
  TensorView row_weight;  // [n] f32 routing weight, or empty for the shared expert
  float limit;            // 0 disables the clamp
  TensorView out;         // [n, f] bf16
  bool operator==(const SwigluArgs&) const = default;
};

enum class RouterScore : uint8_t { kSoftmax, kSigmoid, kSqrtSoftplus };

/// Router (spec §8.1): z = x_f32 . W_f32^T / temp; s = score_fn(z); top-k of s + bias; weights
/// from s, renormalised and scaled.
struct RouterArgs {
  TensorView x;         // [n, dim] bf16
  TensorView weight;    // [E, dim] bf16 or f32
  TensorView bias;      // [E] f32 selection bias (may be empty)
  TensorView bias_vl;   // [E] f32 for image tokens (may be empty)
  TensorView is_image;  // [n] uint8 (may be empty)
  RouterScore score;
  double gate_temp, route_scale;
  bool norm_topk_prob;
  bool given_indices;  // true: `indices` is an input (replayed selections); weights follow from it
  TensorView indices;  // [n, k] int32, in descending order of s + bias
  TensorView weights;  // [n, k] f32
  bool operator==(const RouterArgs&) const = default;
};

/// Ratio-2 compressor pooling (spec §6.1): per channel softmax over the 2 tokens of a group.
struct CompressPoolArgs {
  TensorView kv;     // [groups, 2, d] f32
  TensorView score;  // [groups, 2, d] f32
  TensorView out;    // [groups, d] bf16 (before the RMSNorm)
  bool operator==(const CompressPoolArgs&) const = default;
};

/// out[i, j] = values[scales[i, j / 32] * 256 + codes[i, j]]: rows of byte codes with a scale byte
/// a 32, each value looked up by its (scale, code) pair (the Engram rows: fp8 codes and e8m0 scales,
/// uploaded as stored and decoded where they are used).
struct DecodeRowsArgs {
  TensorView codes;   // [n, d] uint8, d a multiple of 32
  TensorView scales;  // [n, d / 32] uint8
  TensorView values;  // [256 * 256] bf16: by scale byte, then code
  TensorView out;     // [n, d] bf16
  bool operator==(const DecodeRowsArgs&) const = default;
};

/// Engram gate and injection (spec §9.7), per token and copy.
struct EngramGateArgs {
  TensorView x;     // [n, hc, dim] bf16: the stream, updated in place
  TensorView kv;    // [n, (hc + 1) * dim] bf16: wkv output (hc keys, then the value)
  TensorView wgt;   // [hc, dim] f32: q_weight * k_weight
  TensorView live;  // [n] uint8: 0 forces the gate to 0 (image tokens); may be empty
  double norm_eps;
  bool operator==(const EngramGateArgs&) const = default;
};

/// out[i] = src[rows[i]]: the tokens routed to one expert, a decode batch's cache rows. Rows of
/// any 2- or 4-byte type (bf16, f32, int32), copied as they are.
struct GatherRowsArgs {
  TensorView src;   // [n, d]
  TensorView rows;  // [m] int32
  TensorView out;   // [m, d], src's type
  bool operator==(const GatherRowsArgs&) const = default;
};

/// The routed experts (spec §8.2): for each token, over its k choices in ascending expert id,
/// acc[t] += w2_e(bf16(swiglu(w1_e x_t, w3_e x_t) * weight)) in fp32. The choice stays where the
/// router wrote it (a backend may run it without reading it back).
struct RoutedExpertsArgs {
  TensorView x;                            // [n, dim] bf16
  TensorView indices;                      // [n, k] int32, distinct experts per token
  TensorView weights;                      // [n, k] f32 routing weights
  std::span<const ExpertWeights> experts;  // ids [first_expert, first_expert + size): a rank's (others add nothing)
  float swiglu_limit;                      // 0 disables the clamp
  TensorView acc;                          // [n, dim] f32, added into
  int first_expert = 0;
  bool operator==(const RoutedExpertsArgs& o) const {  // the same experts: the same table
    return x == o.x && indices == o.indices && weights == o.weights && experts.data() == o.experts.data() &&
           experts.size() == o.experts.size() && swiglu_limit == o.swiglu_limit && acc == o.acc &&
           first_expert == o.first_expert;
  }
};

/// out[rows[i]] = src[i] (rows distinct): rows written into a ring or a paged pool at places the
/// device reads, so a step's copies do not depend on where its rows go. Types as GatherRowsArgs.
struct ScatterRowsArgs {
  TensorView src;   // [m, d]
  TensorView rows;  // [m] int32
  TensorView out;   // [N, d], src's type
  bool operator==(const ScatterRowsArgs&) const = default;
};

/// acc[rows[i]] += src[i] in fp32 (rows distinct: one expert's tokens); then, when `out` is given,
/// out[rows[i]] = bf16(acc[rows[i]]).
struct ScatterAddArgs {
  TensorView src;   // [m, d] bf16
  TensorView rows;  // [m] int32
  TensorView acc;   // [n, d] f32
  TensorView out;   // [n, d] bf16 or empty
  bool operator==(const ScatterAddArgs&) const = default;
};

/// Work that may run beside the ops after it (a device backend's second stream; the CPU runs every
/// op in order): the ops issued after kFork start once everything issued before it is done and
/// form side work, up to kResume; the ops issued after kResume may run beside it, and those after
/// kJoin once all side work issued before it is done. Side work runs in the order it was issued,
/// so a fork may follow another before its join.
enum class SideQueue : uint8_t { kFork, kResume, kJoin };
struct SideQueueArgs {
  SideQueue step;
  bool operator==(const SideQueueArgs&) const = default;
};

}  // namespace dsinfer

/// Every op of the Backend interface, one line each: X(name, Args). Backend declares `name(const
/// Args&)` from this list, and so do the backends and the step recorder (DSINFER_OVERRIDE_OPS in
/// ops/backend.h): an op is added here and nowhere else in the interface.
#define DSINFER_OPS(X)                     \
  X(embed, EmbedArgs)                      \
  X(rms_norm, RmsNormArgs)                 \
  X(linear, LinearArgs)                    \
  X(grouped_linear, GroupedLinearArgs)     \
  X(rope, RopeArgs)                        \
  X(fake_quant, FakeQuantArgs)             \
  X(hc_mixes, HcMixesArgs)                 \
  X(hc_pre, HcPreArgs)                     \
  X(hc_post, HcPostArgs)                   \
  X(sparse_attn, SparseAttnArgs)           \
  X(indexer_scores, IndexerScoresArgs)     \
  X(candidate_blocks, CandidateBlocksArgs) \
  X(candidate_mask, CandidateMaskArgs)     \
  X(topk, TopkArgs)                        \
  X(paged_rows, PagedRowsArgs)             \
  X(swiglu, SwigluArgs)                    \
  X(router, RouterArgs)                    \
  X(compress_pool, CompressPoolArgs)       \
  X(decode_rows, DecodeRowsArgs)           \
  X(engram_gate, EngramGateArgs)           \
  X(gather_rows, GatherRowsArgs)           \
  X(scatter_rows, ScatterRowsArgs)         \
  X(scatter_add, ScatterAddArgs)           \
  X(routed_experts, RoutedExpertsArgs)     \
  X(markov_draft, MarkovDraftArgs)         \
  X(greedy_pick, GreedyPickArgs)           \
  X(draw_tokens, DrawTokensArgs)           \
  X(side_queue, SideQueueArgs)
