// Generation on the tiny model: greedy output reproduces, a stop string taken from that output
// cuts it exactly before its first occurrence, and the token budget is respected.
#include "runtime/generator.h"

#include <gtest/gtest.h>

#include "tiny_model_fixture.h"

namespace dsinfer {
namespace {

TEST(Generator, GreedyStopStringsAndBudget) {
  testing::TinyModel tiny(3);
  ASSERT_TRUE(tiny.ok());
  Model& model = *tiny.model;
  const Tokenizer& tok = *tiny.tok;
  GenerateRequest req;
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

}  // namespace
}  // namespace dsinfer
