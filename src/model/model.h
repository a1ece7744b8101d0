// Model: the V4.1 text forward pass (spec §2–§9) over a backend and a communicator. One call
// runs chunks of any sequences at once; each chunk is a prefill piece or one decode token.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/cache_store.h"
#include "model/engram_hash.h"
#include "model/forward_taps.h"
#include "model/rope.h"
#include "model/row_runs.h"
#include "model/sequence_state.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "ops/communicator.h"
#include "ops/device_array.h"

namespace dsinfer {

struct RopeRows;

struct ForwardChunk {
  SequenceState* state = nullptr;
  int64_t start_pos = 0;
  std::vector<int32_t> tokens;
  /// false: prefill layout for a prompt of `prompt_len` tokens (this chunk may be a piece of it);
  /// true: one token laid out as the reference's decode step.
  bool decode = false;
  int64_t prompt_len = 0;
  /// With decode false: the tokens are consecutive decode steps run at once (a speculative
  /// draft's verification): each computes what a decode step at its position computes, and the
  /// call writes logits for every one of them. At most config.verify_tokens() tokens, starting at
  /// a position no smaller than their count; Model::truncate takes back the ones not accepted.
  bool verify = false;
  /// A prefill chunk whose every token gets its logits (a perplexity's), not only its last.
  bool all_logits = false;
};

/// Where a forward's ops go and in which shapes: the model runner's choice (runtime/model_runner.h).
struct ForwardContext {
  Backend* ops = nullptr;  // null: the model's backend; else one in front of it (a step recorder)
  /// Keep a decode step's calls the same from one step to the next, so a recorded step can run again:
  /// what grows with the sequence is padded (Batch::columns, Batch::block_table) and positions,
  /// slots and lengths are uploaded data, never addresses or sizes.
  bool fixed_shapes = false;
  ForwardTaps* taps = nullptr;  // may be null
  /// Where the DSpark taps go (spec §2), or empty: [tokens of the call, main_hidden_width()] bf16,
  /// each token's mean of the stream's copies at the input of every tap layer, side by side.
  TensorView main_hidden{};
};

/// One sequence's turn of the DSpark drafter (spec §10): the target's main hidden states of
/// positions [first_pos, first_pos + rows) go into the draft stages' rings of context KV; with
/// `draft`, a block of draft tokens follows position first_pos + rows - 1, seeded with `anchor`
/// (the target's token for the position after it).
struct DraftChunk {
  SequenceState* state = nullptr;
  int64_t first_pos = 0, rows = 0;
  int64_t hidden_row = 0;  // the row of the call's main hidden states that holds first_pos
  bool draft = false;
  int32_t anchor = 0;
};

/// What a draft call writes for its drafting chunks, in their order, in the model backend's memory
/// (B = dspark_block_size).
struct DraftOutputs {
  TensorView tokens;      // [drafting, B + 1] int32: the anchor, then the B drafts
  TensorView base;        // [drafting, B, V] f32: row j's logits with the Markov bias of token j
  TensorView confidence;  // [drafting, B] f32: the confidence head's raw logits (no sigmoid)
};

/// Drafts drawn rather than the maxima (spec §10.4 samples each row): for the drafting chunks in
/// `chunks` (indices among them, ascending) and rows j < rows, token j + 1 is pick(k, j, row j of
/// DraftOutputs::base on the host); the chain then runs a row at a time.
struct DraftSampling {
  std::vector<int64_t> chunks;
  int64_t rows = 0;
  std::function<int32_t(int64_t chunk, int64_t row, std::span<const float> base)> pick;
};

struct LoadOptions {
  bool prefault = false;                                        // read every weight page at load (Checkpoint::prefault)
  std::function<void(uint64_t done, uint64_t total)> progress;  // bytes read by the prefault
  std::function<void(uint64_t done, uint64_t total)> upload_progress;  // bytes copied to a GPU backend
  int64_t max_model_len = 0;  // > 0: the context to run at instead of the config's (ModelConfig::set_context)
};

class Model {
 public:
  /// Loads config.json, tokenizer.json (for the Engram token map) and the weights of `dir`.
  static Result<std::unique_ptr<Model>> load(const std::filesystem::path& dir, Backend& backend, Communicator& comm,
                                             const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  /// The loaded weights (views into the backend's memory): for tools and benchmarks.
  const ModelWeights& weights() const { return weights_; }
  SequenceState new_sequence() const { return make_sequence_state(config_, *store_); }

  /// Replaces the store of the growing caches with an unbounded one of blocks of `block_tokens`
  /// positions, or with one bounded by a budget's layout (the server's); kInvalidArgument while a
  /// sequence holds blocks.
  Status reserve_cache(int64_t block_tokens);
  Status reserve_cache(const CacheLayout& layout);
  /// Blocks of the growing caches when no budget sets them (the server's --cache-block-tokens does).
  static constexpr int64_t kDefaultCacheBlockTokens = 64;
  const CacheStore& cache_store() const { return *store_; }
  /// The backend the weights, caches and sequences live on.
  Backend& backend() const { return backend_; }
  const Communicator& communicator() const { return comm_; }

  /// Puts a kv source's compressed rows and index keys (bf16, groups x head_dim and groups x
  /// index_head_dim) into `seq` as a prefill of groups * ratio positions would leave them, for
  /// tests and benchmarks that need a long context without running one.
  Status write_compressed_cache(SequenceState& seq, int layer, std::span<const uint16_t> compressed,
                                std::span<const uint16_t> index_keys);
  /// Puts a layer's window (bf16, window_size x head_dim: the rows of positions end - window_size
  /// .. end - 1) into `seq`'s ring, for the same tests and benchmarks.
  Status write_window(SequenceState& seq, int layer, int64_t end, std::span<const uint16_t> rows);

  /// The indexer scores, selects and drops this many queries of a chunk at a time (each query's
  /// selections are its own, so the block changes no result): by default as many as keep the
  /// block's fp32 scores within kIndexerScoreBytes; `rows` > 0 fixes it (tests), 0 restores the default.
  static constexpr int64_t kIndexerScoreBytes = int64_t{256} << 20;
  void set_indexer_query_block(int64_t rows) { indexer_query_block_ = rows; }
  /// The queries of a block over `columns` score columns.
  int64_t indexer_query_block(int64_t columns) const;

  /// Runs the chunks and writes the fp32 logits of each chunk's last token (of every token of a
  /// verify or all_logits chunk): logits [logit_rows(chunks), V] f32 in the backend's memory. The ops go where
  /// ctx says.
  Status forward(std::span<ForwardChunk> chunks, const TensorView& logits, const ForwardContext& ctx);
  /// The same with the logits copied to the host, on the model's backend.
  Status forward(std::span<ForwardChunk> chunks, std::span<float> logits, ForwardTaps* taps = nullptr);
  /// The rows of logits a forward of `chunks` writes.
  static int64_t logit_rows(std::span<const ForwardChunk> chunks);
  /// Takes back the positions [length, seq.length) of the last forward's verify chunk (the drafts
  /// not accepted): the sequence continues from `length` as if they had never run. kInvalidArgument
  /// unless the last forward had a verify chunk of seq and length lies within it (its first
  /// position at least).
  Status truncate(SequenceState& seq, int64_t length) const;

  /// Whether the checkpoint has the DSpark drafter, and the width of its main hidden states
  /// (taps x dim; 0 without it).
  bool has_drafter() const { return weights_.dspark.has_value(); }
  int64_t main_hidden_width() const;
  /// Runs the drafter (spec §10) on `main_hidden` [rows, main_hidden_width()] bf16 (what forward
  /// wrote to ForwardContext::main_hidden): every chunk's rows into its rings, then the drafting
  /// chunks' blocks into `out`. The taps see the drafting chunks in order, their tensors named
  /// as the DSpark fixture's ("spec.*"). kUnsupported without a drafter; kInvalidArgument for
  /// rows the sequence has not reached or a block past the RoPE table. `sampling`: the drafts
  /// drawn instead of the maxima.
  Status draft(std::span<const DraftChunk> chunks, const TensorView& main_hidden, const DraftOutputs& out,
               const ForwardContext& ctx = {}, const DraftSampling& sampling = {});

 private:
  Model(ModelConfig config, Checkpoint ckpt, Backend& backend, Communicator& comm)
      : config_(std::move(config)), ckpt_(std::move(ckpt)), backend_(backend), comm_(comm) {}
  struct Batch;
  Status run(Batch& b, const TensorView& logits);  // forward's ops, into the logits
  /// The stream's first state: every token's embedding in each copy, the pre-mix one-hot on copy 0.
  Status embed_stream(Batch& b);
  /// logits [rows, V] f32 = head(x [rows, dim] bf16), the vocab's columns gathered over the ranks.
  Status head_logits(Batch& b, const TensorView& x, std::span<const RowRun> runs, const TensorView& logits);
  /// The index-key owner after a decode step at `pos` that started with `owner`: the last kv source
  /// (in layer order) whose group the step completed, else `owner` (the reference's stale slot).
  int owner_after_step(int owner, int64_t pos) const;
  /// Layer l's name in the taps: "layer{l}", or "spec.stage{i}" for draft stage i.
  std::string layer_name(int layer) const;
  Status block(int layer, Batch& b);
  Status attention(int layer, Batch& b, const TensorView& x, const TensorView& out);
  /// The attention of the backbone's groups of rows (spec §5.1) from q and kv into o.
  Status attend(int layer, Batch& b, const TensorView& x, const TensorView& qr, const DeviceArray<uint16_t>& q,
                const DeviceArray<uint16_t>& kv, const DeviceArray<uint16_t>& o);
  /// A draft stage's attention (spec §10.3) from q and kv into o.
  void draft_attend(int layer, Batch& b, const DeviceArray<uint16_t>& q, const DeviceArray<uint16_t>& kv,
                    const DeviceArray<uint16_t>& o);
  /// Every draft stage's ring takes the context KV of the chunks' main hidden rows (spec §10.3).
  void fill_draft_rings(Batch& b, std::span<const DraftChunk> chunks, const TensorView& main_hidden);
  /// The drafter's head (spec §10.4) over the draft batch's stream.
  Status draft_head(Batch& b, const DraftOutputs& out, const DraftSampling& sampling);
  /// A compressed position a call completes: its sequence and the group's first position.
  struct CompletedGroup {
    SequenceState* seq;
    int64_t pos;
  };
  Status compressed_kv(int layer, Batch& b, size_t group, const TensorView& x, const TensorView& qr);
  Status indexer(int layer, Batch& b, size_t group, const TensorView& x, const TensorView& qr,
                 const DeviceArray<uint16_t>& latent, const std::vector<CompletedGroup>& done,
                 const RopeRows* group_rope);  // the RoPE rows of done's positions (null: none done)
  /// Writes `rows` (the latents or keys of `done`, in order) into `pool`, layer `layer`'s, at each
  /// one's row: one scatter over rows the device reads, so a decode step's call does not depend
  /// on where its rows go.
  void publish_rows(Batch& b, const DeviceArray<uint16_t>& pool, const TensorView& rows, int layer,
                    const std::vector<CompletedGroup>& done) const;
  Status moe(int layer, Batch& b, const TensorView& x, const TensorView& out);
  void engram(int layer, Batch& b);

  ModelConfig config_;
  Checkpoint ckpt_;
  ModelWeights weights_;
  Backend& backend_;  // what lives across calls (weights, caches, sequences) is in its memory
  Communicator& comm_;
  DeviceArray<float> logits_;  // the host-logits forward's, kept between calls
  std::unique_ptr<EngramHasher> hasher_;
  DeviceArray<uint16_t> engram_values_;   // Engram models: bf16(e4m3 code x e8m0 scale) at [scale][code]
  std::vector<uint8_t> engram_codes_;     // a call's looked-up Engram rows as stored (Model::engram), kept
  std::vector<uint8_t> engram_scales_;    // ... and their scale bytes
  std::vector<int32_t> attention_index_;  // a call's attention index on the host (Model::attention), kept
  std::vector<const RopeTable*> rope_;    // per layer
  std::vector<std::unique_ptr<RopeTable>> rope_tables_;
  std::unique_ptr<CacheStore> store_;
  int64_t indexer_query_block_ = 0;  // 0: from kIndexerScoreBytes
};

}  // namespace dsinfer
