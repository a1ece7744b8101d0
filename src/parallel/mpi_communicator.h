// The Communicator of an MPI job's CPU ranks (issue 20: one process a rank, started by mpirun).
//
// Every collective gathers the ranks' buffers and each rank folds them itself, in rank order: the
// same bits on every rank and in every run, whatever order the messages arrive in (an MPI
// reduction's order is the library's to choose). A bf16 sum is taken in f32 and rounded once (the
// reference reduces in fp32). A collective waits at most the timeout for the other ranks; past it
// the call fails with kUnavailable, naming the collective and the rank, and the communicator stays
// failed: the caller ends the job (a rank that died or took another path must not hang the rest;
// the command line calls MPI_Abort). The collective it gave up on is still posted: its buffers are
// left allocated when the communicator goes, since MPI may still write them.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "ops/communicator.h"

namespace dsinfer {

/// MPI for this process: initialised (threads serialised: one thread at a time makes MPI calls)
/// when started unless someone else did, finalised when it ends if it initialised it.
class MpiSession {
 public:
  static Result<std::unique_ptr<MpiSession>> start(int* argc, char*** argv);
  /// Ends every rank of the job with `code` (MPI_Abort): how a rank that failed ends the others,
  /// which may be waiting for it.
  [[noreturn]] static void abort_job(int code);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  MpiSession() = default;
  bool finalize_ = false;
};

/// A communicator of its own over every rank of the job (MPI_Comm_dup of MPI_COMM_WORLD), named by
/// `purpose` in its error; MPI must be initialised.
Result<MPI_Comm> duplicate_world(const char* purpose);

class MpiCommunicator final : public Communicator {
 public:
  /// Every rank of the job, on its own duplicate of MPI_COMM_WORLD (its messages never meet
  /// another communicator's). MPI must be initialised (an MpiSession).
  static Result<std::unique_ptr<MpiCommunicator>> create(std::chrono::milliseconds timeout);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Status all_reduce_sum(TensorView x) override;
  Status all_gather(TensorView x, TensorView out) override;

 private:
  MpiCommunicator(MPI_Comm comm, std::chrono::milliseconds timeout);
  // Gathers `bytes` of `in` from every rank into gathered_ (rank r's at r * bytes). The buffers an
  // unfinished collective reads and writes are the communicator's own, so a call that gives up
  // leaves nothing of the caller's in MPI's hands.
  Status gather(const void* in, int64_t bytes, const char* what);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
  std::vector<uint8_t> sending_, gathered_;
  MPI_Request abandoned_ = MPI_REQUEST_NULL;
  Status failed_;  // ok until a collective times out
};

}  // namespace dsinfer
