// The attention sublayer (spec §5–§7): low-rank q, the window KV ring, the compressor and the
// indexer of kv/index sources, sparse attention over window + selected compressed rows, grouped
// output projection. Per chunk where the reference works per sequence; per token elsewhere. Tensors
// and the selections live in the backend's memory; positions and window slots are built on the host
// (window_slots.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "core/float_formats.h"
#include "model/forward_batch.h"
#include "model/window_slots.h"
#include "ops/candidate_pool.h"

namespace dsinfer {
namespace {

// Copies `count` rows of `width` elements, row src_row(i) of src to row dst_row(i) of dst, one copy
// per run of rows consecutive in both (a ring's rows wrap once at most).
template <typename T, typename DstRow, typename SrcRow>
void copy_rows(Backend& be, T* dst, const T* src, int64_t width, int64_t count, DstRow dst_row, SrcRow src_row) {
  for (int64_t i = 0; i < count;) {
    int64_t run = 1;
    while (i + run < count && dst_row(i + run) == dst_row(i) + run && src_row(i + run) == src_row(i) + run) ++run;
    be.copy_on_device(dst + dst_row(i) * width, src + src_row(i) * width, run * width * sizeof(T));
    i += run;
  }
}

// Selections the taps hand some rows of a group: the rows, then their values, `width` a row.
struct GivenRows {
  std::vector<int32_t> rows, values;
  // Rows [i0, i0 + s) from `given` ([s, own] values), padded with -1s to `width`.
  void add(int64_t i0, int64_t s, std::span<const int32_t> given, int64_t own, int64_t width) {
    for (int64_t i = 0; i < s; ++i) {
      rows.push_back(static_cast<int32_t>(i0 + i));
      values.insert(values.end(), given.begin() + i * own, given.begin() + (i + 1) * own);
      values.resize(values.size() + (width - own), -1);
    }
  }
};

// The rows of a group by the layer whose index keys they score against (each row's owner, its
// sequence's), or nothing when a row that sees keys has none. At a decode step the sequences of a
// group may read different layers' keys, and so may a verify chunk's rows (the reference's shared
// slot, spec §6.4); rows that see no key go with the first owner.
std::map<int, std::vector<int64_t>> rows_by_key_owner(std::span<const int> owners,
                                                      std::span<const SequenceState* const> states,
                                                      std::span<const int64_t> row_T) {
  std::map<int, std::vector<int64_t>> by_owner;
  std::vector<int64_t> blind;
  for (size_t i = 0; i < row_T.size(); ++i) {
    if (row_T[i] == 0) {
      blind.push_back(static_cast<int64_t>(i));
      continue;
    }
    const int owner = owners[i];
    if (owner < 0 || states[i]->layers[owner].index_key_rows < row_T[i]) return {};
    by_owner[owner].push_back(static_cast<int64_t>(i));
  }
  if (!blind.empty() && !by_owner.empty()) {
    std::vector<int64_t>& first = by_owner.begin()->second;
    first.insert(first.end(), blind.begin(), blind.end());
    std::sort(first.begin(), first.end());
  }
  return by_owner;
}

// The window of a group's rows (the chunks [first, end)): a run of decode tokens reads its
// sequences' rings, a prefill or verify chunk the ring's rows before it and its own.
AttentionWindow window_of(std::span<const ForwardChunk> chunks, size_t first, size_t end, bool decode, int64_t win,
                          int64_t R) {
  AttentionWindow w;
  if (decode) {
    w.width = win;
    for (size_t ci = first; ci < end; ++ci) {
      const ForwardChunk& ch = chunks[ci];
      const int64_t ring0 = ch.state->slot.id() * R;
      for (int32_t slot : decode_window_slots(ch.start_pos, win, R))
        w.slots.push_back(slot < 0 ? -1 : static_cast<int32_t>(ring0 + slot));
      w.ring_rows.push_back(static_cast<int32_t>(ring0 + ch.start_pos % R));
    }
    return w;
  }
  const ForwardChunk& ch = chunks[first];
  const int64_t s = static_cast<int64_t>(ch.tokens.size());
  return {ch.verify ? verify_window(ch.start_pos, s, win) : prefill_window(ch.start_pos, s, ch.prompt_len, win), {}};
}

}  // namespace

Status Model::attention(int l, Batch& b, const TensorView& x, const TensorView& out) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const RopeTable& rope = *rope_[l];
  // A rank's heads (its rows of wq_b, its sinks, its wo_a groups; spec §14b.2).
  const int ranks = comm_.world_size();
  const int64_t n = b.n, heads = c.n_heads / ranks, hd = c.head_dim, ql = c.q_lora_rank;

