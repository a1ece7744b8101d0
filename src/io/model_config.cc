// Config parsing (both styles) and validation. One field table (visit_fields) drives parsing and
// to_json, so a field is declared once.
#include "io/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/engram_layout.h"
#include "io/model_config_required.h"

namespace dsinfer {
namespace {

template <typename C, typename V>
void visit_fields(C& c, V&& v) {
  v("max_batch_size", c.max_batch_size);
  v("max_seq_len", c.max_seq_len);
  v("temperature", c.temperature);
  v("dtype", c.dtype);
  v("expert_dtype", c.expert_dtype);
  v("vocab_size", c.vocab_size);
  v("dim", c.dim);
  v("moe_inter_dim", c.moe_inter_dim);
  v("n_layers", c.n_layers);
  v("n_mtp_layers", c.n_mtp_layers);
  v("n_heads", c.n_heads);
  v("n_routed_experts", c.n_routed_experts);
  v("n_shared_experts", c.n_shared_experts);
  v("n_activated_experts", c.n_activated_experts);
  v("score_func", c.score_func);
  v("gate_temp", c.gate_temp);
  v("norm_topk_prob", c.norm_topk_prob);
  v("route_scale", c.route_scale);
  v("swiglu_limit", c.swiglu_limit);
  v("q_lora_rank", c.q_lora_rank);
  v("head_dim", c.head_dim);
  v("rope_head_dim", c.rope_head_dim);
  v("norm_eps", c.norm_eps);
  v("o_groups", c.o_groups);
  v("o_lora_rank", c.o_lora_rank);
  v("window_size", c.window_size);
  v("compress_ratios", c.compress_ratios);
  v("kv_source_layers", c.kv_source_layers);
  v("index_source_layers", c.index_source_layers);
  v("compress_rope_theta", c.compress_rope_theta);
  v("original_seq_len", c.original_seq_len);
  v("rope_theta", c.rope_theta);
  v("rope_factor", c.rope_factor);
  v("beta_fast", c.beta_fast);
  v("beta_slow", c.beta_slow);
  v("index_n_heads", c.index_n_heads);
  v("index_head_dim", c.index_head_dim);
  v("index_topk", c.index_topk);
  v("candidate_source_layer", c.candidate_source_layer);
  v("candidate_topk_blocks", c.candidate_topk_blocks);
  v("candidate_block_size", c.candidate_block_size);
  v("hc_mult", c.hc_mult);
  v("hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  v("hc_eps", c.hc_eps);
  v("engram_layer_ids", c.engram_layer_ids);
  v("engram_num_embeddings", c.engram_num_embeddings);
  v("engram_max_ngram_size", c.engram_max_ngram_size);
  v("engram_vocab_size", c.engram_vocab_size);
  v("engram_n_heads", c.engram_n_heads);
  v("engram_head_dim", c.engram_head_dim);
  v("engram_pad_id", c.engram_pad_id);
  v("engram_compressed_vocab_size", c.engram_compressed_vocab_size);
  v("vision_n_layers", c.vision_n_layers);
  v("vision_dim", c.vision_dim);
  v("vision_n_heads", c.vision_n_heads);
  v("vision_inter_dim", c.vision_inter_dim);
  v("vision_patch_size", c.vision_patch_size);
  v("vision_rope_theta", c.vision_rope_theta);
  v("vision_downsample_ratio", c.vision_downsample_ratio);
  v("vision_max_n_token", c.vision_max_n_token);
  v("vision_min_pixels", c.vision_min_pixels);
  v("vision_max_wh_ratio", c.vision_max_wh_ratio);
  v("image_token_id", c.image_token_id);
  v("dspark_block_size", c.dspark_block_size);
  v("dspark_noise_token_id", c.dspark_noise_token_id);
  v("dspark_target_layer_ids", c.dspark_target_layer_ids);
  v("dspark_markov_rank", c.dspark_markov_rank);
  v("dspark_n_routed_experts", c.dspark_n_routed_experts);
  v("dspark_n_activated_experts", c.dspark_n_activated_experts);
}

Status bad_field(std::string_view what, std::string_view key, std::string_view msg) {
  return error(ErrorKind::kInvalidConfig, fmt::format("{}: field '{}' {}", what, key, msg));
}

template <typename Int>
Status read_integer(const Json& j, std::string_view what, std::string_view key, Int* out) {
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < std::numeric_limits<Int>::min() || v > std::numeric_limits<Int>::max())
      return bad_field(what, key, fmt::format("value {} is out of range", v));
    *out = static_cast<Int>(v);
    return {};
  }
  if (j.is_number_float() && std::nearbyint(j.get<double>()) == j.get<double>() &&
      std::fabs(j.get<double>()) < 1e15) {  // Python sometimes writes 16.0 for an int
    *out = static_cast<Int>(j.get<double>());
    return {};
  }
  return bad_field(what, key, fmt::format("must be an integer, got {} {}", json_type_name(j), j.dump()));
}

// Overloads per field type, picked by visit_fields.
struct FieldReader {
  std::string_view what;
  Status read(const Json& j, std::string_view key, int& out) const { return read_integer(j, what, key, &out); }
  Status read(const Json& j, std::string_view key, int64_t& out) const { return read_integer(j, what, key, &out); }
  Status read(const Json& j, std::string_view key, double& out) const {
    if (!j.is_number()) return bad_field(what, key, fmt::format("must be a number, got {}", json_type_name(j)));
    out = j.get<double>();
    return {};
  }
  Status read(const Json& j, std::string_view key, bool& out) const {
    if (!j.is_boolean()) return bad_field(what, key, fmt::format("must be true or false, got {}", json_type_name(j)));
    out = j.get<bool>();
    return {};
  }
  Status read(const Json& j, std::string_view key, std::string& out) const {
    if (!j.is_string()) return bad_field(what, key, fmt::format("must be a string, got {}", json_type_name(j)));
    out = j.get<std::string>();
    return {};
  }
  template <typename T>
  Status read(const Json& j, std::string_view key, std::optional<T>& out) const {
    if (j.is_null()) return out.reset(), Status();
    T v{};
    DSINFER_RETURN_IF_ERROR(read(j, key, v));
    out = v;
    return {};
  }
  template <typename T>
  Status read(const Json& j, std::string_view key, std::vector<T>& out) const {
    if (!j.is_array()) return bad_field(what, key, fmt::format("must be a list, got {}", json_type_name(j)));
    out.clear();
    for (size_t i = 0; i < j.size(); ++i) {
      T v{};
      DSINFER_RETURN_IF_ERROR(read(j[i], fmt::format("{}[{}]", key, i), v));
      out.push_back(v);
    }
    return {};
  }
};

Status apply_inference_json(const Json& j, std::string_view what, bool strict, ModelConfig* c) {
  std::set<std::string, std::less<>> known;
  visit_fields(*c, [&](std::string_view key, auto&) { known.emplace(key); });
  if (strict) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!known.count(it.key()))
        return error(ErrorKind::kInvalidConfig, fmt::format("{}: unknown field '{}'", what, it.key()));
  }
  Status status;
  const FieldReader reader{what};
  visit_fields(*c, [&](std::string_view key, auto& field) {
    if (!status.ok()) return;
    const auto it = j.find(std::string(key));
    if (it != j.end()) status = reader.read(*it, key, field);
  });
  return status;
}

