// DSINFER_HOST_DEVICE: a function compiled for the host and, where nvcc compiles the file, for the
// device too (definitions shared by the CPU backend and CUDA kernels).
#pragma once

#if defined(__CUDACC__)
#define DSINFER_HOST_DEVICE __host__ __device__
#else
#define DSINFER_HOST_DEVICE
#endif
