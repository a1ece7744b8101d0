// Writer of safetensors files and sharded checkpoints (HF layout: model-0000i-of-0000n.safetensors
// plus model.safetensors.index.json). Used by make-tiny, the tests and the debug dumps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dsinfer {

class SafetensorsWriter {
 public:
  /// Adds a tensor (data copied); order of addition is the order in the file.
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> data);
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t>&& data);
  /// Adds a tensor of `bytes` zero bytes that the file leaves unwritten (sparse): for benchmark
  /// checkpoints larger than the disk, whose weights are filled in elsewhere.
  void add_unwritten(std::string name, DType dtype, std::vector<int64_t> shape, uint64_t bytes);
  template <typename T>
  void add_values(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const T> values) {
    add(std::move(name), dtype, std::move(shape),
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()));
  }
  void set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

  size_t size() const { return tensors_.size(); }
  uint64_t data_bytes() const;

  /// Writes one file atomically.
  Status write(const std::filesystem::path& path) const;
  /// Writes `dir/model-0000i-of-0000n.safetensors` shards of at most ~`max_shard_bytes` each
  /// (a tensor is never split) and `dir/model.safetensors.index.json`.
  Status write_sharded(const std::filesystem::path& dir, uint64_t max_shard_bytes) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
    uint64_t unwritten = 0;  // bytes of zeros left as a hole (data is then empty)
    uint64_t bytes() const { return data.size() + unwritten; }
  };
  Status write_range(const std::filesystem::path& path, size_t begin, size_t end) const;

  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dsinfer
