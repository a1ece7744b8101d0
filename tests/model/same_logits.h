// Helpers of the tests that compare two runs of the golden experiment bit for bit: a fixture's
// model with its first golden prompt, and the comparison of every forward's logits.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "io/json.h"
#include "model/model.h"
#include "test_util.h"
#include "testing/golden_run.h"

namespace dsinfer::testing {

/// A golden fixture's checkpoint on the CPU backend and its first prompt.
struct FixtureModel {
  CpuBackend backend{2};
  LocalCommunicator comm;
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt;
};

/// Loads fixture `name` (tests/data/NAME) into `f`; fails the test when it cannot.
inline void load_fixture(const char* name, FixtureModel* f) {
  const std::filesystem::path dir = data_dir() / name;
  auto model = Model::load(dir / "checkpoint", f->backend, f->comm);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  f->model = std::move(*model);
  auto meta = read_json_file(dir / "golden.json");
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  f->prompt = (*meta)["prompts"][0].get<std::vector<int32_t>>();
}

/// Every forward of `got` has bitwise the logits of `want`'s; `what` names the run in a failure.
inline void expect_same_logits(const GoldenRunResult& got, const GoldenRunResult& want, const std::string& what) {
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (int64_t f = 0; f < want.forwards; ++f) {
    const size_t row = f * want.vocab;
    EXPECT_EQ(std::memcmp(&got.logits[row], &want.logits[row], want.vocab * sizeof(float)), 0)
        << what << ": forward " << f << " differs";
  }
}

}  // namespace dsinfer::testing
