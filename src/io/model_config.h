// ModelConfig: every field of the reference's ModelArgs (spec §1.2) with its default, loaded from
// either config.json style (the inference ModelArgs JSON, or the Hugging Face config with a nested
// text_config) and validated once, with messages that name the offending field.
//
// It lives in io rather than model because io produces it and io may not depend on model
// (dependency rule core <- io <- model); model only reads it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/json.h"

namespace dsinfer {

enum class WeightFormat : uint8_t { kBf16, kFp8, kFp4 };
enum class ScoreFunc : uint8_t { kSoftmax, kSigmoid, kSqrtSoftplus };

/// Role of a layer's attention in the cross-layer sharing scheme (spec §1.4).
enum class AttentionRole : uint8_t {
  kWindowOnly,  // compress ratio 0
  kFull,        // kv source: own Compressor + Indexer (owns index keys)
  kReindex,     // own Indexer over the kv source's index keys
  kReuse,       // reads the compressed KV and top-k of earlier layers
};

struct ModelConfig {
  // ---- runtime (size caches and tables; not model shape) ----
  int max_batch_size = 4;
  int max_seq_len = 4096;  // the context the model runs at (see context_ceiling and docs/context.md)
  double temperature = 1.0;
  // The longest context the release says the model covers (HF `max_position_embeddings`); 0 when
  // the config does not say. Not a ModelArgs field: the inference JSON neither reads nor writes it.
  int64_t max_position_embeddings = 0;

  // ---- storage formats ----
  std::string dtype = "fp8";                        // "fp8" (e4m3 + 32x32 e8m0 scales) or "bf16"
  std::optional<std::string> expert_dtype = "fp4";  // "fp4", "fp8", or null (= dtype)

  // ---- backbone ----
  int vocab_size = 129280;
  int dim = 1024;            // residual width per hyper-connection copy
  int moe_inter_dim = 1024;  // each routed and the shared expert
  int n_layers = 5;
  int n_mtp_layers = 1;  // DSpark draft blocks (built only when dspark_block_size > 0)
  int n_heads = 16;
  int n_routed_experts = 8;
  int n_shared_experts = 1;
  int n_activated_experts = 2;
  std::string score_func = "sqrtsoftplus";  // "softmax", "sigmoid", "sqrtsoftplus"
  double gate_temp = 1.0;
  bool norm_topk_prob = true;
  double route_scale = 1.0;
  double swiglu_limit = 0.0;  // 0 disables the clamp
  int q_lora_rank = 256;
  int head_dim = 128;  // q head and the shared K=V latent
  int rope_head_dim = 32;
  double norm_eps = 1e-20;
  int o_groups = 8;
  int o_lora_rank = 256;
  int window_size = 128;
  std::vector<int> compress_ratios = {0, 2, 2, 1, 1, 0};  // per layer, draft layers included
  std::vector<int> kv_source_layers = {1, 3};
  std::vector<int> index_source_layers = {1, 3};
  double compress_rope_theta = 40000.0;
  int original_seq_len = 0;  // YaRN original context; 0 disables YaRN
  double rope_theta = 10000.0;
  double rope_factor = 40.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int index_n_heads = 16;
  int index_head_dim = 64;
  int index_topk = 64;
  int candidate_source_layer = -1;  // < 0 disables the candidate-block level
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;

  // ---- Engram ----
  std::vector<int> engram_layer_ids = {};
  std::vector<int64_t> engram_num_embeddings = {};  // table rows per Engram layer
  int engram_max_ngram_size = 1;
  int64_t engram_vocab_size = 0;  // start of the bucket-prime search
  int engram_n_heads = 0;
  int engram_head_dim = 0;
  int engram_pad_id = 2;
  int64_t engram_compressed_vocab_size = 0;

