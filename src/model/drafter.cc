// The DSpark drafter (spec §10): main_proj / main_norm over the target's main hidden states, each
// draft stage's ring of context KV, the stages as blocks (window-only attention to the ring and,
// bidirectionally, to the draft block), and the head: the shared LM head, the Markov chain and the
// confidence of every block row.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/forward_batch.h"

namespace dsinfer {

Status Model::draft(std::span<const DraftChunk> chunks, const TensorView& main_hidden, const DraftOutputs& out,
                    const ForwardContext& ctx, const DraftSampling& sampling) {
  const ModelConfig& c = config_;
  if (!has_drafter()) return error(ErrorKind::kUnsupported, "this checkpoint has no DSpark drafter (mtp.*)");
  if (chunks.empty()) return {};
  const int64_t B = c.dspark_block_size, V = c.vocab_size;
  if (main_hidden.ndim != 2 || main_hidden.dtype != DType::kBF16 || main_hidden.size(1) != main_hidden_width() ||
      main_hidden.stride[1] != 1)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("the drafter takes main hidden states of [rows, {}] bf16", main_hidden_width()));
  int64_t drafting = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const DraftChunk& ch = chunks[i];
    if (!ch.state || ch.rows < 1 || ch.first_pos < 0 || ch.hidden_row < 0 ||
        ch.hidden_row + ch.rows > main_hidden.size(0))
      return error(ErrorKind::kInvalidArgument, fmt::format("draft chunk {}: no sequence or rows", i));
    if (ch.first_pos + ch.rows > ch.state->length)
      return error(ErrorKind::kInvalidArgument,
                   fmt::format("draft chunk {}: positions up to {} but its sequence holds {}", i,
                               ch.first_pos + ch.rows, ch.state->length));
    if (ch.draft && (ch.anchor < 0 || ch.anchor >= V))
      return error(ErrorKind::kInvalidArgument,
                   fmt::format("draft chunk {}: anchor {} outside the vocab", i, ch.anchor));
    for (size_t j = 0; j < i; ++j)
      if (chunks[j].state == ch.state)
        return error(ErrorKind::kInvalidArgument, fmt::format("draft chunks {} and {} are of one sequence", j, i));
    drafting += ch.draft;
  }
  if (drafting > 0 &&
      (out.tokens.ndim != 2 || out.tokens.size(0) != drafting || out.tokens.size(1) != B + 1 ||
       out.tokens.dtype != DType::kI32 || !out.tokens.is_contiguous() || out.base.ndim != 3 ||
       out.base.size(0) != drafting || out.base.size(1) != B || out.base.size(2) != V ||
       out.base.dtype != DType::kF32 || !out.base.is_contiguous() || out.confidence.numel() != drafting * B ||
       out.confidence.dtype != DType::kF32 || !out.confidence.is_contiguous()))
    return error(
        ErrorKind::kInvalidArgument,
        fmt::format("draft outputs: tokens [{0}, {1}] i32, base [{0}, {2}, {3}] f32, confidence [{0}, {2}] f32",
                    drafting, B + 1, B, V));
  const std::vector<int64_t>& sampled = sampling.chunks;
  for (size_t i = 0; i < sampled.size(); ++i)
    if (sampled[i] < 0 || sampled[i] >= drafting || (i > 0 && sampled[i] <= sampled[i - 1]) || !sampling.pick)
      return error(ErrorKind::kInvalidArgument,
                   fmt::format("draft sampling: chunks ascending among the {} drafting ones, with a pick", drafting));

  // A drafting chunk's block: rows at positions p + 1 .. p + B, the anchor then noise.
  std::vector<ForwardChunk> blocks(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const DraftChunk& ch = chunks[i];
    const int64_t p = ch.first_pos + ch.rows - 1;
    blocks[i] = {ch.state, p + 1, {}, false, p + 1 + B};
    if (ch.draft) {
      blocks[i].tokens.assign(B, c.dspark_noise_token_id);
      blocks[i].tokens[0] = ch.anchor;
    }
  }
  Batch b(ctx.ops ? *ctx.ops : backend_, ctx.taps);
  b.init(blocks);
  fill_draft_rings(b, chunks, main_hidden);
  if (drafting == 0) return {};
  DSINFER_RETURN_IF_ERROR(embed_stream(b));
  for (int i = 0; i < c.n_draft_layers(); ++i) DSINFER_RETURN_IF_ERROR(block(c.n_layers + i, b));
  return draft_head(b, out, sampling);
}

