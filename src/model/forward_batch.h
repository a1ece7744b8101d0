// Model::Batch: the flattened tokens of one forward call and the per-call slots the reference
// hands between layers (published top-k and candidate masks, per chunk). The residual stream and
// the selections live in the backend's memory; positions and ids are host data.
#pragma once

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "model/model.h"
#include "model/row_runs.h"
#include "model/window_slots.h"
#include "ops/device_array.h"

namespace dsinfer {

/// A RoPE table's cos and sin rows [positions, half] at some positions, in the backend's memory.
struct RopeRows {
  DeviceArray<float> cos, sin;
  int half = 0;

  RopeRows(Backend& be, const RopeTable& t, std::span<const int64_t> positions) : half(t.half) {
    std::vector<float> c, s;
    for (int64_t p : positions) {
      c.insert(c.end(), t.cos_row(p), t.cos_row(p) + t.half);
      s.insert(s.end(), t.sin_row(p), t.sin_row(p) + t.half);
    }
    cos = DeviceArray<float>(be, std::span<const float>(c));
    sin = DeviceArray<float>(be, std::span<const float>(s));
  }
  /// RoPE on x [n, heads, d] with rows [first, first + n).
  void apply(Backend& be, const TensorView& x, int64_t first, bool inverse) const {
    const int64_t n = x.size(0);
    if (n == 0) return;
    be.rope(
        {x, cos.view(DType::kF32, {n, half}, first * half), sin.view(DType::kF32, {n, half}, first * half), inverse});
  }
};

/// A group of rows' sliding window (spec §5.2), the same at every layer of a call: a prefill or
/// verify chunk's PrefillWindow; a decode group's slots are rows of the rings (width: the window),
/// and each token's own row goes in at ring_rows.
struct AttentionWindow : PrefillWindow {
  std::vector<int32_t> ring_rows;
};

struct Model::Batch {
  Batch(Backend& backend, ForwardTaps* forward_taps) : be(backend), taps(forward_taps) {}
  Backend& be;        // where the ops go (ForwardContext::ops)
  ForwardTaps* taps;  // may be null
  /// Scratch in the backend's memory for an op's output (uninitialised: the op writes all of
  /// it), zeroed scratch for an accumulator, or a copy of host data there.
  template <typename T>
  DeviceArray<T> scratch(int64_t count) const {
    return DeviceArray<T>::uninitialized(be, static_cast<size_t>(count));
  }
  template <typename T>
  DeviceArray<T> zeros(int64_t count) const {
    return DeviceArray<T>(be, static_cast<size_t>(count));
  }
  template <typename T>
  DeviceArray<T> upload(const std::vector<T>& host) const {
    return DeviceArray<T>(be, std::span<const T>(host));
  }
  /// The rows of the batch's positions in `t`, made and copied once per table and call.
  const RopeRows& rope_at_positions(const RopeTable& t) {
    auto it = rope_.find(&t);
    if (it == rope_.end()) it = rope_.emplace(&t, RopeRows(be, t, pos)).first;
    return it->second;
  }

