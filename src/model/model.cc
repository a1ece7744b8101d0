// Model loading and the top-level forward: embedding, the 4-copy stream through every block
// (Engram first where present), the final collapse, norm and head (spec §2, §4.3).
#include "model/model.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/float_formats.h"
#include "core/threading.h"
#include "io/engram_token_map.h"
#include "model/forward_batch.h"
#include "model/weight_manifest.h"

namespace dsinfer {
SequenceState make_sequence_state(const ModelConfig& c, CacheStore& store) {
  SequenceState s;
  s.slot = CacheSlot(&store);
  s.blocks = BlockTable(&store);
  s.layers.resize(c.n_layers);
  return s;
}

Result<std::unique_ptr<Model>> Model::load(const std::filesystem::path& dir, Backend& backend, Communicator& comm,
                                           const LoadOptions& options) {
  const int ranks = comm.world_size();
  if (ranks > 1 && backend.device() != Device::kCpu)
    return error(ErrorKind::kUnsupported,
                 fmt::format("{} ranks: several ranks run on the CPU backend only today (the GPU kernels take a whole "
                             "model; NCCL runs one GPU rank)",
                             ranks));
  DSINFER_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  if (options.max_model_len > 0) DSINFER_RETURN_IF_ERROR(config.set_context(options.max_model_len));
  DSINFER_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
  const std::vector<TensorSpec> manifest = build_weight_manifest(config);
  DSINFER_RETURN_IF_ERROR(check_checkpoint(manifest, ckpt));
  DSINFER_RETURN_IF_ERROR(check_tensor_parallel(manifest, config, ranks));
  if (options.prefault) ckpt.prefault(options.progress);
  std::unique_ptr<Model> m(new Model(std::move(config), std::move(ckpt), backend, comm));
  DSINFER_ASSIGN_OR_RETURN(m->weights_, load_model_weights(m->ckpt_, m->config_, {comm.rank(), ranks}));
  place_weights(m->weights_, backend, options.upload_progress);
  const ModelConfig& c = m->config_;
  if (!c.engram_layer_ids.empty()) {
    DSINFER_ASSIGN_OR_RETURN(EngramTokenMap map, build_engram_token_map(dir));
    if (map.compressed_vocab_size != c.engram_compressed_vocab_size)
      return error(ErrorKind::kInvalidConfig,
                   fmt::format("{}: tokenizer.json yields an Engram compressed vocab of {}, config says {}",
                               dir.string(), map.compressed_vocab_size, c.engram_compressed_vocab_size));
    m->hasher_ = std::make_unique<EngramHasher>(c, std::move(map.map));
    // Every table value a lookup can give, bf16(e4m3 code x e8m0 scale), by scale byte and code.
    std::vector<uint16_t> values(256 * 256);
    for (int scale = 0; scale < 256; ++scale)
      for (int code = 0; code < 256; ++code)
        values[scale * 256 + code] =
            f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(code)) * e8m0_to_f32(static_cast<uint8_t>(scale)));
    m->engram_values_ = DeviceArray<uint16_t>(backend, std::span<const uint16_t>(values));
  }
  m->store_ = std::make_unique<CacheStore>(m->config_, backend, kDefaultCacheBlockTokens);
  // Two tables serve every layer: window-only (theta 1e4) and compressed (YaRN) (spec §3.2).
  m->rope_tables_.resize(2);
  for (int l = 0; l < c.n_layers; ++l) {
    auto& table = m->rope_tables_[c.compress_ratio(l) > 0 ? 1 : 0];
    if (!table) table = std::make_unique<RopeTable>(make_layer_rope_table(c, l, c.max_seq_len));
    m->rope_.push_back(table.get());
  }
  // The draft stages' (window-only) table reaches a block past the last position (spec §10.3).
  if (c.n_draft_layers() > 0) {
    m->rope_tables_.push_back(
        std::make_unique<RopeTable>(make_layer_rope_table(c, c.n_layers, c.max_seq_len + c.dspark_block_size)));
    for (int i = 0; i < c.n_draft_layers(); ++i) m->rope_.push_back(m->rope_tables_.back().get());
  }
  return m;
}

