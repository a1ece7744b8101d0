// Communicator: the collectives the tensor-parallel forward needs (spec §14b.2). The single-process
// one is a no-op; NCCL implements the same interface for several GPUs.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dsinfer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// In-place sum over ranks of an f32 or bf16 buffer.
  virtual void all_reduce_sum(TensorView x) = 0;
  /// out [world * n] = concat over ranks of x [n] (same dtype).
  virtual void all_gather(TensorView x, TensorView out) = 0;
};

/// world_size 1: every collective is the identity.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(TensorView) override {}
  void all_gather(TensorView x, TensorView out) override;
};

}  // namespace dsinfer