  DeviceArray<uint16_t> qr = b.scratch<uint16_t>(n * ql), q = b.scratch<uint16_t>(n * heads * hd);
  DeviceArray<uint16_t> kv = b.scratch<uint16_t>(n * hd), o = b.scratch<uint16_t>(n * heads * hd);
  const TensorView qrv = qr.view(DType::kBF16, {n, ql}), kvv = kv.view(DType::kBF16, {n, hd});
  const RopeRows& at_pos = b.rope_at_positions(rope);
  // The KV row as side work beside the queries (side_queue).
  SideWork kv_row(b.be, [&] {
    b.linear({x, &w.wkv, kvv});
    b.be.rms_norm({kvv, w.kv_norm, c.norm_eps, kvv});
    at_pos.apply(b.be, kv.view(DType::kBF16, {n, 1, hd}), 0, false);
    b.be.fake_quant({kvv, FakeQuant::kFp8Group32});  // window KV is fp8 (spec §5.2)
  });
  b.linear({x, &w.wq_a, qrv});
  b.be.rms_norm({qrv, w.q_norm, c.norm_eps, qrv});
  b.linear({qrv, &w.wq_b, q.view(DType::kBF16, {n, heads * hd})});
  at_pos.apply(b.be, q.view(DType::kBF16, {n, heads, hd}), 0, false);
  kv_row.join();

  if (l < c.n_layers) {
    DSINFER_RETURN_IF_ERROR(attend(l, b, x, qrv, q, kv, o));
  } else {
    draft_attend(l, b, q, kv, o);
  }
  at_pos.apply(b.be, o.view(DType::kBF16, {n, heads, hd}), 0, /*inverse=*/true);

  // Grouped low-rank output: group g projects heads [g*h/G, (g+1)*h/G) with its own rows of wo_a.
  const int64_t groups = c.o_groups / ranks, olr = c.o_lora_rank, gw = heads * hd / groups;
  DeviceArray<uint16_t> z = b.scratch<uint16_t>(n * groups * olr);
  std::vector<LinearArgs> wo_a;
  for (int64_t g = 0; g < groups; ++g) {
    TensorView og = o.view(DType::kBF16, {n, heads * hd}), zg = z.view(DType::kBF16, {n, groups * olr});
    og.data = o.data() + g * gw, og.shape[1] = gw;
    zg.data = z.data() + g * olr, zg.shape[1] = olr;
    wo_a.push_back({og, &w.wo_a[g], zg});
  }
  b.grouped_linear(wo_a);
  if (ranks == 1) {
    b.linear({z.view(DType::kBF16, {n, groups * olr}), &w.wo_b, out});
    return {};
  }
  // wo_b is row-parallel: the ranks' fp32 partial outputs are summed, then rounded to bf16 once
  // (adding them to zero rows: out = bf16(sum)).
  const int64_t dim = c.dim;
  DeviceArray<float> partial = b.scratch<float>(n * dim);
  const TensorView pv = partial.view(DType::kF32, {n, dim});
  b.linear({z.view(DType::kBF16, {n, groups * olr}), &w.wo_b, pv});
  DSINFER_RETURN_IF_ERROR(comm_.all_reduce_sum(pv));
  const DeviceArray<uint16_t> none = b.zeros<uint16_t>(n * dim);
  b.be.scatter_add({none.view(DType::kBF16, {n, dim}), b.token_rows().view(DType::kI32, {n}), pv, out});
  return {};
}