  // ---- vision ----
  int vision_n_layers = 0;  // 0 disables the vision path (and bias_vl)
  int vision_dim = 1024;
  int vision_n_heads = 16;
  int vision_inter_dim = 2816;
  int vision_patch_size = 14;
  double vision_rope_theta = 10000.0;
  int vision_downsample_ratio = 3;
  int vision_max_n_token = 1024;
  int64_t vision_min_pixels = 544 * 544;
  std::optional<double> vision_max_wh_ratio;
  int image_token_id = 129264;

  // ---- DSpark drafter ----
  int dspark_block_size = 0;  // 0: no DSpark modules
  int dspark_noise_token_id = 0;
  std::vector<int> dspark_target_layer_ids = {};
  int dspark_markov_rank = 256;
  int dspark_n_routed_experts = 0;  // 0: backbone value
  int dspark_n_activated_experts = 0;

  // ---- derived ----
  bool vision_enabled() const { return vision_n_layers > 0; }
  bool dspark_enabled() const { return dspark_block_size > 0 && n_mtp_layers > 0; }
  int n_draft_layers() const { return dspark_enabled() ? n_mtp_layers : 0; }
  /// The most tokens a speculative verify chunk holds: the anchor and a draft block (1 without a
  /// drafter). The fixed caches keep verify_tokens() - 1 rows of slack past the window (a ring of
  /// window + slack rows, partial groups of 2 + slack) so that the rows a rejected draft wrote
  /// never overwrite one a later step reads.
  int verify_tokens() const { return dspark_enabled() ? dspark_block_size + 1 : 1; }
  int ring_rows() const { return window_size + verify_tokens() - 1; }
  int partial_group_rows() const { return 2 + verify_tokens() - 1; }
  WeightFormat weight_format() const { return dtype == "bf16" ? WeightFormat::kBf16 : WeightFormat::kFp8; }
  WeightFormat expert_format() const;
  ScoreFunc score_function() const;
  int compress_ratio(int layer) const { return compress_ratios[layer]; }
  bool is_kv_source(int layer) const;
  bool is_index_source(int layer) const;
  bool is_candidate_source(int layer) const { return layer == candidate_source_layer; }
  bool uses_candidates(int layer) const {
    return is_index_source(layer) && candidate_source_layer >= 0 && candidate_source_layer < layer;
  }
  /// Most recent kv source / index source at or before `layer`; -1 when none.
  int kv_source_of(int layer) const;
  int index_source_of(int layer) const;
  AttentionRole attention_role(int layer) const;
  /// Position of `layer` in engram_layer_ids, or -1.
  int engram_index(int layer) const;
  /// (routed experts, activated) for a backbone or draft layer.
  int routed_experts(int layer) const;
  int activated_experts(int layer) const;
  /// Number of n-gram hash columns per Engram layer: (max_ngram - 1) * heads.
  int engram_hash_columns() const { return (engram_max_ngram_size - 1) * engram_n_heads; }

  /// The most positions the model may run at: the covered context (max_position_embeddings, else
  /// YaRN's original_seq_len x rope_factor) or an explicit max_seq_len beyond it, as the reference
  /// runs any max_seq_len it is given.
  int64_t context_ceiling() const;
  /// The context the positions cover: max_position_embeddings, else original_seq_len x
  /// rope_factor with YaRN, else 0 (unknown).
  int64_t covered_context() const;
  /// Runs the model at `positions` (`--max-model-len`): kInvalidArgument above context_ceiling().
  Status set_context(int64_t positions);

  /// All fields as inference-style JSON (what `dsinfer inspect` and make-tiny write).
  Json to_json() const;
  /// Checks every constraint; the first violation is reported with the field's name.
  Status validate() const;
};

/// Parses either config style; inference-style unknown keys are errors (the reference's
/// ModelArgs(**config) rejects them too), HF-style unrelated keys are ignored. A missing required
/// field is an error naming it (io/model_config_required.h says which are optional).
Result<ModelConfig> parse_model_config(const Json& j, std::string_view what);
/// Reads `path` (a config.json, or a folder holding one) and validates it.
Result<ModelConfig> load_model_config(const std::filesystem::path& path);
const char* attention_role_name(AttentionRole role);

}  // namespace dsinfer
