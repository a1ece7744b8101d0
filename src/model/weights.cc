// Binding checkpoint tensors to the weight structs. Views point into the mmap; a tensor whose
// bytes are not aligned for its element type is copied once into an aligned buffer.
#include "model/weights.h"

#include <cstring>
#include <map>

#include "core/float_formats.h"

#include <fmt/format.h>

namespace dsinfer {
namespace {

class Binder {
 public:
  Binder(const Checkpoint& c, ModelWeights& w, const ModelConfig& config, Shard shard)
      : ckpt_(c), w_(w), shard_(shard) {
    if (shard.ranks > 1)
      for (TensorSpec& t : build_weight_manifest(config)) specs_.emplace(t.name, std::move(t));
  }

  const Shard& shard() const { return shard_; }

  // The rank's view of tensor `name` (shard_view); `whole`: the whole tensor whatever its split.
  Result<TensorView> view(const std::string& name, bool whole = false) {
    DSINFER_ASSIGN_OR_RETURN(TensorView v, whole_view(name));
    const auto spec = specs_.find(name);
    if (whole || spec == specs_.end()) return v;
    return shard_view(v, spec->second, shard_);
  }

  Result<TensorView> whole_view(const std::string& name) {
    const Checkpoint::Tensor* t = ckpt_.find(name);
    if (!t) return error(ErrorKind::kNotFound, fmt::format("tensor '{}' is missing", name));
    const SafetensorsEntry& e = *t->entry;
    if (e.shape.size() > kMaxDims) return error(ErrorKind::kUnsupported, fmt::format("'{}' has too many dims", name));
    const uint8_t* data = t->data().data();
    const int align = std::max(1, dtype_bits(e.dtype) / 8);
    if (reinterpret_cast<uintptr_t>(data) % align != 0) {
      DSINFER_ASSIGN_OR_RETURN(Buffer b, Buffer::allocate_host(e.data_bytes));
      std::memcpy(b.data(), data, e.data_bytes);
      data = b.as<const uint8_t>();
      own(std::move(b));
    }
    TensorView v;
    v.data = const_cast<uint8_t*>(data);  // weights are read-only; views carry no constness
    v.dtype = e.dtype;
    v.ndim = static_cast<int>(e.shape.size());
    int64_t st = 1;
    for (int d = v.ndim - 1; d >= 0; --d) v.shape[d] = e.shape[d], v.stride[d] = st, st *= e.shape[d];
    return v;
  }

  void own(Buffer b) { w_.owned.push_back(std::move(b)); }

  // An fp8 weight [out, in] with 32 x 32 block scales as exact bf16 values (bf16 holds every
  // e4m3 x 2^k the release stores).
  Result<LinearWeight> dequantised_to_bf16(const LinearWeight& w) {
    DSINFER_ASSIGN_OR_RETURN(Buffer buf, Buffer::allocate_host(static_cast<size_t>(w.out * w.in) * 2));
    auto* values = buf.as<uint16_t>();
    for (int64_t r = 0; r < w.out; ++r) {
      const uint8_t* codes = w.weight.as<const uint8_t>() + r * w.weight.stride[0];
      const uint8_t* scales = w.scale.as<const uint8_t>() + (r / 32) * w.scale.stride[0];
      for (int64_t k = 0; k < w.in; ++k)
        values[r * w.in + k] = f32_to_bf16(e4m3_to_f32(codes[k]) * e8m0_to_f32(scales[k / 32]));
    }
    LinearWeight out;
    out.format = LinearFormat::kBf16;
    out.out = w.out, out.in = w.in;
    out.weight = buf.view(DType::kBF16, {w.out, w.in});
    own(std::move(buf));
    return out;
  }

  Result<LinearWeight> linear(const std::string& prefix, LinearFormat format, bool whole = false) {
    LinearWeight lw;
    lw.format = format;
    DSINFER_ASSIGN_OR_RETURN(lw.weight, view(prefix + ".weight", whole));
    lw.out = lw.weight.shape[0];
    lw.in = lw.weight.shape[1] * (format == LinearFormat::kFp4 ? 2 : 1);
    if (format == LinearFormat::kFp8 || format == LinearFormat::kFp4 || format == LinearFormat::kFp8AsBf16) {
      DSINFER_ASSIGN_OR_RETURN(lw.scale, view(prefix + ".scale", whole));
    }
    return lw;
  }