Status Model::attend(int l, Batch& b, const TensorView& x, const TensorView& qrv, const DeviceArray<uint16_t>& q,
                     const DeviceArray<uint16_t>& kv, const DeviceArray<uint16_t>& o) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const int64_t heads = c.n_heads / comm_.world_size(), hd = c.head_dim, win = c.window_size, R = c.ring_rows();
  const int r = c.compress_ratio(l);
  const TensorView kvv = kv.view(DType::kBF16, {b.n, hd});
  const DeviceArray<uint16_t>& rings = store_->windows(l);
  for (size_t g = 0; g < b.groups.size(); ++g) {
    const Batch::Group& gr = b.groups[g];
    const int64_t m = gr.rows, row0 = gr.row0;

    // Window rows and each query's window slots, in the reference's order (spec §5.2).
    auto [at_window, fresh] = b.windows.try_emplace(g);
    if (fresh) at_window->second = window_of(b.chunks, gr.first, gr.end, gr.decode, win, R);
    const AttentionWindow& window = at_window->second;
    const int64_t width = window.width;
    DeviceArray<uint16_t> prefill_rows;  // a prefill's window: cached rows before the chunk, then its own
    TensorView wrows;
    if (gr.decode) {  // every sequence's ring, rows of one pool; a token's row goes in at its last slot, p % R
      wrows = rings.view(DType::kBF16, {static_cast<int64_t>(rings.size()) / hd, hd});
    } else {
      const ForwardChunk& ch = b.chunks[gr.first];
      uint16_t* ring = rings.data() + ch.state->slot.id() * R * hd;
      const int64_t s = m, start = ch.start_pos, h0 = window.first_cached, cached = window.cached;
      prefill_rows = b.scratch<uint16_t>((cached + s) * hd);
      copy_rows(
          b.be, prefill_rows.data(), ring, hd, cached, [](int64_t i) { return i; },
          [&](int64_t i) { return (h0 + i) % R; });
      b.be.copy_on_device(prefill_rows.data() + cached * hd, kv.data() + row0 * hd, s * hd * 2);
      wrows = prefill_rows.view(DType::kBF16, {cached + s, hd});
      const int64_t kept = std::min(s, win);  // the ring keeps the last window
      copy_rows(
          b.be, ring, kv.data(), hd, kept, [&](int64_t i) { return (start + s - kept + i) % R; },
          [&](int64_t i) { return row0 + s - kept + i; });
    }
    const int64_t n_win_rows = wrows.size(0);

    // Compressed rows and the selected positions (spec §6–§7).
    TensorView crows;
    int64_t k = 0;
    const int src = c.kv_source_of(l);
    if (r > 0) {
      DSINFER_RETURN_IF_ERROR(compressed_kv(l, b, g, x, qrv));
      const DeviceArray<uint16_t>& pool = store_->compressed(src);
      crows = pool.view(DType::kBF16, {static_cast<int64_t>(pool.size()) / hd, hd});
      k = b.topk_k[g];
    }
    // The window's slots, then the selected compressed positions as rows of the shared pool
    // (through the block tables, on the device: the selection never leaves it); then the rows the
    // decode tokens go in at.
    auto [at_index, new_index] = b.attention_index.try_emplace({g, k});
    if (new_index) {  // in a buffer kept between calls (a prompt's chunk: megabytes, else faulted in anew)
      std::vector<int32_t>& idx = attention_index_;
      idx.resize(m * (width + k));
      for (int64_t i = 0; i < m; ++i) {
        int32_t* row = &idx[i * (width + k)];
        std::copy(&window.slots[i * width], &window.slots[(i + 1) * width], row);
        std::fill(row + width, row + width + k, -1);
      }
      idx.insert(idx.end(), window.ring_rows.begin(), window.ring_rows.end());
      at_index->second = b.upload(idx);
    }
    const DeviceArray<int32_t>& didx = at_index->second;
    if (gr.decode) b.be.scatter_rows({row_slice(kvv, row0, m), didx.view(DType::kI32, {m}, m * (width + k)), wrows});
    if (k > 0) {
      TensorView selected_rows = didx.view(DType::kI32, {m, k}, width);
      selected_rows.stride[0] = width + k;
      b.be.paged_rows({b.topk[g].view(DType::kI32, {m, k}),
                       {b.block_table(g), store_->rows_per_block(src), n_win_rows},
                       selected_rows});
    }
    b.be.sparse_attn({q.view(DType::kBF16, {m, heads, hd}, row0 * heads * hd), wrows, crows,
                      didx.view(DType::kI32, {m, width + k}), w.attn_sink,
                      static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                      o.view(DType::kBF16, {m, heads, hd}, row0 * heads * hd)});
  }
  return {};
}

void Model::publish_rows(Batch& b, const DeviceArray<uint16_t>& pool, const TensorView& rows, int layer,
                         const std::vector<CompletedGroup>& done) const {
  const int64_t width = rows.size(1), r = config_.compress_ratio(layer);
  std::vector<int32_t> at;
  for (const CompletedGroup& d : done)
    at.push_back(static_cast<int32_t>(store_->row(layer, d.seq->blocks.blocks(), d.pos / r)));
  const DeviceArray<int32_t> dat = b.upload(at);
  b.be.scatter_rows({rows, dat.view(DType::kI32, {static_cast<int64_t>(at.size())}),
                     pool.view(DType::kBF16, {static_cast<int64_t>(pool.size()) / width, width})});
}

