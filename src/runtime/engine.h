// Engine: many requests over one model with continuous batching — one loop of
// schedule -> forward (every scheduled chunk in one call) -> sample -> update -> emit. Requests
// join and leave between steps; each keeps its own sequence state, sampler, detokenizer and stop
// matcher, so its output does not depend on which others share its steps (on the CPU backend it
// is bit-identical to running alone).
//
// Not yet: paged caches and preemption (a request holds a dense sequence state from admission to
// its end, so max_running bounds memory), a thread-safe front for the server.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "model/model.h"
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
  std::string error;  // kError
};

struct EngineRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<int32_t> stop_ids;
  std::vector<std::string> stop_strings;
  std::function<void(const RequestOutput&)> on_output;  // called from step()
};

class Engine {
 public:
  Engine(Model& model, const Tokenizer& tokenizer, SchedulerConfig config);
  ~Engine();

  /// kInvalidArgument for an empty prompt, bad sampling parameters or a prompt + budget beyond the
  /// context; otherwise the request's id.
  Result<uint64_t> submit(EngineRequest request);
  /// Ends a request now (its on_output gets kCancelled); unknown ids are ignored.
  void cancel(uint64_t id);
  /// Cancels every request (shutdown).
  void cancel_all();
  /// One iteration; false when nothing is running or waiting.
  bool step();
  bool idle() const { return requests_.empty(); }

 private:
  struct Live;
  void finish(uint64_t id, FinishReason reason, std::string error = {});

  Model& model_;
  const Tokenizer& tokenizer_;
  Scheduler scheduler_;
  std::map<uint64_t, std::unique_ptr<Live>> requests_;
  uint64_t next_id_ = 1;
};

}  // namespace dsinfer
