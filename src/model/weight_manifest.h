// The weight manifest: every tensor a V4.1 checkpoint must hold for a given ModelConfig, with its
// release dtype, shape (spec §12.2), component and tensor-parallel split. One flat table serves
// validation, `dsinfer inspect`, make-tiny and loading.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/model_config.h"

namespace dsinfer {

/// The four parts of the release that §1.5 counts separately.
enum class Component : uint8_t { kBackbone, kEngramTable, kDSpark, kVision };

/// A finer breakdown for inspection.
enum class Part : uint8_t {
  kEmbedding,
  kHead,
  kNorm,
  kHyperConnection,
  kAttention,
  kCompressor,
  kIndexer,
  kRouter,
  kRoutedExperts,
  kSharedExpert,
  kEngram,  // Engram projection and gate weights (the tables are Component::kEngramTable)
  kEngramTable,
  kDSparkHeads,  // main_proj / markov / confidence heads
  kVision,
};

/// How a tensor is split across tensor-parallel ranks (convert.py's layout, spec §12.4).
enum class ShardSplit : uint8_t {
  kReplicated,
  kDim0,    // rows (vocab, q heads, wo_a groups, sinks, indexer heads, Engram table rows)
  kDim1,    // columns (wo_b)
  kExpert,  // whole routed experts: rank i holds experts [i*E/ws, (i+1)*E/ws)
};

struct TensorSpec {
  std::string name;
  std::vector<DType> dtypes;  // accepted checkpoint dtypes; the first is the release's
  std::vector<int64_t> shape;
  Component component = Component::kBackbone;
  Part part = Part::kAttention;
  ShardSplit split = ShardSplit::kReplicated;
  bool is_scale = false;  // block scales are bytes, not parameters
  int layer = -1;         // backbone/draft layer id, -1 for globals and vision

  /// Logical parameters (packed fp4 bytes hold two; scales hold none).
  int64_t params() const;
  /// Bytes in the release dtype.
  int64_t bytes() const;
};

std::vector<TensorSpec> build_weight_manifest(const ModelConfig& config);

/// Checks a checkpoint against the manifest: every missing, unexpected, mis-shaped or wrongly
/// typed tensor is listed in one kInvalidConfig error.
Status check_checkpoint(const std::vector<TensorSpec>& manifest, const Checkpoint& checkpoint);

/// Weight bytes one decode step of one sequence reads (the floor of memory-bound decode): every
/// backbone tensor but the embedding (one row) and the routed experts (the activated share), the
/// Engram table rows the hashes select, by part. The draft (DSpark) and vision weights are not read.
struct DecodeStepBytes {
  std::map<Part, double> by_part;
  double total() const;
};
DecodeStepBytes decode_step_bytes(const std::vector<TensorSpec>& manifest, const ModelConfig& config);

/// Whether tensor-parallel ranks hold shares of the tensor rather than all of it (the Engram
/// tables stay whole, in host memory once a machine).
bool split_across_ranks(const TensorSpec& t);

/// Tensor parallelism over `ranks` ranks in the layout of the splits above: every split tensor of
/// the device's components (not the Engram tables, which stay in host memory once a machine)
/// divides evenly by rows, columns or whole routed experts; else the error names the first tensor
/// that does not.
Status check_tensor_parallel(const std::vector<TensorSpec>& manifest, const ModelConfig& config, int ranks);
/// The bytes one rank holds of each component in that layout: a replicated tensor whole, a split
/// one its 1/ranks share (the Engram tables listed whole: they are not split).
std::map<Component, int64_t> rank_bytes(const std::vector<TensorSpec>& manifest, int ranks);

const char* component_name(Component c);
const char* part_name(Part p);

}  // namespace dsinfer
