// LinearWeight: one Linear layer's weight as the release stores it (two views for block-scaled
// formats: codes + e8m0 scales), the unit every GEMM op consumes.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dsinfer {

enum class LinearFormat : uint8_t {
  kFp8,        // e4m3 [out, in] + e8m0 scales [ceil(out/32), ceil(in/32)]; input act_quant'd
  kFp4,        // e2m1 packed [out, in/2] + e8m0 scales [out, in/32]; input act_quant'd
  kBf16,       // bf16 [out, in]; fp32 accumulation, bf16 output
  kBf16AsF32,  // bf16 [out, in] held as fp32 by the reference: f32 output (head, ratio-2 compressor)
  kFp8AsBf16,  // fp8 storage, bf16 math: weights dequantised exactly, input not quantised (wo_a)
};

/// The formats whose input is act_quant'd and whose products are summed per 32-wide block.
inline bool is_block_scaled(LinearFormat f) {
  return f == LinearFormat::kFp8 || f == LinearFormat::kFp4;
}

struct LinearWeight {
  LinearFormat format = LinearFormat::kBf16;
  int64_t out = 0, in = 0;
  TensorView weight;  // codes or values, row stride weight.stride[0] (in elements of its dtype)
  TensorView scale;   // kFp8 / kFp4 only
};

/// One expert's feed-forward: w2(silu(w1 x) * w3 x) (spec §8.2).
struct ExpertWeights {
  LinearWeight w1, w2, w3;  // w1/w3 [ff, dim], w2 [dim, ff]
};

}  // namespace dsinfer
