// Host allocation for Buffer.
#include "core/buffer.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace dsinfer {

Result<Buffer> Buffer::allocate_host(size_t bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = rounded ? std::aligned_alloc(kAlign, rounded) : nullptr;
  if (rounded && !p)
    return error(ErrorKind::kResourceExhausted, fmt::format("cannot allocate {} bytes of host memory", bytes));
  if (p) std::memset(p, 0, rounded);
  return Buffer(p, bytes, Device::kCpu, &std::free);
}

void Buffer::reset() {
  if (data_ && free_fn_) free_fn_(data_);
  data_ = nullptr;
  bytes_ = 0;
  free_fn_ = nullptr;
}

}  // namespace dsinfer
