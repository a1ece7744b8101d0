// MpiStepChannel: a length, then the message, each a non-blocking broadcast polled to completion.
#include "parallel/mpi_step_channel.h"

#include <fmt/format.h>

#include <climits>
#include <thread>

#include "parallel/mpi_communicator.h"

namespace dsinfer {

Result<std::unique_ptr<MpiStepChannel>> MpiStepChannel::create(std::chrono::milliseconds timeout) {
  DSINFER_ASSIGN_OR_RETURN(MPI_Comm comm, duplicate_world("the step messages"));
  return std::unique_ptr<MpiStepChannel>(new MpiStepChannel(comm, timeout));
}

MpiStepChannel::MpiStepChannel(MPI_Comm comm, std::chrono::milliseconds timeout) : comm_(comm), timeout_(timeout) {
  MPI_Comm_rank(comm_, &rank_);
}

MpiStepChannel::~MpiStepChannel() {
  // A broadcast given up on may still write its buffer: it stays allocated (the job is ending).
  if (abandoned_) {
    new std::vector<uint8_t>(std::move(buffer_));  // NOLINT: deliberately never freed
    return;
  }
  MPI_Comm_free(&comm_);
}

Status MpiStepChannel::broadcast(void* data, int64_t bytes, bool bounded) {
  if (bytes > INT_MAX)
    return error(ErrorKind::kUnsupported,
                 fmt::format("a step message of {} bytes: more than one MPI call takes", bytes));
  MPI_Request request;
  if (MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, 0, comm_, &request) != MPI_SUCCESS)
    return failed_ =
               error(ErrorKind::kUnavailable, fmt::format("step message on rank {}: MPI refused the call", rank_));
  // Steps follow each other closely: poll busily at first, then, idle (a server between requests),
  // sleep between polls so that a waiting rank costs no CPU.
  const auto start = std::chrono::steady_clock::now();
  constexpr auto kBusy = std::chrono::milliseconds(50);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return {};
    const auto waited = std::chrono::steady_clock::now() - start;
    if (bounded && waited >= timeout_) {
      abandoned_ = true;
      return failed_ = error(ErrorKind::kUnavailable,
                             fmt::format("the step message from rank 0: the other ranks did not take it within {} ms",
                                         timeout_.count()));
    }
    if (waited < kBusy)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status MpiStepChannel::send(std::span<const uint8_t> message) {
  if (!failed_.ok()) return failed_;
  if (rank_ != 0) return error(ErrorKind::kInternal, "only rank 0 sends step messages");
  size_ = static_cast<int64_t>(message.size());
  DSINFER_RETURN_IF_ERROR(broadcast(&size_, sizeof size_, true));
  buffer_.assign(message.begin(), message.end());
  return broadcast(buffer_.data(), size_, true);
}

Result<std::vector<uint8_t>> MpiStepChannel::receive() {
  if (!failed_.ok()) return failed_;
  if (rank_ == 0) return error(ErrorKind::kInternal, "rank 0 sends step messages, it does not receive them");
  DSINFER_RETURN_IF_ERROR(broadcast(&size_, sizeof size_, false));
  if (size_ < 0) return error(ErrorKind::kInternal, fmt::format("a step message of {} bytes", size_));
  buffer_.resize(static_cast<size_t>(size_));
  DSINFER_RETURN_IF_ERROR(broadcast(buffer_.data(), size_, false));
  return buffer_;
}

}  // namespace dsinfer
