// StepPlan: what one step of rank 0's engine runs, as the other ranks of a tensor-parallel job need
// it to run the same forward on their shards (issue 20: the scheduler lives on rank 0 alone). Each
// sequence is named by an id of rank 0's; a rank that follows keeps its own state for each.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace dsinfer {

struct PlannedChunk {
  uint64_t sequence = 0;
  int64_t start_pos = 0;
  bool decode = false;
  int64_t prompt_len = 0;
  std::vector<int32_t> tokens;
};

struct StepPlan {
  bool stop = false;               // the job ends: the ranks that follow return
  std::vector<uint64_t> released;  // sequences whose states go before the step (finished or preempted)
  std::vector<PlannedChunk> chunks;
};

std::vector<uint8_t> encode_step_plan(const StepPlan& plan);
/// kInternal when `bytes` is not a plan encode_step_plan wrote (truncated, trailing bytes, bad counts).
Result<StepPlan> decode_step_plan(std::span<const uint8_t> bytes);

}  // namespace dsinfer
