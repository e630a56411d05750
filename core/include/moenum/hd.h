// MOENUM_HD marks the numeric rules shared by the CPU reference and the CUDA kernels: one source,
// compiled for both, is what keeps the two bit-identical.
#pragma once

#if defined(__CUDACC__)
#define MOENUM_HD __host__ __device__ __forceinline__
#else
#define MOENUM_HD inline
#endif
