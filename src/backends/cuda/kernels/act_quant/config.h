// The act_quant kernels' launch constants, with what the kernels rely on asserted. Plain C++ (no
// CUDA headers).
#pragma once

namespace dsinfer::cuda::act_quant_config {

inline constexpr int kWarp = 32;
inline constexpr int kGroup = 32;        // fp8 act_quant's group (spec §3.4)
inline constexpr int kThreads = 128;     // fp8: eight values a thread, four threads a group
inline constexpr int kFp4Threads = 256;  // fp4: a thread per element
// fp8: a group's four threads are aligned lanes of one warp.
static_assert(kGroup == 4 * 8 && kThreads % kWarp == 0 && kThreads <= 1024);
// fp4: a group (16 or 32 elements, row-aligned) lies within a warp's 32 consecutive elements.
static_assert(kFp4Threads % kWarp == 0 && kWarp % 16 == 0 && kWarp % 32 == 0);

}  // namespace dsinfer::cuda::act_quant_config
