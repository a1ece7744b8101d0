// Model weights as views into the mmap'ed checkpoint (no dequantised copy of the model), one
// struct per module of the reference. Shapes are the release's (spec §12.2).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/weight_manifest.h"
#include "ops/device_array.h"
#include "ops/linear_weight.h"

namespace dsinfer {

struct AttentionWeights {
  TensorView attn_sink;            // [h] f32
  LinearWeight wq_a;               // [q_lora, dim] fp8
  TensorView q_norm;               // [q_lora] bf16
  LinearWeight wq_b;               // [h * hd, q_lora] fp8
  LinearWeight wkv;                // [hd, dim] fp8
  TensorView kv_norm;              // [hd] bf16
  std::vector<LinearWeight> wo_a;  // per group: [o_lora, h * hd / groups], fp8 storage, bf16 math
  LinearWeight wo_b;               // [dim, groups * o_lora] fp8
  // Compressor (kv sources only).
  LinearWeight comp_wkv;    // [hd, dim] bf16 (f32 math for ratio 2)
  LinearWeight comp_wgate;  // [hd, dim] bf16, ratio 2 only
  TensorView comp_norm;     // [hd] bf16
  // Indexer (index sources; wk / k_norm on kv sources only).
  LinearWeight idx_wq_b;          // [h_idx * d_idx, q_lora] fp8
  LinearWeight idx_weights_proj;  // [h_idx, dim] bf16
  LinearWeight idx_wk;            // [d_idx, hd] bf16
  TensorView idx_k_norm;          // [d_idx] bf16
};

struct MoeWeights {
  TensorView gate;                     // [E, dim] bf16
  TensorView bias;                     // [E] f32
  TensorView bias_vl;                  // [E] f32, vision configs only
  std::vector<ExpertWeights> experts;  // the rank's: routed ids [first_expert, first_expert + size)
  int first_expert = 0;
  ExpertWeights shared;
};

struct EngramWeights {
  TensorView table;        // [rows, d_e] e4m3
  TensorView table_scale;  // [rows, d_e / 32] e8m0
  LinearWeight wkv;        // [(hc + 1) * dim, cols * d_e] fp8
  TensorView wgt;          // [hc, dim] f32: q_weight * k_weight (computed at load)
};

struct BlockWeights {
  TensorView attn_norm, ffn_norm;                      // [dim] bf16
  TensorView hc_attn_fn, hc_attn_base, hc_attn_scale;  // [mix, hc * dim], [mix], [3] f32
  TensorView hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  AttentionWeights attn;
  MoeWeights ffn;
  std::optional<EngramWeights> engram;
};

/// The DSpark drafter's own modules (spec §10.1); its stages are blocks of ModelWeights::layers.
struct DSparkWeights {
  LinearWeight main_proj;   // [dim, taps * dim] fp8 (stage 0)
  TensorView main_norm;     // [dim] bf16 (stage 0)
  TensorView norm;          // [dim] bf16 (last stage)
  TensorView markov_embed;  // [V, r] bf16, whole on every rank
  TensorView markov_head;   // [V, r] bf16 (f32 math), whole on every rank
  LinearWeight confidence;  // [1, dim + r] bf16 (f32 math)
};

struct ModelWeights {
  TensorView embed;                             // [V, dim] bf16
  TensorView norm;                              // [dim] bf16
  LinearWeight head;                            // [V, dim] bf16 (f32 math)
  std::vector<BlockWeights> layers;             // the backbone's layers, then the draft stages (layer n_layers + i)
  std::optional<DSparkWeights> dspark;          // configs with DSpark
  std::vector<Buffer> owned;                    // copies of tensors the file stores misaligned, derived tensors
  std::vector<DeviceArray<uint8_t>> on_device;  // the uploaded copies (a non-CPU backend)
};

/// One rank's part of a tensor-parallel job (spec §12.4): `rank` of `ranks`.
struct Shard {
  int rank = 0, ranks = 1;
};

/// Rank `shard`'s slice of a checkpoint tensor, as a view into the checkpoint's bytes: a kDim0
/// tensor its rows [rank * R / ranks, (rank + 1) * R / ranks), a kDim1 tensor its columns (a
/// strided view), any other tensor whole (replicated ones, the Engram tables, whole routed
/// experts: a rank binds its own). kInvalidConfig when the split dimension does not divide among
/// the ranks, or when a slice would not start on a whole 32-row (or column) scale block of a
/// block-scaled weight; kUnsupported for a packed fp4 tensor split by rows or columns.
Result<TensorView> shard_view(TensorView whole, const TensorSpec& spec, Shard shard);

/// Views every backbone tensor of `ckpt` (which must outlive the result and pass the manifest)
/// that rank `shard` holds: its slices of the split tensors (shard_view), its whole routed experts
/// (experts [r * E / ranks, (r + 1) * E / ranks)), its wo_a groups, the rest whole.
Result<ModelWeights> load_model_weights(const Checkpoint& ckpt, const ModelConfig& config, Shard shard = {});

/// Every weight view the forward pass hands to the backend (in its memory once placed).
void for_each_backend_view(const ModelWeights& w, const std::function<void(const TensorView&)>& f);

/// Copies every tensor but the Engram tables (looked up on the host) into `backend`'s memory and
/// points the views there; nothing to do for a host backend. `progress` sees bytes copied.
void place_weights(ModelWeights& w, Backend& backend,
                   const std::function<void(uint64_t done, uint64_t total)>& progress = {});

}  // namespace dsinfer