// Hugging Face names (text_config / vision_config) -> ModelArgs names (spec §1.2).
const std::map<std::string, std::string, std::less<>>& hf_text_names() {
  static const std::map<std::string, std::string, std::less<>> m = {
      {"hidden_size", "dim"},
      {"num_hidden_layers", "n_layers"},
      {"num_attention_heads", "n_heads"},
      {"qk_rope_head_dim", "rope_head_dim"},
      {"moe_intermediate_size", "moe_inter_dim"},
      {"num_experts_per_tok", "n_activated_experts"},
      {"scoring_func", "score_func"},
      {"routed_scaling_factor", "route_scale"},
      {"sliding_window", "window_size"},
      {"rms_norm_eps", "norm_eps"},
      {"kv_source_layer_ids", "kv_source_layers"},
      {"index_source_layer_ids", "index_source_layers"},
      {"candidate_source_layer_id", "candidate_source_layer"},
      {"num_nextn_predict_layers", "n_mtp_layers"},
      {"dspark_num_experts_per_tok", "dspark_n_activated_experts"},
      {"engram_pad_token_id", "engram_pad_id"},
  };
  return m;
}
const std::map<std::string, std::string, std::less<>>& hf_vision_names() {
  static const std::map<std::string, std::string, std::less<>> m = {
      {"hidden_size", "vision_dim"},
      {"num_hidden_layers", "vision_n_layers"},
      {"num_attention_heads", "vision_n_heads"},
      {"intermediate_size", "vision_inter_dim"},
      {"patch_size", "vision_patch_size"},
      {"rope_theta", "vision_rope_theta"},
      {"downsample_ratio", "vision_downsample_ratio"},
  };
  return m;
}

