// Manifest construction, one helper per module of the reference; names follow spec §12.2.
#include "model/weight_manifest.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dsinfer {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

class ManifestBuilder {
 public:
  explicit ManifestBuilder(const ModelConfig& c) : c_(c) {}

  void tensor(std::string name, std::vector<DType> dtypes, std::vector<int64_t> shape, Part part,
              ShardSplit split = ShardSplit::kReplicated) {
    TensorSpec t;
    t.name = std::move(name);
    t.dtypes = std::move(dtypes);
    t.shape = std::move(shape);
    t.component = component_, t.part = part, t.split = split, t.layer = layer_;
    out_.push_back(std::move(t));
  }

  /// A Linear weight [out, in] in `format`, with its block scales when quantised.
  void linear(const std::string& prefix, int64_t out, int64_t in, WeightFormat format, Part part,
              ShardSplit split = ShardSplit::kReplicated) {
    switch (format) {
      case WeightFormat::kBf16:
        tensor(prefix + ".weight", {DType::kBF16}, {out, in}, part, split);
        return;
      case WeightFormat::kFp8:
        tensor(prefix + ".weight", {DType::kF8E4M3}, {out, in}, part, split);
        tensor(prefix + ".scale", {DType::kF8E8M0}, {ceil_div(out, 32), ceil_div(in, 32)}, part, split);
        out_.back().is_scale = true;
        return;
      case WeightFormat::kFp4:  // packed e2m1 along K, one e8m0 scale per 32 K per row
        tensor(prefix + ".weight", {DType::kI8, DType::kU8}, {out, in / 2}, part, split);
        tensor(prefix + ".scale", {DType::kF8E8M0}, {out, ceil_div(in, 32)}, part, split);
        out_.back().is_scale = true;
        return;
    }
  }

  void block(const std::string& p, int layer) {
    const bool draft = layer >= c_.n_layers;
    layer_ = layer;
    component_ = draft ? Component::kDSpark : Component::kBackbone;
    const int64_t dim = c_.dim, mix = (2 + c_.hc_mult) * c_.hc_mult;
    for (const char* n : {"attn_norm", "ffn_norm"}) tensor(p + n + ".weight", {DType::kBF16}, {dim}, Part::kNorm);
    for (const char* s : {"attn", "ffn"}) {
      tensor(fmt::format("{}hc_{}_fn", p, s), {DType::kF32}, {mix, c_.hc_mult * dim}, Part::kHyperConnection);
      tensor(fmt::format("{}hc_{}_base", p, s), {DType::kF32}, {mix}, Part::kHyperConnection);
      tensor(fmt::format("{}hc_{}_scale", p, s), {DType::kF32}, {3}, Part::kHyperConnection);
    }
    attention(p + "attn.", layer);
    moe(p + "ffn.", layer);
    if (!draft && c_.engram_index(layer) >= 0) engram(p + "engram.", c_.engram_index(layer));
  }

  void attention(const std::string& p, int layer) {
    const WeightFormat f = c_.weight_format();
    const int64_t dim = c_.dim, hd = c_.head_dim, heads = c_.n_heads;
    tensor(p + "attn_sink", {DType::kF32}, {heads}, Part::kAttention, ShardSplit::kDim0);
    linear(p + "wq_a", c_.q_lora_rank, dim, f, Part::kAttention);
    tensor(p + "q_norm.weight", {DType::kBF16}, {c_.q_lora_rank}, Part::kNorm);
    linear(p + "wq_b", heads * hd, c_.q_lora_rank, f, Part::kAttention, ShardSplit::kDim0);
    linear(p + "wkv", hd, dim, f, Part::kAttention);
    tensor(p + "kv_norm.weight", {DType::kBF16}, {hd}, Part::kNorm);
    linear(p + "wo_a", int64_t{c_.o_groups} * c_.o_lora_rank, heads * hd / c_.o_groups, f, Part::kAttention,
           ShardSplit::kDim0);
    linear(p + "wo_b", dim, int64_t{c_.o_groups} * c_.o_lora_rank, f, Part::kAttention, ShardSplit::kDim1);
    if (layer >= c_.n_layers) return;
    if (c_.is_kv_source(layer)) {
      tensor(p + "compressor.wkv.weight", {DType::kBF16}, {hd, dim}, Part::kCompressor);
      if (c_.compress_ratio(layer) > 1)
        tensor(p + "compressor.wgate.weight", {DType::kBF16}, {hd, dim}, Part::kCompressor);
      tensor(p + "compressor.norm.weight", {DType::kBF16}, {hd}, Part::kCompressor);
      tensor(p + "indexer.wk.weight", {DType::kBF16}, {c_.index_head_dim, hd}, Part::kIndexer);
      tensor(p + "indexer.k_norm.weight", {DType::kBF16}, {c_.index_head_dim}, Part::kIndexer);
    }
    if (c_.is_index_source(layer)) {
      linear(p + "indexer.wq_b", int64_t{c_.index_n_heads} * c_.index_head_dim, c_.q_lora_rank, f, Part::kIndexer,
             ShardSplit::kDim0);
      tensor(p + "indexer.weights_proj.weight", {DType::kBF16}, {c_.index_n_heads, dim}, Part::kIndexer,
             ShardSplit::kDim0);
    }
  }

