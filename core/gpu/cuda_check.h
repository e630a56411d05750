// Error checks for CUDA, cuBLAS(Lt) and CUTLASS calls: every failure becomes a moenum::InternalError
// whose text carries file:line and the library's own message (nccl-tests CUDACHECK style), so an
// out-of-memory or a bad launch reaches Python as an exception instead of a crash.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "moenum/error.h"

namespace moenum::gpu {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  throw InternalError(std::string(file) + ":" + std::to_string(line) + ": CUDA error " +
                      cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + expr);
}

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  throw InternalError(std::string(file) + ":" + std::to_string(line) + ": cuBLAS status " +
                      std::to_string(static_cast<int>(s)) + " in " + expr);
}

}  // namespace moenum::gpu

#define MOENUM_CUDA_CHECK(expr)                                                      \
  do {                                                                               \
    cudaError_t moenum_err_ = (expr);                                                \
    if (moenum_err_ != cudaSuccess) {                                                \
      (void)cudaGetLastError(); /* clear the sticky-free error so later calls work */ \
      ::moenum::gpu::throw_cuda(moenum_err_, #expr, __FILE__, __LINE__);             \
    }                                                                                \
  } while (0)

#define MOENUM_CUBLAS_CHECK(expr)                                                    \
  do {                                                                               \
    cublasStatus_t moenum_st_ = (expr);                                              \
    if (moenum_st_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::moenum::gpu::throw_cublas(moenum_st_, #expr, __FILE__, __LINE__);            \
  } while (0)

// After a kernel launch: launch-configuration errors show up here, not at the launch.
#define MOENUM_CUDA_LAUNCH_CHECK() MOENUM_CUDA_CHECK(cudaGetLastError())
