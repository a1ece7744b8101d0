// The engine: with temperature 0 every request's output is the same whether it runs alone or
// among 16 concurrent ones, chunked or not, preempted or not.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <utility>

#include "runtime/bigram_checkpoint.h"
#include "runtime/generate.h"
#include "testing/tiny_model.h"
#include "tiny_model_fixture.h"

namespace dsinfer {
namespace {

TEST(Engine, BatchedOutputsEqualEachRequestAlone) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  Model& model = *tiny.model;
  const Tokenizer& tok = *tiny.tok;
  const std::vector<std::string> prompts = {"Once upon a time",
                                            "The quick brown fox",
                                            "Hello",
                                            "A",
                                            "What is 2 + 2?",
                                            "Rivers run to the sea and",
                                            "x y z",
                                            "Tell me a story about a cat",
                                            "Numbers: 1 2 3",
                                            "Why?",
                                            "The end",
                                            "Reasoning step by step: first",
                                            "Sun",
                                            "Moon and stars",
                                            "Code: int main()",
                                            "Last one"};
  std::vector<std::string> alone(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest g;
    g.prompt = tok.encode(prompts[i]);
    g.sampling.temperature = 0;
    g.max_tokens = 6 + static_cast<int>(i % 5);
    ASSERT_TRUE(generate(model, tok, g, [&](std::string_view p) { alone[i] += p; }).ok());
    ASSERT_FALSE(alone[i].empty()) << i;  // the comparison below compares real text
  }
  // A cache budget of three requests' fixed caches and 20 positions (blocks of two positions):
  // three get in, outgrow it within a few steps, and the newest are preempted and recompute,
  // unseen in their outputs.
  const CacheSizes sizes = reference_cache_sizes(model.config());
  auto probe = cache_layout(sizes, int64_t{1} << 30, 2, 24);
  ASSERT_TRUE(probe.ok());
  auto tight = cache_layout(sizes, (3 * probe->fixed_blocks + 10) * probe->block_bytes, 2, 24);
  ASSERT_TRUE(tight.ok()) << tight.status().message();
  for (const auto& [budget, cache] : {std::pair<int64_t, std::optional<CacheLayout>>{7, std::nullopt},
                                      {512, std::nullopt},
                                      {512, *tight}}) {  // 7: prompts split across steps
    Engine engine(model, tok, {budget, 16}, cache);
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
    const EngineStats st = engine.stats();
    EXPECT_EQ(st.preemptions > 0, cache.has_value()) << st.preemptions;
    EXPECT_EQ(st.cache_blocks_free, st.cache_blocks);       // every block back in the pool
    EXPECT_EQ(model.cache_store().pool().num_in_use(), 0);  // and every block of the cache storage
  }
}

// Speculative decoding with the DSpark drafter: a greedy request verifies drafts every step (a
// fixed length, never stopped) and its output is the same as one token a step, whatever the
// drafts were, with prompts in pieces, preempted or not, beside a sampled request that speculates.
TEST(Engine, SpeculativeGreedyOutputIsPlainDecodings) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  Model& model = *tiny.model;
  ASSERT_TRUE(model.has_drafter());
  const Tokenizer& tok = *tiny.tok;
  const std::vector<std::string> prompts = {
      "Once upon a time", "A", "The quick brown fox jumps over", "Why?", "Rivers run to the sea and", "x y z"};
  const auto request = [&](size_t i, std::string* text, FinishReason* finish) {
    EngineRequest r;
    r.prompt = tok.encode(prompts[i]);
    r.sampling.temperature = i == 3 ? 0.8f : 0.0f;  // one sampled request among the greedy ones
    r.sampling.seed = 11;
    r.max_tokens = 40 + static_cast<int>(7 * i);
    r.on_output = [text, finish](const RequestOutput& o) {
      *text += o.text;
      if (o.finish != FinishReason::kNone) *finish = o.finish;
    };
    return r;
  };
  const CacheSizes sizes = reference_cache_sizes(model.config());
  auto probe = cache_layout(sizes, int64_t{1} << 30, 2, 96);
  ASSERT_TRUE(probe.ok());
  auto tight = cache_layout(sizes, (2 * probe->fixed_blocks + 60) * probe->block_bytes, 2, 96);
  ASSERT_TRUE(tight.ok()) << tight.status().message();
  for (const auto& [budget, cache] :
       {std::pair<int64_t, std::optional<CacheLayout>>{512, std::nullopt}, {7, std::nullopt}, {512, *tight}}) {
    std::vector<std::string> texts[2];
    EngineStats stats[2];
    for (const int drafts : {0, 5}) {
      Engine engine(model, tok, {budget, 16, {drafts, 0, 0}}, cache);
      std::vector<std::string>& text = texts[drafts > 0];
      text.assign(prompts.size(), "");
      std::vector<FinishReason> finish(prompts.size(), FinishReason::kNone);
      for (size_t i = 0; i < prompts.size(); ++i) ASSERT_TRUE(engine.submit(request(i, &text[i], &finish[i])).ok());
      int steps = 0;
      while (engine.step()) ASSERT_LT(++steps, 2000);
      for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(finish[i], FinishReason::kLength) << i;
      stats[drafts > 0] = engine.stats();
      EXPECT_EQ(model.cache_store().pool().num_in_use(), 0);
    }
    for (size_t i = 0; i < prompts.size(); ++i)
      if (i != 3) {
        EXPECT_EQ(texts[1][i], texts[0][i]) << "budget " << budget << " prompt " << i;
      }
    EXPECT_EQ(stats[0].drafted_tokens, 0);
    EXPECT_GT(stats[1].verify_steps, 50);
    EXPECT_GT(stats[1].drafted_tokens, 4 * stats[1].verify_steps / 2);
    EXPECT_EQ(stats[1].preemptions > 0, cache.has_value()) << stats[1].preemptions;
    std::printf("budget %ld%s: %ld verify steps, %ld drafts, %ld accepted\n", static_cast<long>(budget),
                cache ? " (tight cache)" : "", static_cast<long>(stats[1].verify_steps),
                static_cast<long>(stats[1].drafted_tokens), static_cast<long>(stats[1].accepted_tokens));
  }
}

