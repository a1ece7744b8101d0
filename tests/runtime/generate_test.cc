// One request through the engine (the CLI's generate) on the tiny model: greedy output reproduces,
// a stop string taken from that output cuts it exactly before its first occurrence, the token
// budget is respected, and a request the engine refuses is an error naming the problem.
#include "runtime/generate.h"

#include <gtest/gtest.h>

#include "poisoned_checkpoint.h"
#include "tiny_model_fixture.h"

namespace dsinfer {
namespace {

TEST(Generate, GreedyStopStringsAndBudget) {
  testing::TinyModel tiny(3);
  ASSERT_TRUE(tiny.ok());
  Model& model = *tiny.model;
  const Tokenizer& tok = *tiny.tok;
  EngineRequest req;
  req.prompt = tok.encode("Once upon a time");
  req.sampling.temperature = 0;
  req.max_tokens = 40;
  std::vector<std::string> pieces;
  auto stats = generate(model, tok, req, [&](std::string_view p) { pieces.emplace_back(p); });
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  EXPECT_EQ(stats->generated_tokens, 40);
  std::string full;
  for (const auto& p : pieces) full += p;
  ASSERT_GT(pieces.size(), 8u);

  std::string again;
  ASSERT_TRUE(generate(model, tok, req, [&](std::string_view p) { again += p; }).ok());
  EXPECT_EQ(again, full);  // greedy is deterministic

  req.stop_strings = {pieces[5] + pieces[6]};
  std::string cut;
  auto stopped = generate(model, tok, req, [&](std::string_view p) { cut += p; });
  ASSERT_TRUE(stopped.ok());
  EXPECT_TRUE(stopped->stopped_by_string);
  EXPECT_EQ(cut, full.substr(0, full.find(req.stop_strings[0])));
}

TEST(Generate, RefusedRequestsAreErrors) {
  testing::TinyModel tiny(3);
  ASSERT_TRUE(tiny.ok());
  EngineRequest req;
  req.max_tokens = 4;
  auto empty = generate(*tiny.model, *tiny.tok, req, [](std::string_view) {});
  EXPECT_EQ(empty.status().kind(), ErrorKind::kInvalidArgument);
  req.prompt = tiny.tok->encode("Hello");
  req.max_tokens = static_cast<int>(tiny.model->config().max_seq_len);
  auto too_long = generate(*tiny.model, *tiny.tok, req, [](std::string_view) {});
  EXPECT_EQ(too_long.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("context"), std::string::npos) << too_long.status().message();
}

// A checkpoint whose embedding is NaN loads (the file is well-formed) but every logit is NaN: the
// request ends with an error at its first step, not with a run of BOS tokens.
TEST(Generate, NonFiniteLogitsEndTheRequestWithAnError) {
  testing::TempDir dir;
  ASSERT_TRUE(write_tiny_checkpoint(dir.path(), 3).ok());
  testing::fill_bf16_tensor_with_nan(dir.path(), "embed.weight");
  CpuBackend backend{2};
  LocalCommunicator comm;
  auto model = Model::load(dir.path(), backend, comm);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto tok = Tokenizer::load(dir.path() / "tokenizer.json");
  ASSERT_TRUE(tok.ok());
  for (float temperature : {0.0f, 1.0f}) {
    EngineRequest req;
    req.prompt = tok->encode("Once upon a time");
    req.sampling.temperature = temperature;
    req.max_tokens = 8;
    std::string text;
    auto stats = generate(**model, *tok, req, [&](std::string_view p) { text += p; });
    ASSERT_FALSE(stats.ok());
    EXPECT_NE(stats.status().message().find("the logits are not finite at step 1"), std::string::npos)
        << stats.status().message();
    EXPECT_EQ(text, "");  // no token was emitted
  }
}

}  // namespace
}  // namespace dsinfer
