// ModelConfig::validate: every constraint the model code relies on, checked once at load.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/engram_layout.h"
#include "io/model_config.h"

namespace dsinfer {
namespace {

// Collects the first failure; each check names its field.
class Checker {
 public:
  void require(bool ok, std::string_view field, std::string message) {
    if (!ok && status_.ok())
      status_ = error(ErrorKind::kInvalidConfig, fmt::format("field '{}' {}", field, std::move(message)));
  }
  void positive(int64_t v, std::string_view field) { require(v > 0, field, fmt::format("must be > 0, got {}", v)); }
  void multiple_of(int64_t v, int64_t m, std::string_view field, std::string_view why) {
    require(v % m == 0, field, fmt::format("= {} must be a multiple of {} ({})", v, m, why));
  }
  void one_of(const std::string& v, std::initializer_list<std::string_view> allowed, std::string_view field) {
    bool ok = false;
    for (auto a : allowed) ok |= v == a;
    require(ok, field, fmt::format("= \"{}\" is not one of {}", v, fmt::join(allowed, ", ")));
  }
  void layer_list(const std::vector<int>& v, int n_layers, std::string_view field) {
    for (size_t i = 0; i < v.size(); ++i) {
      require(v[i] >= 0 && v[i] < n_layers, field, fmt::format("contains layer {} outside [0, {})", v[i], n_layers));
      require(i == 0 || v[i] > v[i - 1], field, "must be strictly increasing");
    }
  }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

void check_shapes(const ModelConfig& c, Checker& k) {
  for (auto [v, name] : {std::pair{int64_t{c.vocab_size}, "vocab_size"},
                         {c.dim, "dim"},
                         {c.moe_inter_dim, "moe_inter_dim"},
                         {c.n_layers, "n_layers"},
                         {c.n_heads, "n_heads"},
                         {c.n_routed_experts, "n_routed_experts"},
                         {c.n_activated_experts, "n_activated_experts"},
                         {c.q_lora_rank, "q_lora_rank"},
                         {c.head_dim, "head_dim"},
                         {c.rope_head_dim, "rope_head_dim"},
                         {c.o_groups, "o_groups"},
                         {c.o_lora_rank, "o_lora_rank"},
                         {c.window_size, "window_size"},
                         {c.hc_mult, "hc_mult"},
                         {c.hc_sinkhorn_iters, "hc_sinkhorn_iters"},
                         {c.index_n_heads, "index_n_heads"},
                         {c.index_head_dim, "index_head_dim"},
                         {c.index_topk, "index_topk"},
                         {c.max_batch_size, "max_batch_size"},
                         {c.max_seq_len, "max_seq_len"}})
    k.positive(v, name);
  k.require(c.n_mtp_layers >= 0, "n_mtp_layers", "must be >= 0");
  k.require(c.n_shared_experts == 1, "n_shared_experts", fmt::format("must be 1, got {}", c.n_shared_experts));
  k.require(c.n_activated_experts <= c.n_routed_experts, "n_activated_experts",
            fmt::format("= {} exceeds n_routed_experts = {}", c.n_activated_experts, c.n_routed_experts));
  k.one_of(c.dtype, {"fp8", "bf16"}, "dtype");
  if (c.expert_dtype) k.one_of(*c.expert_dtype, {"fp4", "fp8", "bf16"}, "expert_dtype");
  k.one_of(c.score_func, {"softmax", "sigmoid", "sqrtsoftplus"}, "score_func");
  k.require(c.rope_head_dim % 2 == 0, "rope_head_dim", "must be even (RoPE rotates pairs)");
  k.require(c.rope_head_dim <= c.head_dim, "rope_head_dim", "must not exceed head_dim");
  k.require(c.rope_head_dim <= c.index_head_dim, "rope_head_dim", "must not exceed index_head_dim");
  // The reference splits the attention output's n_heads x head_dim values into o_groups equal
  // groups (a view), so a group may hold part of a head.
  k.require(int64_t{c.n_heads} * c.head_dim % c.o_groups == 0, "o_groups",
            fmt::format("= {} must divide n_heads x head_dim = {}", c.o_groups, int64_t{c.n_heads} * c.head_dim));
  // What the reference's act_quant needs (its input's last dim in whole groups of 32): the input
  // width of every act_quant'd GEMM (wq_a and wkv: dim; wq_b and the indexer's wq_b: q_lora_rank;
  // the experts' w2: moe_inter_dim; wo_b: o_groups x o_lora_rank) and the window KV's fake-quant
  // over head_dim. Output widths need nothing: fp8 scales cover ceil(out / 32) row blocks of the
  // whole matrix, so o_lora_rank alone may be any width (wo_a's groups need not align to them).
  const char* kGroups = "the reference's act_quant takes whole groups of 32";
  k.multiple_of(c.dim, 32, "dim", kGroups);
  k.multiple_of(c.moe_inter_dim, 32, "moe_inter_dim", kGroups);
  k.multiple_of(c.q_lora_rank, 32, "q_lora_rank", kGroups);
  k.multiple_of(c.head_dim, 32, "head_dim", kGroups);
  k.require(int64_t{c.o_groups} * c.o_lora_rank % 32 == 0, "o_lora_rank",
            fmt::format("x o_groups = {} x {} must be a multiple of 32 (wo_b's input; {})", c.o_lora_rank, c.o_groups,
                        kGroups));
  k.multiple_of(c.index_head_dim, 32, "index_head_dim", "the indexer's fp4 groups are 32 wide");
  k.require(c.gate_temp > 0, "gate_temp", "must be > 0");
  k.require(c.route_scale > 0, "route_scale", "must be > 0");
  k.require(c.swiglu_limit >= 0, "swiglu_limit", "must be >= 0");
  k.require(c.norm_eps >= 0, "norm_eps", "must be >= 0");
  k.require(c.hc_eps >= 0, "hc_eps", "must be >= 0");
  k.require(c.rope_theta > 0, "rope_theta", "must be > 0");
  k.require(c.compress_rope_theta > 0, "compress_rope_theta", "must be > 0");
  k.require(c.original_seq_len >= 0, "original_seq_len", "must be >= 0");
  if (c.original_seq_len > 0) {
    k.require(c.rope_factor >= 1, "rope_factor", "must be >= 1 with YaRN");
    k.require(c.beta_fast > c.beta_slow && c.beta_slow > 0, "beta_fast", "must exceed beta_slow > 0");
  }
}

void check_sharing(const ModelConfig& c, Checker& k) {
  const size_t with_drafts = static_cast<size_t>(c.n_layers + c.n_mtp_layers);
  const size_t need = c.dspark_enabled() ? with_drafts : static_cast<size_t>(c.n_layers);
  k.require(
      c.compress_ratios.size() == need || c.compress_ratios.size() == with_drafts, "compress_ratios",
      fmt::format("has {} entries; expected n_layers + n_mtp_layers = {}", c.compress_ratios.size(), with_drafts));
  if (!k.status().ok()) return;
  for (size_t l = 0; l < c.compress_ratios.size(); ++l) {
    const int r = c.compress_ratios[l];
    k.require(r == 0 || r == 1 || r == 2, "compress_ratios",
              fmt::format("[{}] = {}; V4.1 supports ratios 0, 1 and 2", l, r));
    if (static_cast<int>(l) >= c.n_layers)
      k.require(r == 0, "compress_ratios", fmt::format("[{}] = {}; draft layers are window-only", l, r));
  }
  k.layer_list(c.kv_source_layers, c.n_layers, "kv_source_layers");
  k.layer_list(c.index_source_layers, c.n_layers, "index_source_layers");
  if (!k.status().ok()) return;
  for (int s : c.kv_source_layers) {
    k.require(c.compress_ratios[s] > 0, "kv_source_layers", fmt::format("lists layer {} whose compress ratio is 0", s));
    k.require(c.is_index_source(s), "index_source_layers",
              fmt::format("must include kv source {} (its consumers need top-k over its cache)", s));
  }
  for (int s : c.index_source_layers)
    k.require(c.compress_ratios[s] > 0, "index_source_layers",
              fmt::format("lists layer {} whose compress ratio is 0", s));
  for (int l = 0; l < c.n_layers && k.status().ok(); ++l) {
    const int r = c.compress_ratios[l];
    if (r == 0) continue;
    const int kv = c.kv_source_of(l), ix = c.index_source_of(l);
    k.require(kv >= 0, "kv_source_layers", fmt::format("has no source at or before compressed layer {}", l));
    k.require(ix >= 0, "index_source_layers", fmt::format("has no source at or before compressed layer {}", l));
    if (!k.status().ok()) return;
    k.require(c.compress_ratios[kv] == r, "compress_ratios",
              fmt::format("layer {} (ratio {}) would read kv source {} of ratio {}", l, r, kv, c.compress_ratios[kv]));
    k.require(c.compress_ratios[ix] == r, "compress_ratios",
              fmt::format("layer {} (ratio {}) would reuse the top-k of layer {} (ratio {})", l, r, ix,
                          c.compress_ratios[ix]));
  }
  if (c.candidate_source_layer >= 0) {
    const int cs = c.candidate_source_layer;
    k.require(c.is_index_source(cs), "candidate_source_layer", fmt::format("= {} is not an index source", cs));
    k.positive(c.candidate_topk_blocks, "candidate_topk_blocks");
    k.positive(c.candidate_block_size, "candidate_block_size");
    // Otherwise top-k could have to choose among masked positions, where only torch's tie order decides.
    k.require(static_cast<int64_t>(c.candidate_topk_blocks - 1) * c.candidate_block_size + 1 >= c.index_topk,
              "candidate_topk_blocks",
              fmt::format("({} - 1) * candidate_block_size {} + 1 must be >= index_topk {}", c.candidate_topk_blocks,
                          c.candidate_block_size, c.index_topk));
    for (int s : c.index_source_layers)
      if (s > cs && c.is_index_source(cs))
        k.require(c.compress_ratios[s] == c.compress_ratios[cs], "candidate_source_layer",
                  fmt::format("layer {} masks with candidates of layer {} of another ratio", s, cs));
  }
}

void check_engram(const ModelConfig& c, Checker& k) {
  if (c.engram_layer_ids.empty()) return;
  k.layer_list(c.engram_layer_ids, c.n_layers, "engram_layer_ids");
  k.require(
      c.engram_num_embeddings.size() == c.engram_layer_ids.size(), "engram_num_embeddings",
      fmt::format("has {} entries for {} Engram layers", c.engram_num_embeddings.size(), c.engram_layer_ids.size()));
  k.require(c.engram_max_ngram_size >= 2, "engram_max_ngram_size", "must be >= 2 with Engram layers");
  k.positive(c.engram_n_heads, "engram_n_heads");
  k.positive(c.engram_head_dim, "engram_head_dim");
  k.multiple_of(c.engram_head_dim, 32, "engram_head_dim", "table scales cover 32 values");
  k.require(c.engram_vocab_size > 1, "engram_vocab_size", "must be > 1");
  k.positive(c.engram_compressed_vocab_size, "engram_compressed_vocab_size");
  k.require(c.engram_pad_id >= 0 && c.engram_pad_id < c.vocab_size, "engram_pad_id", "must be a token id");
  k.require(c.engram_max_ngram_size <= 16 && c.engram_n_heads <= 64, "engram_max_ngram_size",
            "and engram_n_heads are implausibly large");
  if (!k.status().ok()) return;
  const EngramLayout layout = compute_engram_layout(static_cast<int>(c.engram_layer_ids.size()),
                                                    c.engram_max_ngram_size, c.engram_n_heads, c.engram_vocab_size);
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i)
    k.require(layout.table_rows(static_cast<int>(i)) == c.engram_num_embeddings[i], "engram_num_embeddings",
              fmt::format("[{}] = {} but the bucket primes derived from engram_vocab_size {} sum to {}", i,
                          c.engram_num_embeddings[i], c.engram_vocab_size, layout.table_rows(static_cast<int>(i))));
}

void check_extras(const ModelConfig& c, Checker& k) {
  if (c.dspark_enabled()) {
    k.layer_list(c.dspark_target_layer_ids, c.n_layers, "dspark_target_layer_ids");
    k.require(!c.dspark_target_layer_ids.empty(), "dspark_target_layer_ids", "must not be empty with DSpark");
    k.require(c.dspark_noise_token_id >= 0 && c.dspark_noise_token_id < c.vocab_size, "dspark_noise_token_id",
              "must be a token id");
    k.positive(c.dspark_markov_rank, "dspark_markov_rank");
    k.require(c.dspark_n_routed_experts >= 0 && c.dspark_n_activated_experts >= 0, "dspark_n_routed_experts",
              "must be >= 0");
    k.require(c.activated_experts(c.n_layers) <= c.routed_experts(c.n_layers), "dspark_n_activated_experts",
              "exceeds the draft layers' routed experts");
  }
  if (c.vision_enabled()) {
    k.positive(c.vision_dim, "vision_dim");
    k.positive(c.vision_n_heads, "vision_n_heads");
    k.require(c.vision_n_heads > 0 && c.vision_dim % c.vision_n_heads == 0, "vision_n_heads", "must divide vision_dim");
    k.positive(c.vision_inter_dim, "vision_inter_dim");
    k.positive(c.vision_patch_size, "vision_patch_size");
    k.positive(c.vision_downsample_ratio, "vision_downsample_ratio");
    k.require(c.image_token_id >= 0 && c.image_token_id < c.vocab_size, "image_token_id", "must be a token id");
  }
}

}  // namespace

Status ModelConfig::validate() const {
  Checker k;
  check_shapes(*this, k);
  if (k.status().ok()) check_sharing(*this, k);
  if (k.status().ok()) check_engram(*this, k);
  if (k.status().ok()) check_extras(*this, k);
  return k.status();
}

}  // namespace dsinfer
