// Engram bucket layout (spec §9.3): the prime modulus and row offset of every hash column.
#pragma once

#include <cstdint>
#include <vector>

namespace dsinfer {

struct EngramLayout {
  // [engram layer][column], column = (n - 2) * n_heads + head for n-gram order n.
  std::vector<std::vector<int64_t>> primes;
  std::vector<std::vector<int64_t>> offsets;  // cumulative sum of the previous columns' primes

  int64_t table_rows(int engram_layer) const;
};

/// For each layer, order and head: the smallest prime above the running value not used before;
/// the running value restarts at vocab_size - 1 for every (layer, order).
EngramLayout compute_engram_layout(int n_engram_layers, int max_ngram_size, int n_heads, int64_t vocab_size);

}  // namespace dsinfer
