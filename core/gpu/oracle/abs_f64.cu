#include "oracle/abs_f64.h"

#include <algorithm>

#include "cuda_check.h"

namespace moenum::gpu {
namespace {

__global__ void abs_f64_kernel(double* dst, const double* src, int64_t n) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = fabs(src[i]);
}

}  // namespace

void abs_f64(double* dst, const double* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  abs_f64_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(dst, src, n);
  MOENUM_CUDA_LAUNCH_CHECK();
}

}  // namespace moenum::gpu
