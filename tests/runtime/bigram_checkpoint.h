// A tiny checkpoint whose sublayers add nothing (attention and expert outputs, Engram values and
// the Markov bias zeroed) and whose drafter's norm is the model's times `drafter_norm_scale`: the
// stream stays each token's embedding, so the model's next token is a function of its current one,
// and so is the drafter's first (block row 0 holds the anchor: the same embedding through the same
// norm and head, its logits the model's times the scale). Its later drafts come from the noise
// rows (nothing chains them here). Its confidence head is zero: 1/2 for every draft.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/float_formats.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "test_util.h"
#include "testing/tiny_model.h"

namespace dsinfer::testing {

inline Status write_bigram_checkpoint(const std::filesystem::path& dir, float drafter_norm_scale = 1) {
  DSINFER_RETURN_IF_ERROR(write_tiny_checkpoint(dir, 4));
  std::vector<std::filesystem::path> shards;
  for (const auto& file : std::filesystem::directory_iterator(dir))
    if (file.path().extension() == ".safetensors") shards.push_back(file.path());
  std::vector<uint8_t> norm;
  for (const auto& path : shards) {
    DSINFER_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
    if (const SafetensorsEntry* e = f.find("norm.weight")) norm.assign(f.data(*e).begin(), f.data(*e).end());
  }
  std::vector<uint8_t> drafter_norm = norm;
  for (size_t i = 0; i + 1 < drafter_norm.size(); i += 2) {
    uint16_t v = static_cast<uint16_t>(drafter_norm[i] | drafter_norm[i + 1] << 8);
    v = f32_to_bf16(bf16_to_f32(v) * drafter_norm_scale);
    drafter_norm[i] = static_cast<uint8_t>(v), drafter_norm[i + 1] = static_cast<uint8_t>(v >> 8);
  }
  for (const auto& path : shards) {
    SafetensorsWriter w;
    {
      DSINFER_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
      for (const SafetensorsEntry& e : f.entries()) {
        const bool zero = e.name.ends_with("wo_b.weight") || e.name.ends_with("w2.weight") ||
                          e.name.ends_with("engram.wkv.weight") || e.name.ends_with("markov_head.head.weight") ||
                          e.name.ends_with("confidence_head.proj.weight");
        std::vector<uint8_t> bytes(f.data(e).begin(), f.data(e).end());
        if (zero) std::fill(bytes.begin(), bytes.end(), uint8_t{0});
        if (e.name.starts_with("mtp.") && e.name.ends_with(".norm.weight") && bytes.size() == norm.size())
          bytes = drafter_norm;
        w.add(e.name, e.dtype, e.shape, std::move(bytes));
      }
    }
    DSINFER_RETURN_IF_ERROR(w.write(path));
  }
  return {};
}

/// That checkpoint written to a temporary folder and loaded on the CPU (`model` null when either
/// step failed, which the test has then been told).
struct BigramModel {
  TempDir dir;
  CpuBackend backend{2};
  LocalCommunicator comm;
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tok;
  explicit BigramModel(float drafter_norm_scale = 1) {
    EXPECT_TRUE(write_bigram_checkpoint(dir.path(), drafter_norm_scale).ok());
    auto m = Model::load(dir.path(), backend, comm);
    auto t = Tokenizer::load(dir.path() / "tokenizer.json");
    EXPECT_TRUE(m.ok() && t.ok());
    if (m.ok() && t.ok()) model = std::move(*m), tok = std::move(*t);
  }
};

}  // namespace dsinfer::testing
