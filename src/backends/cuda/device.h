// CUDA device discovery: how many GPUs, and what each one is.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace dsinfer::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int sm_count = 0;
  int64_t global_memory_bytes = 0;
  int64_t l2_bytes = 0;
};

/// Number of usable GPUs; 0 (not an error) on a machine without a GPU or driver.
int device_count();
Result<DeviceInfo> device_info(int ordinal);

}  // namespace dsinfer::cuda
