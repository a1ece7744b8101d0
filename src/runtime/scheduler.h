// Scheduler: which requests run in the next step and with how many tokens (vLLM's schedule()):
// one token for every running request past its prompt, then prompt pieces of the running and
// waiting requests, first come first served, within a token budget. It only moves each request's
// count of computed tokens toward its total; the engine runs what it returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace dsinfer {

struct SchedulerConfig {
  int64_t token_budget = 512;  // tokens one step runs (prefill pieces + decodes)
  int max_running = 64;        // requests holding a sequence state at once
};

/// What the scheduler knows of a request.
struct SchedulerEntry {
  uint64_t id = 0;
  int64_t prompt_tokens = 0;
  int64_t computed = 0;  // tokens already in the sequence's caches
};

struct ScheduledChunk {
  uint64_t id = 0;
  int64_t start = 0, count = 0;  // positions [start, start + count)
  bool decode = false;           // one generated token (else a piece of the prompt)
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config) : config_(config) {}
  void add(uint64_t id, int64_t prompt_tokens);
  /// Forgets a request (finished or cancelled), running or waiting.
  void remove(uint64_t id);
  std::vector<ScheduledChunk> schedule();
  /// After a step ran `chunks`: every request's computed count moves past its chunk.
  void update(const std::vector<ScheduledChunk>& chunks);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }

 private:
  SchedulerConfig config_;
  std::vector<SchedulerEntry> running_;  // in arrival order
  std::deque<SchedulerEntry> waiting_;
};

}  // namespace dsinfer
