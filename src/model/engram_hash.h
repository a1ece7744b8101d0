// Engram n-gram hashing (spec §9.4–9.5): compressed token history per sequence and the int64
// rolling-XOR hashes of the 2..max-gram windows ending at each position, reduced per head modulo
// the bucket primes. Pure integer arithmetic, computed on the host.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/engram_layout.h"
#include "io/model_config.h"

namespace dsinfer {

/// The compressed id written for image-span positions: it blocks every n-gram through it.
constexpr int64_t kEngramDead = -1;

class EngramHasher {
 public:
  /// token_map: the compressed token map of the model's tokenizer (io/engram_token_map.h).
  EngramHasher(const ModelConfig& config, std::vector<int32_t> token_map);

  int n_layers() const { return static_cast<int>(layer_ids_.size()); }
  int n_columns() const { return n_columns_; }  // (max_ngram - 1) * heads
  const std::vector<int64_t>& multipliers(int engram_layer) const { return multipliers_[engram_layer]; }
  const EngramLayout& layout() const { return layout_; }
  int64_t pad_id() const { return pad_id_; }
  const std::vector<int32_t>& token_map() const { return token_map_; }

  /// Records the chunk's tokens in `history` (compressed ids by position; kEngramDead where
  /// `live` is false) and writes the hashes of each position: out [s, n_layers, n_columns]
  /// (table row ids, offsets included). `history` must hold every position before start_pos.
  void hash_chunk(std::vector<int64_t>& history, int64_t start_pos, std::span<const int32_t> tokens,
                  std::span<const uint8_t> live, std::span<int64_t> out) const;

 private:
  std::vector<int> layer_ids_;
  int max_ngram_ = 0, n_heads_ = 0, n_columns_ = 0;
  int64_t pad_id_ = 0;
  std::vector<int32_t> token_map_;
  std::vector<std::vector<int64_t>> multipliers_;  // [engram layer][max_ngram]
  EngramLayout layout_;
};

}  // namespace dsinfer