// "Once upon a time" decoded greedily by an engine of its own: the text and the engine's counts.
std::pair<std::string, EngineStats> decode_alone(Model& model, const Tokenizer& tok, SpeculativeConfig speculative,
                                                 int max_tokens) {
  Engine engine(model, tok, {512, 16, speculative});
  std::string text;
  EngineRequest r;
  r.prompt = tok.encode("Once upon a time");
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.on_output = [&](const RequestOutput& o) { text += o.text; };
  EXPECT_TRUE(engine.submit(std::move(r)).ok());
  while (engine.step()) {
  }
  return {text, engine.stats()};
}

TEST(Engine, SpeculativeDecodingAcceptsTheModelsOwnTokens) {
  testing::BigramModel bigram;
  ASSERT_TRUE(bigram.model);
  const auto [plain, plain_stats] = decode_alone(*bigram.model, *bigram.tok, {}, 60);
  const auto [text, stats] = decode_alone(*bigram.model, *bigram.tok, {5, 0}, 60);  // every draft verified
  EXPECT_EQ(text, plain);
  EXPECT_FALSE(plain.empty());
  // 60 tokens: the first from the prompt, then verify steps that keep the first draft and the
  // model's token after it (two a step), past the second draft's rejection; the drafter pays.
  EXPECT_GE(stats.accepted_tokens, stats.verify_steps - 2);
  EXPECT_LT(stats.verify_steps, 35);
  std::printf("bigram model: %ld verify steps, %ld drafts, %ld accepted\n", static_cast<long>(stats.verify_steps),
              static_cast<long>(stats.drafted_tokens), static_cast<long>(stats.accepted_tokens));
}

