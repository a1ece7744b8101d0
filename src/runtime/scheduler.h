// Scheduler: which requests run in the next step and with how many tokens (vLLM's schedule()):
// one token for every running request past its prompt, then prompt pieces of the running and
// waiting requests, first come first served, within a token budget and, when a bounded cache store
// is given, within the blocks it can hand out. When a running request needs a block and none is
// free, the newest running requests are preempted: they give their blocks back and wait at the
// front of the queue to compute their positions again from 0 (the prompt in pieces, then one
// position per step past it). It only moves each request's count of computed tokens and counts
// the blocks its plan needs; the engine runs what it returns, its forward takes those blocks
// (BlockTable::cover) and a preempted request's blocks go back when the engine drops its
// sequence state: the one place they are released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "model/cache_store.h"

namespace dsinfer {

/// Speculative decoding where the model has the DSpark drafter (runtime/engine.h).
struct SpeculativeConfig {
  int draft_tokens = 0;  // the most drafts a request verifies in a step (0: no speculative decoding)
  /// A draft is verified while the confidence head's chance that it and those before it are all
  /// accepted (the product of their sigmoids) is at least this (0: always draft_tokens).
  float min_confidence = 0.25f;
  /// After 16 drafter calls, a request whose drafts were accepted fewer than this many a call on
  /// average stops drafting (0: never).
  float min_accepted_per_call = 0.5f;
};

struct SchedulerConfig {
  int64_t token_budget = 512;  // tokens one step runs (prefill pieces + decodes)
  int max_running = 64;        // requests holding a sequence state at once
  SpeculativeConfig speculative = {};
  /// Prompt tokens a step takes beside decodes at most (0: the token budget's rest): under load
  /// each decode step then waits on at most this much prefill, so the time between a stream's
  /// tokens stays bounded, at some throughput; a step with no decodes still fills the budget.
  int64_t prefill_with_decodes = 0;
};

/// What the scheduler knows of a request.
struct SchedulerEntry {
  uint64_t id = 0;
  int64_t prompt_tokens = 0;
  int64_t computed = 0;   // tokens already in the sequence's caches
  int64_t blocks = 0;     // cache blocks its sequence holds once the planned chunks ran
  int64_t lookahead = 0;  // past its prompt: drafts to verify after its next token (set_lookahead)
};

struct ScheduledChunk {
  uint64_t id = 0;
  int64_t start = 0, count = 0;  // positions [start, start + count)
  bool decode = false;        // generated tokens: the next one, then as many drafts as fit (else a piece of the prompt)
  int64_t prompt_tokens = 0;  // the prompt this piece belongs to
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<uint64_t> preempted;  // their caches are to be dropped: they start again from position 0
};

class Scheduler {
 public:
  /// `cache` (may be null or unbounded: no cache limit) must outlive the scheduler.
  Scheduler(SchedulerConfig config, const CacheStore* cache)
      : config_(config), cache_(cache && cache->bounded() ? cache : nullptr) {}
  void add(uint64_t id, int64_t prompt_tokens);
  /// Forgets a request (finished or cancelled), running or waiting; its blocks are the engine's to drop.
  void remove(uint64_t id);
  SchedulerOutput schedule();
  /// After a step ran `chunks`: every request's computed count moves past its chunk.
  void update(const std::vector<ScheduledChunk>& chunks);
  /// A running request's decodes also verify up to `drafts` tokens after its next one (as far as
  /// the token budget and the blocks allow); 0 again after each step.
  void set_lookahead(uint64_t id, int64_t drafts);
  /// A verify step kept fewer positions than it ran: the request's caches hold `computed` (its
  /// blocks stay its own).
  void rewind(uint64_t id, int64_t computed);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  int64_t num_preemptions() const { return preemptions_; }

 private:
  // Of `wanted` positions after e.computed, how many fit e's blocks and the free ones (all without
  // a cache); counts the blocks they take.
  int64_t fit(SchedulerEntry& e, int64_t wanted);
  // Moves the newest running request back to the front of the queue.
  void preempt_last(SchedulerOutput& out);

  SchedulerConfig config_;
  const CacheStore* cache_;
  int64_t free_ = 0;                     // during schedule(): the store's free blocks less those planned
  std::vector<SchedulerEntry> running_;  // in arrival order
  std::deque<SchedulerEntry> waiting_;
  int64_t preemptions_ = 0;
};

}  // namespace dsinfer
