// Sampled requests through the engine on the GPU (golden_cuda_test only: on the CPU,
// runtime_test's Engine.DrawsOnTheDeviceAreTheHostsDraws): a request drawn on the device (no
// logprobs: Backend::draw_tokens) gives the text the host draws from the same logits (with
// logprobs: the sampler), batched and alone.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "model/model.h"
#include "model/test_backend.h"
#include "runtime/engine.h"
#include "test_util.h"
#include "testing/tiny_model.h"

namespace dsinfer {
namespace {

TEST(EngineDraws, OnTheDeviceAsOnTheHost) {
  if (!testing::test_backend_available()) GTEST_SKIP() << "no CUDA device";
  testing::TempDir dir;
  ASSERT_TRUE(write_tiny_checkpoint(dir.path(), 4).ok());
  const std::unique_ptr<Backend> backend = testing::make_test_backend();
  LocalCommunicator comm;
  auto model = Model::load(dir.path(), *backend, comm);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto tok = Tokenizer::load(dir.path() / "tokenizer.json");
  ASSERT_TRUE(tok.ok());
  // The requests' texts, run together in one engine.
  const auto run = [&](std::vector<EngineRequest> requests) {
    Engine engine(**model, *tok, {512, 16});
    std::map<uint64_t, std::string> text;
    std::vector<uint64_t> ids;
    for (EngineRequest& r : requests) {
      r.on_output = [&text](const RequestOutput& o) { text[o.id] += o.text; };
      const Result<uint64_t> id = engine.submit(std::move(r));
      EXPECT_TRUE(id.ok());
      ids.push_back(id.ok() ? *id : 0);
    }
    for (int steps = 0; engine.step();) EXPECT_LT(++steps, 1000);
    std::vector<std::string> texts;
    for (uint64_t id : ids) texts.push_back(text[id]);
    return texts;
  };
  std::vector<EngineRequest> drawn, on_host;
  EngineRequest r;
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.max_tokens = 16;
  const char* prompts[] = {"Once upon a time", "The quick brown fox", "Numbers: 1 2 3"};
  for (int i = 0; i < 3; ++i) {
    r.prompt = tok->encode(prompts[i]);
    r.sampling.seed = 10 + i;
    r.logprobs = -1;
    drawn.push_back(r);
    r.logprobs = 0;
    on_host.push_back(r);
  }
  EngineRequest greedy = drawn[0];
  greedy.sampling.temperature = 0;
  drawn.push_back(greedy);
  on_host.push_back(greedy);
  const std::vector<std::string> device_texts = run(drawn);
  EXPECT_EQ(device_texts, run(on_host));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(run({drawn[i]}).at(0), device_texts[i]) << i;  // alone
  EXPECT_GT(std::set<std::string>(device_texts.begin(), device_texts.begin() + 3).size(), 1u);
}

}  // namespace
}  // namespace dsinfer