  std::span<ForwardChunk> chunks;
  bool fixed_shapes = false;    // ForwardContext::fixed_shapes
  int64_t n = 0;                // tokens in the call
  std::vector<int64_t> offset;  // chunk c owns rows [offset[c], offset[c + 1])
  std::vector<int64_t> pos;     // [n] absolute positions
  std::vector<int32_t> ids;     // [n]
  std::vector<int64_t> hashes;  // [n, engram layers, columns]
  DeviceArray<uint16_t> x;      // [n, hc, dim] the residual stream
  DeviceArray<float> pre;       // [n, hc] the pending pre-mix
  TensorView main_hidden;       // ForwardContext::main_hidden
  // [n] each row's index-key owner as the layers reach it (the reference's shared slot, spec §6.4):
  // a verify chunk's row as a decode step at its position sees it; other rows read their sequence's.
  std::vector<int> key_owner;
  /// The attention's groups of rows: a prefill chunk alone, or a run of consecutive decode chunks
  /// (a token each) that runs as one batch, each row reading its own sequence's ring and tables.
  struct Group {
    size_t first = 0, end = 0;  // chunks [first, end)
    bool decode = false;
    int64_t row0 = 0, rows = 0;  // rows [row0, row0 + rows) of the call
  };
  std::vector<Group> groups;
  // Published by the most recent index source / candidate source in this call, per group, in the
  // backend's memory (no step waits for the host to choose).
  std::vector<DeviceArray<int32_t>> topk;  // [rows, k] compressed positions or -1
  std::vector<int64_t> topk_k;
  std::vector<DeviceArray<int32_t>> candidates;      // [rows, candidates_kb]: kept block numbers, then -1s
  std::vector<int64_t> candidates_T, candidates_kb;  // the score columns they cover; numbers a row
  // The rows of a group that score one key owner's keys, their visible columns, and (a part of a
  // decode group) their block tables, by (group, key owner, ratio): the index layers that score one
  // owner's keys with the same rows share them.
  struct IndexerRows {
    std::vector<int64_t> host_rows;
    DeviceArray<int32_t> rows, visible, tables;
  };
  std::map<std::tuple<size_t, int, int>, IndexerRows> indexer_rows;
  /// Each group's window, made at the call's first attention layer.
  std::map<size_t, AttentionWindow> windows;
  /// The sparse attention's index of a group's rows [rows, width + k] (the window's slots, then
  /// the k selected rows), then a decode group's ring rows, by (group, k): every layer's selection
  /// rewrites all k columns, so the layers that select k rows share one upload.
  std::map<std::pair<size_t, int64_t>, DeviceArray<int32_t>> attention_index;

  /// The runs of the call's rows (row_runs of the chunks' rows) that the row-wise ops below run on
  /// one at a time: a sequence's results do not depend on what else shares its step. Their row
  /// tensors are [n, ...] (the head's, [logits rows, ...] with its own runs).
  std::vector<RowRun> runs;
  /// op(args) once a run, the args' row tensors `rows` ([n, ...]; empty ones stay empty) cut to it.
  template <typename A, typename Op>
  void each_run(std::span<const RowRun> over, const A& a, std::initializer_list<TensorView A::*> rows, Op op) const {
    if (over.size() == 1) return op(a);
    for (const RowRun& r : over) {
      A part = a;
      for (TensorView A::*v : rows)
        if ((part.*v).data) part.*v = row_slice(part.*v, r.first, r.count);
      op(part);
    }
  }
  void linear(const LinearArgs& a, std::span<const RowRun> over) const {
    each_run(over, a, {&LinearArgs::x, &LinearArgs::out}, [&](const LinearArgs& p) { be.linear(p); });
  }
  void linear(const LinearArgs& a) const { linear(a, runs); }
  void grouped_linear(std::span<const LinearArgs> ops) const {
    if (runs.size() == 1) return be.grouped_linear({ops});
    std::vector<LinearArgs> part(ops.begin(), ops.end());
    for (const RowRun& r : runs) {
      for (size_t i = 0; i < ops.size(); ++i)
        part[i] = {row_slice(ops[i].x, r.first, r.count), ops[i].w, row_slice(ops[i].out, r.first, r.count)};
      be.grouped_linear({part});
    }
  }
  void hc_mixes(const HcMixesArgs& a) const {
    using A = HcMixesArgs;
    each_run(runs, a, {&A::x, &A::pre, &A::post, &A::comb}, [&](const A& p) { be.hc_mixes(p); });
  }
  void router(const RouterArgs& a) const {
    using A = RouterArgs;
    each_run(runs, a, {&A::x, &A::is_image, &A::indices, &A::weights}, [&](const A& p) { be.router(p); });
  }
  void routed_experts(const RoutedExpertsArgs& a) const {
    using A = RoutedExpertsArgs;
    each_run(runs, a, {&A::x, &A::indices, &A::weights, &A::acc}, [&](const A& p) { be.routed_experts(p); });
  }

