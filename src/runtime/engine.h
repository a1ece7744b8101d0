// Engine: many requests over one model with continuous batching — one loop of
// schedule -> forward (every scheduled chunk in one call) -> sample -> update -> emit. Requests
// join and leave between steps; each keeps its own sequence state, sampler, detokenizer and stop
// matcher, so its output does not depend on which others share its steps (on the CPU backend it
// is bit-identical to running alone).
//
// With SpeculativeConfig::draft_tokens and a model with the DSpark drafter, requests decode
// speculatively: after every step the drafter proposes tokens (as many as its confidence head
// backs), the next step verifies them with the request's next token as one verify chunk
// (ForwardChunk::verify), and the rejected positions are taken back (Model::truncate). Greedy
// requests keep the longest prefix the model itself would have generated, so their output is
// bit-identical to decoding one token a step; sampled ones draw their drafts with their own
// parameters and keep or replace each by speculative rejection sampling (SamplerState::
// verify_draft), so their tokens follow the distribution plain sampling follows (a seed reproduces
// a run with the same speculative settings, not one without). Requests with a forced continuation
// decode one token a step, as does a request whose drafts were seldom accepted.
//
// With a cache layout, the caches of the running requests stay within its budget (the model's
// cache store bounded by it, model/cache_store.h): short of blocks, the newest requests are preempted and later
// recompute what they had: the prompt as a prefill, then their output so far as the same decode steps that first
// produced it (not as one prefill: the reference's decode and prefill give different caches at some positions, spec
// §6.4), so the caches come back bit for bit and the output does not change. EngineLoop is the
// thread-safe front (the server's).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "model/model.h"
#include "runtime/model_runner.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"

namespace dsinfer {

enum class FinishReason { kNone, kStopToken, kStopString, kLength, kCancelled, kError };

/// What one step produced for one request: new text, and at the end why it ended.
struct RequestOutput {
  uint64_t id = 0;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string error;                      // kError
  std::vector<SampledLogprobs> logprobs;  // the tokens generated this step, when the request asked
};

/// Tokens the engine emits instead of sampling once `after_token` was generated (or right after
/// the prompt when it is -1): how a forced tool call is made (the calls block's opening).
struct ForcedContinuation {
  int32_t after_token = -1;
  std::vector<int32_t> tokens;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t cache_blocks = 0, cache_blocks_free = 0;  // 0 and 0 without a cache budget
  int64_t preemptions = 0;
  // Speculative decoding (SpeculativeConfig): drafts verified, those accepted, and
  // the verify steps a request ran (a request's step of 2 or more tokens).
  int64_t drafted_tokens = 0, accepted_tokens = 0, verify_steps = 0;
};

struct EngineRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<int32_t> stop_ids;
  std::vector<std::string> stop_strings;
  int logprobs = -1;  // -1: none; n >= 0: each generated token's log-probability and the n likeliest
  ForcedContinuation forced;
  std::function<void(const RequestOutput&)> on_output;  // called from step()
};

class Engine {
 public:
  /// No cache layout: no cache limit (max_running bounds the memory). followers: on rank 0 of a
  /// job of several ranks, the channel to the others, which run each step's forward with it
  /// (follow_steps, runtime/model_runner.h) and keep the same cache layout.
  Engine(Model& model, const Tokenizer& tokenizer, SchedulerConfig config,
         std::optional<CacheLayout> cache = std::nullopt, StepChannel* followers = nullptr);
  ~Engine();

  /// kInvalidArgument for an empty prompt, bad sampling parameters or a prompt + budget beyond the
  /// context; otherwise the request's id.
  Result<uint64_t> submit(EngineRequest request);
  /// submit's checks alone. It reads only what is fixed when the Engine is made (the context, the
  /// cache budget's size), never the running state, so any thread may call it while another steps.
  Status validate(const EngineRequest& request) const;
  /// Ends a request now (its on_output gets kCancelled); unknown ids are ignored.
  void cancel(uint64_t id);
  /// Cancels every request (shutdown).
  void cancel_all();
  /// One iteration; false when nothing is running or waiting.
  bool step();
  bool idle() const { return requests_.empty(); }
  EngineStats stats() const;
  /// Ok, or why the engine can run nothing more: on several ranks, a forward whose collectives or
  /// step message failed (a rank died or stopped answering). Every request then ended with it and
  /// submit refuses new ones; the job is to end.
  const Status& broken() const { return broken_; }

 private:
  struct Live;
  void finish(uint64_t id, FinishReason reason, std::string error = {});

  // Emits one generated token of request `id` (stop ids, forced continuations, stop strings, the
  // budget); false when the request finished with it.
  bool emit(uint64_t id, Live& r, int32_t token, std::span<const float> logits);
  // The DSpark drafter after a step: the rows each speculating request computed go into its rings,
  // and a request that waits for its next step gets drafts to verify in it.
  void draft(const std::vector<ScheduledChunk>& plan, const std::vector<int64_t>& kept,
             const std::vector<int64_t>& hidden_rows);

  Model& model_;
  ModelRunner runner_;
  const Tokenizer& tokenizer_;
  Scheduler scheduler_;
  const int draft_tokens_;  // 0: no speculative decoding
  DeviceArray<uint16_t> main_hidden_;
  std::vector<float> logits_;          // a step's logits (Engine::step), kept for the next
  std::vector<RowReadback> readback_;  // what a step reads back of each logit row
  std::vector<int32_t> picks_;         // the device's greedy picks and draws of a step's rows
  std::vector<RowDraw> draws_;         // the draws a step asks of the device
  DeviceArray<int32_t> draft_out_;
  DeviceArray<float> draft_base_, draft_confidence_;
  const double min_confidence_, min_accepted_per_call_;  // SpeculativeConfig's
  int64_t drafted_ = 0, accepted_ = 0, verify_steps_ = 0;
  const int64_t context_;         // the model's max_seq_len
  const int64_t cache_capacity_;  // the budget's blocks; -1 without a cache budget
  std::map<uint64_t, std::unique_ptr<Live>> requests_;
  uint64_t next_id_ = 1;
  Status broken_;
};

}  // namespace dsinfer
