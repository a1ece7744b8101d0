// The decode benchmarks' synthetic model: V4.1-shaped (dim 2048, 16 heads x 512, 8 routed fp4
// experts top-6, fp8 elsewhere, ratio-2 and ratio-1 kv sources, indexers, candidate blocks; no
// Engram, whose lookup is a host-side table read either way) with random weights in the release
// format, written once to a folder and reused; and the sequences the benchmarks decode (filled_sequence).
#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "io/atomic_file.h"
#include "io/json.h"
#include "io/model_config.h"
#include "model/model.h"
#include "model/weight_manifest.h"
#include "testing/config_builder.h"
#include "testing/tiny_model.h"
#include "testing/tiny_tokenizer.h"

namespace dsinfer {

/// The ~2 GB model (at 24 layers): Flash's layer kinds in `layers` layers (one source of each), dim
/// 2048, 16 heads, 8 routed experts top-6.
inline Result<ModelConfig> synthetic_config(int layers, int vocab_size, int max_seq_len) {
  return flash_shaped_config({.max_batch_size = 1,
                              .max_seq_len = max_seq_len,
                              .vocab_size = vocab_size,
                              .layers = one_source_each_layout(layers),
                              .n_routed_experts = 8,
                              .dim = 2048,
                              .moe_inter_dim = 2048,
                              .q_lora_rank = 512,
                              .o_lora_rank = 256,
                              .n_heads = 16,
                              .o_groups = 4,
                              .index_n_heads = 8,
                              .index_topk = 128,
                              .candidate_topk_blocks = 64,
                              .original_seq_len = 4096});
}

/// V4.1-Flash's text model at its real dimensions (tests/data/configs/v41_flash_hf.json: dim 5120,
/// 40 layers, 64 heads, the same compression ratios, kv/index/candidate sources, indexer and
/// hyper-connections) with `experts` routed experts instead of 384, a small Engram table and the
/// three DSpark draft stages; the vision tower is left out.
inline Result<ModelConfig> flash_config(int experts, const TokenizerVocab& vocab, int max_seq_len) {
  return flash_shaped_config({.max_batch_size = 64,
                              .max_seq_len = max_seq_len,
                              .n_routed_experts = experts,
                              .engram_tokenizer = &vocab,
                              .engram_vocab_size = 20000,
                              .dspark = true});
}

/// Weight codes above this many bytes are left out of the Flash-shaped checkpoint (57 GB would not
/// fit the benchmark machine's disk): the benchmark fills them with random codes on the device.
inline constexpr int64_t kUnwrittenAbove = int64_t{1} << 20;

struct SyntheticModel {
  ModelConfig config;
  int64_t weight_bytes = 0;
  int64_t decode_read_bytes = 0;    // a batch-1 decode step: all but the unselected experts and the embedding
  int64_t routed_expert_bytes = 0;  // all routed experts of the backbone's layers
  double token_weights = 0;         // weights of the linears one token passes (6 routed experts a layer)
};

/// Writes the checkpoint into `dir` unless it is there, with up to `max_seq_len` positions: the
/// ~2 GB model of synthetic_config, or with `flash_experts` > 0 the Flash-shaped one of
/// flash_config (its big weight codes unwritten, see kUnwrittenAbove).
inline Result<SyntheticModel> ensure_synthetic_checkpoint(const std::string& dir, int layers, int max_seq_len = 4096,
                                                          int flash_experts = 0) {
  // The Flash-shaped model's head picks any of its 129,280 ids (its random weights): with the
  // tokenizer padded to them, each picked id streams text when it is served.
  const Json tok = flash_experts > 0 ? pad_tokenizer_vocab(make_tiny_tokenizer_json(kTinyTokenizerMerges),
                                                           FlashShapedOptions{}.vocab_size)
                                     : make_tiny_tokenizer_json(kTinyTokenizerMerges);
  auto vocab = TokenizerVocab::from_json(tok, "tokenizer");
  if (!vocab.ok()) return vocab.status();
  SyntheticModel m;
  DSINFER_ASSIGN_OR_RETURN(m.config, flash_experts > 0 ? flash_config(flash_experts, *vocab, max_seq_len)
                                                       : synthetic_config(layers, vocab->size(), max_seq_len));
  if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
    const auto t0 = std::chrono::steady_clock::now();
    DSINFER_RETURN_IF_ERROR(make_random_weights(m.config, 1, flash_experts > 0 ? kUnwrittenAbove : -1)
                                .write_sharded(dir, uint64_t{4} << 30));
    DSINFER_RETURN_IF_ERROR(write_file_atomic(std::filesystem::path(dir) / "tokenizer.json", tok.dump()));
    DSINFER_RETURN_IF_ERROR(write_file_atomic(std::filesystem::path(dir) / "config.json", m.config.to_json().dump(1)));
    std::printf("wrote the synthetic checkpoint in %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } else {
    // Written for fewer positions by an earlier run: the weights serve any length, so only the
    // config's max_seq_len grows.
    DSINFER_ASSIGN_OR_RETURN(Json written, read_json_file(std::filesystem::path(dir) / "config.json"));
    if (written.value("max_seq_len", 0) < max_seq_len) {
      written["max_seq_len"] = max_seq_len;
      DSINFER_RETURN_IF_ERROR(write_file_atomic(std::filesystem::path(dir) / "config.json", written.dump(1)));
    }
  }
  const ModelConfig& c = m.config;
  for (const TensorSpec& t : build_weight_manifest(c)) {
    m.weight_bytes += t.bytes();
    if (t.component == Component::kDSpark) continue;  // what a target step reads: the backbone's
    if (t.part == Part::kRoutedExperts) m.routed_expert_bytes += t.bytes();
    // The embedding and the Engram tables are read a row per token.
    if (t.name == "embed.weight" || t.part == Part::kEngramTable) continue;
    if (!t.is_scale && t.shape.size() == 2) {
      const bool fp4 = t.part == Part::kRoutedExperts && c.expert_dtype == "fp4";
      const double bytes_per_weight = fp4 ? 0.5 : static_cast<double>(dtype_bytes(t.dtypes.front(), 1));
      m.token_weights +=
          t.bytes() / bytes_per_weight *
          (t.part == Part::kRoutedExperts ? static_cast<double>(c.n_activated_experts) / c.n_routed_experts : 1.0);
    }
    m.decode_read_bytes +=
        t.part == Part::kRoutedExperts ? t.bytes() * c.n_activated_experts / c.n_routed_experts : t.bytes();
  }
  return m;
}

/// A sequence as a prefill of `context` positions would leave it: random window rows on every
/// layer, random compressed rows and index keys on the kv sources, the index-key slot on the last,
/// an Engram token history.
/// `pool` holds the random bf16 values (shared by every sequence: only the time is measured).
inline SequenceState filled_sequence(Model& model, const std::vector<uint16_t>& pool, int64_t context) {
  const ModelConfig& c = model.config();
  SequenceState s = model.new_sequence();
  const auto rows = [&](int64_t n) { return std::span<const uint16_t>(pool.data(), static_cast<size_t>(n)); };
  for (int l = 0; l < c.n_layers; ++l) {
    if (Status st = model.write_window(s, l, context, rows(static_cast<int64_t>(c.window_size) * c.head_dim)); !st.ok())
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
    if (!c.is_kv_source(l)) continue;
    const int64_t groups = context / c.compress_ratio(l);
    if (Status st = model.write_compressed_cache(s, l, rows(groups * c.head_dim), rows(groups * c.index_head_dim));
        !st.ok())
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
    s.index_key_owner = l;
  }
  s.length = context;
  if (!c.engram_layer_ids.empty()) s.engram_history.assign(context, 5);  // compressed ids of the prompt
  return s;
}

}  // namespace dsinfer
