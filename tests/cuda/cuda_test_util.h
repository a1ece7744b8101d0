// Device copies for the GPU tests: a host vector to device memory and back (failures are test
// failures, not crashes).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

namespace dsinfer::testing {

template <typename T>
T* to_device(const std::vector<T>& h) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, h.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

template <typename T>
std::vector<T> from_device(const T* p, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

}  // namespace dsinfer::testing
