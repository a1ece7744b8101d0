// The engine loop on the tiny model: nothing that submits, cancels or reads stats waits for a
// forward pass. A short request finishes while a long one runs, a cancelled request stops within a
// few steps, stats() answers at once mid-generation, and destroying the loop cancels what runs.
// The bounds are ratios and token counts, not tight times: the suite also runs under ASan.
#include "runtime/engine_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "model/cache_sizes.h"
#include "tiny_model_fixture.h"

namespace dsinfer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class EngineLoopTest : public ::testing::Test {
 protected:
  static constexpr int64_t kContext = 640;
  static constexpr int kLong = 600;  // the long request's tokens: hundreds of steps

  void SetUp() override {
    ASSERT_TRUE(tiny_.ok());
    // A cache budget of four sequences of the context in two-position blocks: the blocks in use
    // show in the stats.
    const CacheSizes sizes = reference_cache_sizes(tiny_.model->config());
    const CacheLayout probe = *cache_layout(sizes, 1 << 30, 2, kContext);
    auto cache = cache_layout(sizes, 4 * (probe.fixed_blocks + kContext / 2) * probe.block_bytes, 2, kContext);
    ASSERT_TRUE(cache.ok()) << cache.status().message();
    engine_ = std::make_unique<Engine>(*tiny_.model, *tiny_.tok, SchedulerConfig{64, 16}, *cache);
    loop_ = std::make_unique<EngineLoop>(*engine_, 64);
  }
  void TearDown() override { loop_.reset(); }

  // No stop tokens: runs to max_tokens. logprobs 0: one output for every generated token.
  EngineRequest request(int max_tokens) {
    EngineRequest r;
    r.prompt = tiny_.tok->encode("Once upon a time");
    r.max_tokens = max_tokens;
    r.logprobs = 0;
    return r;
  }
  // Reads `n` outputs (each one token) of a running request.
  static void read_tokens(OutputStream& s, int n) {
    RequestOutput out;
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(s.next(&out));
      ASSERT_EQ(out.finish, FinishReason::kNone);
    }
  }
  // Reads to the end; the last output, and in *tokens the outputs that carried a token.
  static RequestOutput drain(OutputStream& s, int* tokens = nullptr) {
    RequestOutput out, last;
    while (s.next(&out)) {
      if (tokens) *tokens += static_cast<int>(out.logprobs.size());
      last = out;
    }
    return last;
  }

  testing::TinyModel tiny_{4};
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineLoop> loop_;
};

TEST_F(EngineLoopTest, ShortRequestFinishesWhileALongOneRuns) {
  auto long_stream = loop_->submit(request(kLong));
  ASSERT_TRUE(long_stream.ok());
  const auto long_start = Clock::now();
  read_tokens(**long_stream, 8);
  const double per_token = seconds_since(long_start) / 8;

  const auto short_start = Clock::now();
  auto short_stream = loop_->submit(request(4));
  ASSERT_TRUE(short_stream.ok());
  int short_tokens = 0;
  const RequestOutput short_last = drain(**short_stream, &short_tokens);
  const double short_s = seconds_since(short_start);
  EXPECT_EQ(short_last.finish, FinishReason::kLength);
  EXPECT_EQ(short_last.completion_tokens, 4);
  EXPECT_EQ(short_tokens, 4);

  // The long one is still running: cancelling it ends it far short of its budget.
  for (int i = 0; i < 200 && loop_->stats().active > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(loop_->stats().active, 1);  // (the short one's end is published after its step)
  loop_->cancel((*long_stream)->id());
  const RequestOutput long_last = drain(**long_stream);
  EXPECT_EQ(long_last.finish, FinishReason::kCancelled);
  EXPECT_LT(long_last.completion_tokens, kLong / 2);
  std::printf("short request: %.3f s beside the long one (%.4f s per long token, %lld of %d tokens when cancelled)\n",
              short_s, per_token, static_cast<long long>(long_last.completion_tokens), kLong);
}

TEST_F(EngineLoopTest, CancelStopsWithinAFewSteps) {
  auto stream = loop_->submit(request(kLong));
  ASSERT_TRUE(stream.ok());
  read_tokens(**stream, 5);
  loop_->cancel((*stream)->id());
  int tokens = 5;
  const RequestOutput last = drain(**stream, &tokens);
  EXPECT_EQ(last.finish, FinishReason::kCancelled);
  EXPECT_EQ(last.completion_tokens, tokens);
  // The step in progress may end and the reader lags the loop by a few tokens; nowhere near the
  // budget of 600.
  EXPECT_LT(last.completion_tokens, 5 + 30);
  std::printf("cancelled after reading 5 tokens: %lld generated (budget %d)\n",
              static_cast<long long>(last.completion_tokens), kLong);
  for (int i = 0; i < 200 && loop_->stats().active > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineLoopStats s = loop_->stats();
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.engine.running, 0);
  EXPECT_EQ(s.engine.cache_blocks_free, s.engine.cache_blocks);  // its blocks given back

  // A request cancelled right after submission (still queued for the loop) ends too.
  auto quick = loop_->submit(request(kLong));
  ASSERT_TRUE(quick.ok());
  loop_->cancel((*quick)->id());
  EXPECT_EQ(drain(**quick).finish, FinishReason::kCancelled);
  // cancel_all as well.
  auto a = loop_->submit(request(kLong));
  auto b = loop_->submit(request(kLong));
  ASSERT_TRUE(a.ok() && b.ok());
  read_tokens(**a, 2);
  loop_->cancel_all();
  EXPECT_LT(drain(**a).completion_tokens, kLong / 2);
  EXPECT_EQ(drain(**b).finish, FinishReason::kCancelled);
  // shut_down ends what runs and refuses what comes after it (a handler that submits while the
  // server stops must not run to its end).
  auto c = loop_->submit(request(kLong));
  ASSERT_TRUE(c.ok());
  read_tokens(**c, 2);
  loop_->shut_down();
  EXPECT_EQ(drain(**c).finish, FinishReason::kCancelled);
  auto late = loop_->submit(request(kLong));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().kind(), ErrorKind::kResourceExhausted);
  EXPECT_NE(late.status().message().find("stopping"), std::string::npos);
}

