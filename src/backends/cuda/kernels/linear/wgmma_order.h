// The K order of the wgmma kernel's activation operand (linear_wgmma.cu), which act_quant writes
// (QuantizeInputParams::operand) and the kernel reads. Framework-free.
//
// The kernel decodes the weights' codes into wgmma's A fragment in registers. In a K step of 16
// the fragment gives lane quad position c (lane % 4) the columns 2c, 2c + 1 and 2c + 8, 2c + 9;
// the kernel fills them with K indices 16c + 4j .. 16c + 4j + 3 of each 64 (j the step), so that a
// thread reads its codes of a stage as one run (16 bytes of e4m3 or 8 of e2m1 a row). The
// activations, the B operand in shared memory, are therefore stored with K index 16c + 4j + t of
// each 64 at column 16j + 2c + t (t < 2) or 16j + 8 + 2c + t - 2 (t >= 2). Each product is the
// same; only the order of the tensor cores' sums is the kernel's own.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace dsinfer::cuda {

inline constexpr int kWgmmaOrderSpan = 64;  // K indices a permutation covers: K a multiple of it

/// The column of K index `k` in the wgmma kernel's activation operand.
DSINFER_HOST_DEVICE constexpr int wgmma_operand_column(int k) {
  const int base = k - k % kWgmmaOrderSpan, i = k % kWgmmaOrderSpan;
  const int c = i / 16, j = i / 4 % 4, t = i % 4;
  return base + 16 * j + (t < 2 ? 2 * c + t : 8 + 2 * c + t - 2);
}

}  // namespace dsinfer::cuda
