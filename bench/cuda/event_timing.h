// The CUDA benchmarks' error check and event timing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

// A failed CUDA call ends the benchmark with its place and message.
#define CHECK_CUDA(call)                                                                          \
  do {                                                                                            \
    const cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace dsinfer::bench {

// Median over `reps` runs of `region` (timed with events on `stream`, after 3 warm-up runs), in
// milliseconds; `before` runs ahead of each timed run, untimed.
inline double median_ms(
    cudaStream_t stream, const std::function<void()>& region, int reps, const std::function<void()>& before = [] {}) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) region();
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    before();
    CHECK_CUDA(cudaEventRecord(a, stream));
    region();
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2];
}

}  // namespace dsinfer::bench