TEST_F(EngineLoopTest, StatsAnswerAtOnceWhileALongRequestRuns) {
  auto stream = loop_->submit(request(kLong));
  ASSERT_TRUE(stream.ok());
  read_tokens(**stream, 5);
  double slowest = 0;
  EngineLoopStats s;
  for (int i = 0; i < 20; ++i) {
    const auto t = Clock::now();
    s = loop_->stats();
    slowest = std::max(slowest, seconds_since(t));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_LT(slowest, 0.1);
  EXPECT_EQ(s.active, 1);
  EXPECT_EQ(s.requests, 1);
  EXPECT_EQ(s.engine.running, 1);
  EXPECT_EQ(s.engine.waiting, 0);
  EXPECT_GT(s.engine.cache_blocks, 0);
  EXPECT_LT(s.engine.cache_blocks_free, s.engine.cache_blocks);  // the long request holds blocks
  EXPECT_GE(s.ttft.count(), 1);
  std::printf("slowest of 20 stats() calls mid-generation: %.6f s\n", slowest);

  // Validation errors come back at once, from the caller's thread.
  EngineRequest empty;
  EXPECT_EQ(loop_->submit(std::move(empty)).status().kind(), ErrorKind::kInvalidArgument);
  EngineRequest too_long = request(1 << 20);
  EXPECT_NE(loop_->submit(std::move(too_long)).status().message().find("exceeds the context"), std::string::npos);
  loop_->cancel((*stream)->id());
  EXPECT_EQ(drain(**stream).finish, FinishReason::kCancelled);
}

TEST_F(EngineLoopTest, DestroyingTheLoopCancelsWhatRuns) {
  auto running = loop_->submit(request(kLong));
  auto waiting = loop_->submit(request(kLong));
  ASSERT_TRUE(running.ok() && waiting.ok());
  const auto start = Clock::now();
  read_tokens(**running, 8);
  const double per_token = seconds_since(start) / 8;
  const auto t = Clock::now();
  loop_.reset();
  const double destroy_s = seconds_since(t);
  const RequestOutput last = drain(**running);
  EXPECT_EQ(last.finish, FinishReason::kCancelled);
  EXPECT_LT(last.completion_tokens, kLong / 2);
  EXPECT_EQ(drain(**waiting).finish, FinishReason::kCancelled);
  // Far less than the rest of the generation would take (a few steps at most).
  EXPECT_LT(destroy_s, per_token * kLong / 4);
  std::printf("destroyed mid-generation in %.4f s (%.4f s per token; %lld of %d tokens generated)\n", destroy_s,
              per_token, static_cast<long long>(last.completion_tokens), kLong);
}

}  // namespace
}  // namespace dsinfer
