// Engram hashing.
#include "model/engram_hash.h"

#include <limits>

#include "core/check.h"
#include "model/numpy_random.h"

namespace dsinfer {

EngramHasher::EngramHasher(const ModelConfig& c, std::vector<int32_t> token_map)
    : layer_ids_(c.engram_layer_ids),
      max_ngram_(c.engram_max_ngram_size),
      n_heads_(c.engram_n_heads),
      n_columns_(c.engram_hash_columns()),
      token_map_(std::move(token_map)) {
  DSINFER_CHECK(static_cast<int>(token_map_.size()) > c.engram_pad_id, "token map smaller than the pad id");
  pad_id_ = token_map_[c.engram_pad_id];
  layout_ = compute_engram_layout(n_layers(), max_ngram_, n_heads_, c.engram_vocab_size);
  // bound = (INT64_MAX // compressed_vocab) // 2; multipliers are odd: 2 * draw + 1.
  const int64_t bound = std::numeric_limits<int64_t>::max() / c.engram_compressed_vocab_size / 2;
  for (int layer : layer_ids_) {
    std::vector<int64_t> m = numpy_default_rng_integers(10007ull * static_cast<uint64_t>(layer), bound, max_ngram_);
    for (int64_t& v : m) v = v * 2 + 1;
    multipliers_.push_back(std::move(m));
  }
}

void EngramHasher::hash_chunk(std::vector<int64_t>& history, int64_t start_pos, std::span<const int32_t> tokens,
                              std::span<const uint8_t> live, std::span<int64_t> out) const {
  const int64_t s = static_cast<int64_t>(tokens.size());
  DSINFER_CHECK(static_cast<int64_t>(history.size()) >= start_pos, "history has {} positions, chunk starts at {}",
                history.size(), start_pos);
  DSINFER_CHECK(static_cast<int64_t>(out.size()) == s * n_layers() * n_columns_, "hash output size");
  history.resize(start_pos + s);
  for (int64_t i = 0; i < s; ++i) {
    const bool is_live = live.empty() || live[i];
    const int32_t t = tokens[i];
    history[start_pos + i] =
        is_live && t >= 0 && t < static_cast<int32_t>(token_map_.size()) ? token_map_[t] : kEngramDead;
  }
  for (int64_t i = 0; i < s; ++i) {
    const int64_t p = start_pos + i;
    for (int l = 0; l < n_layers(); ++l) {
      bool blocked = false;
      int64_t rolling = 0;
      int64_t* row = &out[(i * n_layers() + l) * n_columns_];
      for (int shift = 0; shift < max_ngram_; ++shift) {
        const int64_t src = history[std::max<int64_t>(p - shift, 0)];
        blocked = blocked || p < shift || src == kEngramDead;  // sticky: history stops at start / images
        const int64_t v = blocked ? pad_id_ : src;
        rolling ^= v * multipliers_[l][shift];  // < 2^63 by the choice of bound
        if (shift == 0) continue;
        for (int h = 0; h < n_heads_; ++h) {
          const int col = (shift - 1) * n_heads_ + h;
          row[col] = rolling % layout_.primes[l][col] + layout_.offsets[l][col];
        }
      }
    }
  }
}

}  // namespace dsinfer