namespace {

// Tokens a host thread looks up at least at a time (Model::engram): a decode step's few stay on
// the calling thread.
constexpr int64_t kEngramTokensPerTask = 64;

Status replaceable(const CacheStore& store, int64_t block_tokens) {
  if (store.pool().num_in_use() != 0 || store.pool().num_free() != store.pool().capacity() || store.slots_in_use() != 0)
    return error(ErrorKind::kInvalidArgument, "the cache store cannot be replaced while sequences hold caches");
  if (block_tokens <= 0 || block_tokens % 2 != 0)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("cache blocks must hold an even number of positions, not {}", block_tokens));
  return {};
}

}  // namespace

Status Model::reserve_cache(int64_t block_tokens) {
  DSINFER_RETURN_IF_ERROR(replaceable(*store_, block_tokens));
  store_ = std::make_unique<CacheStore>(config_, backend_, block_tokens);
  return {};
}

Status Model::reserve_cache(const CacheLayout& layout) {
  DSINFER_RETURN_IF_ERROR(replaceable(*store_, layout.block_tokens));
  if (layout.num_blocks < 1 || layout.fixed_blocks < 0)
    return error(ErrorKind::kInvalidArgument, "a cache budget needs at least one block");
  store_ = std::make_unique<CacheStore>(config_, backend_, layout);
  return {};
}

Status Model::write_compressed_cache(SequenceState& seq, int layer, std::span<const uint16_t> compressed,
                                     std::span<const uint16_t> index_keys) {
  const ModelConfig& c = config_;
  if (!c.is_kv_source(layer)) return error(ErrorKind::kInvalidArgument, fmt::format("layer {} is no kv source", layer));
  const int64_t groups = static_cast<int64_t>(compressed.size()) / c.head_dim;
  if (static_cast<int64_t>(compressed.size()) != groups * c.head_dim ||
      static_cast<int64_t>(index_keys.size()) != groups * c.index_head_dim)
    return error(ErrorKind::kInvalidArgument, "compressed rows and index keys must be whole rows of one count");
  DSINFER_RETURN_IF_ERROR(seq.blocks.cover(groups * c.compress_ratio(layer)));
  const std::span<const int32_t> blocks = seq.blocks.blocks();
  const int64_t per = store_->rows_per_block(layer);
  for (int64_t g = 0; g < groups;) {  // one copy per block: its rows are consecutive in the pool
    const int64_t row = store_->row(layer, blocks, g), run = std::min(per - g % per, groups - g);
    backend_.copy_to_device(store_->compressed(layer).data() + row * c.head_dim, &compressed[g * c.head_dim],
                            run * c.head_dim * 2);
    backend_.copy_to_device(store_->index_keys(layer).data() + row * c.index_head_dim,
                            &index_keys[g * c.index_head_dim], run * c.index_head_dim * 2);
    g += run;
  }
  seq.layers[layer].compressed_rows = seq.layers[layer].index_key_rows = groups;
  return {};
}

Status Model::write_window(SequenceState& seq, int layer, int64_t end, std::span<const uint16_t> rows) {
  const ModelConfig& c = config_;
  const int64_t win = c.window_size, hd = c.head_dim, R = c.ring_rows();
  if (layer < 0 || layer >= c.n_layers || static_cast<int64_t>(rows.size()) != win * hd || end < win)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("a window of layer {} is {} values of positions from 0 on", layer, win * hd));
  uint16_t* ring = store_->windows(layer).data() + seq.slot.id() * R * hd;
  for (int64_t i = 0; i < win; ++i)  // position end - win + i at row (end - win + i) % R
    backend_.copy_to_device(ring + (end - win + i) % R * hd, &rows[i * hd], hd * 2);
  return {};
}

int64_t Model::logit_rows(std::span<const ForwardChunk> chunks) {
  int64_t rows = 0;
  for (const ForwardChunk& ch : chunks) rows += ch.verify || ch.all_logits ? static_cast<int64_t>(ch.tokens.size()) : 1;
  return rows;
}

Status Model::forward(std::span<ForwardChunk> chunks, std::span<float> logits, ForwardTaps* taps) {
  const int64_t rows = logit_rows(chunks);
  if (logits.size() != static_cast<size_t>(rows * config_.vocab_size))
    return error(ErrorKind::kInvalidArgument, "logits buffer must hold logit_rows x vocab floats");
  if (logits_.size() < logits.size()) logits_ = DeviceArray<float>::uninitialized(backend_, logits.size());
  const TensorView device_logits = logits_.view(DType::kF32, {rows, config_.vocab_size});
  DSINFER_RETURN_IF_ERROR(forward(chunks, device_logits, {.taps = taps}));
  backend_.copy_to_host(logits.data(), logits_.data(), logits.size() * sizeof(float));
  return {};
}