 private:
  const Checkpoint& ckpt_;
  ModelWeights& w_;
  Shard shard_;
  std::map<std::string, TensorSpec> specs_;  // by name, when the tensors are split (ranks > 1)
};

LinearFormat storage_format(WeightFormat f) {
  switch (f) {
    case WeightFormat::kFp8:
      return LinearFormat::kFp8;
    case WeightFormat::kFp4:
      return LinearFormat::kFp4;
    case WeightFormat::kBf16:
      return LinearFormat::kBf16;
  }
  return LinearFormat::kBf16;
}

// `block`: the block's prefix, "layers.{l}." or "mtp.{i}." (a draft stage).
Status bind_attention(Binder& b, const ModelConfig& c, int l, const std::string& block, AttentionWeights& a) {
  const std::string p = block + "attn.";
  const LinearFormat f = storage_format(c.weight_format());
  DSINFER_ASSIGN_OR_RETURN(a.attn_sink, b.view(p + "attn_sink"));
  DSINFER_ASSIGN_OR_RETURN(a.wq_a, b.linear(p + "wq_a", f));
  DSINFER_ASSIGN_OR_RETURN(a.q_norm, b.view(p + "q_norm.weight"));
  DSINFER_ASSIGN_OR_RETURN(a.wq_b, b.linear(p + "wq_b", f));
  DSINFER_ASSIGN_OR_RETURN(a.wkv, b.linear(p + "wkv", f));
  DSINFER_ASSIGN_OR_RETURN(a.kv_norm, b.view(p + "kv_norm.weight"));
  DSINFER_ASSIGN_OR_RETURN(a.wo_b, b.linear(p + "wo_b", f));
  // wo_a is a block-diagonal (grouped) projection with bf16 math on the exactly dequantised
  // weights (spec §5.1): one LinearWeight view per group, rows [g * o_lora, (g + 1) * o_lora).
  // A rank holds groups [rank * G / ranks, (rank + 1) * G / ranks) (their rows of the whole matrix).
  const Shard& shard = b.shard();
  if (c.o_groups % shard.ranks != 0)
    return error(ErrorKind::kInvalidConfig, fmt::format("tensor parallelism over {} ranks: {}wo_a has {} groups, "
                                                        "not a multiple of {}",
                                                        shard.ranks, p, c.o_groups, shard.ranks));
  const int groups = c.o_groups / shard.ranks, first_group = shard.rank * groups;
  DSINFER_ASSIGN_OR_RETURN(LinearWeight wo_a,
                           b.linear(p + "wo_a", f == LinearFormat::kFp8 ? LinearFormat::kFp8AsBf16 : f, true));
  // The fp8 scales tile the whole matrix in 32 x 32 blocks (spec §12.3), not each group: when a
  // group starts inside a block its rows cannot be a view with scales of their own, so the matrix
  // is dequantised once, exactly, to bf16 (what the reference's convert.py does to all of wo_a).
  if (wo_a.format == LinearFormat::kFp8AsBf16 && c.o_lora_rank % 32 != 0) {
    DSINFER_ASSIGN_OR_RETURN(wo_a, b.dequantised_to_bf16(wo_a));
  }
  for (int g = first_group; g < first_group + groups; ++g) {
    LinearWeight gw = wo_a;
    gw.out = c.o_lora_rank;
    gw.weight.data =
        wo_a.weight.as<uint8_t>() + dtype_bytes(wo_a.weight.dtype, g * c.o_lora_rank * wo_a.weight.stride[0]);
    gw.weight.shape[0] = c.o_lora_rank;
    if (gw.scale.data) {
      gw.scale.data = wo_a.scale.as<uint8_t>() + (g * c.o_lora_rank / 32) * wo_a.scale.stride[0];
      gw.scale.shape[0] = (c.o_lora_rank + 31) / 32;
    }
    a.wo_a.push_back(gw);
  }
  if (c.is_kv_source(l)) {
    const LinearFormat cf = c.compress_ratio(l) > 1 ? LinearFormat::kBf16AsF32 : LinearFormat::kBf16;
    DSINFER_ASSIGN_OR_RETURN(a.comp_wkv, b.linear(p + "compressor.wkv", cf));
    if (c.compress_ratio(l) > 1) {
      DSINFER_ASSIGN_OR_RETURN(a.comp_wgate, b.linear(p + "compressor.wgate", cf));
    }
    DSINFER_ASSIGN_OR_RETURN(a.comp_norm, b.view(p + "compressor.norm.weight"));
    DSINFER_ASSIGN_OR_RETURN(a.idx_wk, b.linear(p + "indexer.wk", LinearFormat::kBf16));
    DSINFER_ASSIGN_OR_RETURN(a.idx_k_norm, b.view(p + "indexer.k_norm.weight"));
  }
  if (c.is_index_source(l)) {
    DSINFER_ASSIGN_OR_RETURN(a.idx_wq_b, b.linear(p + "indexer.wq_b", f));
    DSINFER_ASSIGN_OR_RETURN(a.idx_weights_proj, b.linear(p + "indexer.weights_proj", LinearFormat::kBf16));
  }
  return {};
}

Status bind_moe(Binder& b, const ModelConfig& c, int l, const std::string& block, MoeWeights& m) {
  const std::string p = block + "ffn.";
  DSINFER_ASSIGN_OR_RETURN(m.gate, b.view(p + "gate.weight"));
  DSINFER_ASSIGN_OR_RETURN(m.bias, b.view(p + "gate.bias"));
  if (c.vision_enabled()) {
    DSINFER_ASSIGN_OR_RETURN(m.bias_vl, b.view(p + "gate.bias_vl"));
  }
  const auto expert = [&](const std::string& ep, LinearFormat f, ExpertWeights& e) -> Status {
    DSINFER_ASSIGN_OR_RETURN(e.w1, b.linear(ep + "w1", f));
    DSINFER_ASSIGN_OR_RETURN(e.w2, b.linear(ep + "w2", f));
    DSINFER_ASSIGN_OR_RETURN(e.w3, b.linear(ep + "w3", f));
    return {};
  };
  // The rank's whole experts (expert parallelism): ids [rank * E / ranks, (rank + 1) * E / ranks).
  const Shard& shard = b.shard();
  const int experts = c.routed_experts(l);
  if (experts % shard.ranks != 0)
    return error(ErrorKind::kInvalidConfig, fmt::format("tensor parallelism over {} ranks: layer {} has {} routed "
                                                        "experts, not a multiple of {}",
                                                        shard.ranks, l, experts, shard.ranks));
  m.experts.resize(experts / shard.ranks);
  m.first_expert = shard.rank * (experts / shard.ranks);
  for (size_t i = 0; i < m.experts.size(); ++i)
    DSINFER_RETURN_IF_ERROR(expert(fmt::format("{}experts.{}.", p, m.first_expert + static_cast<int>(i)),
                                   storage_format(c.expert_format()), m.experts[i]));
  return expert(p + "shared_experts.", storage_format(c.weight_format()), m.shared);
}

Status bind_engram(Binder& b, const ModelConfig& c, int l, EngramWeights& e) {
  const std::string p = fmt::format("layers.{}.engram.", l);
  DSINFER_ASSIGN_OR_RETURN(e.table, b.view(p + "embed.weight"));
  DSINFER_ASSIGN_OR_RETURN(e.table_scale, b.view(p + "embed.scale"));
  DSINFER_ASSIGN_OR_RETURN(e.wkv, b.linear(p + "wkv", storage_format(c.weight_format())));
  DSINFER_ASSIGN_OR_RETURN(TensorView q, b.view(p + "q_weight"));
  DSINFER_ASSIGN_OR_RETURN(TensorView k, b.view(p + "k_weight"));
  const auto value = [](const TensorView& t, int64_t i) {
    return t.dtype == DType::kF32 ? t.as<const float>()[i] : bf16_to_f32(t.as<const uint16_t>()[i]);
  };
  DSINFER_ASSIGN_OR_RETURN(Buffer wgt, Buffer::allocate_host(q.numel() * sizeof(float)));
  for (int64_t i = 0; i < q.numel(); ++i) wgt.as<float>()[i] = value(q, i) * value(k, i);
  e.wgt = wgt.view(DType::kF32, {c.hc_mult, c.dim});
  b.own(std::move(wgt));
  return {};
}

Status bind_dspark(Binder& b, const ModelConfig& c, DSparkWeights& d) {
  const std::string first = "mtp.0.", last = fmt::format("mtp.{}.", c.n_draft_layers() - 1);
  DSINFER_ASSIGN_OR_RETURN(d.main_proj, b.linear(first + "main_proj", storage_format(c.weight_format())));
  DSINFER_ASSIGN_OR_RETURN(d.main_norm, b.view(first + "main_norm.weight"));
  DSINFER_ASSIGN_OR_RETURN(d.norm, b.view(last + "norm.weight"));
  // The Markov chain runs whole on every rank (its argmax needs every column), so its tables are
  // not split; the reference holds them in fp32 from the release's bf16.
  DSINFER_ASSIGN_OR_RETURN(d.markov_embed, b.view(last + "markov_head.embed.weight", true));
  DSINFER_ASSIGN_OR_RETURN(d.markov_head, b.view(last + "markov_head.head.weight", true));
  DSINFER_ASSIGN_OR_RETURN(d.confidence, b.linear(last + "confidence_head.proj", LinearFormat::kBf16AsF32));
  for (auto [name, dtype] : {std::pair{"markov_head.head", d.markov_head.dtype},
                             std::pair{"confidence_head.proj", d.confidence.weight.dtype}})
    if (dtype != DType::kBF16)
      return error(ErrorKind::kUnsupported,
                   fmt::format("{}{}.weight is {}: the drafter reads it as bf16 (the release's dtype)", last, name,
                               dtype_name(dtype)));
  return {};
}

Status check_shard(Shard shard) {
  if (shard.ranks < 1 || shard.rank < 0 || shard.rank >= shard.ranks)
    return error(ErrorKind::kInvalidArgument, fmt::format("rank {} of {}", shard.rank, shard.ranks));
  return {};
}

}  // namespace

Result<TensorView> shard_view(TensorView v, const TensorSpec& spec, Shard shard) {
  DSINFER_RETURN_IF_ERROR(check_shard(shard));
  // Whole routed experts are a rank's own to bind (bind_moe); the rest is split by rows or columns.
  if (shard.ranks == 1 || !split_across_ranks(spec) || spec.split == ShardSplit::kExpert) return v;
  const int dim = spec.split == ShardSplit::kDim0 ? 0 : 1;
  if (dim >= v.ndim) return error(ErrorKind::kInvalidConfig, fmt::format("'{}' has no dimension {}", spec.name, dim));
  if (v.dtype == DType::kF4E2M1)
    return error(ErrorKind::kUnsupported, fmt::format("'{}': packed fp4 split by rows or columns", spec.name));
  const char* what = dim == 0 ? "rows" : "columns";
  const int64_t n = v.shape[dim], part = n / shard.ranks;
  if (n % shard.ranks != 0)
    return error(ErrorKind::kInvalidConfig, fmt::format("tensor parallelism over {} ranks: {} has {} {}, not a "
                                                        "multiple of {}",
                                                        shard.ranks, spec.name, n, what, shard.ranks));
  // An fp8 weight's 32 x 32 block scales are split alike (their own spec): a rank's first row or
  // column must start a block.
  if (v.dtype == DType::kF8E4M3 && !spec.is_scale && part % 32 != 0)
    return error(ErrorKind::kInvalidConfig,
                 fmt::format("tensor parallelism over {} ranks: {} would give each rank {} {}, which split its "
                             "32 x 32 scale blocks",
                             shard.ranks, spec.name, part, what));
  v.data = static_cast<uint8_t*>(v.data) + dtype_bytes(v.dtype, shard.rank * part * v.stride[dim]);
  v.shape[dim] = part;
  return v;
}

Result<ModelWeights> load_model_weights(const Checkpoint& ckpt, const ModelConfig& c, Shard shard) {
  DSINFER_RETURN_IF_ERROR(check_shard(shard));
  ModelWeights w;
  Binder b(ckpt, w, c, shard);
  DSINFER_ASSIGN_OR_RETURN(w.embed, b.view("embed.weight"));
  DSINFER_ASSIGN_OR_RETURN(w.norm, b.view("norm.weight"));
  DSINFER_ASSIGN_OR_RETURN(w.head, b.linear("head", LinearFormat::kBf16AsF32));
  w.layers.resize(c.n_layers + c.n_draft_layers());
  for (int l = 0; l < static_cast<int>(w.layers.size()); ++l) {
    BlockWeights& bw = w.layers[l];
    const std::string p = l < c.n_layers ? fmt::format("layers.{}.", l) : fmt::format("mtp.{}.", l - c.n_layers);
    DSINFER_ASSIGN_OR_RETURN(bw.attn_norm, b.view(p + "attn_norm.weight"));
    DSINFER_ASSIGN_OR_RETURN(bw.ffn_norm, b.view(p + "ffn_norm.weight"));
    DSINFER_ASSIGN_OR_RETURN(bw.hc_attn_fn, b.view(p + "hc_attn_fn"));
    DSINFER_ASSIGN_OR_RETURN(bw.hc_attn_base, b.view(p + "hc_attn_base"));
    DSINFER_ASSIGN_OR_RETURN(bw.hc_attn_scale, b.view(p + "hc_attn_scale"));
    DSINFER_ASSIGN_OR_RETURN(bw.hc_ffn_fn, b.view(p + "hc_ffn_fn"));
    DSINFER_ASSIGN_OR_RETURN(bw.hc_ffn_base, b.view(p + "hc_ffn_base"));
    DSINFER_ASSIGN_OR_RETURN(bw.hc_ffn_scale, b.view(p + "hc_ffn_scale"));
    DSINFER_RETURN_IF_ERROR(bind_attention(b, c, l, p, bw.attn));
    DSINFER_RETURN_IF_ERROR(bind_moe(b, c, l, p, bw.ffn));
    if (l < c.n_layers && c.engram_index(l) >= 0) {
      bw.engram.emplace();
      DSINFER_RETURN_IF_ERROR(bind_engram(b, c, l, *bw.engram));
    }
  }
  if (c.dspark_enabled()) DSINFER_RETURN_IF_ERROR(bind_dspark(b, c, w.dspark.emplace()));
  return w;
}

namespace {

// Every view the forward pass hands to the backend (the Engram tables are read on the host).
template <typename F>
void for_each_device_view(ModelWeights& w, F&& f) {
  const auto linear = [&](LinearWeight& lw) {
    f(lw.weight);
    f(lw.scale);
  };
  const auto expert = [&](ExpertWeights& e) { linear(e.w1), linear(e.w2), linear(e.w3); };
  f(w.embed), f(w.norm), linear(w.head);
  for (BlockWeights& b : w.layers) {
    for (TensorView* v : {&b.attn_norm, &b.ffn_norm, &b.hc_attn_fn, &b.hc_attn_base, &b.hc_attn_scale, &b.hc_ffn_fn,
                          &b.hc_ffn_base, &b.hc_ffn_scale})
      f(*v);
    AttentionWeights& a = b.attn;
    for (TensorView* v : {&a.attn_sink, &a.q_norm, &a.kv_norm, &a.comp_norm, &a.idx_k_norm}) f(*v);
    for (LinearWeight* lw :
         {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b, &a.comp_wkv, &a.comp_wgate, &a.idx_wq_b, &a.idx_weights_proj, &a.idx_wk})
      linear(*lw);
    for (LinearWeight& g : a.wo_a) linear(g);
    MoeWeights& m = b.ffn;
    f(m.gate), f(m.bias), f(m.bias_vl);
    for (ExpertWeights& e : m.experts) expert(e);
    expert(m.shared);
    if (b.engram) linear(b.engram->wkv), f(b.engram->wgt);
  }
  if (DSparkWeights* d = w.dspark ? &*w.dspark : nullptr) {
    linear(d->main_proj), linear(d->confidence);
    f(d->main_norm), f(d->norm), f(d->markov_embed), f(d->markov_head);
  }
}

// Bytes from a view's first element to one past its last.
uint64_t extent_bytes(const TensorView& v) {
  int64_t last = 0;
  for (int d = 0; d < v.ndim; ++d) last += (v.shape[d] - 1) * v.stride[d];
  return static_cast<uint64_t>(dtype_bytes(v.dtype, last + 1));
}

}  // namespace

void for_each_backend_view(const ModelWeights& w, const std::function<void(const TensorView&)>& f) {
  for_each_device_view(const_cast<ModelWeights&>(w), [&](TensorView& v) { f(v); });  // f cannot change the views
}

void place_weights(ModelWeights& w, Backend& backend, const std::function<void(uint64_t, uint64_t)>& progress) {
  if (backend.device() == Device::kCpu) return;
  uint64_t total = 0, done = 0;
  for_each_device_view(w, [&](TensorView& v) {
    if (v.data) total += extent_bytes(v);
  });
  for_each_device_view(w, [&](TensorView& v) {
    if (!v.data) return;
    const uint64_t bytes = extent_bytes(v);
    DeviceArray<uint8_t> copy(backend, std::span<const uint8_t>(v.as<const uint8_t>(), bytes));
    v.data = copy.data(), v.device = backend.device();
    w.on_device.push_back(std::move(copy));
    done += bytes;
    if (progress) progress(done, total);
  });
}

}  // namespace dsinfer
