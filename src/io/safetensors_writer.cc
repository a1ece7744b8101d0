// SafetensorsWriter: header JSON in insertion order, padded with spaces to 8 bytes so every
// tensor starts 8-byte aligned relative to the data section (as the format recommends).
#include "io/safetensors_writer.h"

#include <fmt/format.h>

#include "core/check.h"
#include "io/atomic_file.h"
#include "io/json.h"

namespace dsinfer {

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> data) {
  add(std::move(name), dtype, std::move(shape), std::vector<uint8_t>(data.begin(), data.end()));
}

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t>&& data) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  DSINFER_CHECK(dtype != DType::kF4E2M1, "fp4 is stored as I8/U8 in safetensors ({})", name);
  DSINFER_CHECK(static_cast<uint64_t>(dtype_bytes(dtype, numel)) == data.size(), "tensor {}: {} bytes for shape", name,
                data.size());
  tensors_.push_back({std::move(name), dtype, std::move(shape), std::move(data)});
}

void SafetensorsWriter::add_unwritten(std::string name, DType dtype, std::vector<int64_t> shape, uint64_t bytes) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  DSINFER_CHECK(static_cast<uint64_t>(dtype_bytes(dtype, numel)) == bytes, "tensor {}: {} bytes for shape", name,
                bytes);
  tensors_.push_back({std::move(name), dtype, std::move(shape), {}, bytes});
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.bytes();
  return n;
}

Status SafetensorsWriter::write(const std::filesystem::path& path) const {
  return write_range(path, 0, tensors_.size());
}

Status SafetensorsWriter::write_range(const std::filesystem::path& path, size_t begin, size_t end) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::vector<uint64_t> pads;
  uint64_t offset = 0;
  for (size_t i = begin; i < end; ++i) {
    const Tensor& t = tensors_[i];
    const uint64_t pad = (8 - offset % 8) % 8;  // keep each tensor 8-byte aligned
    offset += pad;
    pads.push_back(pad);
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  DSINFER_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::create(path));
  DSINFER_RETURN_IF_ERROR(w.write(std::span<const uint8_t>(len, 8)));
  DSINFER_RETURN_IF_ERROR(w.write(text));
  static const uint8_t kZeros[8] = {};
  for (size_t i = begin; i < end; ++i) {
    DSINFER_RETURN_IF_ERROR(w.write(std::span<const uint8_t>(kZeros, pads[i - begin])));
    DSINFER_RETURN_IF_ERROR(w.write(tensors_[i].data));
    DSINFER_RETURN_IF_ERROR(w.skip(tensors_[i].unwritten));
  }
  return w.commit();
}

Status SafetensorsWriter::write_sharded(const std::filesystem::path& dir, uint64_t max_shard_bytes) const {
  std::vector<std::pair<size_t, size_t>> shards;  // [begin, end) tensor ranges
  size_t begin = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (i > begin && bytes + tensors_[i].bytes() > max_shard_bytes) {
      shards.emplace_back(begin, i);
      begin = i, bytes = 0;
    }
    bytes += tensors_[i].bytes();
  }
  shards.emplace_back(begin, tensors_.size());

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return error(ErrorKind::kIo, fmt::format("{}: cannot create folder: {}", dir.string(), ec.message()));
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    DSINFER_RETURN_IF_ERROR(write_range(dir / file, shards[s].first, shards[s].second));
    for (size_t i = shards[s].first; i < shards[s].second; ++i) weight_map[tensors_[i].name] = file;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", data_bytes()}}}, {"weight_map", weight_map}};
  return write_file_atomic(dir / "model.safetensors.index.json", index.dump(1) + "\n");
}

}  // namespace dsinfer