// Rewrites an HF-style config into inference-style keys; unrelated HF keys are dropped.
Result<Json> translate_hf(const Json& root, std::string_view what) {
  const Json& text = root.contains("text_config") ? root["text_config"] : root;
  if (!text.is_object()) return bad_field(what, "text_config", "must be an object");
  std::set<std::string, std::less<>> known;
  ModelConfig defaults;
  visit_fields(defaults, [&](std::string_view key, auto&) { known.emplace(key); });

  Json out = Json::object();
  for (auto it = text.begin(); it != text.end(); ++it) {
    const auto renamed = hf_text_names().find(it.key());
    if (renamed != hf_text_names().end())
      out[renamed->second] = *it;
    else if (known.count(it.key()))
      out[it.key()] = *it;
  }
  if (text.contains("num_key_value_heads") && text["num_key_value_heads"] != 1)
    return bad_field(what, "num_key_value_heads", "must be 1 (V4.1 attention shares one latent KV)");
  if (text.contains("rope_scaling") && text["rope_scaling"].is_object()) {
    const Json& rs = text["rope_scaling"];
    for (const auto& [hf, ours] :
         std::map<std::string, std::string>{{"factor", "rope_factor"},
                                            {"beta_fast", "beta_fast"},
                                            {"beta_slow", "beta_slow"},
                                            {"original_max_position_embeddings", "original_seq_len"}})
      if (rs.contains(hf)) out[ours] = rs[hf];
  }
  if (root.contains("vision_config") && root["vision_config"].is_object()) {
    const Json& vc = root["vision_config"];
    for (auto it = vc.begin(); it != vc.end(); ++it) {
      const auto renamed = hf_vision_names().find(it.key());
      if (renamed != hf_vision_names().end())
        out[renamed->second] = *it;
      else if (known.count(it.key()))
        out[it.key()] = *it;
    }
  }
  const Json* quant = root.contains("quantization_config")   ? &root["quantization_config"]
                      : text.contains("quantization_config") ? &text["quantization_config"]
                                                             : nullptr;
  if (quant && quant->is_object()) {
    if (quant->contains("weight_block_size") && (*quant)["weight_block_size"] != Json::array({32, 32}))
      return bad_field(what, "quantization_config.weight_block_size",
                       fmt::format("is {}; V4.1 checkpoints use [32, 32]", (*quant)["weight_block_size"].dump()));
    if (quant->contains("scale_fmt") && (*quant)["scale_fmt"] != "ue8m0")
      return bad_field(what, "quantization_config.scale_fmt", "must be \"ue8m0\"");
    if (!out.contains("dtype")) out["dtype"] = "fp8";
  }
  for (const char* key : {"expert_dtype", "max_batch_size", "max_seq_len"})
    if (root.contains(key) && !out.contains(key)) out[key] = root[key];
  return out;
}

// HF `max_position_embeddings` (text_config's, else the root's); 0 when absent.
Status read_max_position_embeddings(const Json& root, std::string_view what, ModelConfig* c) {
  const Json& text = root.contains("text_config") ? root["text_config"] : root;
  const Json* v = text.contains("max_position_embeddings")   ? &text["max_position_embeddings"]
                  : root.contains("max_position_embeddings") ? &root["max_position_embeddings"]
                                                             : nullptr;
  if (!v) return {};
  DSINFER_RETURN_IF_ERROR(read_integer(*v, what, "max_position_embeddings", &c->max_position_embeddings));
  if (c->max_position_embeddings <= 0)
    return bad_field(what, "max_position_embeddings", fmt::format("must be > 0, got {}", c->max_position_embeddings));
  return {};
}

