// `dsinfer inspect`: validates a checkpoint (or just a config) and prints the layer schedule,
// parameter and byte counts by component, part and dtype, the KV-cache bytes per token, and with
// --tensor-parallel N what each of N ranks would hold.
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/units.h"
#include "io/checkpoint.h"
#include "io/engram_token_map.h"
#include "io/model_config.h"
#include "model/cache_sizes.h"
#include "model/weight_manifest.h"

namespace dsinfer::cli {
namespace {

struct InspectOptions {
  std::string model;
  std::string config;
  int64_t max_model_len = 0;
  int tensor_parallel = 0;  // 0: not asked
};

// Parameter counts in one unit chosen by the total, so the column reads like spec §1.5.
struct ParamUnit {
  double scale;
  const char* name;
  explicit ParamUnit(int64_t total)
      : scale(total >= 1e9   ? 1e9
              : total >= 1e6 ? 1e6
                             : 1e3),
        name(total >= 1e9   ? "B"
             : total >= 1e6 ? "M"
                            : "K") {}
  std::string operator()(int64_t n) const {
    const double v = n / scale;
    if (v < 0.01 && n > 0 && scale > 1e3) return ParamUnit(n)(n);  // too small for this unit
    return v >= 10 ? fmt::format("{:.1f} {}", v, name) : fmt::format("{:.2f} {}", v, name);
  }
};

std::string rope_label(const ModelConfig& c, int layer) {
  if (c.compress_ratio(layer) == 0) return fmt::format("theta {:g}", c.rope_theta);
  return c.original_seq_len > 0 ? fmt::format("theta {:g} yarn x{:g}", c.compress_rope_theta, c.rope_factor)
                                : fmt::format("theta {:g}", c.compress_rope_theta);
}

void print_schedule(const ModelConfig& c) {
  fmt::print("\nlayer schedule\n");
  fmt::print("  {:>5}  {:>5}  {:<8}  {:>6}  {:>9}  {:<10}  {:<22}  {}\n", "layer", "ratio", "role", "kv src",
             "index src", "candidates", "rope", "extras");
  const auto dash_or = [](int v) { return v < 0 ? std::string("-") : std::to_string(v); };
  for (int l = 0; l < c.n_layers + c.n_draft_layers(); ++l) {
    const bool draft = l >= c.n_layers;
    const int r = c.compress_ratio(l);
    std::string cand = "-";
    if (!draft && c.is_candidate_source(l))
      cand = "publishes";
    else if (!draft && c.uses_candidates(l))
      cand = "masked";
    std::string extras;
    if (c.engram_index(l) >= 0) extras += "engram ";
    if (draft) extras += fmt::format("dspark draft {} ", l - c.n_layers);
    for (int t : c.dspark_target_layer_ids)
      if (t == l && c.dspark_enabled()) extras += "dspark tap ";
    fmt::print("  {:>5}  {:>5}  {:<8}  {:>6}  {:>9}  {:<10}  {:<22}  {}\n", l, r,
               attention_role_name(c.attention_role(l)), r ? dash_or(c.kv_source_of(l)) : "-",
               r ? dash_or(c.index_source_of(l)) : "-", cand, rope_label(c, l), extras);
  }
}

void print_counts(const std::vector<TensorSpec>& manifest) {
  std::map<Component, std::pair<int64_t, int64_t>> by_component;  // params, bytes
  std::map<Part, std::pair<int64_t, int64_t>> by_part;
  std::map<std::string_view, std::pair<int64_t, int64_t>> by_dtype;  // tensors, bytes
  int64_t total_params = 0, total_bytes = 0;
  for (const TensorSpec& t : manifest) {
    by_component[t.component].first += t.params(), by_component[t.component].second += t.bytes();
    by_part[t.part].first += t.params(), by_part[t.part].second += t.bytes();
    by_dtype[dtype_name(t.dtypes.front())].first += 1, by_dtype[dtype_name(t.dtypes.front())].second += t.bytes();
    total_params += t.params(), total_bytes += t.bytes();
  }
  const ParamUnit unit(total_params);
  fmt::print("\nparameters and bytes by component ({} tensors)\n", manifest.size());
  for (const auto& [c, pb] : by_component)
    fmt::print("  {:<20} {:>10}  {:>16} params  {:>10}\n", component_name(c), unit(pb.first), pb.first,
               human_bytes(pb.second));
  fmt::print("  {:<20} {:>10}  {:>16} params  {:>10}\n", "total", unit(total_params), total_params,
             human_bytes(total_bytes));
  fmt::print("\nby part\n");
  for (const auto& [p, pb] : by_part)
    fmt::print("  {:<20} {:>10}  {:>10}\n", part_name(p), unit(pb.first), human_bytes(pb.second));
  fmt::print("\nby dtype (release)\n");
  for (const auto& [d, nb] : by_dtype)
    fmt::print("  {:<20} {:>8} tensors  {:>10}\n", d, nb.first, human_bytes(nb.second));
}

void print_decode_step(const std::vector<TensorSpec>& manifest, const ModelConfig& c) {
  const DecodeStepBytes d = decode_step_bytes(manifest, c);
  fmt::print("\nweights one decode step reads (batch 1; {} of {} routed experts, {} Engram rows a layer): {}\n",
             c.n_activated_experts, c.n_routed_experts, c.engram_hash_columns(), human_bytes(d.total()));
  for (const auto& [part, bytes] : d.by_part) fmt::print("  {:<20} {:>10}\n", part_name(part), human_bytes(bytes));
}

void print_cache(const ModelConfig& c) {
  const CacheSizes compact = compact_cache_sizes(c), ref = reference_cache_sizes(c);
  fmt::print("\nKV cache (compact layout: fp4 compressed KV and index keys, fp8 window)\n");
  fmt::print("  per token: {:.0f} B = compressed KV {:.0f} B + index keys {:.0f} B + token history {:.0f} B\n",
             compact.per_token(), compact.compressed_kv_per_token, compact.index_keys_per_token,
             compact.engram_history_per_token);
  fmt::print("  per sequence: window rings {}, compressor state {}\n", human_bytes(compact.window_per_sequence),
             human_bytes(compact.compressor_state_per_sequence));
  fmt::print("  at the context ({} positions): {} per sequence\n", c.max_seq_len,
             human_bytes(static_cast<double>(sequence_cache_bytes(compact, c.max_seq_len))));
  fmt::print(
      "  reference layout (bf16 buffers, what serve's --cache-memory plans with): {:.0f} B per token, window "
      "rings {} per sequence, {} per sequence at the context\n",
      ref.per_token(), human_bytes(ref.window_per_sequence),
      human_bytes(static_cast<double>(sequence_cache_bytes(ref, c.max_seq_len))));
}

// What each rank holds under tensor parallelism over `ranks` (the manifest's splits; a layout the
// config does not divide into is an error): what a run under mpirun with that many ranks loads
// (CPU ranks today; GPU ranks are planned from it).
Status print_tensor_parallel(const std::vector<TensorSpec>& manifest, const ModelConfig& c, int ranks) {
  DSINFER_RETURN_IF_ERROR(check_tensor_parallel(manifest, c, ranks));
  const std::map<Component, int64_t> bytes = rank_bytes(manifest, ranks);
  fmt::print(
      "\ntensor parallelism over {} ranks (attention and indexer heads, wo_a groups and the vocabulary split; "
      "{} of {} routed experts a rank)\n",
      ranks, c.n_routed_experts / ranks, c.n_routed_experts);
  int64_t device = 0;
  std::string parts;
  for (const auto& [component, b] : bytes) {
    if (component == Component::kEngramTable) continue;
    device += b;
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", component_name(component),
                         human_bytes(static_cast<double>(b)));
  }
  fmt::print("  weights per rank: {} ({})\n", human_bytes(static_cast<double>(device)), parts);
  if (const auto e = bytes.find(Component::kEngramTable); e != bytes.end())
    fmt::print("  engram tables: {} in host memory, once a machine (not split)\n",
               human_bytes(static_cast<double>(e->second)));
  fmt::print("  caches per rank: not split (the latent KV and index keys serve every head): the KV cache above\n");
  return {};
}

// The tokenizer loaded exactly as generate loads it (a folder generate cannot run fails here too),
// and the Engram compressed vocab it yields must be the config's (the reference asserts it).
Status check_tokenizer(const std::string& dir, const ModelConfig& c) {
  DSINFER_ASSIGN_OR_RETURN(Tokenizer tok, load_tokenizer(dir));
  const TokenizerVocab& vocab = tok.vocab();
  std::string engram;
  if (!c.engram_layer_ids.empty()) {
    const EngramTokenMap map = build_engram_token_map(vocab);
    if (map.compressed_vocab_size != c.engram_compressed_vocab_size)
      return error(ErrorKind::kInvalidConfig,
                   fmt::format("{}: yields an Engram compressed vocab of {} but config.json says "
                               "engram_compressed_vocab_size = {}",
                               (std::filesystem::path(dir) / "tokenizer.json").string(), map.compressed_vocab_size,
                               c.engram_compressed_vocab_size));
    engram = fmt::format(", Engram compressed vocab {} (matches the config)", map.compressed_vocab_size);
  }
  fmt::print("tokenizer: {} ids, {} merges, longest token {} bytes{}\n", vocab.size(), vocab.merges().size(),
             tok.max_token_bytes(), engram);
  return {};
}

int run_inspect(const InspectOptions& o) {
  const std::filesystem::path source = o.model.empty() ? o.config : o.model;
  auto config = load_config_at_context(source, o.max_model_len);
  if (!config.ok()) return report_error(config.status());
  const ModelConfig& c = *config;
  const std::vector<TensorSpec> manifest = build_weight_manifest(c);
  if (!o.model.empty()) {
    auto ckpt = Checkpoint::open(o.model);
    if (!ckpt.ok()) return report_error(ckpt.status());
    if (Status s = check_checkpoint(manifest, *ckpt); !s.ok())
      return report_error(error(s.kind(), fmt::format("{}: {}", o.model, s.message())));
    fmt::print("checkpoint {}: {} tensors in {} files, {}, all as the config expects\n", o.model,
               ckpt->tensors().size(), ckpt->files().size(), human_bytes(static_cast<double>(ckpt->total_bytes())));
    if (Status s = check_tokenizer(o.model, c); !s.ok()) return report_error(s);
  } else {
    fmt::print("config {} (no checkpoint checked)\n", o.config);
  }
  fmt::print("model: dim {}, {} layers + {} draft, {} heads x {}, {} routed experts (top-{}) + {} shared, vocab {}\n",
             c.dim, c.n_layers, c.n_draft_layers(), c.n_heads, c.head_dim, c.n_routed_experts, c.n_activated_experts,
             c.n_shared_experts, c.vocab_size);
  const int64_t covered = c.covered_context();
  fmt::print("context: {} positions{} (covered by the positions: {})\n", c.max_seq_len,
             o.max_model_len > 0 ? " (--max-model-len)" : "",
             covered > 0 ? fmt::format("{}", covered) : std::string("not stated"));
  fmt::print("formats: weights {}, experts {}; window {}, index top-{}, hyper-connections x{}\n", c.dtype,
             c.expert_dtype.value_or(c.dtype), c.window_size, c.index_topk, c.hc_mult);
  print_schedule(c);
  print_counts(manifest);
  print_decode_step(manifest, c);
  print_cache(c);
  if (o.tensor_parallel > 0)
    if (Status s = print_tensor_parallel(manifest, c, o.tensor_parallel); !s.ok()) return report_error(s);
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, CommandResult& result) {
  auto opts = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Validate a checkpoint and print its schedule, sizes and cache needs");
  auto* model = cmd->add_option("--model", opts->model, "Model folder (config.json, tokenizer.json, safetensors)");
  auto* config = cmd->add_option("--config", opts->config, "A config.json alone (no weights checked)");
  model->excludes(config);
  add_max_model_len_flag(cmd, opts->max_model_len);
  cmd->add_option("--tensor-parallel", opts->tensor_parallel,
                  "Also print what each of N tensor-parallel ranks holds (mpirun -np N: CPU ranks today)")
      ->check(CLI::PositiveNumber);
  cmd->callback([opts, &result] {
    if (opts->model.empty() && opts->config.empty()) {
      result.exit_code = usage_error("inspect needs --model DIR or --config FILE (see dsinfer inspect --help)");
      return;
    }
    result.exit_code = run_inspect(*opts);
  });
}

}  // namespace dsinfer::cli
