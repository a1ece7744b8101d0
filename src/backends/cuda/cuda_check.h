// CUDA runtime errors on the host side, in one place: a Status for what a caller may recover from
// (device queries), an abort for what is a programmer error once arguments were checked (launches,
// copies, the backend's own allocations and events).
// For host code (.cc) only: core/status.h brings fmt, whose compile-time format checks nvcc's front
// end cannot evaluate (kernel launchers in .cu files return cudaError_t).
#pragma once

#include <cuda_runtime.h>

#include "core/status.h"

namespace dsinfer::cuda {

/// ok for cudaSuccess; otherwise "CUDA <what>: <message> (<name>)".
Status cuda_status(cudaError_t err, const char* what);

/// Aborts unless cudaSuccess, with "CUDA <what>: <message> (<name>)".
void check_cuda(cudaError_t err, const char* what);

}  // namespace dsinfer::cuda

/// Evaluates a CUDA runtime call and returns its error as a Status from the enclosing function.
#define DSINFER_CUDA_RETURN_IF_ERROR(expr) DSINFER_RETURN_IF_ERROR(::dsinfer::cuda::cuda_status((expr), #expr))
