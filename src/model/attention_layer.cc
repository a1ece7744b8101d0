// The attention sublayer (spec §5–§7): low-rank q, the window KV ring, the compressor and the
// indexer of kv/index sources, sparse attention over window + selected compressed rows, grouped
// output projection. Per chunk where the reference works per sequence; per token elsewhere.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/float_formats.h"
#include "model/forward_batch.h"
#include "model/selection.h"

namespace dsinfer {
namespace {

// cos/sin rows of the given positions, for RopeArgs.
struct RopeRows {
  std::vector<float> cos, sin;
  RopeRows(const RopeTable& t, const std::vector<int64_t>& positions) {
    for (int64_t p : positions) {
      cos.insert(cos.end(), t.cos_row(p), t.cos_row(p) + t.half);
      sin.insert(sin.end(), t.sin_row(p), t.sin_row(p) + t.half);
    }
  }
  TensorView cos_view(int64_t n, int half) const { return tv(cos.data(), DType::kF32, {n, half}); }
  TensorView sin_view(int64_t n, int half) const { return tv(sin.data(), DType::kF32, {n, half}); }
};

void rope_rows(Backend& be, const RopeTable& t, uint16_t* x, int64_t n, int64_t heads, int64_t d,
               const std::vector<int64_t>& positions, bool inverse) {
  if (n == 0) return;
  const RopeRows r(t, positions);
  be.rope({tv(x, DType::kBF16, {n, heads, d}), r.cos_view(n, t.half), r.sin_view(n, t.half), inverse});
}

TensorView rows_of(const TensorView& t, int64_t begin, int64_t count) {
  TensorView v = t;
  v.data = t.as<uint16_t>() + begin * t.stride[0];
  v.shape[0] = count;
  return v;
}

void grow(std::vector<uint16_t>& v, size_t size) {
  if (v.size() < size) v.resize(size, 0);
}

}  // namespace

Status Model::attention(int l, Batch& b, const TensorView& x, const TensorView& out) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const RopeTable& rope = *rope_[l];
  const int64_t n = b.n, heads = c.n_heads, hd = c.head_dim, ql = c.q_lora_rank, win = c.window_size;
  const int r = c.compress_ratio(l);

  std::vector<uint16_t> qr(n * ql), q(n * heads * hd), kv(n * hd), o(n * heads * hd);
  const TensorView qrv = tv(qr.data(), DType::kBF16, {n, ql}), kvv = tv(kv.data(), DType::kBF16, {n, hd});
  backend_.linear({x, &w.wq_a, qrv});
  backend_.rms_norm({qrv, w.q_norm, c.norm_eps, qrv});
  backend_.linear({qrv, &w.wq_b, tv(q.data(), DType::kBF16, {n, heads * hd})});
  rope_rows(backend_, rope, q.data(), n, heads, hd, b.pos, false);
  backend_.linear({x, &w.wkv, kvv});
  backend_.rms_norm({kvv, w.kv_norm, c.norm_eps, kvv});
  rope_rows(backend_, rope, kv.data(), n, 1, hd, b.pos, false);
  backend_.fake_quant({kvv, FakeQuant::kFp8Group32});  // window KV is fp8 (spec §5.2)

  for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
    ForwardChunk& ch = b.chunks[ci];
    LayerCache& cache = ch.state->layers[l];
    const int64_t s = b.size(ci), row0 = b.offset[ci], start = ch.start_pos;

