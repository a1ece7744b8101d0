// CudaBackendOptions::from_switches (options.h).
#include "backends/cuda/options.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace dsinfer {

CudaBackendOptions CudaBackendOptions::from_switches(const std::function<const char*(const char*)>& lookup) {
  CudaBackendOptions o;
  if (const char* g = lookup("DSINFER_CUDA_GRAPH"))
    o.graph_tokens = std::clamp<int64_t>(std::atoi(g), 0, kDeviceRoutedTokens);
  if (const char* r = lookup("DSINFER_CUDA_ROUTED_TOKENS"))
    o.routed_tokens = std::clamp<int64_t>(std::atoi(r), 0, kDeviceRoutedTokens);
  if (const char* r = lookup("DSINFER_CUDA_GEMV_ROWS")) {
    const int rows = std::atoi(r);
    o.gemv_rows = rows == 8 || rows == 1 ? rows : 0;
  }
  if (const char* d = lookup("DSINFER_CUDA_PDL")) o.dependent_launches = std::string_view(d) != "0";
  if (const char* d = lookup("DSINFER_CUDA_SIDE")) o.side_stream = std::string_view(d) != "0";
  if (const char* k = lookup("DSINFER_CUDA_LINEAR")) {
    const std::string_view name = k;
    o.linear_kernel = name == "fma"     ? cuda::LinearKernel::kFma
                      : name == "gemv"  ? cuda::LinearKernel::kGemv
                      : name == "mma"   ? cuda::LinearKernel::kMma
                      : name == "tiled" ? cuda::LinearKernel::kTiled
                      : name == "exact" ? cuda::LinearKernel::kExact
                                        : cuda::LinearKernel::kAuto;
  }
  return o;
}

}  // namespace dsinfer
