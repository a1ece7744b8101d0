// AtomicFileWriter: writes a file under a temporary name and renames it into place on commit(),
// so a crash or an error never leaves a half-written file where a reader would find it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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

/// Writes the folder `dir` as a whole: `fill` writes into a fresh sibling temporary folder
/// (`dir`.tmp-<pid>, in the same parent, so renames stay on one file system), which then replaces
/// `dir`: atomically swapped with it (renameat2 RENAME_EXCHANGE) and the old one removed, or where
/// the file system cannot swap, `dir` renamed aside to `dir`.old-<pid>, the new one renamed into
/// place and the old removed. A crash at any point leaves at `dir` either the old folder or the new
/// one, whole, never a mix (in the fallback's instant between its two renames `dir` is absent, the
/// old one whole in .old-<pid>). An error from `fill` leaves `dir` untouched. First, the leftovers
/// of earlier interrupted runs (`dir`.tmp-<pid> and `dir`.old-<pid> of processes no longer
/// running) are removed. An existing `dir` is replaced only if it is empty or holds a config.json
/// or *.safetensors (a model folder), so a wrong `--out` cannot delete an unrelated folder.
Status write_folder_atomic(const std::filesystem::path& dir,
                           const std::function<Status(const std::filesystem::path& tmp)>& fill);

}  // namespace dsinfer