    // Window rows and each query's window slots, in the reference's order (spec §5.2).
    std::vector<uint16_t> wrows;
    std::vector<int32_t> widx;
    int64_t width = 0;
    if (ch.decode) {
      const int64_t p = start;
      std::memcpy(&cache.window[(p % win) * hd], &kv[row0 * hd], hd * 2);
      wrows = cache.window;
      width = win;
      for (int64_t j = 0; j < win; ++j) {
        const int64_t slot = (p % win + 1 + j) % win;  // oldest first
        widx.push_back(slot > p ? -1 : static_cast<int32_t>(slot));
      }
    } else {
      width = std::min(ch.prompt_len, win);
      const int64_t h0 = std::max<int64_t>(start - (win - 1), 0);
      for (int64_t p = h0; p < start; ++p)
        wrows.insert(wrows.end(), &cache.window[(p % win) * hd], &cache.window[(p % win) * hd] + hd);
      wrows.insert(wrows.end(), &kv[row0 * hd], &kv[(row0 + s) * hd]);
      for (int64_t i = 0; i < s; ++i) {
        const int64_t t = start + i, first = std::max<int64_t>(t - (win - 1), 0);
        for (int64_t j = 0; j < width; ++j) widx.push_back(first + j <= t ? static_cast<int32_t>(first + j - h0) : -1);
      }
      for (int64_t i = std::max<int64_t>(0, s - win); i < s; ++i)  // the ring keeps the last window
        std::memcpy(&cache.window[((start + i) % win) * hd], &kv[(row0 + i) * hd], hd * 2);
    }
    const int64_t n_win_rows = static_cast<int64_t>(wrows.size()) / hd;

    // Compressed rows and the selected positions (spec §6–§7).
    const uint16_t* crows = nullptr;
    int64_t n_crows = 0, k = 0;
    if (r > 0) {
      DSINFER_RETURN_IF_ERROR(compressed_kv(l, b, ci, x, qrv));
      const LayerCache& src = ch.state->layers[c.kv_source_of(l)];
      crows = src.compressed.data();
      n_crows = static_cast<int64_t>(src.compressed.size()) / hd;
      k = b.topk_k[ci];
    }
    std::vector<int32_t> idx(s * (width + k));
    for (int64_t i = 0; i < s; ++i) {
      std::copy(&widx[i * width], &widx[(i + 1) * width], &idx[i * (width + k)]);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t sel = b.topk[ci][i * k + j];
        idx[i * (width + k) + width + j] = sel < 0 ? -1 : static_cast<int32_t>(n_win_rows + sel);
      }
    }
    backend_.sparse_attn(
        {tv(&q[row0 * heads * hd], DType::kBF16, {s, heads, hd}), tv(wrows.data(), DType::kBF16, {n_win_rows, hd}),
         n_crows ? tv(crows, DType::kBF16, {n_crows, hd}) : TensorView{}, tv(idx.data(), DType::kI32, {s, width + k}),
         w.attn_sink, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
         tv(&o[row0 * heads * hd], DType::kBF16, {s, heads, hd})});
  }
  rope_rows(backend_, rope, o.data(), n, heads, hd, b.pos, /*inverse=*/true);

  // Grouped low-rank output: group g projects heads [g*h/G, (g+1)*h/G) with its own rows of wo_a.
  const int64_t groups = c.o_groups, olr = c.o_lora_rank, gw = heads * hd / groups;
  std::vector<uint16_t> z(n * groups * olr);
  for (int64_t g = 0; g < groups; ++g) {
    TensorView og = tv(o.data(), DType::kBF16, {n, heads * hd}), zg = tv(z.data(), DType::kBF16, {n, groups * olr});
    og.data = o.data() + g * gw, og.shape[1] = gw;
    zg.data = z.data() + g * olr, zg.shape[1] = olr;
    backend_.linear({og, &w.wo_a[g], zg});
  }
  backend_.linear({tv(z.data(), DType::kBF16, {n, groups * olr}), &w.wo_b, out});
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
  std::vector<uint16_t> latent;
  std::vector<int64_t> group_pos;  // first token of each completed group
  if (c.is_kv_source(l)) {
    LayerCache& cache = st.layers[l];
    if (r == 1) {
      latent.resize(s * hd);
      const TensorView lv = tv(latent.data(), DType::kBF16, {s, hd});
      backend_.linear({xc, &w.comp_wkv, lv});
      backend_.rms_norm({lv, w.comp_norm, c.norm_eps, lv});
      for (int64_t i = 0; i < s; ++i) group_pos.push_back(start + i);
    } else {
      std::vector<float> kvf(s * hd), score(s * hd), pairs, pair_scores;
      backend_.linear({xc, &w.comp_wkv, tv(kvf.data(), DType::kF32, {s, hd})});
      backend_.linear({xc, &w.comp_wgate, tv(score.data(), DType::kF32, {s, hd})});
      for (int64_t i = 0; i < s; ++i) {  // state slot p % 2; a group completes at odd p
        const int64_t p = start + i, slot = p % 2;
        std::copy(&kvf[i * hd], &kvf[(i + 1) * hd], &cache.kv_state[slot * hd]);
        std::copy(&score[i * hd], &score[(i + 1) * hd], &cache.score_state[slot * hd]);
        if (slot == 1) {
          pairs.insert(pairs.end(), cache.kv_state.begin(), cache.kv_state.end());
          pair_scores.insert(pair_scores.end(), cache.score_state.begin(), cache.score_state.end());
          group_pos.push_back(p - 1);
        }
      }
      const int64_t g = static_cast<int64_t>(group_pos.size());
      latent.resize(g * hd);
      if (g) {
        const TensorView lv = tv(latent.data(), DType::kBF16, {g, hd});
        backend_.compress_pool(
            {tv(pairs.data(), DType::kF32, {g, 2, hd}), tv(pair_scores.data(), DType::kF32, {g, 2, hd}), lv});
        backend_.rms_norm({lv, w.comp_norm, c.norm_eps, lv});
      }
    }
  }
  const int64_t groups = static_cast<int64_t>(group_pos.size());

  if (c.is_index_source(l)) DSINFER_RETURN_IF_ERROR(indexer(l, b, ci, xc, rows_of(qr, row0, s), latent, group_pos));

  // Publish the rotated, fp4 fake-quantised latents into this layer's compressed cache (spec §6.2).
  if (groups) {
    rope_rows(backend_, rope, latent.data(), groups, 1, hd, group_pos, false);
    backend_.fake_quant({tv(latent.data(), DType::kBF16, {groups, hd}), FakeQuant::kFp4E4M3Group16});
    LayerCache& cache = st.layers[l];
    const int64_t j0 = group_pos.front() / r;
    grow(cache.compressed, (j0 + groups) * hd);
    std::copy(latent.begin(), latent.end(), cache.compressed.begin() + j0 * hd);
  }
  // Config validation guarantees an index source of this ratio ran earlier in this call.
  DSINFER_CHECK(static_cast<int64_t>(b.topk[ci].size()) == s * b.topk_k[ci], "layer {}: no published top-k", l);
  return {};
}

