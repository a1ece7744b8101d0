// Reader of the safetensors format over mmap: validates the whole header before handing out any
// tensor, so a corrupt, truncated or hostile file is an error naming the file and tensor, never a
// crash or an out-of-bounds read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/mapped_file.h"

namespace dsinfer {

/// Largest header we accept (the format's own reference implementation uses the same bound).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // from the start of the file
  uint64_t data_bytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

/// One .safetensors file. Cheap to move; the mapping is shared with views handed out.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::filesystem::path& path);
  /// Validates `bytes` (a whole file's contents) without a file; `label` names it in errors.
  /// The bytes must outlive the result. Used by the fuzzer and tests.
  static Result<SafetensorsFile> parse(std::span<const uint8_t> bytes, std::string label);

  const std::string& label() const { return label_; }
  /// Entries sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(std::string_view name) const;
  /// The tensor's bytes, inside the file by construction.
  std::span<const uint8_t> data(const SafetensorsEntry& e) const { return bytes_.subspan(e.data_offset, e.data_bytes); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_bytes() const { return bytes_.size(); }

 private:
  std::shared_ptr<const MappedFile> map_;  // null when parsed from caller-owned bytes
  std::span<const uint8_t> bytes_;
  std::string label_;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

}  // namespace dsinfer
