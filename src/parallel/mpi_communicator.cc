// MpiSession and MpiCommunicator: collectives as a non-blocking all-gather polled against a
// deadline, then a fold in rank order.
#include "parallel/mpi_communicator.h"

#include <fmt/format.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/check.h"
#include "core/float_formats.h"

namespace dsinfer {

Result<std::unique_ptr<MpiSession>> MpiSession::start(int* argc, char*** argv) {
  std::unique_ptr<MpiSession> s(new MpiSession);
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      return error(ErrorKind::kUnavailable, "MPI could not be initialised");
    s->finalize_ = true;
    if (provided < MPI_THREAD_SERIALIZED)
      return error(ErrorKind::kUnsupported, "this MPI library does not allow calls from more than one thread");
  }
  return s;
}

void MpiSession::abort_job(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return
}

MpiSession::~MpiSession() {
  if (finalize_) MPI_Finalize();
}

Result<MPI_Comm> duplicate_world(const char* purpose) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) return error(ErrorKind::kInternal, "MPI is not initialised (no MpiSession)");
  MPI_Comm comm;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS)
    return error(ErrorKind::kUnavailable, fmt::format("MPI could not make a communicator for {}", purpose));
  return comm;
}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::create(std::chrono::milliseconds timeout) {
  DSINFER_ASSIGN_OR_RETURN(MPI_Comm comm, duplicate_world("the collectives"));
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm, timeout));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::chrono::milliseconds timeout) : comm_(comm), timeout_(timeout) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  // A collective given up on may still write its buffers: they stay allocated (see the header).
  if (abandoned_ != MPI_REQUEST_NULL) {
    new std::vector<uint8_t>(std::move(sending_));   // NOLINT: deliberately never freed
    new std::vector<uint8_t>(std::move(gathered_));  // NOLINT: likewise
    return;
  }
  MPI_Comm_free(&comm_);
}

Status MpiCommunicator::gather(const void* in, int64_t bytes, const char* what) {
  if (!failed_.ok()) return failed_;
  if (bytes > INT_MAX / size_)
    return error(ErrorKind::kUnsupported,
                 fmt::format("{} of {} bytes a rank: more than one MPI call takes", what, bytes));
  sending_.assign(static_cast<const uint8_t*>(in), static_cast<const uint8_t*>(in) + bytes);
  gathered_.resize(static_cast<size_t>(bytes) * size_);
  MPI_Request request;
  const int count = static_cast<int>(bytes);
  if (MPI_Iallgather(sending_.data(), count, MPI_BYTE, gathered_.data(), count, MPI_BYTE, comm_, &request) !=
      MPI_SUCCESS)
    return failed_ = error(ErrorKind::kUnavailable, fmt::format("{} on rank {}: MPI refused the call", what, rank_));
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return {};
    if (std::chrono::steady_clock::now() >= deadline) {
      abandoned_ = request;
      return failed_ = error(ErrorKind::kUnavailable,
                             fmt::format("{} on rank {} of {}: the other ranks did not join within {} ms", what, rank_,
                                         size_, timeout_.count()));
    }
    std::this_thread::yield();
  }
}

Status MpiCommunicator::all_reduce_sum(TensorView x) {
  DSINFER_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kBF16, "all_reduce_sum takes f32 or bf16");
  DSINFER_CHECK(x.is_contiguous(), "all_reduce_sum takes a contiguous buffer");
  const int64_t n = x.numel(), bytes = dtype_bytes(x.dtype, n);
  DSINFER_RETURN_IF_ERROR(gather(x.data, bytes, "all_reduce_sum"));
  // ((x_0 + x_1) + x_2) + ... in f32 on every rank.
  std::vector<float> sum(n);
  for (int r = 0; r < size_; ++r) {
    const uint8_t* part = gathered_.data() + static_cast<size_t>(r) * bytes;
    for (int64_t i = 0; i < n; ++i) {
      float v;
      if (x.dtype == DType::kF32) {
        std::memcpy(&v, part + 4 * i, 4);
      } else {
        uint16_t b;
        std::memcpy(&b, part + 2 * i, 2);
        v = bf16_to_f32(b);
      }
      sum[i] = r == 0 ? v : sum[i] + v;
    }
  }
  if (x.dtype == DType::kF32) {
    std::memcpy(x.data, sum.data(), bytes);
  } else {
    uint16_t* out = x.as<uint16_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(sum[i]);
  }
  return {};
}

Status MpiCommunicator::all_gather(TensorView x, TensorView out) {
  DSINFER_CHECK(x.dtype == out.dtype && out.numel() == x.numel() * size_, "all_gather shapes");
  DSINFER_CHECK(x.is_contiguous() && out.is_contiguous(), "all_gather takes contiguous buffers");
  const int64_t bytes = dtype_bytes(x.dtype, x.numel());
  DSINFER_RETURN_IF_ERROR(gather(x.data, bytes, "all_gather"));
  std::memcpy(out.data, gathered_.data(), gathered_.size());
  return {};
}

}  // namespace dsinfer
