// The StepChannel of an MPI job (ops/communicator.h): rank 0's step messages broadcast to the other
// ranks on a communicator of their own, so that they never meet the collectives of the forward.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "ops/communicator.h"

namespace dsinfer {

class MpiStepChannel final : public StepChannel {
 public:
  /// Every rank of the job; rank 0 sends, the others receive. `timeout`: how long rank 0 waits for
  /// the others to take a message. MPI must be initialised (an MpiSession).
  static Result<std::unique_ptr<MpiStepChannel>> create(std::chrono::milliseconds timeout);
  ~MpiStepChannel() override;
  MpiStepChannel(const MpiStepChannel&) = delete;
  MpiStepChannel& operator=(const MpiStepChannel&) = delete;

  Status send(std::span<const uint8_t> message) override;
  Result<std::vector<uint8_t>> receive() override;

 private:
  MpiStepChannel(MPI_Comm comm, std::chrono::milliseconds timeout);
  // Broadcasts `bytes` bytes at `data` from rank 0: rank 0 waits until the deadline (none: as long
  // as it takes), polling; the others as long as it takes, sleeping between polls once idle.
  Status broadcast(void* data, int64_t bytes, bool bounded);

  MPI_Comm comm_;
  int rank_ = 0;
  std::chrono::milliseconds timeout_;
  int64_t size_ = 0;             // the message's length, broadcast first
  std::vector<uint8_t> buffer_;  // what MPI reads or writes while a broadcast runs
  bool abandoned_ = false;       // a broadcast gave up: its buffers stay MPI's
  Status failed_;
};

}  // namespace dsinfer
