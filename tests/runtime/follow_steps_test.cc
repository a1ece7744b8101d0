// Rank 0's engine leading another rank (issue 20), in one process: the leader's engine sends each
// step's plan through a queue to a follower that runs it on its own copy of the model, as a rank
// of a tensor-parallel job runs its shard. With a cache budget small enough to preempt, the
// follower's logits pick every token the leader's greedy requests emitted, and it ends when the
// engine goes. The plan's bytes decode to what was encoded; malformed ones are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/engine.h"
#include "runtime/model_runner.h"
#include "runtime/step_plan.h"
#include "tiny_model_fixture.h"

namespace dsinfer {
namespace {

class QueueChannel final : public StepChannel {
 public:
  Status send(std::span<const uint8_t> message) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(message.begin(), message.end());
    cv_.notify_one();
    return {};
  }
  Result<std::vector<uint8_t>> receive() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    std::vector<uint8_t> m = std::move(queue_.front());
    queue_.pop_front();
    return m;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<uint8_t>> queue_;
};

TEST(FollowSteps, TheFollowerComputesWhatTheLeaderEmits) {
  testing::TinyModel leader(4), follower(4);
  ASSERT_TRUE(leader.ok() && follower.ok());
  const Tokenizer& tok = *leader.tok;
  // Three requests' fixed caches and 20 positions in blocks of two: the newest are preempted.
  const CacheSizes sizes = reference_cache_sizes(leader.model->config());
  auto probe = cache_layout(sizes, int64_t{1} << 30, 2, 24);
  ASSERT_TRUE(probe.ok());
  auto tight = cache_layout(sizes, (3 * probe->fixed_blocks + 10) * probe->block_bytes, 2, 24);
  ASSERT_TRUE(tight.ok()) << tight.status().message();

  QueueChannel channel;
  ASSERT_TRUE(follower.model->reserve_cache(*tight).ok());
  // What the follower's logits predict: each sequence's greedy token at the position after a chunk.
  std::map<std::pair<uint64_t, int64_t>, int32_t> predicted;
  int64_t checked = 0, steps_followed = 0;
  const int64_t vocab = leader.model->config().vocab_size;
  Status followed;
  std::thread follower_thread([&] {
    ModelRunner runner(*follower.model);
    followed = follow_steps(runner, channel, [&](const StepPlan& plan, std::span<const float> logits) {
      ++steps_followed;
      for (size_t i = 0; i < plan.chunks.size(); ++i) {
        const PlannedChunk& c = plan.chunks[i];
        for (size_t t = 0; t < c.tokens.size(); ++t) {  // the tokens the leader fed: emitted past the prompt
          const int64_t pos = c.start_pos + static_cast<int64_t>(t);
          if (const auto it = predicted.find({c.sequence, pos}); it != predicted.end() && pos >= c.prompt_len) {
            EXPECT_EQ(c.tokens[t], it->second) << "sequence " << c.sequence << " position " << pos;
            ++checked;
          }
        }
        const std::span<const float> row = logits.subspan(i * vocab, vocab);
        predicted[{c.sequence, c.start_pos + static_cast<int64_t>(c.tokens.size())}] =
            static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      }
    });
  });
  int64_t preemptions = 0;
  {
    Engine engine(*leader.model, tok, {512, 16}, *tight, &channel);
    for (const char* p : {"Once upon a time", "The quick brown fox", "Hello", "What is 2 + 2?", "Rivers run to the sea",
                          "Tell me a story about a cat", "Numbers: 1 2 3", "Moon and stars"}) {
      EngineRequest r;
      r.prompt = tok.encode(p);
      r.sampling.temperature = 0;
      r.max_tokens = 8;
      ASSERT_TRUE(engine.submit(std::move(r)).ok());
    }
    for (int steps = 0; engine.step();) ASSERT_LT(++steps, 1000);
    preemptions = engine.stats().preemptions;
  }  // the engine's runner stops the follower
  follower_thread.join();
  EXPECT_TRUE(followed.ok()) << followed.message();
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(steps_followed, 8);
  EXPECT_GT(checked, 8 * 6);  // most emitted tokens were fed back and checked (the last of each is not)
  EXPECT_EQ(follower.model->cache_store().pool().num_in_use(), 0);  // the follower's states all went
}

TEST(FollowSteps, ASequenceNeverBegunIsAnError) {
  testing::TinyModel follower(4);
  ASSERT_TRUE(follower.ok());
  QueueChannel channel;
  StepPlan plan;
  plan.chunks.push_back({7, 5, true, 3, {42}});
  ASSERT_TRUE(channel.send(encode_step_plan(plan)).ok());
  ModelRunner runner(*follower.model);
  const Status s = follow_steps(runner, channel);
  EXPECT_EQ(s.kind(), ErrorKind::kInternal);
  EXPECT_NE(s.message().find("sequence 7 at position 5"), std::string::npos) << s.message();
}

// Another rank that stopped answering: the step message fails, every request ends with that error,
// later submissions are refused with it, and the loop reports it once (the server ends the job).
TEST(FollowSteps, AChannelThatFailsBreaksTheEngine) {
  class DeadChannel final : public StepChannel {
   public:
    Status send(std::span<const uint8_t>) override {
      return error(ErrorKind::kUnavailable, "the other ranks did not take it");
    }
    Result<std::vector<uint8_t>> receive() override { return error(ErrorKind::kInternal, "unused"); }
  } dead;
  testing::TinyModel tiny(4);
  ASSERT_TRUE(tiny.ok());
  Engine engine(*tiny.model, *tiny.tok, {512, 16}, std::nullopt, &dead);
  std::vector<RequestOutput> ends;
  for (const char* p : {"Hello", "Moon and stars"}) {
    EngineRequest r;
    r.prompt = tiny.tok->encode(p);
    r.on_output = [&](const RequestOutput& o) {
      if (o.finish != FinishReason::kNone) ends.push_back(o);
    };
    ASSERT_TRUE(engine.submit(std::move(r)).ok());
  }
  EXPECT_FALSE(engine.step());
  ASSERT_EQ(ends.size(), 2u);
  for (const RequestOutput& o : ends) {
    EXPECT_EQ(o.finish, FinishReason::kError);
    EXPECT_NE(o.error.find("did not take it"), std::string::npos) << o.error;
  }
  EXPECT_EQ(engine.broken().kind(), ErrorKind::kUnavailable);
  EngineRequest late;
  late.prompt = tiny.tok->encode("Late");
  const auto refused = engine.submit(std::move(late));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().kind(), ErrorKind::kUnavailable);
}