Status Model::forward(std::span<ForwardChunk> chunks, const TensorView& logits, const ForwardContext& ctx) {
  const ModelConfig& c = config_;
  DSINFER_RETURN_IF_ERROR(Batch::validate(c, chunks));
  if (logits.ndim != 2 || logits.dtype != DType::kF32 || logits.size(0) != logit_rows(chunks) ||
      logits.size(1) != c.vocab_size)
    return error(ErrorKind::kInvalidArgument, "logits must be [logit_rows, vocab] f32");
  // Blocks for every position first: taking them may grow the store (and move its pools).
  for (ForwardChunk& ch : chunks)
    DSINFER_RETURN_IF_ERROR(ch.state->blocks.cover(ch.start_pos + static_cast<int64_t>(ch.tokens.size())));
  Batch b(ctx.ops ? *ctx.ops : backend_, ctx.taps);
  b.init(chunks);
  b.fixed_shapes = ctx.fixed_shapes;
  if (ctx.main_hidden.data) {
    if (!has_drafter() || ctx.main_hidden.ndim != 2 || ctx.main_hidden.dtype != DType::kBF16 ||
        ctx.main_hidden.size(0) < b.n || ctx.main_hidden.size(1) != main_hidden_width() ||
        ctx.main_hidden.stride[1] != 1)
      return error(ErrorKind::kInvalidArgument,
                   fmt::format("main hidden states need a drafter and [{}, {}] bf16 rows", b.n, main_hidden_width()));
    b.main_hidden = ctx.main_hidden;
  }
  // Each row's index-key owner as it enters the layers: its sequence's, or for a verify chunk's
  // rows the one a decode step at the row's position starts from.
  b.key_owner.resize(b.n);
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    int owner = chunks[ci].state->index_key_owner;
    for (int64_t i = b.offset[ci]; i < b.offset[ci + 1]; ++i) {
      b.key_owner[i] = owner;
      if (chunks[ci].verify) owner = owner_after_step(owner, b.pos[i]);
    }
  }
  DSINFER_RETURN_IF_ERROR(run(b, logits));
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    ForwardChunk& ch = chunks[ci];
    SequenceState& st = *ch.state;
    st.length = ch.start_pos + static_cast<int64_t>(ch.tokens.size());
    st.index_key_owner = b.key_owner[b.offset[ci + 1] - 1];
    st.verify_from = ch.verify ? ch.start_pos : -1;
    st.verify_owners.clear();
    if (!ch.verify) continue;
    for (int64_t i = b.offset[ci]; i < b.offset[ci + 1]; ++i) st.verify_owners.push_back(b.key_owner[i]);
    st.verify_owners.push_back(st.index_key_owner);
  }
  return {};
}

int Model::owner_after_step(int owner, int64_t pos) const {
  for (int l : config_.kv_source_layers)  // in layer order: the last to publish keys holds the slot
    if (config_.is_index_source(l) && (pos + 1) % config_.compress_ratio(l) == 0) owner = l;
  return owner;
}

Status Model::truncate(SequenceState& seq, int64_t length) const {
  if (seq.verify_from < 0 || length < seq.verify_from || length > seq.length)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("a sequence of {} positions goes back to {} only inside its last forward's verify chunk",
                             seq.length, length));
  // What the verify chunk's rejected positions wrote in the rings and partial groups lies in their
  // slack (ModelConfig::ring_rows); what they published past `length` is no longer counted.
  for (int l : config_.kv_source_layers)
    seq.layers[l].compressed_rows = seq.layers[l].index_key_rows = length / config_.compress_ratio(l);
  seq.index_key_owner = seq.verify_owners[length - seq.verify_from];
  seq.verify_owners.resize(length - seq.verify_from + 1);
  if (static_cast<int64_t>(seq.engram_history.size()) > length) seq.engram_history.resize(length);
  seq.length = length;
  return {};
}

