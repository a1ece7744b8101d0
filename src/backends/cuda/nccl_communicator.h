// The Communicator of CUDA ranks (issue 20): NCCL on the backend's stream, one process a GPU.
//
// A sum gathers the ranks' buffers (ncclAllGather) and folds them in rank order on the device,
// like the MPI communicator on the host: the same bits on every rank, and for every batch size,
// which NCCL's own reductions (their order follows the buffer's size and the topology) do not
// promise. The collectives are enqueued, not waited for; a watchdog thread follows each one and,
// past the timeout, aborts the NCCL communicator (the kernels waiting for a rank that died or
// stopped answering end) and marks it failed: its later calls return kUnavailable.
#pragma once

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>

#include "backends/cuda/cuda_backend.h"
#include "core/status.h"
#include "ops/communicator.h"

namespace dsinfer {

class NcclCommunicator final : public Communicator {
 public:
  /// Rank `rank` of `ranks`, on the backend's device and stream. `share_id` gives every rank the
  /// bytes of rank 0's NCCL id (under mpirun: a broadcast; for one rank it may do nothing).
  using ShareId = std::function<Status(std::span<uint8_t> id)>;
  static Result<std::unique_ptr<NcclCommunicator>> create(const CudaBackend& backend, int rank, int ranks,
                                                          const ShareId& share_id, std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return ranks_; }
  bool enqueues_on_device() const override { return true; }
  Status all_reduce_sum(TensorView x) override;
  Status all_gather(TensorView x, TensorView out) override;

 private:
  NcclCommunicator(const CudaBackend& backend, ncclComm_t comm, int rank, int ranks, std::chrono::milliseconds timeout);
  Status gather(const void* in, int64_t bytes, void* out, const char* what);
  Status failure() const;
  void watch();  // the watchdog thread

  const CudaBackend& backend_;
  ncclComm_t comm_;
  int rank_, ranks_;
  std::chrono::milliseconds timeout_;
  void* scratch_ = nullptr;  // the gathered parts of a sum
  int64_t scratch_bytes_ = 0;

  struct Pending {
    cudaEvent_t done;
    std::chrono::steady_clock::time_point since;
    const char* what;
  };
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  Status failed_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace dsinfer
