// Turning CUDA runtime errors into Status (launchers return Status, never abort).
// No fmt here: nvcc's front end cannot evaluate fmt's compile-time format checks in .cu files.
#pragma once

#include <cuda_runtime.h>

#include "core/status.h"

namespace dsinfer::cuda {

/// ok for cudaSuccess; otherwise "CUDA <what>: <message> (<name>)".
Status cuda_status(cudaError_t err, const char* what);

}  // namespace dsinfer::cuda

/// Evaluates a CUDA runtime call and returns its error as a Status from the enclosing function.
#define DSINFER_CUDA_RETURN_IF_ERROR(expr) DSINFER_RETURN_IF_ERROR(::dsinfer::cuda::cuda_status((expr), #expr))
