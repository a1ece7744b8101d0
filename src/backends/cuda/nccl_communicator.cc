// NcclCommunicator (nccl_communicator.h).
#include "backends/cuda/nccl_communicator.h"

#include <fmt/format.h>

#include "backends/cuda/kernels/collective/rank_fold.h"
#include "core/check.h"

namespace dsinfer {
namespace {

Status nccl_error(ncclResult_t r, const char* what) {
  return error(ErrorKind::kUnavailable, fmt::format("NCCL {}: {}", what, ncclGetErrorString(r)));
}

}  // namespace

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const CudaBackend& backend, int rank, int ranks,
                                                                   const ShareId& share_id,
                                                                   std::chrono::milliseconds timeout) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return error(ErrorKind::kInvalidArgument, fmt::format("NCCL rank {} of {}", rank, ranks));
  ncclUniqueId id{};
  if (rank == 0)
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return nccl_error(r, "could not make an id");
  DSINFER_RETURN_IF_ERROR(share_id(std::span<uint8_t>(reinterpret_cast<uint8_t*>(&id), sizeof id)));
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&comm, ranks, id, rank); r != ncclSuccess)
    return nccl_error(r, fmt::format("could not start rank {} of {}", rank, ranks).c_str());
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(backend, comm, rank, ranks, timeout));
}

NcclCommunicator::NcclCommunicator(const CudaBackend& backend, ncclComm_t comm, int rank, int ranks,
                                   std::chrono::milliseconds timeout)
    : backend_(backend), comm_(comm), rank_(rank), ranks_(ranks), timeout_(timeout), watchdog_([this] { watch(); }) {}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  watchdog_.join();
  for (Pending& p : pending_) cudaEventDestroy(p.done);
  if (failed_.ok()) {
    ncclCommDestroy(comm_);  // waits for the collectives still enqueued
  } else {
    ncclCommAbort(comm_);  // no-op after the watchdog's abort; otherwise ends what still waits
  }
  if (scratch_) cudaFree(scratch_);
}

Status NcclCommunicator::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void NcclCommunicator::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(20));
    if (!failed_.ok()) continue;
    while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
      cudaEventDestroy(pending_.front().done);
      pending_.pop_front();
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      failed_ = nccl_error(async, fmt::format("rank {} of {}", rank_, ranks_).c_str());
    } else if (!pending_.empty() && std::chrono::steady_clock::now() - pending_.front().since > timeout_) {
      failed_ = error(ErrorKind::kUnavailable, fmt::format("{} on rank {} of {}: the other ranks did not join within "
                                                           "{} ms (NCCL aborted)",
                                                           pending_.front().what, rank_, ranks_, timeout_.count()));
    }
    if (!failed_.ok()) ncclCommAbort(comm_);  // the kernels that wait for the other ranks end
  }
}

Status NcclCommunicator::gather(const void* in, int64_t bytes, void* out, const char* what) {
  DSINFER_RETURN_IF_ERROR(failure());
  const cudaStream_t stream = backend_.stream();
  if (ncclResult_t r = ncclAllGather(in, out, static_cast<size_t>(bytes), ncclUint8, comm_, stream); r != ncclSuccess)
    return nccl_error(r, what);
  cudaEvent_t done;
  if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(done, stream) != cudaSuccess)
    return error(ErrorKind::kUnavailable, fmt::format("{}: CUDA could not record its completion", what));
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back({done, std::chrono::steady_clock::now(), what});
  }
  return {};
}

Status NcclCommunicator::all_reduce_sum(TensorView x) {
  DSINFER_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kBF16, "all_reduce_sum takes f32 or bf16");
  DSINFER_CHECK(x.is_contiguous(), "all_reduce_sum takes a contiguous buffer");
  const int64_t n = x.numel(), bytes = dtype_bytes(x.dtype, n);
  if (scratch_bytes_ < bytes * ranks_) {
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr, scratch_bytes_ = 0;
    if (cudaMalloc(&scratch_, static_cast<size_t>(bytes * ranks_)) != cudaSuccess)
      return error(ErrorKind::kResourceExhausted,
                   fmt::format("all_reduce_sum: no GPU memory for the {} ranks' {} bytes", ranks_, bytes));
    scratch_bytes_ = bytes * ranks_;
  }
  DSINFER_RETURN_IF_ERROR(gather(x.data, bytes, scratch_, "all_reduce_sum"));
  if (cuda::launch_rank_fold(scratch_, ranks_, n, x.dtype == DType::kBF16, x.data, backend_.stream()) != cudaSuccess)
    return error(ErrorKind::kInternal, "all_reduce_sum: the rank fold did not launch");
  return {};
}

Status NcclCommunicator::all_gather(TensorView x, TensorView out) {
  DSINFER_CHECK(x.dtype == out.dtype && out.numel() == x.numel() * ranks_, "all_gather shapes");
  DSINFER_CHECK(x.is_contiguous() && out.is_contiguous(), "all_gather takes contiguous buffers");
  return gather(x.data, dtype_bytes(x.dtype, x.numel()), out.data, "all_gather");
}

}  // namespace dsinfer