void Model::fill_draft_rings(Batch& b, std::span<const DraftChunk> chunks, const TensorView& main_hidden) {
  const ModelConfig& c = config_;
  const DSparkWeights& d = *weights_.dspark;
  const int64_t dim = c.dim, hd = c.head_dim, win = c.window_size, R = c.ring_rows();
  // The rows a ring keeps (its last `win` positions) and their ring rows, chunk by chunk.
  std::vector<int64_t> kept, positions;
  std::vector<int32_t> rows, ring_rows;
  for (const DraftChunk& ch : chunks) {
    kept.push_back(std::min(ch.rows, win));
    for (int64_t r = ch.rows - kept.back(); r < ch.rows; ++r) {
      rows.push_back(static_cast<int32_t>(ch.hidden_row + r));
      positions.push_back(ch.first_pos + r);
      ring_rows.push_back(static_cast<int32_t>(ch.state->slot.id() * R + (ch.first_pos + r) % win));
    }
  }
  const int64_t m = static_cast<int64_t>(rows.size());
  const DeviceArray<int32_t> drows = b.upload(rows), dring = b.upload(ring_rows);
  DeviceArray<uint16_t> hidden = b.scratch<uint16_t>(m * main_hidden.size(1)), main_x = b.scratch<uint16_t>(m * dim);
  const TensorView hv = hidden.view(DType::kBF16, {m, main_hidden.size(1)}), xv = main_x.view(DType::kBF16, {m, dim});
  b.be.gather_rows({main_hidden, drows.view(DType::kI32, {m}), hv});
  b.be.linear({hv, &d.main_proj, xv});
  b.be.rms_norm({xv, d.main_norm, c.norm_eps, xv});
  // Each stage's context KV of those positions, from the same main_x with its own wkv / kv_norm,
  // rotated and fp8 fake-quantised as a window row (spec §10.3).
  const RopeRows rope(b.be, *rope_[c.n_layers], positions);
  DeviceArray<uint16_t> kv = b.scratch<uint16_t>(m * hd);
  const TensorView kvv = kv.view(DType::kBF16, {m, hd});
  for (int i = 0; i < c.n_draft_layers(); ++i) {
    const AttentionWeights& w = weights_.layers[c.n_layers + i].attn;
    b.be.linear({xv, &w.wkv, kvv});
    b.be.rms_norm({kvv, w.kv_norm, c.norm_eps, kvv});
    rope.apply(b.be, kv.view(DType::kBF16, {m, 1, hd}), 0, false);
    b.be.fake_quant({kvv, FakeQuant::kFp8Group32});
    const DeviceArray<uint16_t>& rings = store_->windows(c.n_layers + i);
    b.be.scatter_rows(
        {kvv, dring.view(DType::kI32, {m}), rings.view(DType::kBF16, {static_cast<int64_t>(rings.size()) / hd, hd})});
  }

  // Dumped per chunk: main_x of the rows kept, each stage's ring after the call.
  for (size_t ci = 0, first = 0; ci < chunks.size(); first += kept[ci], ++ci) {
    b.record(ci, "spec.main_x", DType::kBF16, {kept[ci], dim}, main_x, static_cast<int64_t>(first) * dim);
    for (int i = 0; i < c.n_draft_layers(); ++i)
      b.record(ci, fmt::format("spec.stage{}.window_kv", i), DType::kBF16, {win, hd}, store_->windows(c.n_layers + i),
               chunks[ci].state->slot.id() * R * hd);
  }
}

void Model::draft_attend(int l, Batch& b, const DeviceArray<uint16_t>& q, const DeviceArray<uint16_t>& kv,
                         const DeviceArray<uint16_t>& o) {
  const ModelConfig& c = config_;
  const int64_t n = b.n, heads = c.n_heads / comm_.world_size(), hd = c.head_dim, win = c.window_size;
  const int64_t B = c.dspark_block_size, width = win + B, R = c.ring_rows();
  const DeviceArray<uint16_t>& rings = store_->windows(l);
  const int64_t ring_rows = static_cast<int64_t>(rings.size()) / hd;
  // Every row of a block sees its ring's filled slots in slot order (positions 0 .. p while the
  // ring is not full; a draft ring uses the first `win` of its R rows), then the block's B rows
  // (after the rings in the index space); -1s pad.
  std::vector<int32_t> idx;
  idx.reserve(n * width);
  for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
    const ForwardChunk& ch = b.chunks[ci];
    if (ch.tokens.empty()) continue;
    const int64_t p = ch.start_pos - 1, ring0 = ch.state->slot.id() * R;
    std::vector<int32_t> row;
    for (int64_t j = 0; j < std::min(win, p + 1); ++j) row.push_back(static_cast<int32_t>(ring0 + j));
    for (int64_t j = 0; j < B; ++j) row.push_back(static_cast<int32_t>(ring_rows + b.offset[ci] + j));
    row.resize(width, -1);
    for (int64_t j = 0; j < B; ++j) idx.insert(idx.end(), row.begin(), row.end());
  }
  const DeviceArray<int32_t> didx = b.upload(idx);
  b.be.sparse_attn({q.view(DType::kBF16, {n, heads, hd}), rings.view(DType::kBF16, {ring_rows, hd}),
                    kv.view(DType::kBF16, {n, hd}), didx.view(DType::kI32, {n, width}),
                    weights_.layers[l].attn.attn_sink, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                    o.view(DType::kBF16, {n, heads, hd})});
}