// The confidence head sets how many drafts a step verifies: here it says 1/2 for every draft, so
// the chance that the first k are all accepted is 2^-k.
TEST(Engine, TheConfidenceHeadChoosesTheVerifyLength) {
  testing::BigramModel bigram;
  ASSERT_TRUE(bigram.model);
  for (const auto& [threshold, drafts] : {std::pair{0.25f, 2}, {0.5f, 1}, {0.6f, 0}, {0.0f, 5}}) {
    const EngineStats s = decode_alone(*bigram.model, *bigram.tok, {5, threshold, 0}, 40).second;
    EXPECT_EQ(s.verify_steps > 0, drafts > 0) << threshold;
    // The last step may verify fewer: the budget's end.
    EXPECT_LE(s.drafted_tokens, drafts * s.verify_steps) << threshold;
    EXPECT_GE(s.drafted_tokens, drafts * (s.verify_steps - 1) + (drafts > 0)) << threshold;
  }
}

// A drafter whose drafts are seldom accepted (random weights) stops for the request after its
// probation of 16 calls; the output stays plain decoding's.
TEST(Engine, DraftingStopsWhereItDoesNotPay) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  const auto [plain, plain_stats] = decode_alone(*tiny.model, *tiny.tok, {}, 60);
  const auto [text, stats] = decode_alone(*tiny.model, *tiny.tok, {5, 0}, 60);
  EXPECT_EQ(text, plain);
  EXPECT_LT(stats.accepted_tokens, 8);
  EXPECT_EQ(stats.verify_steps, 15);  // the drafts of calls 1 to 15; the 16th call ends it
}

// The token budget cuts prompts into pieces at different places (1: one token a step; 7 and 8:
// odd and even pieces); none changes a temperature-0 output. The prompts are long enough that the
// indexer selects among more compressed positions than it keeps.
TEST(Engine, TheTokenBudgetChangesNoOutput) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  const Tokenizer& tok = *tiny.tok;
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"Tell me a story about a cat who sails to the moon and back, with every detail you can",
                        "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25",
                        "The quick brown fox jumps over the lazy dog while the rivers run to the sea and"})
    prompts.push_back(tok.encode(p));
  std::map<int64_t, std::vector<std::string>> texts;
  for (const int64_t budget : {512, 1, 7, 8}) {
    Engine engine(*tiny.model, tok, {budget, 16});
    std::vector<std::string>& out = texts[budget];
    out.resize(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r;
      r.prompt = prompts[i];
      r.sampling.temperature = 0;
      r.max_tokens = 8;
      r.on_output = [&out, i](const RequestOutput& o) { out[i] += o.text; };
      ASSERT_TRUE(engine.submit(std::move(r)).ok());
    }
    for (int steps = 0; engine.step();) ASSERT_LT(++steps, 2000);
  }
  for (const int64_t budget : {1, 7, 8})
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(texts[budget][i], texts[512][i])
          << "budget " << budget << ", prompt " << i << " (" << prompts[i].size() << " tokens)";
}

// Runs one request to its end; the outputs in order.
std::vector<RequestOutput> run_alone(Model& model, const Tokenizer& tok, EngineRequest r) {
  Engine engine(model, tok, {64, 4});
  std::vector<RequestOutput> outs;
  r.on_output = [&](const RequestOutput& o) { outs.push_back(o); };
  EXPECT_TRUE(engine.submit(std::move(r)).ok());
  for (int steps = 0; engine.step();) EXPECT_LT(++steps, 1000);
  return outs;
}

std::string joined_text(const std::vector<RequestOutput>& outs) {
  std::string text;
  for (const RequestOutput& o : outs) text += o.text;
  return text;
}

TEST(Engine, ReportsLogprobsOfEveryGeneratedToken) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  EngineRequest r;
  r.prompt = tiny.tok->encode("Once upon a time");
  r.sampling.temperature = 0;
  r.max_tokens = 5;
  r.logprobs = 3;
  int tokens = 0;
  for (const RequestOutput& o : run_alone(*tiny.model, *tiny.tok, r))
    for (const SampledLogprobs& lp : o.logprobs) {
      ++tokens;
      ASSERT_EQ(lp.top.size(), 3u);
      EXPECT_EQ(lp.chosen.token, lp.top[0].token);  // greedy without penalties: the likeliest token
      EXPECT_EQ(lp.chosen.logprob, lp.top[0].logprob);
      EXPECT_LE(lp.top[0].logprob, 0.0f);
      EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
      EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
    }
  EXPECT_EQ(tokens, 5);
  r.logprobs = -1;
  for (const RequestOutput& o : run_alone(*tiny.model, *tiny.tok, r)) EXPECT_TRUE(o.logprobs.empty());
}

