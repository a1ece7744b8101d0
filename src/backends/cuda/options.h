// CudaBackendOptions: how a CudaBackend runs, fixed when it is made. The library reads no
// environment: the CLI (src/cli/load_model.cc) turns the DSINFER_CUDA_* switches into options with
// from_switches, as do the tests and benchmarks that take the same switches.
#pragma once

#include <cstdint>
#include <functional>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer {

struct CudaBackendOptions {
  static constexpr int64_t kDeviceRoutedTokens = 64;  // a decode step's (the route grouping's bound)

  /// Decode steps of up to this many tokens (0: none) captured as CUDA graphs and kept to run again
  /// (CudaBackend::step_graphs). Off by default: faster than launching op by op for the
  /// Flash-shaped model's steady decode at batch 1 to 8, slower at 64 (the host's part of a step
  /// comes before each relaunch) and serving the tiny model (docs/perf-notes.md).
  /// DSINFER_CUDA_GRAPH=N (at most kDeviceRoutedTokens).
  int64_t graph_tokens = 0;
  /// Steps of up to this many tokens (at most kDeviceRoutedTokens) run their routed experts on the
  /// device's choice without reading it back (sorted by expert on the device, or token after token
  /// with the fma or gemv kernel forced); larger ones group the tokens by expert on the host (one
  /// token always runs on the device's choice where its experts allow). DSINFER_CUDA_ROUTED_TOKENS=N
  /// (0: group every larger step), for comparisons.
  int64_t routed_tokens = kDeviceRoutedTokens;
  /// One token's GEMVs with 1 or 8 weight rows a warp wherever that applies; 0: by shape
  /// (kernels/linear/linear_gemv.cuh). DSINFER_CUDA_GEMV_ROWS=1|8, for comparisons.
  int gemv_rows = 0;
  /// One block-scaled kernel for every batch size (the tensor-core GEMM of large batches off), for
  /// accuracy and speed comparisons; kAuto: by shape. DSINFER_CUDA_LINEAR=auto|tiled|exact|gemv|fma|mma
  /// (any other value is auto; the wgmma kernel is in the kernel lab, bench/cuda/lab).
  cuda::LinearKernel linear_kernel = cuda::LinearKernel::kAuto;
  /// Kernels launched as programmatic dependents of the kernel before them, so that each one's
  /// launch and start-up overlap the end of the last (common/dependent_launch.cuh); a process-wide
  /// policy, set when a backend is made. DSINFER_CUDA_PDL=0 turns it off, for comparisons.
  bool dependent_launches = true;
  /// Ops the model marks as side work (side_queue: a sublayer's hyper-connection mixes, the KV row,
  /// the route) on a second stream, beside the ops after them. DSINFER_CUDA_SIDE=0 queues them in
  /// order on the one stream, for comparisons.
  bool side_stream = true;

  /// The options the DSINFER_CUDA_* switches set, each as the CLI has always read it; `lookup`
  /// gives a switch's value, null where it is unset (the process environment, in the CLI).
  static CudaBackendOptions from_switches(const std::function<const char*(const char*)>& lookup);
};

}  // namespace dsinfer
