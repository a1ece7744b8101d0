// MappedFile: a read-only mmap of a whole file (RAII). Checkpoints are read through it, never copied.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

#include "core/status.h"

namespace dsinfer {

class MappedFile {
 public:
  static Result<MappedFile> open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

}  // namespace dsinfer
