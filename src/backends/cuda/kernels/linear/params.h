// Parameters of the block-scaled linear kernels (spec §3.6): plain pointers, POD.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

/// One weight matrix with its input and output.
struct LinearOperands {
  const uint16_t* x_values = nullptr;  // [n, k] from QuantizeInputParams (CUDA-core kernel)
  const float* x_scales = nullptr;     // [n, k / 32]
  const uint8_t* w = nullptr;          // [out, k] e4m3 or [out, k / 2] packed e2m1
  const uint8_t* w_scales = nullptr;   // e8m0: [ceil(out / 32), k / 32] (fp8) or [out, k / 32] (fp4)
  uint16_t* y = nullptr;               // [n, out] bf16, row stride y_stride elements
  const uint8_t* x_codes = nullptr;    // [n, k] e4m3 codes from QuantizeInputParams (the tiled kernel)
  // Or, for the tiled kernel at one activation tile (tiled_quantises_input), the input itself: [n, k]
  // bf16, row stride x_bf16_stride, quantised by the kernel as it stages it (the above unused).
  const uint16_t* x_bf16 = nullptr;
  // Or, for the wgmma kernel: [n, k] bf16 code * scale in its K order (QuantizeInputParams::operand).
  const uint16_t* x_operand = nullptr;
};

inline constexpr int kMaxLinearGroups = 16;
inline constexpr int kTensorMapBytes = 128;  // a CUtensorMap

/// A weight matrix by address, in a device table of experts (routed calls).
struct RoutedWeight {
  const uint8_t* w = nullptr;
  const uint8_t* w_scales = nullptr;
};

/// One expert's share of a step's routed tokens (a grouped call): rows [first, first + count) of
/// the expert-sorted activations. count 0: an unused entry.
struct ExpertGroup {
  int32_t expert = 0, first = 0, count = 0;
};

/// The kernels the dispatch can run (their tile and launch constants: config.h; the kernel lab,
/// bench/cuda/lab, keeps wgmma and the other knob values).
enum class LinearKernel {
  kAuto,   // kTiled, but kWgmma from its kMinRows rows and for plain fp8 calls (decode tiles up to kFewRows)
  kExact,  // the kernels that equal the CPU's exact block sums, the fastest measured for the shape:
           // kGemv at n = 1 (kFma where it does not apply), kMma above; the dense linears' double sums
  kTiled,  // e4m3 tensor cores, fp32 sums: 64 weight rows a CTA, K split over a cluster by shape
           // alone, the activations staged in shared memory; any n (passes of 64), batch-invariant
  kWgmma,  // bf16 warpgroup tensor cores, the weights decoded in registers, one fp32 sum over K: 128 x 128
           // output tiles, for many rows (the dispatch's choice from wgmma_kernel::kMinRows); per-row
           // sums independent of n and of the grouping
  kGemv,   // f16 tensor cores: n = 1 with out % 8 == 0 (fp4, or fp8 of many rows) 8 weight rows a warp,
           // else a warp per weight row (K split over a CTA's warps for short matrices), n <= 4, k % 64 == 0
  kFma,    // CUDA cores: one warp per output row, fp32 FMAs
  kMma,    // f16 tensor cores (mma.sync m16n8k16), any n, per-row sums independent of n, rounded
           // step by step as the CPU (its exact block sums on over 99.9 % of outputs)
};

/// y = bf16(sum over K blocks b of (P_b * sx_b) * sw_b), P_b = sum of code products in block b,
/// for `groups` matrices of one shape in one launch (the experts of a token, or w1 and w3 that
/// share an input): small GEMMs alone are too short to reach the memory bandwidth.
struct BlockLinearParams {
  LinearOperands op[kMaxLinearGroups];
  int groups = 1;
  int n = 0, k = 0, out = 0;
  bool fp4 = false;              // e2m1 packed two per byte (scales per row) instead of e4m3 (scales per 32 rows)
  int64_t w_stride = 0;          // bytes per weight row
  int64_t s_stride = 0;          // bytes per scale row
  int64_t y_stride = 0;          // elements per output row
  int64_t x_bf16_stride = 0;     // elements per row of the operands' x_bf16 (16-byte aligned rows)
  int64_t x_operand_stride = 0;  // elements per row of the operands' x_operand (0: k; a multiple of 8)
  LinearKernel kernel = LinearKernel::kAuto;
  int tiled_slice_blocks = 0;   // kTiled: the fewest K slices of at most this many blocks (0: the default;
                                // the benchmark's sweeps: it changes the sums' order)
  int tiled_staged_blocks = 0;  // kTiled: K blocks of activations staged at a time (0: by instance; the
                                // benchmark's sweeps: the sums' order does not change)
  int gemv_rows = 0;            // kGemv at n = 1: weight rows a warp, 8 (linear_gemv_rows.cuh) or 1; 0: by shape
  // Routed (kTiled, kFma and kGemv): group g's weights are route_table[routes[g / per_route] * per_route +
  // g % per_route] (op[g].w and w_scales unused), the experts chosen on the device; an id
  // outside [0, route_count) gives zeros.
  const int32_t* routes = nullptr;
  const RoutedWeight* route_table = nullptr;
  int per_route = 1, route_count = 0;
  // Grouped (kTiled, kMma, kWgmma): group g is entry g / per_route of `expert_groups` (device memory), matrix
  // g % per_route: that entry's rows of op[g % per_route]'s x and y against route_table[expert *
  // per_route + g % per_route], n ignored; groups may exceed kMaxLinearGroups.
  const ExpertGroup* expert_groups = nullptr;
  // Grouped kWgmma: route_table's weights as TMA tensor maps (CUtensorMap, kTensorMapBytes each, the
  // same indexing; wgmma_weight_map), in device memory.
  const void* route_maps = nullptr;
  int max_group_rows = 0;  // grouped: the most rows an entry can have (a step's tokens: what picks
                           // kWgmma under kAuto), 0 unknown (any)
  cudaStream_t stream = nullptr;
};

}  // namespace dsinfer::cuda
