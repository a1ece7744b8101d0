// The attention sublayer (spec §5–§7): low-rank q, the window KV ring, the compressor and the
// indexer of kv/index sources, sparse attention over window + selected compressed rows, grouped
// output projection. Per chunk where the reference works per sequence; per token elsewhere. Tensors
// and the selections live in the backend's memory; positions and window slots are built on the host
// (window_slots.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/float_formats.h"
#include "model/forward_batch.h"
#include "model/window_slots.h"
#include "ops/candidate_pool.h"

namespace dsinfer {
namespace {

TensorView rows_of(const TensorView& t, int64_t begin, int64_t count) {
  TensorView v = t;
  v.data = t.as<uint8_t>() + dtype_bytes(t.dtype, begin * t.stride[0]);
  v.shape[0] = count;
  return v;
}

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

// Writes `rows` (compressed positions first, first + 1, ... of `layer`) into the layer's pool
// through the sequence's block table: one scatter over pool rows the device reads, so a decode
// step's call does not depend on where its rows go.
void publish_rows(Backend& be, const CacheStore& store, const DeviceArray<uint16_t>& pool, const TensorView& rows,
                  int layer, std::span<const int32_t> blocks, int64_t first) {
  const int64_t count = rows.size(0), width = rows.size(1);
  std::vector<int32_t> at(count);
  for (int64_t i = 0; i < count; ++i) at[i] = static_cast<int32_t>(store.row(layer, blocks, first + i));
  const DeviceArray<int32_t> dat(be, std::span<const int32_t>(at));
  be.scatter_rows({rows, dat.view(DType::kI32, {count}),
                   pool.view(DType::kBF16, {static_cast<int64_t>(pool.size()) / width, width})});
}

}  // namespace

Status Model::attention(int l, Batch& b, const TensorView& x, const TensorView& out) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const RopeTable& rope = *rope_[l];
  const int64_t n = b.n, heads = c.n_heads, hd = c.head_dim, ql = c.q_lora_rank, win = c.window_size;
  const int r = c.compress_ratio(l);

  DeviceArray<uint16_t> qr = b.scratch<uint16_t>(n * ql), q = b.scratch<uint16_t>(n * heads * hd);
  DeviceArray<uint16_t> kv = b.scratch<uint16_t>(n * hd), o = b.scratch<uint16_t>(n * heads * hd);
  const TensorView qrv = qr.view(DType::kBF16, {n, ql}), kvv = kv.view(DType::kBF16, {n, hd});
  b.be.linear({x, &w.wq_a, qrv});
  b.be.rms_norm({qrv, w.q_norm, c.norm_eps, qrv});
  b.be.linear({qrv, &w.wq_b, q.view(DType::kBF16, {n, heads * hd})});
  const RopeRows& at_pos = b.rope_at_positions(rope);
  at_pos.apply(b.be, q.view(DType::kBF16, {n, heads, hd}), 0, false);
  b.be.linear({x, &w.wkv, kvv});
  b.be.rms_norm({kvv, w.kv_norm, c.norm_eps, kvv});
  at_pos.apply(b.be, kv.view(DType::kBF16, {n, 1, hd}), 0, false);
  b.be.fake_quant({kvv, FakeQuant::kFp8Group32});  // window KV is fp8 (spec §5.2)

  for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
    ForwardChunk& ch = b.chunks[ci];
    LayerCache& cache = ch.state->layers[l];
    const int64_t s = b.size(ci), row0 = b.offset[ci], start = ch.start_pos;

    // Window rows and each query's window slots, in the reference's order (spec §5.2).
    DeviceArray<uint16_t> prefill_rows;  // a prefill's window: cached rows before the chunk, then its own
    TensorView wrows;
    std::vector<int32_t> widx;
    int64_t width = 0;
    if (ch.decode) {
      wrows = cache.window.view(DType::kBF16, {win, hd});  // the token's row goes in at its last slot (below)
      width = win;
      widx = decode_window_slots(start, win);
    } else {
      PrefillWindow pw = prefill_window(start, s, ch.prompt_len, win);
      const int64_t h0 = pw.first_cached, cached = pw.cached;
      prefill_rows = b.scratch<uint16_t>((cached + s) * hd);
      copy_rows(
          b.be, prefill_rows.data(), cache.window.data(), hd, cached, [](int64_t i) { return i; },
          [&](int64_t i) { return (h0 + i) % win; });
      b.be.copy_on_device(prefill_rows.data() + cached * hd, kv.data() + row0 * hd, s * hd * 2);
      wrows = prefill_rows.view(DType::kBF16, {cached + s, hd});
      width = pw.width;
      widx = std::move(pw.slots);
      const int64_t kept = std::min(s, win);  // the ring keeps the last window
      copy_rows(
          b.be, cache.window.data(), kv.data(), hd, kept, [&](int64_t i) { return (start + s - kept + i) % win; },
          [&](int64_t i) { return row0 + s - kept + i; });
    }
    const int64_t n_win_rows = wrows.size(0);

