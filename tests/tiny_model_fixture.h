// A freshly written tiny checkpoint, loaded on the CPU backend with its tokenizer: the model the
// runtime and server tests run (write_tiny_checkpoint: every layer kind, random weights).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "backends/cpu/cpu_backend.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "test_util.h"
#include "testing/tiny_model.h"

namespace dsinfer::testing {

struct TinyModel {
  TempDir dir;
  CpuBackend backend{2};
  LocalCommunicator comm;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;

  explicit TinyModel(uint64_t seed) {
    EXPECT_TRUE(write_tiny_checkpoint(dir.path(), seed).ok());
    auto m = Model::load(dir.path(), backend, comm);
    auto t = Tokenizer::load(dir.path() / "tokenizer.json");
    EXPECT_TRUE(m.ok() && t.ok());
    if (m.ok()) model = std::move(*m);
    if (t.ok()) tok = std::make_unique<Tokenizer>(std::move(*t));
  }
  bool ok() const { return model && tok; }
};

}  // namespace dsinfer::testing