  void moe(const std::string& p, int layer) {
    const int64_t dim = c_.dim, inter = c_.moe_inter_dim, experts = c_.routed_experts(layer);
    tensor(p + "gate.weight", {DType::kBF16, DType::kF32}, {experts, dim}, Part::kRouter);
    tensor(p + "gate.bias", {DType::kF32}, {experts}, Part::kRouter);
    if (c_.vision_enabled()) tensor(p + "gate.bias_vl", {DType::kF32}, {experts}, Part::kRouter);
    for (int64_t e = 0; e < experts; ++e) {
      const std::string ep = fmt::format("{}experts.{}.", p, e);
      linear(ep + "w1", inter, dim, c_.expert_format(), Part::kRoutedExperts, ShardSplit::kExpert);
      linear(ep + "w2", dim, inter, c_.expert_format(), Part::kRoutedExperts, ShardSplit::kExpert);
      linear(ep + "w3", inter, dim, c_.expert_format(), Part::kRoutedExperts, ShardSplit::kExpert);
    }
    linear(p + "shared_experts.w1", inter, dim, c_.weight_format(), Part::kSharedExpert);
    linear(p + "shared_experts.w2", dim, inter, c_.weight_format(), Part::kSharedExpert);
    linear(p + "shared_experts.w3", inter, dim, c_.weight_format(), Part::kSharedExpert);
  }

  void engram(const std::string& p, int engram_layer) {
    const int64_t rows = c_.engram_num_embeddings[engram_layer], hd = c_.engram_head_dim;
    component_ = Component::kEngramTable;
    tensor(p + "embed.weight", {DType::kF8E4M3}, {rows, hd}, Part::kEngramTable, ShardSplit::kDim0);
    tensor(p + "embed.scale", {DType::kF8E8M0}, {rows, ceil_div(hd, 32)}, Part::kEngramTable, ShardSplit::kDim0);
    out_.back().is_scale = true;
    component_ = Component::kBackbone;
    linear(p + "wkv", int64_t{c_.hc_mult + 1} * c_.dim, c_.engram_hash_columns() * hd, c_.weight_format(),
           Part::kEngram);
    for (const char* n : {"q_weight", "k_weight"})
      tensor(p + n, {DType::kBF16, DType::kF32}, {c_.hc_mult, c_.dim}, Part::kEngram);
  }

  void dspark_heads(int stage, int layer) {
    const std::string p = fmt::format("mtp.{}.", stage);
    layer_ = layer;
    component_ = Component::kDSpark;
    const int64_t dim = c_.dim;
    if (stage == 0) {
      linear(p + "main_proj", dim, dim * static_cast<int64_t>(c_.dspark_target_layer_ids.size()), c_.weight_format(),
             Part::kDSparkHeads);
      tensor(p + "main_norm.weight", {DType::kBF16}, {dim}, Part::kNorm);
    }
    if (stage == c_.n_mtp_layers - 1) {
      tensor(p + "norm.weight", {DType::kBF16}, {dim}, Part::kNorm);
      tensor(p + "markov_head.embed.weight", {DType::kBF16}, {c_.vocab_size, c_.dspark_markov_rank}, Part::kDSparkHeads,
             ShardSplit::kDim0);
      tensor(p + "markov_head.head.weight", {DType::kBF16, DType::kF32}, {c_.vocab_size, c_.dspark_markov_rank},
             Part::kDSparkHeads, ShardSplit::kDim0);
      tensor(p + "confidence_head.proj.weight", {DType::kBF16, DType::kF32}, {1, dim + c_.dspark_markov_rank},
             Part::kDSparkHeads);
    }
  }

