// Communicator: the collectives the tensor-parallel forward needs (spec §14b.2). The single-process
// one is the identity; MPI (CPU ranks, src/parallel/) implements the same interface for several
// processes. A collective that another rank does not join in time fails with kUnavailable.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace dsinfer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Whether the collectives are enqueued on the device's stream rather than done at the call (NCCL):
  /// a recorded step that skipped the call would then skip the collective, so such steps are not recorded.
  virtual bool enqueues_on_device() const { return false; }
  /// In-place sum over ranks of an f32 or bf16 buffer (bf16 summed in f32, rounded once).
  virtual Status all_reduce_sum(TensorView x) = 0;
  /// out [world * n] = concat over ranks of x [n] (same dtype).
  virtual Status all_gather(TensorView x, TensorView out) = 0;
};

/// world_size 1: every collective is the identity.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status all_reduce_sum(TensorView) override { return {}; }
  Status all_gather(TensorView x, TensorView out) override;
};

/// Rank 0's messages to the other ranks of a job, on the host: how the scheduler on rank 0 tells the
/// others what each step runs (runtime/step_plan.h). Apart from the communicator, whose collectives
/// may run on a device and wait a bounded time: a rank that follows waits for the next message as
/// long as rank 0 takes (a server idles between requests).
class StepChannel {
 public:
  virtual ~StepChannel() = default;
  /// Rank 0: the message to every other rank; kUnavailable when they do not take it in time.
  virtual Status send(std::span<const uint8_t> message) = 0;
  /// Another rank: the next message of rank 0, waiting as long as it takes.
  virtual Result<std::vector<uint8_t>> receive() = 0;
};

}  // namespace dsinfer