Status Model::compressed_kv(int l, Batch& b, size_t g, const TensorView& x, const TensorView& qr) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const RopeTable& rope = *rope_[l];
  const Batch::Group& gr = b.groups[g];
  const int r = c.compress_ratio(l);
  const int64_t m = gr.rows, row0 = gr.row0, hd = c.head_dim;
  const TensorView xg = row_slice(x, row0, m);

  // Compressor (kv sources): the pre-RoPE latents of the groups this call completes.
  DeviceArray<uint16_t> latent(b.be);
  std::vector<CompletedGroup> done;
  if (c.is_kv_source(l)) {
    if (r == 1) {
      latent = b.scratch<uint16_t>(m * hd);
      const TensorView lv = latent.view(DType::kBF16, {m, hd});
      b.be.linear({xg, &w.comp_wkv, lv});
      b.be.rms_norm({lv, w.comp_norm, c.norm_eps, lv});
      for (int64_t i = 0; i < m; ++i) done.push_back({b.chunks[b.chunk_of(gr, i)].state, b.pos[row0 + i]});
    } else {
      DeviceArray<float> kvf = b.scratch<float>(m * hd), score = b.scratch<float>(m * hd);
      b.be.linear({xg, &w.comp_wkv, kvf.view(DType::kF32, {m, hd})});
      b.be.linear({xg, &w.comp_wgate, score.view(DType::kF32, {m, hd})});
      // A sequence's partial groups: position p's row at G * slot + p % G of the state pools (G =
      // 2 + a verify chunk's slack). A group completes at odd p with the rows of p - 1 and p.
      const int64_t G = c.partial_group_rows();
      const std::array<std::pair<const DeviceArray<float>*, DeviceArray<float>*>, 2> states = {
          std::pair{&store_->kv_states(l), &kvf}, std::pair{&store_->score_states(l), &score}};
      DeviceArray<float> pairs(b.be), pair_scores(b.be);
      if (gr.decode) {
        // Each token into its row of the partial groups, then the pairs of the groups completed.
        std::vector<int32_t> at;  // [m] each token's state row, then [2 * groups] the pairs' rows
        for (size_t ci = gr.first; ci < gr.end; ++ci) {
          const ForwardChunk& ch = b.chunks[ci];
          at.push_back(static_cast<int32_t>(G * ch.state->slot.id() + ch.start_pos % G));
          if (ch.start_pos % 2 == 1) done.push_back({ch.state, ch.start_pos - 1});
        }
        for (const CompletedGroup& d : done)
          at.insert(at.end(), {static_cast<int32_t>(G * d.seq->slot.id() + d.pos % G),
                               static_cast<int32_t>(G * d.seq->slot.id() + (d.pos + 1) % G)});
        const int64_t groups = static_cast<int64_t>(done.size());
        const DeviceArray<int32_t> dat = b.upload(at);
        pairs = b.scratch<float>(groups * 2 * hd), pair_scores = b.scratch<float>(groups * 2 * hd);
        for (auto [dst, state] : {std::pair{&pairs, states[0]}, std::pair{&pair_scores, states[1]}}) {
          const TensorView pool = state.first->view(DType::kF32, {static_cast<int64_t>(state.first->size()) / hd, hd});
          b.be.scatter_rows({state.second->view(DType::kF32, {m, hd}), dat.view(DType::kI32, {m}), pool});
          if (groups)
            b.be.gather_rows({pool, dat.view(DType::kI32, {2 * groups}, m), dst->view(DType::kF32, {2 * groups, hd})});
        }
      } else {
        // A group begun in an earlier call takes its first row from the state; the rest are
        // consecutive rows of the chunk. The chunk's last G rows go into the state.
        const ForwardChunk& ch = b.chunks[gr.first];
        const int64_t s = m, start = ch.start_pos;
        for (int64_t p = start; p < start + s; ++p)
          if (p % 2 == 1) done.push_back({ch.state, p - 1});
        const int64_t groups = static_cast<int64_t>(done.size());
        pairs = b.scratch<float>(groups * 2 * hd), pair_scores = b.scratch<float>(groups * 2 * hd);
        for (auto [dst, state] : {std::pair{&pairs, states[0]}, std::pair{&pair_scores, states[1]}}) {
          float* slot = state.first->data() + G * ch.state->slot.id() * hd;
          const DeviceArray<float>& rows = *state.second;
          int64_t first = 0, filled = 0;  // first chunk row of a whole pair; floats of `dst` written
          if (groups && start % 2 == 1) {
            b.be.copy_on_device(dst->data(), slot + (start - 1) % G * hd, hd * 4);
            b.be.copy_on_device(dst->data() + hd, rows.data(), hd * 4);
            first = 1, filled = 2 * hd;
          }
          if (filled < groups * 2 * hd)
            b.be.copy_on_device(dst->data() + filled, rows.data() + first * hd, (groups * 2 * hd - filled) * 4);
          const int64_t kept = std::min(s, G);
          copy_rows(
              b.be, slot, rows.data(), hd, kept, [&](int64_t i) { return (start + s - kept + i) % G; },
              [&](int64_t i) { return s - kept + i; });
        }
      }
      const int64_t groups = static_cast<int64_t>(done.size());
      latent = b.scratch<uint16_t>(groups * hd);
      if (groups) {
        const TensorView lv = latent.view(DType::kBF16, {groups, hd});
        b.be.compress_pool(
            {pairs.view(DType::kF32, {groups, 2, hd}), pair_scores.view(DType::kF32, {groups, 2, hd}), lv});
        b.be.rms_norm({lv, w.comp_norm, c.norm_eps, lv});
      }
    }
  }

  // The RoPE rows of the completed groups' first positions: the latents' and the index keys'.
  std::optional<RopeRows> group_rope;
  if (!done.empty()) {
    std::vector<int64_t> group_pos;
    for (const CompletedGroup& d : done) group_pos.push_back(d.pos);
    group_rope.emplace(b.be, rope, group_pos);
  }
  if (c.is_index_source(l))
    DSINFER_RETURN_IF_ERROR(
        indexer(l, b, g, xg, row_slice(qr, row0, m), latent, done, group_rope ? &*group_rope : nullptr));

  // Publish the rotated, fp4 fake-quantised latents into this layer's compressed cache (spec §6.2).
  if (const int64_t groups = static_cast<int64_t>(done.size())) {
    const TensorView lv = latent.view(DType::kBF16, {groups, hd});
    group_rope->apply(b.be, latent.view(DType::kBF16, {groups, 1, hd}), 0, false);
    b.be.fake_quant({lv, FakeQuant::kFp4E4M3Group16});
    publish_rows(b, store_->compressed(l), lv, l, done);
    for (const CompletedGroup& d : done)
      d.seq->layers[l].compressed_rows = std::max(d.seq->layers[l].compressed_rows, d.pos / r + 1);
  }
  // Config validation guarantees an index source of this ratio ran earlier in this call.
  DSINFER_CHECK(static_cast<int64_t>(b.topk[g].size()) == m * b.topk_k[g], "layer {}: no published top-k", l);
  return {};
}