  void vision() {
    layer_ = -1;
    component_ = Component::kVision;
    const std::vector<DType> any = {DType::kBF16, DType::kF32};  // release dtypes not confirmed (spec §17.2)
    const int64_t vd = c_.vision_dim, inter = c_.vision_inter_dim,
                  patch = 3LL * c_.vision_patch_size * c_.vision_patch_size;
    const auto w = [&](const std::string& n, std::vector<int64_t> shape) {
      tensor(n, any, std::move(shape), Part::kVision);
    };
    w("vision.patch_embed.proj.weight", {vd, patch});
    w("vision.patch_embed.proj.bias", {vd});
    for (int i = 0; i < c_.vision_n_layers; ++i) {
      const std::string p = fmt::format("vision.blocks.{}.", i);
      w(p + "norm1.weight", {vd});
      w(p + "attn.wqkv.weight", {3 * vd, vd});
      w(p + "attn.wqkv.bias", {3 * vd});
      w(p + "attn.wo.weight", {vd, vd});
      w(p + "attn.wo.bias", {vd});
      w(p + "norm2.weight", {vd});
      w(p + "mlp.w1.weight", {2 * inter, vd});
      w(p + "mlp.w2.weight", {vd, inter});
    }
    w("vision.norm.weight", {vd});
    const int64_t unshuffled = vd * c_.vision_downsample_ratio * c_.vision_downsample_ratio;
    w("aligner.w1.weight", {c_.dim, unshuffled});
    w("aligner.w1.bias", {c_.dim});
    w("aligner.w2.weight", {c_.dim, c_.dim});
    w("aligner.w2.bias", {c_.dim});
    for (const char* n : {"image_start", "image_end", "image_newline"}) w(n, {c_.dim});
  }

  std::vector<TensorSpec> build() {
    component_ = Component::kBackbone;
    tensor("embed.weight", {DType::kBF16}, {c_.vocab_size, c_.dim}, Part::kEmbedding, ShardSplit::kDim0);
    tensor("norm.weight", {DType::kBF16}, {c_.dim}, Part::kNorm);
    tensor("head.weight", {DType::kBF16}, {c_.vocab_size, c_.dim}, Part::kHead, ShardSplit::kDim0);
    for (int l = 0; l < c_.n_layers; ++l) block(fmt::format("layers.{}.", l), l);
    for (int s = 0; s < c_.n_draft_layers(); ++s) {
      block(fmt::format("mtp.{}.", s), c_.n_layers + s);
      dspark_heads(s, c_.n_layers + s);
    }
    if (c_.vision_enabled()) vision();
    return std::move(out_);
  }

 private:
  const ModelConfig& c_;
  std::vector<TensorSpec> out_;
  Component component_ = Component::kBackbone;
  int layer_ = -1;
};

std::string describe(DType dtype, const std::vector<int64_t>& shape) {
  return fmt::format("{} [{}]", dtype_name(dtype), fmt::join(shape, ", "));
}

void append_section(std::string& msg, const char* title, const std::vector<std::string>& lines) {
  if (lines.empty()) return;
  msg += fmt::format("\n{} ({}):", title, lines.size());
  for (const std::string& l : lines) msg += "\n  " + l;
}

}  // namespace

int64_t TensorSpec::params() const {
  if (is_scale) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return (dtypes.front() == DType::kI8 || dtypes.front() == DType::kU8) && part == Part::kRoutedExperts ? 2 * n : n;
}

int64_t TensorSpec::bytes() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return dtype_bytes(dtypes.front(), n);
}

std::vector<TensorSpec> build_weight_manifest(const ModelConfig& config) {
  return ManifestBuilder(config).build();
}

Status check_checkpoint(const std::vector<TensorSpec>& manifest, const Checkpoint& checkpoint) {
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> expected;
  for (const TensorSpec& t : manifest) {
    expected.insert(t.name);
    const Checkpoint::Tensor* got = checkpoint.find(t.name);
    if (!got) {
      missing.push_back(fmt::format("{}  (want {})", t.name, describe(t.dtypes.front(), t.shape)));
      continue;
    }
    const bool dtype_ok = std::find(t.dtypes.begin(), t.dtypes.end(), got->entry->dtype) != t.dtypes.end();
    if (!dtype_ok || got->entry->shape != t.shape)
      mismatched.push_back(fmt::format("{}  is {}, want {}", t.name, describe(got->entry->dtype, got->entry->shape),
                                       describe(t.dtypes.front(), t.shape)));
  }
  for (const Checkpoint::Tensor& t : checkpoint.tensors())
    if (!expected.count(t.entry->name))
      unexpected.push_back(
          fmt::format("{}  ({}, in {})", t.entry->name, describe(t.entry->dtype, t.entry->shape), t.file->label()));
  if (missing.empty() && unexpected.empty() && mismatched.empty()) return {};
  std::string msg = fmt::format(
      "checkpoint does not match the config: {} missing, {} unexpected, {} mis-shaped or "
      "wrongly typed tensors",
      missing.size(), unexpected.size(), mismatched.size());
  append_section(msg, "missing", missing);
  append_section(msg, "unexpected", unexpected);
  append_section(msg, "mis-shaped or wrongly typed", mismatched);
  return error(ErrorKind::kInvalidConfig, msg);
}

