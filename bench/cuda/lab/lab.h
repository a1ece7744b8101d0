// The kernel lab (as llm.c's dev/cuda): block-scaled linear kernels and variants that the library's
// dispatch never runs, kept to be measured (cuda_linear_bench) and checked against the CPU backend
// and the library's kernels (cuda_linear_bench check). Each variant's knobs are its own here; the
// library compiles only the instances its dispatch picks, at the knobs' values below.
// Framework-free (nvcc compiles it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda::lab {

/// Knobs of the library's CUDA-core and f16 tensor-core kernels; the defaults are the instances the
/// library runs (kernels/linear/config.h).
struct LinearKnobs {
  int chunks_in_flight = 2;  // fma: 16-byte weight loads each lane issues before using them, 2 or 4;
                             // gemv: 2, or 4 ("deep": a row a warp at n = 1 keeps 8 steps of loads in
                             // flight instead of 4, 8 rows a warp 4 instead of 2)
  int blocks_per_sm = 4;     // fma, gemv with a row a warp: blocks of 8 warps in the grid, per SM
};

/// The CUDA-core kernel (LinearKernel::kFma) with these knobs: the same sums in the same order as
/// the library's (the knobs change how the loads are issued and the grid, not the arithmetic).
cudaError_t block_linear_fma(const BlockLinearParams& p, const LinearKnobs& k);
/// The f16 tensor-core GEMV (LinearKernel::kGemv: a row or 8 rows a warp as the library picks,
/// p.gemv_rows) with these knobs, bit for bit the library's; where gemv does not apply, the
/// library's launch_block_linear with kGemv (which runs what kAuto would).
cudaError_t block_linear_gemv(const BlockLinearParams& p, const LinearKnobs& k);

/// Hopper's fp8 tensor cores (wgmma): a warpgroup per 64 weight rows and K slice, n <= 8; K slices
/// summed in a fixed order by a second kernel. Coarser than the CPU's exact block sums.
struct WgmmaKnobs {
  float* workspace = nullptr;  // block_linear_wgmma_workspace_bytes(p, *this) of device memory
  int ctas_per_sm = 16;        // CTAs aimed at per SM (sets how finely K is split)
  int variant = 2;             // K blocks per wgmma group and buffering: 0: 4; 1: 4, double-buffered;
                               // 2: 2, double-buffered (the best measured); 3: 8
};
/// cudaErrorInvalidValue unless k % 32 == 0, n <= 8, 1 <= groups <= kMaxLinearGroups and a workspace.
cudaError_t block_linear_wgmma(const BlockLinearParams& p, const WgmmaKnobs& k);
/// The workspace of n <= 8 rows (0 otherwise): its K slices' fp32 partials.
size_t block_linear_wgmma_workspace_bytes(const BlockLinearParams& p, const WgmmaKnobs& k);

/// Whether bf16 wgmma chains (m64n64k16, A from registers) give the fp32 bits of mma.m16n8k16
/// chains over the same K steps (chain_bits.cu), with B K-major and MN-major (two readings of the
/// descriptor's offsets); prints a line per case, returns the K-major cases whose outputs are far
/// from the exact sums (a layout error), not those whose bits differ.
int chain_bits();

/// The lab's check (check.cc): every variant against the CPU backend at the library test's shapes,
/// and the variants of the library's kernels bit for bit against them. Prints a line per case;
/// the number of failures.
int check();

}  // namespace dsinfer::cuda::lab
