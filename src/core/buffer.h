// Buffer: owning, move-only memory tagged with its device. Views of it are TensorViews.
#pragma once

#include <cstddef>
#include <utility>

#include "core/status.h"
#include "core/tensor.h"

namespace dsinfer {

class Buffer {
 public:
  using FreeFn = void (*)(void*);

  Buffer() = default;
  /// Takes ownership of `data` (`bytes` long), released with `free_fn`.
  Buffer(void* data, size_t bytes, Device device, FreeFn free_fn)
      : data_(data), bytes_(bytes), device_(device), free_fn_(free_fn) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      device_ = o.device_;
      free_fn_ = std::exchange(o.free_fn_, nullptr);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  /// 64-byte aligned, zero-filled host memory; kResourceExhausted when the allocation fails.
  static Result<Buffer> allocate_host(size_t bytes);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  TensorView view(DType dtype, std::initializer_list<int64_t> shape) const {
    TensorView t = TensorView::contiguous(data_, dtype, shape, device_);
    DSINFER_CHECK(static_cast<size_t>(dtype_bytes(dtype, t.numel())) <= bytes_, "view larger than buffer");
    return t;
  }
  void reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::kCpu;
  FreeFn free_fn_ = nullptr;
};

}  // namespace dsinfer