double DecodeStepBytes::total() const {
  double t = 0;
  for (const auto& [part, bytes] : by_part) t += bytes;
  return t;
}

DecodeStepBytes decode_step_bytes(const std::vector<TensorSpec>& manifest, const ModelConfig& config) {
  DecodeStepBytes d;
  for (const TensorSpec& t : manifest) {
    const double bytes = static_cast<double>(t.bytes());
    if (t.component == Component::kEngramTable) {  // one row per hash column of the layer
      d.by_part[t.part] += bytes / static_cast<double>(t.shape.front()) * config.engram_hash_columns();
    } else if (t.component == Component::kBackbone) {
      if (t.part == Part::kEmbedding)
        d.by_part[t.part] += bytes / static_cast<double>(t.shape.front());
      else if (t.part == Part::kRoutedExperts)
        d.by_part[t.part] += bytes * config.n_activated_experts / config.n_routed_experts;
      else
        d.by_part[t.part] += bytes;
    }
  }
  return d;
}

bool split_across_ranks(const TensorSpec& t) {
  return t.split != ShardSplit::kReplicated && t.component != Component::kEngramTable;
}

Status check_tensor_parallel(const std::vector<TensorSpec>& manifest, const ModelConfig& config, int ranks) {
  if (ranks < 1) return error(ErrorKind::kInvalidArgument, fmt::format("tensor parallelism over {} ranks", ranks));
  for (const auto& [experts, what] :
       {std::pair{config.n_routed_experts, "routed experts"},
        {config.dspark_enabled() ? config.dspark_n_routed_experts : 0, "DSpark routed experts"}})
    if (experts % ranks != 0)
      return error(ErrorKind::kInvalidConfig, fmt::format("tensor parallelism over {} ranks: {} {} do not divide "
                                                          "among them",
                                                          ranks, experts, what));
  for (const TensorSpec& t : manifest) {
    if (!split_across_ranks(t) || t.split == ShardSplit::kExpert) continue;  // experts: counted above
    const size_t dim = t.split == ShardSplit::kDim0 ? 0 : 1;
    if (t.shape[dim] % ranks != 0)
      return error(ErrorKind::kInvalidConfig,
                   fmt::format("tensor parallelism over {} ranks: {} has {} {}, not a multiple of {}", ranks, t.name,
                               t.shape[dim], dim == 0 ? "rows" : "columns", ranks));
  }
  return {};
}

std::map<Component, int64_t> rank_bytes(const std::vector<TensorSpec>& manifest, int ranks) {
  std::map<Component, int64_t> bytes;
  for (const TensorSpec& t : manifest) {
    bytes[t.component] += split_across_ranks(t) ? t.bytes() / ranks : t.bytes();
  }
  return bytes;
}

const char* component_name(Component c) {
  switch (c) {
    case Component::kBackbone:
      return "backbone";
    case Component::kEngramTable:
      return "engram tables";
    case Component::kDSpark:
      return "dspark";
    case Component::kVision:
      return "vision";
  }
  return "?";
}

const char* part_name(Part p) {
  switch (p) {
    case Part::kEmbedding:
      return "embedding";
    case Part::kHead:
      return "head";
    case Part::kNorm:
      return "norms";
    case Part::kHyperConnection:
      return "hyper-connections";
    case Part::kAttention:
      return "attention";
    case Part::kCompressor:
      return "compressor";
    case Part::kIndexer:
      return "indexer";
    case Part::kRouter:
      return "router";
    case Part::kRoutedExperts:
      return "routed experts";
    case Part::kSharedExpert:
      return "shared expert";
    case Part::kEngram:
      return "engram projection";
    case Part::kEngramTable:
      return "engram tables";
    case Part::kDSparkHeads:
      return "dspark heads";
    case Part::kVision:
      return "vision";
  }
  return "?";
}

}  // namespace dsinfer