Status Model::indexer(int l, Batch& b, size_t ci, const TensorView& xc, const TensorView& qrc,
                      std::vector<uint16_t>& latent, const std::vector<int64_t>& group_pos) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[l].attn;
  const RopeTable& rope = *rope_[l];
  ForwardChunk& ch = b.chunks[ci];
  SequenceState& st = *ch.state;
  const int r = c.compress_ratio(l);
  const int64_t s = xc.size(0), start = ch.start_pos, end = start + s, T = end / r;
  const int64_t hi = c.index_n_heads, di = c.index_head_dim;
  const LayerReplay* replay = ch.replay && ch.replay->count(l) ? &ch.replay->at(l) : nullptr;
  std::vector<int64_t> positions(s);
  for (int64_t i = 0; i < s; ++i) positions[i] = start + i;

  // Index keys of a key owner, from the pre-RoPE latents (spec §7.1); the shared slot moves here.
  const int64_t groups = static_cast<int64_t>(group_pos.size());
  if (c.is_kv_source(l) && groups) {
    std::vector<uint16_t> keys(groups * di);
    const TensorView kv = tv(keys.data(), DType::kBF16, {groups, di});
    backend_.linear({tv(latent.data(), DType::kBF16, {groups, c.head_dim}), &w.idx_wk, kv});
    backend_.rms_norm({kv, w.idx_k_norm, c.norm_eps, kv});
    rope_rows(backend_, rope, keys.data(), groups, 1, di, group_pos, false);
    backend_.fake_quant({kv, FakeQuant::kFp4E8M0Group32});
    LayerCache& cache = st.layers[l];
    const int64_t j0 = group_pos.front() / r;
    grow(cache.index_keys, (j0 + groups) * di);
    std::copy(keys.begin(), keys.end(), cache.index_keys.begin() + j0 * di);
    st.index_key_owner = l;
  }
  const int64_t k = std::min<int64_t>(c.index_topk, T);
  b.topk_k[ci] = k;
  b.topk[ci].assign(s * k, -1);
  if (T == 0) {
    b.record(ci, fmt::format("layer{}.topk_idxs", l), DType::kI32, {s, 0}, nullptr);
    return {};
  }

  std::vector<uint16_t> q(s * hi * di), wts(s * hi);
  backend_.linear({qrc, &w.idx_wq_b, tv(q.data(), DType::kBF16, {s, hi * di})});
  rope_rows(backend_, rope, q.data(), s, hi, di, positions, false);
  backend_.fake_quant({tv(q.data(), DType::kBF16, {s, hi * di}), FakeQuant::kFp4E8M0Group32});
  backend_.linear({xc, &w.idx_weights_proj, tv(wts.data(), DType::kBF16, {s, hi})});
  const float wscale =
      static_cast<float>(std::pow(static_cast<double>(di), -0.5) * std::pow(static_cast<double>(hi), -0.5));
  for (uint16_t& v : wts) v = f32_to_bf16(bf16_to_f32(v) * wscale);

  const int owner = st.index_key_owner;
  if (owner < 0 || static_cast<int64_t>(st.layers[owner].index_keys.size()) < T * di)
    return error(ErrorKind::kInternal, fmt::format("layer {}: no index keys to score against", l));
  std::vector<int32_t> visible(s);
  for (int64_t i = 0; i < s; ++i) visible[i] = static_cast<int32_t>(ch.decode ? T : (start + i + 1) / r);
  std::vector<float> scores(s * T);
  backend_.indexer_scores({tv(q.data(), DType::kBF16, {s, hi, di}),
                           tv(st.layers[owner].index_keys.data(), DType::kBF16, {T, di}),
                           tv(wts.data(), DType::kBF16, {s, hi}), tv(visible.data(), DType::kI32, {s}),
                           tv(scores.data(), DType::kF32, {s, T})});

  if (c.is_candidate_source(l)) {
    std::vector<uint8_t>& cand = b.candidates[ci];
    cand.assign(s * T, 0);
    for (int64_t i = 0; i < s; ++i) {
      const auto mask =
          replay && !replay->candidates.empty()
              ? std::vector<uint8_t>(replay->candidates.begin() + i * T, replay->candidates.begin() + (i + 1) * T)
              : select_candidate_blocks(std::span(scores).subspan(i * T, T), visible[i], c.candidate_topk_blocks,
                                        c.candidate_block_size);
      std::copy(mask.begin(), mask.end(), cand.begin() + i * T);
    }
    b.record(ci, fmt::format("layer{}.candidates", l), DType::kU8, {s, T}, cand.data());
  } else if (c.uses_candidates(l)) {
    const std::vector<uint8_t>& cand = b.candidates[ci];
    if (static_cast<int64_t>(cand.size()) != s * T)
      return error(ErrorKind::kInternal, fmt::format("layer {}: candidate mask missing", l));
    for (int64_t e = 0; e < s * T; ++e)
      if (!cand[e]) scores[e] = -std::numeric_limits<float>::infinity();
  }

  for (int64_t i = 0; i < s; ++i) {
    const std::vector<int32_t> sel =
        replay && !replay->topk.empty()
            ? std::vector<int32_t>(replay->topk.begin() + i * k, replay->topk.begin() + (i + 1) * k)
            : select_topk(std::span(scores).subspan(i * T, T), k, visible[i]);
    std::copy(sel.begin(), sel.end(), b.topk[ci].begin() + i * k);
  }
  // Dumped as the reference passes them to sparse_attn: offset by its window rows (s or win).
  std::vector<int32_t> dumped = b.topk[ci];
  const int64_t offset = ch.decode ? c.window_size : s;
  for (int32_t& v : dumped)
    if (v >= 0) v += static_cast<int32_t>(offset);
  b.record(ci, fmt::format("layer{}.topk_idxs", l), DType::kI32, {s, k}, dumped.data());
  return {};
}

}  // namespace dsinfer