Status Model::indexer(int l, Batch& b, size_t g, const TensorView& xg, const TensorView& qrg,
                      const DeviceArray<uint16_t>& latent, const std::vector<CompletedGroup>& done,
                      const RopeRows* group_rope) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const RopeTable& rope = *rope_[l];
  const Batch::Group& gr = b.groups[g];
  const int r = c.compress_ratio(l);
  const bool verifies = !gr.decode && b.chunks[gr.first].verify;
  // A rank's index heads; their score sums are added over the ranks before the selections.
  const int64_t m = gr.rows, hi = c.index_n_heads / comm_.world_size(), di = c.index_head_dim;

  // Index keys of a key owner, from the pre-RoPE latents (spec §7.1); the shared slot moves here.
  const int64_t groups = static_cast<int64_t>(done.size());
  if (c.is_kv_source(l) && groups) {
    DeviceArray<uint16_t> keys = b.scratch<uint16_t>(groups * di);
    const TensorView kv = keys.view(DType::kBF16, {groups, di});
    b.be.linear({latent.view(DType::kBF16, {groups, c.head_dim}), &w.idx_wk, kv});
    b.be.rms_norm({kv, w.idx_k_norm, c.norm_eps, kv});
    group_rope->apply(b.be, keys.view(DType::kBF16, {groups, 1, di}), 0, false);
    b.be.fake_quant({kv, FakeQuant::kFp4E8M0Group32});
    publish_rows(b, store_->index_keys(l), kv, l, done);
    for (const CompletedGroup& d : done)
      d.seq->layers[l].index_key_rows = std::max(d.seq->layers[l].index_key_rows, d.pos / r + 1);
    // A decode step's (or a verify chunk's) row that completed a group moves its slot here.
    if (gr.decode || verifies)
      for (int64_t i = gr.row0; i < gr.row0 + m; ++i)
        if ((b.pos[i] + 1) % r == 0) b.key_owner[i] = l;
  }
  // Each row's compressed positions: a decode token sees (p + 1) / r; a prefill chunk's queries
  // see (start + i + 1) / r of the chunk's T = (start + s) / r.
  std::vector<int64_t> row_T(m);
  std::vector<int32_t> visible(m);
  for (int64_t i = 0; i < m; ++i) {
    const ForwardChunk& ch = b.chunks[b.chunk_of(gr, i)];
    const int64_t end = ch.start_pos + static_cast<int64_t>(ch.tokens.size());
    row_T[i] = end / r;
    visible[i] = static_cast<int32_t>(gr.decode ? row_T[i] : (ch.start_pos + i + 1) / r);
  }
  const int64_t T = *std::max_element(row_T.begin(), row_T.end());
  // A piece of a prompt computes what the one-shot prefill computes, where every owner publishes
  // the keys of all the groups so far and so reads its own: even a piece that completes no group.
  // Only a decode step keeps the reference's stale slot (spec §15 10a), and a verify chunk's rows.
  if (c.is_kv_source(l) && !gr.decode && !verifies && T > 0)
    std::fill(b.key_owner.begin() + gr.row0, b.key_owner.begin() + gr.row0 + m, l);
  const int64_t cols = b.columns(T, c.index_topk), k = std::min<int64_t>(c.index_topk, cols);
  b.topk_k[g] = k;
  b.topk[g] = b.scratch<int32_t>(m * k);
  if (T == 0) {
    for (size_t ci = gr.first; ci < gr.end; ++ci)
      b.record(ci, fmt::format("layer{}.topk_idxs", l), DType::kI32, {b.size(ci), 0}, nullptr);
    return {};
  }

  DeviceArray<uint16_t> q = b.scratch<uint16_t>(m * hi * di), wts = b.scratch<uint16_t>(m * hi);
  b.be.linear({qrg, &w.idx_wq_b, q.view(DType::kBF16, {m, hi * di})});
  b.rope_at_positions(rope).apply(b.be, q.view(DType::kBF16, {m, hi, di}), gr.row0, false);
  b.be.fake_quant({q.view(DType::kBF16, {m, hi * di}), FakeQuant::kFp4E8M0Group32});
  b.be.linear({xg, &w.idx_weights_proj, wts.view(DType::kBF16, {m, hi})});
  const float wscale = static_cast<float>(std::pow(static_cast<double>(di), -0.5) *
                                          std::pow(static_cast<double>(c.index_n_heads), -0.5));

  std::vector<const SequenceState*> row_states(m);
  for (int64_t i = 0; i < m; ++i) row_states[i] = b.chunks[b.chunk_of(gr, i)].state;
  const auto by_owner =
      rows_by_key_owner(std::span(b.key_owner).subspan(gr.row0, m), std::span(row_states).subspan(0, m), row_T);
  if (by_owner.empty()) return error(ErrorKind::kInternal, fmt::format("layer {}: no index keys to score against", l));

  // The candidate pool: made by the candidate source (or replayed) for all the group's queries, as
  // block numbers; the layers after it expand a query block's rows into a mask.
  const int64_t bs = c.candidate_block_size;
  const auto blocks_of = [&](int64_t columns) {
    return std::min<int64_t>(c.candidate_topk_blocks, (columns + bs - 1) / bs);
  };
  const int64_t kb = blocks_of(cols);
  const bool makes_candidates = c.is_candidate_source(l), reads_candidates = !makes_candidates && c.uses_candidates(l);
  if (makes_candidates) {
    b.candidates_T[g] = cols, b.candidates_kb[g] = kb;
    b.candidates[g] = b.scratch<int32_t>(m * kb);
  } else if (reads_candidates &&
             (b.candidates_T[g] != cols || static_cast<int64_t>(b.candidates[g].size()) != m * b.candidates_kb[g])) {
    return error(ErrorKind::kInternal, fmt::format("layer {}: candidate mask missing", l));
  }
  const int64_t rkb = b.candidates_kb[g];

  // Selections the taps replay, by row: a chunk's own k (and candidate blocks), padded with -1s to
  // the group's.
  GivenRows topk_given, cand_given;
  for (size_t ci = gr.first; ci < gr.end; ++ci) {
    const LayerReplay* replay = b.replay(ci, l);
    if (!replay) continue;
    const int64_t s = b.size(ci), i0 = b.offset[ci] - gr.row0;
    const int64_t own_cols = b.columns(row_T[i0], c.index_topk), own_k = std::min<int64_t>(c.index_topk, own_cols);
    if (!replay->topk.empty()) {
      if (static_cast<int64_t>(replay->topk.size()) != s * own_k)
        return error(ErrorKind::kInvalidArgument, fmt::format("layer {}: the replayed top-k holds {} values, not {}", l,
                                                              replay->topk.size(), s * own_k));
      topk_given.add(i0, s, replay->topk, own_k, k);
    }
    if (makes_candidates && !replay->candidates.empty()) {
      const int64_t own_kb = blocks_of(own_cols);
      auto ids = candidate_block_ids(replay->candidates, s, own_cols, bs, own_kb);
      if (!ids.ok()) return error(ErrorKind::kInvalidArgument, fmt::format("layer {}: {}", l, ids.status().message()));
      cand_given.add(i0, s, *ids, own_kb, kb);
    }
  }
  const bool all_topk = static_cast<int64_t>(topk_given.rows.size()) == m;
  const bool all_candidates = !makes_candidates || static_cast<int64_t>(cand_given.rows.size()) == m;

  // Score, select and drop a block of queries at a time: the scores and masks of a block are all
  // that the selections hold at once, so a long prompt's prefill stays linear in its length.
  if (!(all_topk && all_candidates)) {
    for (const auto& [owner, rows] : by_owner) {
      const int64_t mp = static_cast<int64_t>(rows.size());
      const bool whole = mp == m;  // else this owner's rows are gathered and their selections scattered back
      Batch::IndexerRows& ir = b.indexer_rows[{g, owner, r}];
      if (ir.host_rows != rows) {
        ir.host_rows = rows;
        std::vector<int32_t> ids, vis;
        for (int64_t i : rows) ids.push_back(static_cast<int32_t>(i)), vis.push_back(visible[i]);
        ir.visible = b.upload(vis);
        if (!whole) {  // some of the group's rows: theirs, and a block table each
          ir.rows = b.upload(ids);
          const TensorView all = b.block_table(g);
          const size_t width = static_cast<size_t>(all.size(-1));
          std::vector<int32_t> tables;
          for (int64_t i : rows) {
            const size_t ci = b.chunk_of(gr, i);
            const std::vector<int32_t> t = b.tables(ci, ci + 1, width);
            tables.insert(tables.end(), t.begin(), t.end());
          }
          ir.tables = b.upload(tables);
        }
      }
      const TensorView table = whole ? b.block_table(g) : ir.tables.view(DType::kI32, {mp, b.block_table(g).size(-1)});
      const DeviceArray<uint16_t>& key_pool = store_->index_keys(owner);
      const TensorView keys = key_pool.view(DType::kBF16, {static_cast<int64_t>(key_pool.size()) / di, di});
      const TensorView row_ids = whole ? TensorView{} : ir.rows.view(DType::kI32, {mp});
      // This owner's queries, weights and selections: the group's own, or gathered copies.
      DeviceArray<uint16_t> pq(b.be), pw(b.be);
      DeviceArray<int32_t> ptopk(b.be), pcand(b.be), pread(b.be);
      TensorView qv = q.view(DType::kBF16, {m, hi * di}), wv = wts.view(DType::kBF16, {m, hi});
      TensorView topk_out = b.topk[g].view(DType::kI32, {m, k});
      TensorView cand_out = makes_candidates ? b.candidates[g].view(DType::kI32, {m, kb}) : TensorView{};
      TensorView cand_in = reads_candidates ? b.candidates[g].view(DType::kI32, {m, rkb}) : TensorView{};
      if (!whole) {
        pq = b.scratch<uint16_t>(mp * hi * di), pw = b.scratch<uint16_t>(mp * hi);
        b.be.gather_rows({qv, row_ids, pq.view(DType::kBF16, {mp, hi * di})});
        b.be.gather_rows({wv, row_ids, pw.view(DType::kBF16, {mp, hi})});
        qv = pq.view(DType::kBF16, {mp, hi * di}), wv = pw.view(DType::kBF16, {mp, hi});
        ptopk = b.scratch<int32_t>(mp * k), topk_out = ptopk.view(DType::kI32, {mp, k});
        if (makes_candidates) pcand = b.scratch<int32_t>(mp * kb), cand_out = pcand.view(DType::kI32, {mp, kb});
        if (reads_candidates) {
          pread = b.scratch<int32_t>(mp * rkb);
          b.be.gather_rows({cand_in, row_ids, pread.view(DType::kI32, {mp, rkb})});
          cand_in = pread.view(DType::kI32, {mp, rkb});
        }
      }
      const int64_t block = std::min(mp, indexer_query_block(cols));
      DeviceArray<float> dscores = b.scratch<float>(block * cols);
      DeviceArray<uint8_t> dmask = b.scratch<uint8_t>(reads_candidates ? block * cols : 0);
      for (int64_t i0 = 0; i0 < mp; i0 += block) {
        const int64_t mb = std::min(block, mp - i0);
        const TensorView scores = dscores.view(DType::kF32, {mb, cols}), dvis = ir.visible.view(DType::kI32, {mb}, i0);
        const TensorView block_table = table.ndim == 2 ? row_slice(table, i0, mb) : table;
        b.be.indexer_scores({(whole ? q : pq).view(DType::kBF16, {mb, hi, di}, i0 * hi * di),
                             keys,
                             row_slice(wv, i0, mb),
                             dvis,
                             scores,
                             {block_table, store_->rows_per_block(owner), 0},
                             wscale});
        DSINFER_RETURN_IF_ERROR(comm_.all_reduce_sum(scores));
        if (makes_candidates && !all_candidates)
          b.be.candidate_blocks({scores, dvis, c.candidate_topk_blocks, bs, row_slice(cand_out, i0, mb)});
        if (all_topk) continue;
        TensorView mask;
        if (reads_candidates) {
          mask = dmask.view(DType::kU8, {mb, cols});
          b.be.candidate_mask({row_slice(cand_in, i0, mb), bs, mask});
        }
        b.be.topk({scores, mask, dvis, row_slice(topk_out, i0, mb)});
      }
      if (!whole) {
        if (!all_topk) b.be.scatter_rows({topk_out, row_ids, b.topk[g].view(DType::kI32, {m, k})});
        if (makes_candidates && !all_candidates)
          b.be.scatter_rows({cand_out, row_ids, b.candidates[g].view(DType::kI32, {m, kb})});
      }
    }
  }
  // The replayed rows over the computed ones.
  for (auto [given, out, width] :
       {std::tuple{&topk_given, &b.topk[g], k}, std::tuple{&cand_given, &b.candidates[g], kb}}) {
    if (given->rows.empty() || width == 0) continue;
    const int64_t count = static_cast<int64_t>(given->rows.size());
    const DeviceArray<int32_t> drows = b.upload(given->rows), dvalues = b.upload(given->values);
    b.be.scatter_rows({dvalues.view(DType::kI32, {count, width}), drows.view(DType::kI32, {count}),
                       out->view(DType::kI32, {m, width})});
  }

  // Dumped per chunk as the reference lays them out: the candidates as a mask over the chunk's
  // columns, the top-k offset by the chunk's window rows (s or win) as it passes them to sparse_attn.
  const bool dumps = [&] {
    for (size_t ci = gr.first; ci < gr.end; ++ci)
      if (b.wants_tensors(ci)) return true;
    return false;
  }();
  if (!dumps) return {};
  const std::vector<int32_t> topk = b.topk[g].download();
  const std::vector<int32_t> ids = makes_candidates ? b.candidates[g].download() : std::vector<int32_t>{};
  for (size_t ci = gr.first; ci < gr.end; ++ci) {
    if (!b.wants_tensors(ci)) continue;
    const int64_t s = b.size(ci), i0 = b.offset[ci] - gr.row0;
    const int64_t own_cols = b.columns(row_T[i0], c.index_topk), own_k = std::min<int64_t>(c.index_topk, own_cols);
    if (makes_candidates) {
      std::vector<uint8_t> mask;
      for (int64_t i = i0; i < i0 + s; ++i) {
        const std::vector<uint8_t> row = candidate_mask(std::span(ids).subspan(i * kb, kb), bs, own_cols);
        mask.insert(mask.end(), row.begin(), row.end());
      }
      b.record(ci, fmt::format("layer{}.candidates", l), DType::kU8, {s, own_cols}, mask.data());
    }
    std::vector<int32_t> dumped;
    const int64_t offset = gr.decode ? c.window_size : s;
    for (int64_t i = i0; i < i0 + s; ++i)
      for (int64_t j = 0; j < own_k; ++j) {
        const int32_t v = topk[i * k + j];
        dumped.push_back(v >= 0 ? v + static_cast<int32_t>(offset) : v);
      }
    b.record(ci, fmt::format("layer{}.topk_idxs", l), DType::kI32, {s, own_k}, dumped.data());
  }
  return {};
}

int64_t Model::indexer_query_block(int64_t columns) const {
  if (indexer_query_block_ > 0) return indexer_query_block_;
  return std::max<int64_t>(1, kIndexerScoreBytes / (std::max<int64_t>(columns, 1) * int64_t{sizeof(float)}));
}

}  // namespace dsinfer
