// Overwrites one bf16 tensor of a written checkpoint with NaN in place: a well-formed file whose
// weights make the logits non-finite (the probe's "embed.weight all bf16 NaN" case).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/json.h"
#include "io/safetensors.h"

namespace dsinfer::testing {

inline void fill_bf16_tensor_with_nan(const std::filesystem::path& dir, const std::string& tensor) {
  auto index = read_json_file(dir / "model.safetensors.index.json");
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  const std::filesystem::path shard = dir / (*index)["weight_map"][tensor].get<std::string>();
  uint64_t offset = 0, bytes = 0;
  {
    auto file = SafetensorsFile::open(shard);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    const SafetensorsEntry* e = file->find(tensor);
    ASSERT_NE(e, nullptr) << tensor;
    ASSERT_EQ(e->dtype, DType::kBF16) << tensor;
    offset = e->data_offset, bytes = e->data_bytes;
  }
  std::vector<char> nan(bytes);
  for (size_t i = 0; i + 1 < nan.size(); i += 2) nan[i] = '\xC0', nan[i + 1] = '\x7F';  // bf16 0x7FC0, quiet NaN
  std::fstream out(shard, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(static_cast<std::streamoff>(offset));
  out.write(nan.data(), static_cast<std::streamsize>(nan.size()));
  ASSERT_TRUE(out.good());
}

}  // namespace dsinfer::testing
