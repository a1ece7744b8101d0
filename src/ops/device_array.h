// DeviceArray: a typed array in a backend's memory (device memory for CUDA, host memory for the
// CPU), move-only. The model's activations and caches are DeviceArrays, so host code reads them
// only through download() and the forward pass is the same on every backend.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "ops/backend.h"

namespace dsinfer {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  /// `n` zeroed elements.
  explicit DeviceArray(Backend& be, size_t n = 0) : be_(&be) { resize(n); }
  /// A copy of host data.
  DeviceArray(Backend& be, std::span<const T> host) : be_(&be) { assign(host); }
  /// `n` elements left as the allocator gives them: for outputs an op writes in full.
  static DeviceArray uninitialized(Backend& be, size_t n) {
    DeviceArray a(be);
    a.data_ = static_cast<T*>(be.allocate(n * sizeof(T)));
    a.size_ = a.capacity_ = n;
    return a;
  }
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_;
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { release(); }

  T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Backend& backend() const { return *be_; }

  /// A row-major view of the elements from `offset` on.
  TensorView view(DType dtype, std::initializer_list<int64_t> shape, size_t offset = 0) const {
    TensorView t = TensorView::contiguous(data_ + offset, dtype, shape, be_->device());
    DSINFER_CHECK(offset * sizeof(T) + static_cast<size_t>(dtype_bytes(dtype, t.numel())) <= size_ * sizeof(T),
                  "view of {} elements past the array's {}", t.numel(), size_);
    return t;
  }

  /// Keeps the first min(n, size) elements and zeroes the rest. Growing past the capacity doubles
  /// it at least, so a cache that grows a row per step reallocates O(log n) times.
  void resize(size_t n) {
    if (n > capacity_) {
      const size_t cap = capacity_ ? std::max(n, 2 * capacity_) : n;
      T* fresh = static_cast<T*>(be_->allocate(cap * sizeof(T)));
      const size_t kept = size_;
      if (kept) be_->copy_on_device(fresh, data_, kept * sizeof(T));
      release();
      data_ = fresh, size_ = kept, capacity_ = cap;
    }
    if (n > size_) be_->zero(data_ + size_, (n - size_) * sizeof(T));
    size_ = n;
  }
  /// Replaces the contents with a copy of host data (no zeroing or keeping of what was there).
  void assign(std::span<const T> host) {
    if (host.size() > capacity_) {
      release();
      data_ = static_cast<T*>(be_->allocate(host.size() * sizeof(T)));
      capacity_ = host.size();
    }
    size_ = host.size();
    upload(host);
  }
  void upload(std::span<const T> host, size_t offset = 0) {
    DSINFER_CHECK(offset + host.size() <= size_, "upload past the array's end");
    if (!host.empty()) be_->copy_to_device(data_ + offset, host.data(), host.size() * sizeof(T));
  }
  std::vector<T> download(size_t offset = 0, size_t count = SIZE_MAX) const {
    count = std::min(count, size_ - std::min(offset, size_));
    std::vector<T> host(count);
    if (count) be_->copy_to_host(host.data(), data_ + offset, count * sizeof(T));
    return host;
  }

 private:
  void release() {
    if (data_) be_->deallocate(data_);
    data_ = nullptr, size_ = capacity_ = 0;
  }

  Backend* be_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace dsinfer
