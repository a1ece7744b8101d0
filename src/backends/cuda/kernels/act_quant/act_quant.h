// Launchers of the act_quant kernels. Framework-free (no Status/fmt: nvcc compiles this header
// in .cu files); the backend wraps the cudaError_t into a Status with context.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/act_quant/params.h"

namespace dsinfer::cuda {

/// One warp per group of 32: amax, power-of-two scale from the fp32 bits, saturating e4m3 RNE.
/// Bit-identical to dsinfer::act_quant / act_quant_inplace on the CPU.
/// cudaErrorInvalidValue when n is not a multiple of 32.
cudaError_t launch_act_quant(const ActQuantParams& p);

/// The same kernel for a block-scaled linear's input: each row of x in groups of 32, the codes, their
/// fp16 values and the scales as floats. cudaErrorInvalidValue unless k % 32 == 0.
cudaError_t launch_quantize_input(const QuantizeInputParams& p);

/// fp4_act_quant_inplace on every row: amax per group, the scale (e8m0: 2^ceil(log2(max(amax,
/// 6 * 2^-126) / 6)); e4m3: RNE of max(amax, 6 * 2^-9) / 6), e2m1 codes ties to even, x = code *
/// scale in bf16. Bit-identical to the CPU. cudaErrorInvalidValue for a group other than 16 or 32
/// or d not a multiple of it.
cudaError_t launch_fp4_fake_quant(const Fp4FakeQuantParams& p);

}  // namespace dsinfer::cuda