Status Model::run(Batch& b, const TensorView& logits) {
  const ModelConfig& c = config_;
  const std::span<ForwardChunk> chunks = b.chunks;
  const int64_t n = b.n, hc = c.hc_mult, dim = c.dim;
  if (hasher_) {
    b.hashes.resize(n * hasher_->n_layers() * hasher_->n_columns());
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      ForwardChunk& ch = chunks[ci];
      const int64_t per_tok = hasher_->n_layers() * hasher_->n_columns();
      std::span<int64_t> out(&b.hashes[b.offset[ci] * per_tok], ch.tokens.size() * per_tok);
      hasher_->hash_chunk(ch.state->engram_history, ch.start_pos, ch.tokens, {}, out);
      b.record(ci, "engram_hashes", DType::kI64,
               {static_cast<int64_t>(ch.tokens.size()), hasher_->n_layers(), hasher_->n_columns()}, out.data());
    }
  }

  DSINFER_RETURN_IF_ERROR(embed_stream(b));
  // The DSpark taps: the mean of the copies at a tap layer's input, after its Engram (spec §2).
  const std::vector<int>& taps = c.dspark_target_layer_ids;
  const DeviceArray<float> mean_pre = b.main_hidden.data
                                          ? b.upload(std::vector<float>(n * hc, 1.0f / static_cast<float>(hc)))
                                          : DeviceArray<float>(b.be);
  for (int l = 0; l < c.n_layers; ++l) {
    if (weights_.layers[l].engram) engram(l, b);
    if (const auto tap = std::find(taps.begin(), taps.end(), l); b.main_hidden.data && tap != taps.end()) {
      TensorView part = b.main_hidden;
      part.data = b.main_hidden.as<uint16_t>() + (tap - taps.begin()) * dim, part.shape[1] = dim;
      b.be.hc_pre({b.x.view(DType::kBF16, {n, hc, dim}), mean_pre.view(DType::kF32, {n, hc}), part});
    }
    DSINFER_RETURN_IF_ERROR(block(l, b));
  }

  // Final collapse with the last FFN's pre, norm, head on each chunk's last token (a verify
  // chunk's or an all_logits chunk's every token).
  std::vector<int32_t> last;
  std::vector<int64_t> logits_rows;  // each chunk's
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const int64_t first = chunks[ci].verify || chunks[ci].all_logits ? b.offset[ci] : b.offset[ci + 1] - 1;
    for (int64_t i = first; i < b.offset[ci + 1]; ++i) last.push_back(static_cast<int32_t>(i));
    logits_rows.push_back(b.offset[ci + 1] - first);
  }
  const int64_t nc = static_cast<int64_t>(last.size());
  DeviceArray<uint16_t> last_x = b.scratch<uint16_t>(nc * hc * dim), collapsed = b.scratch<uint16_t>(nc * dim);
  DeviceArray<float> last_pre = b.scratch<float>(nc * hc);
  const DeviceArray<int32_t> dlast = b.upload(last);
  b.be.gather_rows({b.x.view(DType::kBF16, {n, hc * dim}), dlast.view(DType::kI32, {nc}),
                    last_x.view(DType::kBF16, {nc, hc * dim})});
  b.be.gather_rows(
      {b.pre.view(DType::kF32, {n, hc}), dlast.view(DType::kI32, {nc}), last_pre.view(DType::kF32, {nc, hc})});
  const TensorView xc = collapsed.view(DType::kBF16, {nc, dim});
  b.be.hc_pre({last_x.view(DType::kBF16, {nc, hc, dim}), last_pre.view(DType::kF32, {nc, hc}), xc});
  b.be.rms_norm({xc, weights_.norm, c.norm_eps, xc});
  return head_logits(b, xc, row_runs(logits_rows, b.be.max_invariant_rows()), logits);
}

Status Model::embed_stream(Batch& b) {
  const int64_t n = b.n, hc = config_.hc_mult, dim = config_.dim;
  const DeviceArray<int32_t> ids = b.upload(b.ids);
  b.x = b.scratch<uint16_t>(n * hc * dim);
  // Each rank embeds its rows of the vocabulary (zeros for the others' ids); their sum, exact with
  // one non-zero contributor, is the embedding (spec §14b.2).
  const auto copy_of = [&](int64_t k) {
    TensorView copy = b.x.view(DType::kBF16, {n, dim}, k * dim);
    copy.stride[0] = hc * dim;
    return copy;
  };
  if (comm_.world_size() == 1) {
    for (int64_t k = 0; k < hc; ++k) b.be.embed({ids.view(DType::kI32, {n}), weights_.embed, 0, copy_of(k)});
  } else {
    const int64_t vocab_rows = weights_.embed.size(0);
    const DeviceArray<uint16_t> embedded = b.scratch<uint16_t>(n * dim);
    const TensorView ev = embedded.view(DType::kBF16, {n, dim});
    b.be.embed({ids.view(DType::kI32, {n}), weights_.embed, comm_.rank() * vocab_rows, ev});
    DSINFER_RETURN_IF_ERROR(comm_.all_reduce_sum(ev));
    for (int64_t k = 0; k < hc; ++k) b.be.gather_rows({ev, b.token_rows().view(DType::kI32, {n}), copy_of(k)});
  }
  std::vector<float> pre(n * hc, 0.0f);
  for (int64_t t = 0; t < n; ++t) pre[t * hc] = 1.0f;
  b.pre = b.upload(pre);
  return {};
}

