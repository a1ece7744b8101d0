// AtomicFileWriter: writes a file under a temporary name and renames it into place on commit(),
// so a crash or an error never leaves a half-written file where a reader would find it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "core/status.h"

namespace dsinfer {

class AtomicFileWriter {
 public:
  static Result<AtomicFileWriter> create(const std::filesystem::path& path);

  AtomicFileWriter(AtomicFileWriter&& o) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();

  Status write(std::span<const uint8_t> bytes);
  Status write(std::string_view text) {
    return write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  /// Leaves `bytes` unwritten: they read as zeros and take no disk space (a sparse file).
  Status skip(uint64_t bytes);
  /// fsync, close and rename over the final path.
  Status commit();

 private:
  AtomicFileWriter(std::filesystem::path path, std::filesystem::path tmp, int fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  std::filesystem::path path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes a whole file atomically.
Status write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace dsinfer