    // Compressed rows and the selected positions (spec §6–§7).
    TensorView crows;
    int64_t k = 0;
    const int src = c.kv_source_of(l);
    if (r > 0) {
      DSINFER_RETURN_IF_ERROR(compressed_kv(l, b, ci, x, qrv));
      const DeviceArray<uint16_t>& pool = store_->compressed(src);
      crows = pool.view(DType::kBF16, {static_cast<int64_t>(pool.size()) / hd, hd});
      k = b.topk_k[ci];
    }
    // The window's slots, then the selected compressed positions as rows of the shared pool
    // (through the block table, on the device: the selection never leaves it).
    std::vector<int32_t> idx(s * (width + k), -1);
    for (int64_t i = 0; i < s; ++i) std::copy(&widx[i * width], &widx[(i + 1) * width], &idx[i * (width + k)]);
    const DeviceArray<int32_t> didx = b.upload(idx);
    if (ch.decode)  // the token's row into the ring: at its list's last window slot, p % win (a slot the device reads)
      b.be.scatter_rows({rows_of(kvv, row0, 1), didx.view(DType::kI32, {1}, width - 1), wrows});
    if (k > 0) {
      TensorView selected_rows = didx.view(DType::kI32, {s, k}, width);
      selected_rows.stride[0] = width + k;
      const DeviceArray<int32_t>& blocks = b.block_table(ci);
      b.be.paged_rows({b.topk[ci].view(DType::kI32, {s, k}),
                       blocks.view(DType::kI32, {static_cast<int64_t>(blocks.size())}), store_->rows_per_block(src),
                       n_win_rows, selected_rows});
    }
    b.be.sparse_attn({q.view(DType::kBF16, {s, heads, hd}, row0 * heads * hd), wrows, crows,
                      didx.view(DType::kI32, {s, width + k}), w.attn_sink,
                      static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                      o.view(DType::kBF16, {s, heads, hd}, row0 * heads * hd)});
  }
  at_pos.apply(b.be, o.view(DType::kBF16, {n, heads, hd}), 0, /*inverse=*/true);

  // Grouped low-rank output: group g projects heads [g*h/G, (g+1)*h/G) with its own rows of wo_a.
  const int64_t groups = c.o_groups, olr = c.o_lora_rank, gw = heads * hd / groups;
  DeviceArray<uint16_t> z = b.scratch<uint16_t>(n * groups * olr);
  std::vector<LinearArgs> wo_a;
  for (int64_t g = 0; g < groups; ++g) {
    TensorView og = o.view(DType::kBF16, {n, heads * hd}), zg = z.view(DType::kBF16, {n, groups * olr});
    og.data = o.data() + g * gw, og.shape[1] = gw;
    zg.data = z.data() + g * olr, zg.shape[1] = olr;
    wo_a.push_back({og, &w.wo_a[g], zg});
  }
  b.be.grouped_linear({wo_a});
  b.be.linear({z.view(DType::kBF16, {n, groups * olr}), &w.wo_b, out});
  comm_.all_reduce_sum(out);
  return {};
}