// A sampled request without logprobs is drawn on the device (Backend::draw_tokens), one with
// them on the host from its logits: the same tokens, alone and among others; other seeds differ.
TEST(Engine, DrawsOnTheDeviceAreTheHostsDraws) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  const auto tokens = [](const std::vector<RequestOutput>& outs) {
    std::vector<int32_t> t;
    for (const RequestOutput& o : outs)
      for (const SampledLogprobs& lp : o.logprobs) t.push_back(lp.chosen.token);
    return t;
  };
  EngineRequest r;
  r.prompt = tiny.tok->encode("Once upon a time");
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.max_tokens = 12;
  std::set<std::string> texts;
  for (const uint64_t seed : {7u, 8u, 9u}) {
    r.sampling.seed = seed;
    r.logprobs = 0;
    const std::vector<RequestOutput> host = run_alone(*tiny.model, *tiny.tok, r);
    ASSERT_EQ(tokens(host).size(), 12u);
    r.logprobs = -1;
    const std::string drawn = joined_text(run_alone(*tiny.model, *tiny.tok, r));
    EXPECT_EQ(drawn, joined_text(host)) << seed;
    texts.insert(drawn);
  }
  EXPECT_GT(texts.size(), 1u);  // the seeds decide: the draws are not one fixed pick

  // Among greedy requests and one with logprobs, in one engine: the same text as alone.
  Engine engine(*tiny.model, *tiny.tok, {512, 16});
  r.sampling.seed = 7;
  std::map<uint64_t, std::string> text;
  const auto add = [&](EngineRequest q) {
    q.on_output = [&text](const RequestOutput& o) { text[o.id] += o.text; };
    const Result<uint64_t> id = engine.submit(std::move(q));
    EXPECT_TRUE(id.ok());
    return id.ok() ? *id : 0;
  };
  EngineRequest greedy = r;
  greedy.sampling.temperature = 0;
  add(greedy);
  const uint64_t drawn = add(r);
  EngineRequest with_logprobs = r;
  with_logprobs.sampling.seed = 8;
  with_logprobs.logprobs = 1;
  const uint64_t on_host = add(with_logprobs);
  for (int steps = 0; engine.step();) ASSERT_LT(++steps, 1000);
  r.logprobs = -1;
  EXPECT_EQ(text[drawn], joined_text(run_alone(*tiny.model, *tiny.tok, r)));
  r.sampling.seed = 8;
  EXPECT_EQ(text[on_host], joined_text(run_alone(*tiny.model, *tiny.tok, r)));
}

TEST(Engine, ForcedContinuationReplacesSampling) {
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  const Tokenizer& tok = *tiny.tok;
  EngineRequest r;
  r.prompt = tok.encode("Once upon a time");
  r.sampling.temperature = 0;
  r.max_tokens = 8;
  r.logprobs = 0;
  const std::vector<RequestOutput> free_run = run_alone(*tiny.model, tok, r);
  ASSERT_FALSE(free_run.empty());
  const int32_t first = free_run[0].logprobs.at(0).chosen.token;
  const std::vector<int32_t> forced = tok.encode(" forced words");
  // Right after the prompt: the output starts with the forced tokens.
  r.forced = {-1, forced};
  std::string text = joined_text(run_alone(*tiny.model, tok, r));
  EXPECT_TRUE(text.starts_with(" forced words")) << text;
  // After a trigger token: the free first token, then the forced ones.
  r.forced = {first, forced};
  text = joined_text(run_alone(*tiny.model, tok, r));
  EXPECT_TRUE(text.starts_with(tok.decode(std::vector<int32_t>{first}) + " forced words")) << text;
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
