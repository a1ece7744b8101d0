// CpuFront: a test backend in front of a CpuBackend, whose memory, copies and host threads it
// uses; a subclass defines the ops (DSINFER_OPS) and passes them on as its test needs.
#pragma once

#include <cstddef>

#include "backends/cpu/cpu_backend.h"
#include "ops/backend.h"

namespace dsinfer::testing {

class CpuFront : public Backend {
 public:
  explicit CpuFront(CpuBackend& cpu) : cpu_(cpu) {}
  Device device() const override { return Device::kCpu; }
  void* allocate(size_t bytes) override { return cpu_.allocate(bytes); }
  void deallocate(void* p) override { cpu_.deallocate(p); }
  void zero(void* p, size_t bytes) override { cpu_.zero(p, bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { cpu_.copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_.copy_to_host(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { cpu_.copy_on_device(dst, src, bytes); }
  ThreadPool* host_threads() override { return cpu_.host_threads(); }

 protected:
  CpuBackend& cpu_;
};

}  // namespace dsinfer::testing