  int64_t size(size_t c) const { return offset[c + 1] - offset[c]; }
  /// The chunk of row i of group g.
  size_t chunk_of(const Group& g, int64_t i) const { return g.decode ? g.first + static_cast<size_t>(i) : g.first; }

  /// Bad input, named: chunks without a sequence or tokens, two chunks of one sequence, positions
  /// past max_seq_len, token ids outside the vocab.
  static Status validate(const ModelConfig& cfg, std::span<const ForwardChunk> cs) {
    for (size_t c = 0; c < cs.size(); ++c) {
      const ForwardChunk& ch = cs[c];
      const int64_t s = static_cast<int64_t>(ch.tokens.size());
      if (!ch.state || s == 0) return error(ErrorKind::kInvalidArgument, "a chunk needs a sequence and tokens");
      for (size_t e = 0; e < c; ++e)
        if (cs[e].state == ch.state)
          return error(ErrorKind::kInvalidArgument,
                       fmt::format("chunks {} and {} are of one sequence (a call runs a sequence once)", e, c));
      if (ch.decode && s != 1) return error(ErrorKind::kInvalidArgument, "a decode chunk holds exactly one token");
      if (ch.verify && (ch.decode || s > cfg.verify_tokens() || ch.start_pos < s))
        return error(ErrorKind::kInvalidArgument,
                     fmt::format("a verify chunk holds at most {} tokens at a position no smaller than their count, "
                                 "not {} at {}",
                                 cfg.verify_tokens(), s, ch.start_pos));
      if (ch.all_logits && (ch.decode || ch.verify))
        return error(ErrorKind::kInvalidArgument, "only a prefill chunk takes all_logits");
      if (ch.start_pos != ch.state->length)
        return error(ErrorKind::kInvalidArgument, fmt::format("chunk starts at {} but its sequence holds {} positions",
                                                              ch.start_pos, ch.state->length));
      if (ch.start_pos + s > cfg.max_seq_len)
        return error(ErrorKind::kInvalidArgument,
                     fmt::format("positions up to {} exceed max_seq_len {}", ch.start_pos + s, cfg.max_seq_len));
      if (!ch.decode && !ch.verify && ch.prompt_len < ch.start_pos + s)
        return error(ErrorKind::kInvalidArgument, "a prefill chunk must lie inside its prompt");
      for (int32_t t : ch.tokens)
        if (t < 0 || t >= cfg.vocab_size)
          return error(ErrorKind::kInvalidArgument,
                       fmt::format("token id {} outside the vocab of {}", t, cfg.vocab_size));
    }
    return {};
  }

  /// The flattened tokens of validated chunks.
  void init(std::span<ForwardChunk> cs) {
    chunks = cs;
    offset.assign(1, 0);
    for (const ForwardChunk& ch : cs) {
      const int64_t s = static_cast<int64_t>(ch.tokens.size());
      offset.push_back(offset.back() + s);
      for (int64_t i = 0; i < s; ++i) pos.push_back(ch.start_pos + i), ids.push_back(ch.tokens[i]);
    }
    n = offset.back();
    groups.clear();
    for (size_t c = 0; c < cs.size(); ++c) {
      // A run of decode tokens attends as one group of at most Backend::max_invariant_rows (its
      // per-group ops are row-wise ones too).
      if (cs[c].decode && !groups.empty() && groups.back().decode && groups.back().rows < be.max_invariant_rows()) {
        groups.back().end = c + 1, groups.back().rows += 1;
        continue;
      }
      groups.push_back({c, c + 1, cs[c].decode, offset[c], size(c)});
    }
    std::vector<int64_t> chunk_rows(cs.size());
    for (size_t c = 0; c < cs.size(); ++c) chunk_rows[c] = size(c);
    runs = row_runs(chunk_rows, be.max_invariant_rows());
    const size_t ng = groups.size();
    topk.clear(), topk.resize(ng);
    topk_k.assign(ng, 0);
    candidates.clear(), candidates.resize(ng);
    candidates_T.assign(ng, 0);
    candidates_kb.assign(ng, 0);
    block_tables_.clear(), block_tables_.resize(ng);
  }

