// TensorView: a non-owning, copyable view of device or host memory (shape and strides in elements).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/check.h"
#include "core/dtype.h"

namespace dsinfer {

enum class Device : uint8_t { kCpu, kCuda };

constexpr int kMaxDims = 4;

/// Block-scaled fp8/fp4 weights are two views (data + scales), never an interleaved block type.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};  // in elements; for kF4E2M1 in (packed) elements too

  /// A row-major view of `data` with the given shape.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCpu) {
    DSINFER_CHECK(shape.size() <= kMaxDims, "too many dims: {}", shape.size());
    TensorView t;
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    t.ndim = static_cast<int>(shape.size());
    int i = 0;
    for (int64_t s : shape) t.shape[i++] = s;
    int64_t st = 1;
    for (int d = t.ndim - 1; d >= 0; --d) t.stride[d] = st, st *= t.shape[d];
    return t;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  bool is_contiguous() const {
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && stride[d] != st) return false;
      st *= shape[d];
    }
    return true;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  /// The same memory, type and layout (a recorded step compares its ops' views: runtime/step_recorder.h).
  bool operator==(const TensorView&) const = default;
};

}  // namespace dsinfer