// Without an explicit max_seq_len the model runs at the context it covers (docs/context.md):
// max_position_embeddings, else YaRN's original_seq_len x rope_factor, else ModelArgs' 4096.
Status resolve_context(bool explicit_max_seq_len, std::string_view what, ModelConfig* c) {
  if (explicit_max_seq_len) return {};
  const int64_t covered = c->covered_context() > 0 ? c->covered_context() : ModelConfig{}.max_seq_len;
  if (covered > std::numeric_limits<int>::max())
    return error(ErrorKind::kInvalidConfig,
                 fmt::format("{}: the covered context of {} positions is too large (at most {})", what, covered,
                             std::numeric_limits<int>::max()));
  c->max_seq_len = static_cast<int>(std::max<int64_t>(covered, 1));  // validate() names a bad factor
  return {};
}

// Our field -> how an HF-style config spells it, for the missing-field message.
std::map<std::string, std::string, std::less<>> hf_spellings() {
  std::map<std::string, std::string, std::less<>> m;
  for (const auto& [hf, ours] : hf_text_names()) m[ours] = fmt::format("HF '{}'", hf);
  for (const auto& [hf, ours] : hf_vision_names()) m[ours] = fmt::format("HF 'vision_config.{}'", hf);
  m["rope_factor"] = "HF 'rope_scaling.factor'";
  m["beta_fast"] = "HF 'rope_scaling.beta_fast'";
  m["beta_slow"] = "HF 'rope_scaling.beta_slow'";
  m["original_seq_len"] = "HF 'rope_scaling.original_max_position_embeddings'";
  m["dtype"] = "HF 'quantization_config'";
  return m;
}

bool is_hf_style(const Json& j) {
  return j.contains("text_config") || j.contains("model_type") || j.contains("hidden_size");
}

}  // namespace

WeightFormat ModelConfig::expert_format() const {
  if (!expert_dtype) return weight_format();
  if (*expert_dtype == "fp4") return WeightFormat::kFp4;
  return *expert_dtype == "bf16" ? WeightFormat::kBf16 : WeightFormat::kFp8;
}

ScoreFunc ModelConfig::score_function() const {
  if (score_func == "softmax") return ScoreFunc::kSoftmax;
  return score_func == "sigmoid" ? ScoreFunc::kSigmoid : ScoreFunc::kSqrtSoftplus;
}

bool ModelConfig::is_kv_source(int layer) const {
  return std::find(kv_source_layers.begin(), kv_source_layers.end(), layer) != kv_source_layers.end();
}
bool ModelConfig::is_index_source(int layer) const {
  return std::find(index_source_layers.begin(), index_source_layers.end(), layer) != index_source_layers.end();
}
int64_t ModelConfig::covered_context() const {
  if (max_position_embeddings > 0) return max_position_embeddings;
  if (original_seq_len > 0)
    return static_cast<int64_t>(std::min(static_cast<double>(original_seq_len) * rope_factor, 0x1p62));
  return 0;
}

int64_t ModelConfig::context_ceiling() const {
  return std::max<int64_t>(covered_context(), max_seq_len);
}

Status ModelConfig::set_context(int64_t positions) {
  const int64_t ceiling = context_ceiling();
  if (positions < 1 || positions > ceiling) {
    const std::string covers =
        max_position_embeddings > 0 ? fmt::format("max_position_embeddings = {}", max_position_embeddings)
        : original_seq_len > 0
            ? fmt::format("YaRN: original_seq_len {} x rope_factor {:g}", original_seq_len, rope_factor)
            : fmt::format("no YaRN; max_seq_len = {}", max_seq_len);
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("a context of {} positions is outside what this model's positions cover: 1 to {} ({})",
                             positions, ceiling, covers));
  }
  max_seq_len = static_cast<int>(positions);
  return {};
}

