// RoPE tables (spec §3.2): cos/sin of t * f_i in fp32, with the YaRN frequency blend on
// compressed layers. One table per distinct (base, YaRN) setting, shared by the layers using it.
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace dsinfer {

struct RopeTable {
  int half = 0;  // rope_dim / 2 frequency pairs
  int64_t positions = 0;
  std::vector<float> cos;  // [positions, half]
  std::vector<float> sin;  // [positions, half]

  const float* cos_row(int64_t pos) const { return &cos[pos * half]; }
  const float* sin_row(int64_t pos) const { return &sin[pos * half]; }
};

/// original_seq_len 0 disables YaRN.
RopeTable make_rope_table(int rope_dim, int64_t positions, int original_seq_len, double base, double factor,
                          double beta_fast, double beta_slow);

/// The table of `layer`: theta 1e4 without YaRN for window-only (and draft) layers, else
/// compress_rope_theta with YaRN.
RopeTable make_layer_rope_table(const ModelConfig& c, int layer, int64_t positions);

}  // namespace dsinfer