Status Model::compressed_kv(int l, Batch& b, size_t ci, const TensorView& x, const TensorView& qr) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const RopeTable& rope = *rope_[l];
  ForwardChunk& ch = b.chunks[ci];
  SequenceState& st = *ch.state;
  const int r = c.compress_ratio(l);
  const int64_t s = b.size(ci), row0 = b.offset[ci], start = ch.start_pos, hd = c.head_dim;
  const TensorView xc = rows_of(x, row0, s);

  // Compressor (kv sources): the pre-RoPE latents of the groups this chunk completes.
  DeviceArray<uint16_t> latent(b.be);
  std::vector<int64_t> group_pos;  // first token of each completed group
  if (c.is_kv_source(l)) {
    LayerCache& cache = st.layers[l];
    if (r == 1) {
      latent = b.scratch<uint16_t>(s * hd);
      const TensorView lv = latent.view(DType::kBF16, {s, hd});
      b.be.linear({xc, &w.comp_wkv, lv});
      b.be.rms_norm({lv, w.comp_norm, c.norm_eps, lv});
      for (int64_t i = 0; i < s; ++i) group_pos.push_back(start + i);
    } else {
      DeviceArray<float> kvf = b.scratch<float>(s * hd), score = b.scratch<float>(s * hd);
      b.be.linear({xc, &w.comp_wkv, kvf.view(DType::kF32, {s, hd})});
      b.be.linear({xc, &w.comp_wgate, score.view(DType::kF32, {s, hd})});
      // State slot p % 2; a group completes at odd p with the pair (slot 0, slot 1). A group begun
      // in an earlier call takes its first row from the state; the rest are consecutive rows.
      for (int64_t p = start; p < start + s; ++p)
        if (p % 2 == 1) group_pos.push_back(p - 1);
      const int64_t g = static_cast<int64_t>(group_pos.size());
      DeviceArray<float> pairs = b.scratch<float>(g * 2 * hd), pair_scores = b.scratch<float>(g * 2 * hd);
      for (auto [dst, state, rows] :
           {std::tuple{&pairs, &cache.kv_state, &kvf}, {&pair_scores, &cache.score_state, &score}}) {
        int64_t first = 0, filled = 0;  // first chunk row of a whole pair; floats of `dst` written
        if (g && start % 2 == 1) {
          b.be.copy_on_device(dst->data(), state->data(), hd * 4);
          b.be.copy_on_device(dst->data() + hd, rows->data(), hd * 4);
          first = 1, filled = 2 * hd;
        }
        if (filled < g * 2 * hd)
          b.be.copy_on_device(dst->data() + filled, rows->data() + first * hd, (g * 2 * hd - filled) * 4);
        for (int64_t slot = 0; slot < 2; ++slot) {  // the last row of each parity becomes its slot
          const int64_t last = start + s - 1 - ((start + s - 1 - slot) % 2 + 2) % 2;
          if (last >= start) b.be.copy_on_device(state->data() + slot * hd, rows->data() + (last - start) * hd, hd * 4);
        }
      }
      latent = b.scratch<uint16_t>(g * hd);
      if (g) {
        const TensorView lv = latent.view(DType::kBF16, {g, hd});
        b.be.compress_pool({pairs.view(DType::kF32, {g, 2, hd}), pair_scores.view(DType::kF32, {g, 2, hd}), lv});
        b.be.rms_norm({lv, w.comp_norm, c.norm_eps, lv});
      }
    }
  }
  const int64_t groups = static_cast<int64_t>(group_pos.size());

  if (c.is_index_source(l)) DSINFER_RETURN_IF_ERROR(indexer(l, b, ci, xc, rows_of(qr, row0, s), latent, group_pos));

  // Publish the rotated, fp4 fake-quantised latents into this layer's compressed cache (spec §6.2).
  if (groups) {
    RopeRows(b.be, rope, group_pos).apply(b.be, latent.view(DType::kBF16, {groups, 1, hd}), 0, false);
    b.be.fake_quant({latent.view(DType::kBF16, {groups, hd}), FakeQuant::kFp4E4M3Group16});
    const int64_t j0 = group_pos.front() / r;
    publish_rows(b.be, *store_, store_->compressed(l), latent.view(DType::kBF16, {groups, hd}), l, st.blocks.blocks(),
                 j0);
    st.layers[l].compressed_rows = std::max(st.layers[l].compressed_rows, j0 + groups);
  }
  // Config validation guarantees an index source of this ratio ran earlier in this call.
  DSINFER_CHECK(static_cast<int64_t>(b.topk[ci].size()) == s * b.topk_k[ci], "layer {}: no published top-k", l);
  return {};
}

