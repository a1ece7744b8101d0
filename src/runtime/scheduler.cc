#include "runtime/scheduler.h"

#include <algorithm>

namespace dsinfer {

void Scheduler::add(uint64_t id, int64_t prompt_tokens) {
  waiting_.push_back({id, prompt_tokens, 0});
}

void Scheduler::remove(uint64_t id) {
  const auto match = [id](const SchedulerEntry& e) { return e.id == id; };
  std::erase_if(running_, match);
  std::erase_if(waiting_, match);
}

int64_t Scheduler::fit(SchedulerEntry& e, int64_t wanted) {
  if (!cache_) return wanted;
  const int64_t affordable = e.blocks + free_, fixed = cache_->fixed_blocks(), per = cache_->block_tokens();
  if (affordable < fixed + 1) return 0;
  const int64_t n = std::min(wanted, (affordable - fixed) * per - e.computed);
  if (n <= 0) return 0;
  const int64_t blocks = cache_->blocks_for(e.computed + n);
  free_ -= blocks - e.blocks;
  e.blocks = blocks;
  return n;
}

void Scheduler::preempt_last(SchedulerOutput& out) {
  SchedulerEntry e = running_.back();
  running_.pop_back();
  free_ += e.blocks;  // dropped with its sequence state before the step runs
  e.blocks = 0;
  e.computed = 0;  // its prompt again, then its output so far as decodes (the engine knows the tokens)
  e.lookahead = 0;
  waiting_.push_front(e);
  out.preempted.push_back(e.id);
  ++preemptions_;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.token_budget;
  if (cache_) free_ = cache_->pool().num_free();
  // Decodes first: a running request past its prompt advances by one token every step. Short of
  // blocks, the newest requests make room (never one already given its token: they come first).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    SchedulerEntry& e = running_[i];
    if (e.computed < e.prompt_tokens) continue;
    int64_t n = 0;
    while ((n = fit(e, std::min(1 + e.lookahead, budget))) == 0) {
      const bool self = i + 1 == running_.size();
      preempt_last(out);
      if (self) break;
    }
    if (i < running_.size()) out.chunks.push_back({e.id, e.computed, n, true, e.prompt_tokens}), budget -= n;
  }
  if (!out.chunks.empty() && config_.prefill_with_decodes > 0) budget = std::min(budget, config_.prefill_with_decodes);
  // Then prompt pieces: running requests still in their prompt, as far as blocks allow. If nothing
  // at all could run, the newest request gives way (one request alone always fits the pool).
  for (;;) {
    for (SchedulerEntry& e : running_) {
      if (e.computed >= e.prompt_tokens || budget <= 0) continue;
      const int64_t n = fit(e, std::min(budget, e.prompt_tokens - e.computed));
      if (n > 0) out.chunks.push_back({e.id, e.computed, n, false, e.prompt_tokens}), budget -= n;
    }
    if (!out.chunks.empty() || running_.size() <= 1) break;
    preempt_last(out);
  }
  // New requests while there is room, in arrival order (none skips the one that does not fit); not
  // in a step that had to preempt, or the preempted would come straight back and thrash.
  while (out.preempted.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < config_.max_running) {
    SchedulerEntry& e = waiting_.front();
    const int64_t n = fit(e, std::min(budget, e.prompt_tokens - e.computed));
    if (n == 0) break;
    out.chunks.push_back({e.id, e.computed, n, false, e.prompt_tokens}), budget -= n;
    running_.push_back(e);
    waiting_.pop_front();
  }
  return out;
}

void Scheduler::update(const std::vector<ScheduledChunk>& chunks) {
  for (const ScheduledChunk& c : chunks)
    for (SchedulerEntry& e : running_)
      if (e.id == c.id) e.computed = c.start + c.count, e.lookahead = 0;
}

void Scheduler::set_lookahead(uint64_t id, int64_t drafts) {
  for (SchedulerEntry& e : running_)
    if (e.id == id) e.lookahead = std::max<int64_t>(0, drafts);
}

void Scheduler::rewind(uint64_t id, int64_t computed) {
  for (SchedulerEntry& e : running_)
    if (e.id == id) e.computed = std::min(e.computed, computed);
}

}  // namespace dsinfer
