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

std::vector<ScheduledChunk> Scheduler::schedule() {
  std::vector<ScheduledChunk> out;
  int64_t budget = config_.token_budget;
  // Decodes first: a running request past its prompt advances by one token every step.
  for (const SchedulerEntry& e : running_)
    if (e.computed >= e.prompt_tokens && budget > 0) out.push_back({e.id, e.computed, 1, true}), --budget;
  // Then prompt pieces: running requests still in their prompt, then new ones while there is room.
  const auto prefill = [&](const SchedulerEntry& e) {
    const int64_t n = std::min(budget, e.prompt_tokens - e.computed);
    if (n > 0) out.push_back({e.id, e.computed, n, false}), budget -= n;
  };
  for (const SchedulerEntry& e : running_)
    if (e.computed < e.prompt_tokens) prefill(e);
  while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < config_.max_running) {
    running_.push_back(waiting_.front());
    waiting_.pop_front();
    prefill(running_.back());
  }
  return out;
}

void Scheduler::update(const std::vector<ScheduledChunk>& chunks) {
  for (const ScheduledChunk& c : chunks)
    for (SchedulerEntry& e : running_)
      if (e.id == c.id) e.computed = c.start + c.count;
}

}  // namespace dsinfer
