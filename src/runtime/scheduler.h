// Scheduler: which requests run in the next step and with how many tokens (vLLM's schedule()):
// one token for every running request past its prompt, then prompt pieces of the running and
// waiting requests, first come first served, within a token budget and, when a CacheManager is
// given, within the cache blocks it can hand out. When a running request needs a block and none is
// free, the newest running requests are preempted: they give their blocks back and wait at the
// front of the queue to compute their positions again from 0 (the prompt in pieces, then one
// position per step past it). It only moves each request's count of computed tokens; the engine
// runs what it returns and knows which tokens fill those positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "runtime/cache_manager.h"

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
  int64_t prompt_tokens = 0;     // the prompt this piece belongs to
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<uint64_t> preempted;  // their caches are to be dropped: they start again from position 0
};

class Scheduler {
 public:
  /// `cache` (may be null: no cache limit) must outlive the scheduler.
  Scheduler(SchedulerConfig config, CacheManager* cache) : config_(config), cache_(cache) {}
  void add(uint64_t id, int64_t prompt_tokens);
  /// Forgets a request (finished or cancelled), running or waiting, and frees its blocks.
  void remove(uint64_t id);
  SchedulerOutput schedule();
  /// After a step ran `chunks`: every request's computed count moves past its chunk.
  void update(const std::vector<ScheduledChunk>& chunks);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  int64_t num_preemptions() const { return preemptions_; }

 private:
  // Of `wanted` positions after e.computed, how many the cache can take for e (all without a cache).
  int64_t fit(const SchedulerEntry& e, int64_t wanted);
  // Moves the newest running request back to the front of the queue.
  void preempt_last(SchedulerOutput& out);

  SchedulerConfig config_;
  CacheManager* cache_;
  std::vector<SchedulerEntry> running_;  // in arrival order
  std::deque<SchedulerEntry> waiting_;
  int64_t preemptions_ = 0;
};

}  // namespace dsinfer