Status Model::draft_head(Batch& b, const DraftOutputs& out, const DraftSampling& sampling) {
  const ModelConfig& c = config_;
  const DSparkWeights& d = *weights_.dspark;
  const int64_t n = b.n, hc = c.hc_mult, dim = c.dim, r = c.dspark_markov_rank, B = c.dspark_block_size;
  const int64_t V = c.vocab_size, blocks = n / B;
  // [n, dim + r]: the collapsed stream, then the Markov embedding of the row's token (the
  // confidence head's input); the norm of the former feeds the LM head.
  DeviceArray<uint16_t> joined = b.scratch<uint16_t>(n * (dim + r)), normed = b.scratch<uint16_t>(n * dim);
  TensorView x = joined.view(DType::kBF16, {n, dim}), e = joined.view(DType::kBF16, {n, r}, dim);
  x.stride[0] = e.stride[0] = dim + r;
  const TensorView xn = normed.view(DType::kBF16, {n, dim});
  b.be.hc_pre({b.x.view(DType::kBF16, {n, hc, dim}), b.pre.view(DType::kF32, {n, hc}), x});
  b.be.rms_norm({x, d.norm, c.norm_eps, xn});
  const TensorView base = TensorView::contiguous(out.base.data, DType::kF32, {n, V}, out.base.device);
  DSINFER_RETURN_IF_ERROR(head_logits(b, xn, b.runs, base));

  std::vector<int32_t> tokens(blocks * (B + 1), 0);
  for (size_t ci = 0, k = 0; ci < b.chunks.size(); ++ci)
    if (!b.chunks[ci].tokens.empty()) tokens[(k++) * (B + 1)] = b.chunks[ci].tokens[0];
  b.be.copy_to_device(out.tokens.data, tokens.data(), tokens.size() * sizeof(int32_t));
  const bool dumps = std::any_of(b.chunks.begin(), b.chunks.end(), [&](const ForwardChunk& ch) {
    return b.wants_tensors(static_cast<size_t>(&ch - b.chunks.data()));
  });
  std::vector<float> head_logits_host;
  if (dumps) {
    head_logits_host.resize(n * V);
    b.be.copy_to_host(head_logits_host.data(), base.data, head_logits_host.size() * sizeof(float));
  }
  if (sampling.chunks.empty() || sampling.rows < 1) {
    b.be.markov_draft({out.base, d.markov_embed, d.markov_head, out.tokens, e});
  } else {
    // A row at a time: the op's maxima for every block, then the sampled blocks' picks over them.
    std::vector<float> row(V);
    for (int64_t j = 0; j < B; ++j) {
      TensorView base_j = out.base, tokens_j = out.tokens, e_j = e;
      base_j.data = static_cast<float*>(out.base.data) + j * V;
      base_j.shape[1] = 1;
      tokens_j.data = static_cast<int32_t*>(out.tokens.data) + j;
      tokens_j.shape[1] = 2;
      e_j.data = static_cast<uint16_t*>(e.data) + j * (dim + r);
      e_j.shape[0] = blocks, e_j.stride[0] = B * (dim + r);
      b.be.markov_draft({base_j, d.markov_embed, d.markov_head, tokens_j, e_j});
      if (j >= sampling.rows) continue;
      for (const int64_t k : sampling.chunks) {
        b.be.copy_to_host(row.data(), static_cast<const float*>(out.base.data) + (k * B + j) * V, V * sizeof(float));
        const int32_t token = sampling.pick(k, j, row);
        DSINFER_CHECK(token >= 0 && token < V, "draft pick {} outside the vocab", token);
        b.be.copy_to_device(static_cast<int32_t*>(out.tokens.data) + k * (B + 1) + j + 1, &token, sizeof(int32_t));
      }
    }
  }
  b.be.linear({joined.view(DType::kBF16, {n, dim + r}), &d.confidence,
               TensorView::contiguous(out.confidence.data, DType::kF32, {n, 1}, out.confidence.device)});
  if (!dumps) return {};

  std::vector<uint16_t> joined_host(n * (dim + r));
  b.be.copy_to_host(joined_host.data(), joined.data(), joined_host.size() * sizeof(uint16_t));
  for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
    if (b.size(ci) == 0) continue;
    std::vector<uint16_t> xs, es;
    for (int64_t i = b.offset[ci]; i < b.offset[ci + 1]; ++i) {
      const uint16_t* row = &joined_host[i * (dim + r)];
      xs.insert(xs.end(), row, row + dim);
      es.insert(es.end(), row + dim, row + dim + r);
    }
    b.record(ci, "spec.head_x", DType::kBF16, {B, dim}, xs.data());
    b.record(ci, "spec.markov_embed", DType::kBF16, {B, r}, es.data());
    b.record(ci, "spec.head_logits", DType::kF32, {B, V}, &head_logits_host[b.offset[ci] * V]);
  }
  return {};
}

}  // namespace dsinfer
