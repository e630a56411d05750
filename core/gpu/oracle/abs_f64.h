// |x| of fp64 arrays on the device: the operands of the reference's certificate GEMM |A| . |B|^T.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace moenum::gpu {

// dst[i] = fabs(src[i]) for i < n (dst may be src), enqueued on `stream`.
void abs_f64(double* dst, const double* src, int64_t n, cudaStream_t stream);

}  // namespace moenum::gpu