TEST(StepPlan, BytesRoundTripAndMalformedOnesAreRefused) {
  StepPlan plan;
  plan.released = {3, 9};
  plan.chunks.push_back({1, 0, false, 4, {10, 11, 12, 13}});
  plan.chunks.push_back({2, 17, true, 5, {99}});
  const std::vector<uint8_t> bytes = encode_step_plan(plan);
  auto back = decode_step_plan(bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_FALSE(back->stop);
  EXPECT_EQ(back->released, plan.released);
  ASSERT_EQ(back->chunks.size(), 2u);
  EXPECT_EQ(back->chunks[1].sequence, 2u);
  EXPECT_EQ(back->chunks[1].start_pos, 17);
  EXPECT_TRUE(back->chunks[1].decode);
  EXPECT_EQ(back->chunks[1].prompt_len, 5);
  EXPECT_EQ(back->chunks[0].tokens, plan.chunks[0].tokens);
  StepPlan stop;
  stop.stop = true;
  auto stopped = decode_step_plan(encode_step_plan(stop));
  ASSERT_TRUE(stopped.ok());
  EXPECT_TRUE(stopped->stop);
  // Every truncation, a trailing byte and a wrong tag: refused, never read past the end.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto cut = decode_step_plan(std::span<const uint8_t>(bytes).first(n));
    ASSERT_FALSE(cut.ok()) << n;
    EXPECT_EQ(cut.status().kind(), ErrorKind::kInternal);
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(decode_step_plan(longer).ok());
  std::vector<uint8_t> wrong = bytes;
  wrong[0] ^= 1;
  EXPECT_FALSE(decode_step_plan(wrong).ok());
}

}  // namespace
}  // namespace dsinfer
