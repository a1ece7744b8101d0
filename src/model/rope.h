// RoPE tables (spec §3.2): cos/sin of t * f_i in fp32, with the YaRN frequency blend on
// compressed layers. One table per distinct (base, YaRN) setting, shared by the layers using it.
#pragma once

#include <cstdint>
#include <span>
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

/// The rope_dim / 2 frequencies f_i, with YaRN's blend when original_seq_len > 0 (fp32 steps).
std::vector<float> rope_frequencies(int rope_dim, int original_seq_len, double base, double factor, double beta_fast,
                                    double beta_slow);
/// One table row: cos and sin of the fp32 product pos x f_i.
void rope_row(std::span<const float> freqs, int64_t pos, float* cos_out, float* sin_out);

/// original_seq_len 0 disables YaRN.
RopeTable make_rope_table(int rope_dim, int64_t positions, int original_seq_len, double base, double factor,
                          double beta_fast, double beta_slow);

/// The table of `layer`: theta 1e4 without YaRN for window-only (and draft) layers, else
/// compress_rope_theta with YaRN.
RopeTable make_layer_rope_table(const ModelConfig& c, int layer, int64_t positions);

}  // namespace dsinfer
