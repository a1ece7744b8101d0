// Checkpoint: every tensor of a model folder, single file or sharded with
// model.safetensors.index.json, behind one name lookup. Only headers are read at open time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"

namespace dsinfer {

class Checkpoint {
 public:
  struct Tensor {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
    std::span<const uint8_t> data() const { return file->data(*entry); }
  };

  /// `path` is a model folder or one .safetensors file. In a folder the index (if present) is
  /// authoritative: every tensor it lists must be in the shard it names and every tensor of every
  /// shard must be listed. Without an index, the release's names decide: model.safetensors, or the
  /// complete set model-00001-of-0000N.safetensors ...; other *.safetensors files are not part of
  /// the checkpoint (a folder holding only one, under any name, is that one-file checkpoint), and
  /// model*.safetensors files that are not one such set are an error, never merged.
  static Result<Checkpoint> open(const std::filesystem::path& path);

  const Tensor* find(std::string_view name) const;
  /// All tensors, sorted by name.
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t total_bytes() const;

  /// Reads every page of every tensor once (with read-ahead), so that the first forward pass does
  /// not wait on the disk; `progress(done, total)` follows the bytes. Meant for checkpoints that
  /// fit in memory.
  void prefault(const std::function<void(uint64_t done, uint64_t total)>& progress) const;

 private:
  Status add_file(std::unique_ptr<SafetensorsFile> file);
  void build_index();

  std::vector<std::unique_ptr<SafetensorsFile>> files_;  // stable addresses for Tensor::file
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace dsinfer
