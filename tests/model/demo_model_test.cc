// The demo model (models/demo-v41, trained by tools/train_demo/train.py): its held-out text's
// perplexity is within 1 % of the value the training program's own forward (model.py) recorded at
// export, the quality gate a numerics change must pass (the random fixtures' chaotic logits hide a
// change that makes a real model worse). Built for the CUDA backend too (golden_cuda_test), where
// the GPU's perplexity must also be within 1 % of the CPU's.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "backends/cpu/cpu_backend.h"
#include "chat/chat_tokenize.h"
#include "io/json.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "model/test_backend.h"
#include "ops/communicator.h"
#include "runtime/perplexity.h"
#include "test_util.h"

namespace dsinfer {
namespace {

struct HeldOut {
  std::vector<int32_t> ids;
  int64_t window = 0;
  double recorded = 0;
};

HeldOut held_out(const std::filesystem::path& dir) {
  HeldOut h;
  auto record = read_json_file(dir / "training_record.json");
  EXPECT_TRUE(record.ok()) << record.status().to_string();
  auto tokenizer = Tokenizer::load(dir / "tokenizer.json");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  if (!record.ok() || !tokenizer.ok()) return h;
  const Json& gate = (*record)["gate"];
  h.window = gate["window"].get<int64_t>();
  h.recorded = gate["perplexity_model_py"].get<double>();
  h.ids = with_bos(*tokenizer, tokenizer->encode(testing::read_file(dir / gate["text"].get<std::string>())));
  EXPECT_EQ(static_cast<int64_t>(h.ids.size()), gate["tokens"].get<int64_t>()) << "the held-out text's tokens";
  return h;
}

Result<double> perplexity_on(Backend& backend, const std::filesystem::path& dir, const HeldOut& h) {
  LocalCommunicator comm;
  auto model = Model::load(dir, backend, comm);
  if (!model.ok()) return model.status();
  auto r = perplexity(**model, h.ids, h.window, 512);
  if (!r.ok()) return r.status();
  return r->perplexity();
}

TEST(DemoModel, HeldOutPerplexityIsTheOneRecordedAtExport) {
  if (!testing::test_backend_available()) GTEST_SKIP() << "no CUDA device";
  const std::filesystem::path dir = testing::models_dir() / "demo-v41";
  const HeldOut h = held_out(dir);
  ASSERT_GT(h.ids.size(), 1000u);
  std::unique_ptr<Backend> backend = testing::make_test_backend();
  const Result<double> got = perplexity_on(*backend, dir, h);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_NEAR(*got, h.recorded, 0.01 * h.recorded) << "over " << h.ids.size() << " tokens";
#ifdef DSINFER_GOLDEN_ON_CUDA
  CpuBackend cpu(2);
  const Result<double> on_cpu = perplexity_on(cpu, dir, h);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().to_string();
  EXPECT_NEAR(*got, *on_cpu, 0.01 * *on_cpu) << "the GPU against the CPU";
  std::printf("demo model: held-out perplexity %.4f on the GPU, %.4f on the CPU, %.4f recorded\n", *got, *on_cpu,
              h.recorded);
#else
  std::printf("demo model: held-out perplexity %.4f on the CPU, %.4f recorded\n", *got, h.recorded);
#endif
}

}  // namespace
}  // namespace dsinfer
