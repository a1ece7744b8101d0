// The act_quant kernels' launch constants, with what the kernels rely on asserted. Plain C++ (no
// CUDA headers).
#pragma once

namespace dsinfer::cuda::act_quant_config {

inline constexpr int kWarp = 32;
inline constexpr int kGroup = 32;         // fp8 act_quant's group (spec §3.4)
inline constexpr int kWarpsPerBlock = 8;  // fp8: a warp per group
inline constexpr int kFp4Threads = 256;   // fp4: a thread per element
// fp8: a group's amax is one warp's butterfly.
static_assert(kGroup == kWarp && kWarpsPerBlock * kWarp <= 1024);
// fp4: a group (16 or 32 elements, row-aligned) lies within a warp's 32 consecutive elements.
static_assert(kFp4Threads % kWarp == 0 && kWarp % 16 == 0 && kWarp % 32 == 0);

}  // namespace dsinfer::cuda::act_quant_config