  /// 0 .. n - 1 in the backend's memory (every token's own row), copied at its first use in the call.
  const DeviceArray<int32_t>& token_rows() {
    if (token_rows_.empty()) {
      std::vector<int32_t> rows(n);
      for (int64_t t = 0; t < n; ++t) rows[t] = static_cast<int32_t>(t);
      token_rows_ = upload(rows);
    }
    return token_rows_;
  }

  /// The width of the indexer's score rows over T compressed positions: T, or with fixed shapes T
  /// rounded up to a multiple of `topk` (the indexer's k), so the scores, the candidate mask and
  /// the top-k keep their sizes for `topk` positions. The padded columns lie past the queries'
  /// visible columns: scored -inf, never chosen (a row with fewer than k others ends in -1s).
  int64_t columns(int64_t T, int64_t topk) const { return fixed_shapes && T > 0 ? (T + topk - 1) / topk * topk : T; }

  /// Group g's block tables in the backend's memory, copied at their first use in the call (forward
  /// covers every position first, so they do not change during the call): a prefill chunk's table
  /// [b], a decode group's [rows, b] (a row's sequence a row, 0s past its end: the null block);
  /// with fixed shapes b is padded to a multiple of kTableBucket entries (0s: read for no position).
  static constexpr size_t kTableBucket = 16;
  TensorView block_table(size_t g) {
    const Group& gr = groups[g];
    size_t width = 0;
    for (size_t c = gr.first; c < gr.end; ++c) width = std::max(width, chunks[c].state->blocks.blocks().size());
    if (fixed_shapes) width = (width + kTableBucket - 1) / kTableBucket * kTableBucket;
    if (block_tables_[g].empty()) block_tables_[g] = upload(tables(gr.first, gr.end, width));
    const auto w = static_cast<int64_t>(width);
    return gr.decode ? block_tables_[g].view(DType::kI32, {gr.rows, w}) : block_tables_[g].view(DType::kI32, {w});
  }
  /// The block tables of chunks [first, end), `width` entries each (0s past a table's end).
  std::vector<int32_t> tables(size_t first, size_t end, size_t width) const {
    std::vector<int32_t> t(width * (end - first), 0);
    for (size_t c = first; c < end; ++c) {
      const std::span<const int32_t> blocks = chunks[c].state->blocks.blocks();
      std::copy(blocks.begin(), blocks.end(), t.begin() + static_cast<int64_t>((c - first) * width));
    }
    return t;
  }

  /// The selections the taps hand chunk c's layer, or null.
  const LayerReplay* replay(size_t c, int layer) const { return taps ? taps->replay(c, layer) : nullptr; }
  bool wants_tensors(size_t c) const { return taps && taps->wants_tensors(c); }
  /// Hands the taps host data of chunk c (--dump-debug).
  void record(size_t c, const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) const {
    if (!wants_tensors(c)) return;
    DebugTensor t{dtype, std::move(shape), {}};
    t.bytes.resize(debug_bytes(t));
    if (!t.bytes.empty()) std::memcpy(t.bytes.data(), data, t.bytes.size());
    taps->tensor(c, name, std::move(t));
  }
  /// Hands the taps `array` from element `from` on.
  template <typename T>
  void record(size_t c, const std::string& name, DType dtype, std::vector<int64_t> shape, const DeviceArray<T>& array,
              int64_t from) const {
    if (!wants_tensors(c)) return;
    DebugTensor t{dtype, std::move(shape), {}};
    t.bytes.resize(debug_bytes(t));
    if (!t.bytes.empty()) be.copy_to_host(t.bytes.data(), array.data() + from, t.bytes.size());
    taps->tensor(c, name, std::move(t));
  }

 private:
  std::map<const RopeTable*, RopeRows> rope_;
  std::vector<DeviceArray<int32_t>> block_tables_;  // by group
  DeviceArray<int32_t> token_rows_;

  static size_t debug_bytes(const DebugTensor& t) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    return static_cast<size_t>(dtype_bytes(t.dtype, numel));
  }
};

}  // namespace dsinfer