Status Model::head_logits(Batch& b, const TensorView& x, std::span<const RowRun> runs, const TensorView& logits) {
  if (comm_.world_size() == 1) {
    b.linear({x, &weights_.head, logits}, runs);
    return {};
  }
  // Each rank's columns of the vocabulary, gathered over the ranks ([rank][row][column]), then
  // laid out as the rows'.
  const int ranks = comm_.world_size();
  const int64_t rows = x.size(0), cols = weights_.head.out;
  DeviceArray<float> part = b.scratch<float>(rows * cols), gathered = b.scratch<float>(ranks * rows * cols);
  b.linear({x, &weights_.head, part.view(DType::kF32, {rows, cols})}, runs);
  DSINFER_RETURN_IF_ERROR(
      comm_.all_gather(part.view(DType::kF32, {rows * cols}), gathered.view(DType::kF32, {ranks * rows * cols})));
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < rows; ++i)
      b.be.copy_on_device(logits.as<float>() + i * logits.stride[0] + r * cols, gathered.data() + (r * rows + i) * cols,
                          cols * sizeof(float));
  return {};
}

int64_t Model::main_hidden_width() const {
  return has_drafter() ? static_cast<int64_t>(config_.dspark_target_layer_ids.size()) * config_.dim : 0;
}

std::string Model::layer_name(int l) const {
  return l < config_.n_layers ? fmt::format("layer{}", l) : fmt::format("spec.stage{}", l - config_.n_layers);
}

Status Model::block(int l, Batch& b) {
  const ModelConfig& c = config_;
  const BlockWeights& w = weights_.layers[l];
  const int64_t n = b.n, hc = c.hc_mult, dim = c.dim;
  const TensorView stream = b.x.view(DType::kBF16, {n, hc, dim});
  DeviceArray<float> a_pre = b.scratch<float>(n * hc), a_post = b.scratch<float>(n * hc);
  DeviceArray<float> a_comb = b.scratch<float>(n * hc * hc), f_pre = b.scratch<float>(n * hc);
  DeviceArray<float> f_post = b.scratch<float>(n * hc), f_comb = b.scratch<float>(n * hc * hc);
  DeviceArray<uint16_t> x = b.scratch<uint16_t>(n * dim), y = b.scratch<uint16_t>(n * dim);
  const TensorView xv = x.view(DType::kBF16, {n, dim}), yv = y.view(DType::kBF16, {n, dim});

  // Attention: mixes from the block input, as side work beside the rest (only hc_post reads
  // them); collapse with the previous sublayer's pre.
  SideWork attn_mixes(b.be, [&] {
    b.hc_mixes({stream, w.hc_attn_fn, w.hc_attn_scale, w.hc_attn_base, c.norm_eps, c.hc_eps, c.hc_sinkhorn_iters,
                a_pre.view(DType::kF32, {n, hc}), a_post.view(DType::kF32, {n, hc}),
                a_comb.view(DType::kF32, {n, hc, hc})});
  });
  b.be.hc_pre({stream, b.pre.view(DType::kF32, {n, hc}), xv});
  b.be.rms_norm({xv, w.attn_norm, c.norm_eps, xv});
  DSINFER_RETURN_IF_ERROR(attention(l, b, xv, yv));
  for (size_t ci = 0; ci < b.chunks.size(); ++ci)
    b.record(ci, layer_name(l) + ".attn_out", DType::kBF16, {b.size(ci), dim}, y, b.offset[ci] * dim);
  attn_mixes.join();
  b.be.hc_post({yv, stream, a_post.view(DType::kF32, {n, hc}), a_comb.view(DType::kF32, {n, hc, hc}), stream});

  // FFN: mixes from the updated stream, as side work too; collapse with this attention's pre.
  SideWork ffn_mixes(b.be, [&] {
    b.hc_mixes({stream, w.hc_ffn_fn, w.hc_ffn_scale, w.hc_ffn_base, c.norm_eps, c.hc_eps, c.hc_sinkhorn_iters,
                f_pre.view(DType::kF32, {n, hc}), f_post.view(DType::kF32, {n, hc}),
                f_comb.view(DType::kF32, {n, hc, hc})});
  });
  b.be.hc_pre({stream, a_pre.view(DType::kF32, {n, hc}), xv});
  b.be.rms_norm({xv, w.ffn_norm, c.norm_eps, xv});
  DSINFER_RETURN_IF_ERROR(moe(l, b, xv, yv));
  ffn_mixes.join();
  b.be.hc_post({yv, stream, f_post.view(DType::kF32, {n, hc}), f_comb.view(DType::kF32, {n, hc, hc}), stream});
  b.pre = std::move(f_pre);  // the delayed pre-mix: the next block's attention collapses with it

  for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
    const int64_t s = b.size(ci);
    b.record(ci, layer_name(l) + ".out", DType::kBF16, {s, hc, dim}, b.x, b.offset[ci] * hc * dim);
    b.record(ci, layer_name(l) + ".ffn_pre", DType::kF32, {s, hc}, b.pre, b.offset[ci] * hc);
  }
  return {};
}