Status Model::indexer(int l, Batch& b, size_t ci, const TensorView& xc, const TensorView& qrc,
                      const DeviceArray<uint16_t>& latent, const std::vector<int64_t>& group_pos) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const RopeTable& rope = *rope_[l];
  ForwardChunk& ch = b.chunks[ci];
  SequenceState& st = *ch.state;
  const int r = c.compress_ratio(l);
  const int64_t s = xc.size(0), start = ch.start_pos, end = start + s, T = end / r;
  const int64_t hi = c.index_n_heads, di = c.index_head_dim;
  const LayerReplay* replay = b.replay(ci, l);

  // Index keys of a key owner, from the pre-RoPE latents (spec §7.1); the shared slot moves here.
  const int64_t groups = static_cast<int64_t>(group_pos.size());
  if (c.is_kv_source(l) && groups) {
    DeviceArray<uint16_t> keys = b.scratch<uint16_t>(groups * di);
    const TensorView kv = keys.view(DType::kBF16, {groups, di});
    b.be.linear({latent.view(DType::kBF16, {groups, c.head_dim}), &w.idx_wk, kv});
    b.be.rms_norm({kv, w.idx_k_norm, c.norm_eps, kv});
    RopeRows(b.be, rope, group_pos).apply(b.be, keys.view(DType::kBF16, {groups, 1, di}), 0, false);
    b.be.fake_quant({kv, FakeQuant::kFp4E8M0Group32});
    const int64_t j0 = group_pos.front() / r;
    publish_rows(b.be, *store_, store_->index_keys(l), kv, l, st.blocks.blocks(), j0);
    st.layers[l].index_key_rows = std::max(st.layers[l].index_key_rows, j0 + groups);
    st.index_key_owner = l;
  }
  // A piece of a prompt computes what the one-shot prefill computes, where every owner publishes
  // the keys of all the groups so far and so reads its own: even a piece that completes no group.
  // Only a decode step keeps the reference's stale slot (spec §15 10a).
  if (c.is_kv_source(l) && !ch.decode && T > 0) st.index_key_owner = l;
  const int64_t cols = b.columns(T, c.index_topk), k = std::min<int64_t>(c.index_topk, cols);
  b.topk_k[ci] = k;
  b.topk[ci] = b.scratch<int32_t>(s * k);
  if (T == 0) {
    b.record(ci, fmt::format("layer{}.topk_idxs", l), DType::kI32, {s, 0}, nullptr);
    return {};
  }

  DeviceArray<uint16_t> q = b.scratch<uint16_t>(s * hi * di), wts = b.scratch<uint16_t>(s * hi);
  b.be.linear({qrc, &w.idx_wq_b, q.view(DType::kBF16, {s, hi * di})});
  b.rope_at_positions(rope).apply(b.be, q.view(DType::kBF16, {s, hi, di}), b.offset[ci], false);
  b.be.fake_quant({q.view(DType::kBF16, {s, hi * di}), FakeQuant::kFp4E8M0Group32});
  b.be.linear({xc, &w.idx_weights_proj, wts.view(DType::kBF16, {s, hi})});
  const float wscale =
      static_cast<float>(std::pow(static_cast<double>(di), -0.5) * std::pow(static_cast<double>(hi), -0.5));

  const int owner = st.index_key_owner;
  if (owner < 0 || st.layers[owner].index_key_rows < T)
    return error(ErrorKind::kInternal, fmt::format("layer {}: no index keys to score against", l));
  // The owner's keys of positions [0, T), read from the pool through the block table (padded
  // columns name row 0: never read, they lie past every query's visible columns), and each query's
  // visible columns: made once per chunk, owner and ratio in a call, for every index layer reading them.
  auto [rows, fresh] = b.indexer_rows.try_emplace({ci, owner, r});
  if (fresh) {
    std::vector<int32_t> key_rows(cols, 0), visible(s);
    for (int64_t tau = 0; tau < T; ++tau)
      key_rows[tau] = static_cast<int32_t>(store_->row(owner, st.blocks.blocks(), tau));
    for (int64_t i = 0; i < s; ++i) visible[i] = static_cast<int32_t>(ch.decode ? T : (start + i + 1) / r);
    rows->second = {b.upload(key_rows), b.upload(visible)};
  }
  const DeviceArray<int32_t>&dkey_rows = rows->second.key_rows, &dvisible = rows->second.visible;
  const DeviceArray<uint16_t>& key_pool = store_->index_keys(owner);
  const TensorView keys = key_pool.view(DType::kBF16, {static_cast<int64_t>(key_pool.size()) / di, di});

  // The candidate pool: made by the candidate source (or replayed) for all the chunk's queries, as
  // block numbers; the layers after it expand a query block's rows into a mask.
  const int64_t bs = c.candidate_block_size;
  const int64_t kb = std::min<int64_t>(c.candidate_topk_blocks, (cols + bs - 1) / bs);
  const bool makes_candidates = c.is_candidate_source(l), reads_candidates = !makes_candidates && c.uses_candidates(l);
  bool candidates_given = false;
  if (makes_candidates) {
    b.candidates_T[ci] = cols, b.candidates_kb[ci] = kb;
    if (replay && !replay->candidates.empty()) {
      auto given = candidate_block_ids(replay->candidates, s, cols, bs, kb);
      if (!given.ok())
        return error(ErrorKind::kInvalidArgument, fmt::format("layer {}: {}", l, given.status().message()));
      b.candidates[ci] = b.upload(*given);
      candidates_given = true;
    } else {
      b.candidates[ci] = b.scratch<int32_t>(s * kb);
    }
  } else if (reads_candidates &&
             (b.candidates_T[ci] != cols || static_cast<int64_t>(b.candidates[ci].size()) != s * b.candidates_kb[ci])) {
    return error(ErrorKind::kInternal, fmt::format("layer {}: candidate mask missing", l));
  }
  const bool topk_given = replay && !replay->topk.empty();
  if (topk_given) {
    if (static_cast<int64_t>(replay->topk.size()) != s * k)
      return error(ErrorKind::kInvalidArgument,
                   fmt::format("layer {}: the replayed top-k holds {} values, not {}", l, replay->topk.size(), s * k));
    b.topk[ci].upload(replay->topk);
  }

  // Score, select and drop a block of queries at a time: the scores and masks of a block are all
  // that the selections hold at once, so a long prompt's prefill stays linear in its length.
  if (!(topk_given && (!makes_candidates || candidates_given))) {
    const int64_t block = std::min(s, indexer_query_block(cols));
    DeviceArray<float> dscores = b.scratch<float>(block * cols);
    DeviceArray<uint8_t> dmask = b.scratch<uint8_t>(reads_candidates ? block * cols : 0);
    for (int64_t i0 = 0; i0 < s; i0 += block) {
      const int64_t m = std::min(block, s - i0);
      const TensorView scores = dscores.view(DType::kF32, {m, cols}), dvis = dvisible.view(DType::kI32, {m}, i0);
      b.be.indexer_scores({q.view(DType::kBF16, {m, hi, di}, i0 * hi * di), keys,
                           wts.view(DType::kBF16, {m, hi}, i0 * hi), dvis, scores, dkey_rows.view(DType::kI32, {cols}),
                           wscale});
      if (makes_candidates && !candidates_given)
        b.be.candidate_blocks(
            {scores, dvis, c.candidate_topk_blocks, bs, b.candidates[ci].view(DType::kI32, {m, kb}, i0 * kb)});
      if (topk_given) continue;
      TensorView mask;
      if (reads_candidates) {
        const int64_t rkb = b.candidates_kb[ci];
        mask = dmask.view(DType::kU8, {m, cols});
        b.be.candidate_mask({b.candidates[ci].view(DType::kI32, {m, rkb}, i0 * rkb), bs, mask});
      }
      b.be.topk({scores, mask, dvis, b.topk[ci].view(DType::kI32, {m, k}, i0 * k)});
    }
  }
  if (makes_candidates && b.wants_tensors(ci)) {  // dumped as the reference's mask over the columns
    const std::vector<int32_t> ids = b.candidates[ci].download();
    std::vector<uint8_t> mask;
    for (int64_t i = 0; i < s; ++i) {
      const std::vector<uint8_t> row = candidate_mask(std::span(ids).subspan(i * kb, kb), bs, cols);
      mask.insert(mask.end(), row.begin(), row.end());
    }
    b.record(ci, fmt::format("layer{}.candidates", l), DType::kU8, {s, cols}, mask.data());
  }
  if (b.wants_tensors(
          ci)) {  // dumped as the reference passes them to sparse_attn: offset by its window rows (s or win)
    std::vector<int32_t> dumped = b.topk[ci].download();
    const int64_t offset = ch.decode ? c.window_size : s;
    for (int32_t& v : dumped)
      if (v >= 0) v += static_cast<int32_t>(offset);
    b.record(ci, fmt::format("layer{}.topk_idxs", l), DType::kI32, {s, k}, dumped.data());
  }
  return {};
}

int64_t Model::indexer_query_block(int64_t columns) const {
  if (indexer_query_block_ > 0) return indexer_query_block_;
  return std::max<int64_t>(1, kIndexerScoreBytes / (std::max<int64_t>(columns, 1) * int64_t{sizeof(float)}));
}

}  // namespace dsinfer
