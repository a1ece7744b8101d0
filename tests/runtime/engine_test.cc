// Scheduler scenarios (what runs in each step) and the engine: with temperature 0 every request's
// output is the same whether it runs alone or among 16 concurrent ones, chunked or not.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include "runtime/generator.h"
#include "tiny_model_fixture.h"

namespace dsinfer {
namespace {

TEST(Scheduler, DecodesFirstThenPromptPiecesWithinTheBudget) {
  Scheduler s({/*token_budget=*/8, /*max_running=*/2});
  s.add(1, 5);
  s.add(2, 6);
  s.add(3, 2);
  auto plan = s.schedule();  // 1's prompt (5), then 3 of 2's; 3 waits (max_running)
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].id, 1u);
  EXPECT_EQ(plan[0].count, 5);
  EXPECT_EQ(plan[1].id, 2u);
  EXPECT_EQ(plan[1].count, 3);
  EXPECT_EQ(s.num_waiting(), 1u);
  s.update(plan);
  plan = s.schedule();  // 1 decodes; 2 finishes its prompt
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(plan[0].decode);
  EXPECT_EQ(plan[0].start, 5);
  EXPECT_EQ(plan[1].id, 2u);
  EXPECT_EQ(plan[1].start, 3);
  EXPECT_EQ(plan[1].count, 3);
  s.update(plan);
  s.remove(1);  // 1 finished: 3 gets its place
  plan = s.schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(plan[0].decode && plan[0].id == 2u);
  EXPECT_EQ(plan[1].id, 3u);
  EXPECT_EQ(s.num_running(), 2u);
}

TEST(Engine, BatchedOutputsEqualEachRequestAlone) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  Model& model = *tiny.model;
  const Tokenizer& tok = *tiny.tok;
  const std::vector<std::string> prompts = {"Once upon a time", "The quick brown fox", "Hello", "A", "What is 2 + 2?",
                                            "Rivers run to the sea and", "x y z", "Tell me a story about a cat",
                                            "Numbers: 1 2 3", "Why?", "The end", "Reasoning step by step: first",
                                            "Sun", "Moon and stars", "Code: int main()", "Last one"};
  std::vector<std::string> alone(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest g;
    g.prompt = tok.encode(prompts[i]);
    g.sampling.temperature = 0;
    g.max_tokens = 6 + static_cast<int>(i % 5);
    ASSERT_TRUE(generate(model, tok, g, [&](std::string_view p) { alone[i] += p; }).ok());
    ASSERT_FALSE(alone[i].empty()) << i;  // the comparison below compares real text
  }
  for (const int64_t budget : {int64_t{7}, int64_t{512}}) {  // 7: prompts split across steps
    Engine engine(model, tok, {budget, 16});
    std::vector<std::string> batched(prompts.size());
    std::vector<FinishReason> finish(prompts.size(), FinishReason::kNone);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r;
      r.prompt = tok.encode(prompts[i]);
      r.sampling.temperature = 0;
      r.max_tokens = 6 + static_cast<int>(i % 5);
      r.on_output = [&, i](const RequestOutput& o) {
        batched[i] += o.text;
        if (o.finish != FinishReason::kNone) finish[i] = o.finish;
      };
      ASSERT_TRUE(engine.submit(std::move(r)).ok());
    }
    int steps = 0;
    while (engine.step()) ASSERT_LT(++steps, 1000);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(batched[i], alone[i]) << "budget " << budget << " prompt " << i;
      EXPECT_EQ(finish[i], FinishReason::kLength);
    }
  }
}

TEST(Engine, RejectsBadRequestsAndCancels) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  Model& model = *tiny.model;
  const Tokenizer& tok = *tiny.tok;
  Engine engine(model, tok, {64, 4});
  EXPECT_FALSE(engine.submit({}).ok());  // empty prompt
  EngineRequest too_long;
  too_long.prompt = {1, 2, 3};
  too_long.max_tokens = 1 << 20;
  EXPECT_NE(engine.submit(too_long).status().message().find("exceeds the context"), std::string::npos);
  EngineRequest r;
  r.prompt = tok.encode("Once upon a time");
  r.max_tokens = 50;
  FinishReason got = FinishReason::kNone;
  r.on_output = [&](const RequestOutput& o) {
    if (o.finish != FinishReason::kNone) got = o.finish;
  };
  auto id = engine.submit(std::move(r));
  ASSERT_TRUE(id.ok());
  engine.step();
  engine.cancel(*id);
  EXPECT_EQ(got, FinishReason::kCancelled);
  EXPECT_TRUE(engine.idle());
  EXPECT_FALSE(engine.step());
  // cancel_all ends every request, running or waiting.
  int ended = 0;
  for (int i = 0; i < 3; ++i) {
    EngineRequest more;
    more.prompt = tok.encode("Again");
    more.on_output = [&](const RequestOutput& o) { ended += o.finish == FinishReason::kCancelled; };
    ASSERT_TRUE(engine.submit(std::move(more)).ok());
  }
  engine.step();
  engine.cancel_all();
  EXPECT_EQ(ended, 3);
  EXPECT_TRUE(engine.idle());
}

}  // namespace
}  // namespace dsinfer