void Model::engram(int l, Batch& b) {
  const ModelConfig& c = config_;
  const EngramWeights& w = *weights_.layers[l].engram;
  const int e = c.engram_index(l), cols = hasher_->n_columns(), de = c.engram_head_dim;
  const int64_t n = b.n, hc = c.hc_mult, dim = c.dim;
  // Look up the hashed rows on the host, where the table stays (fp8 codes with an e8m0 scale per
  // 32): a step reads cols rows of it, the device needs only those. They go as stored (a byte a
  // value and a scale byte a 32, half of bf16's bytes: a prefill chunk's are tens of megabytes)
  // and are decoded to bf16 on the device (exact: e4m3 times a power of two). The host buffers
  // are kept between calls (a fresh one would be zeroed and faulted in, page by page) and filled
  // on the backend's host threads.
  const int64_t blocks = de / 32;
  std::vector<uint8_t>& codes = engram_codes_;
  std::vector<uint8_t>& row_scales = engram_scales_;
  codes.resize(n * cols * de), row_scales.resize(n * cols * blocks);
  const uint8_t* table = w.table.as<const uint8_t>();
  const uint8_t* scales = w.table_scale.as<const uint8_t>();
  const auto look_up = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int col = 0; col < cols; ++col) {
        const int64_t row = b.hashes[(t * hasher_->n_layers() + e) * cols + col], at = t * cols + col;
        std::memcpy(&codes[at * de], table + row * w.table.stride[0], de);
        std::memcpy(&row_scales[at * blocks], scales + row * w.table_scale.stride[0], blocks);
      }
  };
  if (ThreadPool* threads = b.be.host_threads())
    threads->parallel_for(n, kEngramTokensPerTask, look_up);
  else
    look_up(0, n);
  const DeviceArray<uint8_t> dcodes(b.be, std::span<const uint8_t>(codes.data(), codes.size()));
  const DeviceArray<uint8_t> dscales(b.be, std::span<const uint8_t>(row_scales.data(), row_scales.size()));
  const DeviceArray<uint16_t> looked_up = b.scratch<uint16_t>(n * cols * de);
  b.be.decode_rows({dcodes.view(DType::kU8, {n * cols, de}), dscales.view(DType::kU8, {n * cols, blocks}),
                    engram_values_.view(DType::kBF16, {256 * 256}), looked_up.view(DType::kBF16, {n * cols, de})});
  DeviceArray<uint16_t> kv = b.scratch<uint16_t>(n * (hc + 1) * dim);
  b.linear({looked_up.view(DType::kBF16, {n, cols * de}), &w.wkv, kv.view(DType::kBF16, {n, (hc + 1) * dim})});
  b.be.engram_gate({b.x.view(DType::kBF16, {n, hc, dim}), kv.view(DType::kBF16, {n, (hc + 1) * dim}), w.wgt,
                    TensorView{}, c.norm_eps});
  for (size_t ci = 0; ci < b.chunks.size(); ++ci)
    b.record(ci, fmt::format("layer{}.engram_out", l), DType::kBF16, {b.size(ci), hc, dim}, b.x,
             b.offset[ci] * hc * dim);
}

}  // namespace dsinfer