int ModelConfig::kv_source_of(int layer) const {
  int best = -1;
  for (int s : kv_source_layers)
    if (s <= layer) best = std::max(best, s);
  return best;
}
int ModelConfig::index_source_of(int layer) const {
  int best = -1;
  for (int s : index_source_layers)
    if (s <= layer) best = std::max(best, s);
  return best;
}
AttentionRole ModelConfig::attention_role(int layer) const {
  if (layer >= n_layers || compress_ratios[layer] == 0) return AttentionRole::kWindowOnly;
  if (is_kv_source(layer)) return AttentionRole::kFull;
  return is_index_source(layer) ? AttentionRole::kReindex : AttentionRole::kReuse;
}
int ModelConfig::engram_index(int layer) const {
  const auto it = std::find(engram_layer_ids.begin(), engram_layer_ids.end(), layer);
  return it == engram_layer_ids.end() ? -1 : static_cast<int>(it - engram_layer_ids.begin());
}
int ModelConfig::routed_experts(int layer) const {
  return layer < n_layers || dspark_n_routed_experts == 0 ? n_routed_experts : dspark_n_routed_experts;
}
int ModelConfig::activated_experts(int layer) const {
  return layer < n_layers || dspark_n_activated_experts == 0 ? n_activated_experts : dspark_n_activated_experts;
}

const char* attention_role_name(AttentionRole role) {
  switch (role) {
    case AttentionRole::kWindowOnly:
      return "window";
    case AttentionRole::kFull:
      return "full";
    case AttentionRole::kReindex:
      return "reindex";
    case AttentionRole::kReuse:
      return "reuse";
  }
  return "?";
}

Json ModelConfig::to_json() const {
  Json j = Json::object();
  visit_fields(*this, [&](std::string_view key, const auto& field) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<T, std::optional<std::string>> || std::is_same_v<T, std::optional<double>>) {
      j[std::string(key)] = field ? Json(*field) : Json(nullptr);
    } else {
      j[std::string(key)] = field;
    }
  });
  return j;
}

Result<ModelConfig> parse_model_config(const Json& j, std::string_view what) {
  if (!j.is_object()) return error(ErrorKind::kInvalidConfig, fmt::format("{}: config is not a JSON object", what));
  ModelConfig c;
  std::vector<std::string> fields;
  visit_fields(c, [&](std::string_view key, auto&) { fields.emplace_back(key); });
  if (is_hf_style(j)) {
    DSINFER_ASSIGN_OR_RETURN(Json translated, translate_hf(j, what));
    DSINFER_RETURN_IF_ERROR(apply_inference_json(translated, what, /*strict=*/false, &c));
    DSINFER_RETURN_IF_ERROR(check_required_fields(translated, c, fields, what, hf_spellings()));
    DSINFER_RETURN_IF_ERROR(read_max_position_embeddings(j, what, &c));
    DSINFER_RETURN_IF_ERROR(resolve_context(translated.contains("max_seq_len"), what, &c));
  } else {
    DSINFER_RETURN_IF_ERROR(apply_inference_json(j, what, /*strict=*/true, &c));
    DSINFER_RETURN_IF_ERROR(check_required_fields(j, c, fields, what, {}));
    DSINFER_RETURN_IF_ERROR(resolve_context(j.contains("max_seq_len"), what, &c));
  }
  const Status s = c.validate();
  if (!s.ok()) return error(s.kind(), fmt::format("{}: {}", what, s.message()));
  return c;
}

Result<ModelConfig> load_model_config(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return error(ErrorKind::kNotFound, fmt::format("{}: no such model folder or config file", path.string()));
  const bool folder = std::filesystem::is_directory(path, ec);
  const std::filesystem::path file = folder ? path / "config.json" : path;
  if (folder && !std::filesystem::exists(file, ec))
    return error(ErrorKind::kNotFound, fmt::format("{}: the model folder has no config.json", path.string()));
  DSINFER_ASSIGN_OR_RETURN(Json j, read_json_file(file));
  return parse_model_config(j, file.string());
}

}  // namespace dsinfer
