#include "kernels/mx_quantize.h"

#include <algorithm>

#include "cuda_check.h"
#include "kernels/fp8x2_encode.cuh"
#include "kernels/mx_quantize_pipelined.h"

namespace moenum::gpu {
namespace {

constexpr int kTileRows = 32;   // one columnwise block high
constexpr int kTileCols = 128;  // four rowwise blocks wide: 128 threads, one of each kind per thread

// A 32 x 128 tile is read from global memory once (coalesced, into shared memory as fp32: bf16 ->
// fp32 is exact); thread t then quantizes rowwise block (t / 4, t % 4) and columnwise block t, each
// through the shared mx_quantize_block, writing its codes back strided.
__global__ void mx_quantize_kernel(const uint16_t* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleRounding rnd,
                                   InvScaleRule inv, uint8_t* q_row, uint8_t* s_row, uint8_t* q_col, uint8_t* s_col) {
  __shared__ float tile[kTileRows][kTileCols + 1];
  __shared__ uint8_t qr[kTileRows][kTileCols + 4];
  __shared__ uint8_t qc[kTileRows][kTileCols + 4];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int t = threadIdx.x;
  const int64_t nrows = (rows - r0 < kTileRows ? rows - r0 : int64_t{kTileRows});
  const int64_t ncols = (cols - c0 < kTileCols ? cols - c0 : int64_t{kTileCols});  // a multiple of 32
  for (int i = 0; i < kTileRows; ++i)
    tile[i][t] = (i < nrows && t < ncols) ? bf16_to_f32(x[(r0 + i) * cols + c0 + t]) : 0.0f;
  __syncthreads();

  const int64_t nb = cols / kMxBlock;
  if (q_row) {
    const int i = t / 4, b = t % 4;
    if (i < nrows && b * kMxBlock < ncols)
      s_row[(r0 + i) * nb + c0 / kMxBlock + b] =
          mx_quantize_block(&tile[i][b * kMxBlock], 1, &qr[i][b * kMxBlock], 1, fmt, rnd, inv);
  }
  if (q_col && nrows == kTileRows && t < ncols)
    s_col[(r0 / kMxBlock) * cols + c0 + t] = mx_quantize_block(&tile[0][t], kTileCols + 1, &qc[0][t], kTileCols + 4, fmt, rnd, inv);
  __syncthreads();
  for (int i = 0; i < nrows; ++i) {
    if (t < ncols) {
      if (q_row) q_row[(r0 + i) * cols + c0 + t] = qr[i][t];
      if (q_col && nrows == kTileRows) q_col[(r0 + i) * cols + c0 + t] = qc[i][t];
    }
  }
}

// ---- the vectorized quantizer: 16-byte loads and stores, FP8 conversion in hardware ------------
// A 32 x 256 tile per 256 threads. Rowwise: warp w takes rows w*4 .. w*4+3; in each, lane l holds
// the 8 elements at columns 8l .. 8l+7 (one 16-byte load), four lanes make one block of 32 and reduce
// its amax by shuffles, and each lane stores its 8 codes at once. The bf16 tile stays in shared
// memory for the columnwise pass: thread t takes column t, and the codes go out through shared
// memory again as 16-byte rows. Same per-block rules as the tiled kernel (mx.h), same bytes.
constexpr int kVecRows = 32, kVecCols = 256, kVecThreads = 256;

template <Fp8Format F>
__global__ void __launch_bounds__(kVecThreads)
mx_quantize_vec_kernel(const uint16_t* __restrict__ x, int64_t rows, int64_t cols, ScaleRounding rnd,
                       InvScaleRule inv, uint8_t* q_row, uint8_t* s_row, uint8_t* q_col, uint8_t* s_col) {
  __shared__ __align__(16) uint16_t tile[kVecRows][kVecCols];
  __shared__ __align__(16) uint8_t qc[kVecRows][kVecCols];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kVecRows;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kVecCols;
  const int nrows = static_cast<int>(rows - r0 < kVecRows ? rows - r0 : kVecRows);
  const int ncols = static_cast<int>(cols - c0 < kVecCols ? cols - c0 : kVecCols);  // a multiple of 32
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool lane_in = lane * 8 < ncols;  // whole blocks of four lanes are in or out
  const int64_t nb = cols / kMxBlock;

  // All four rows' loads are issued before any is used: 64 bytes in flight per thread.
  constexpr int kRowsPerWarp = kVecRows / 8;
  uint4 raws[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = warp * kRowsPerWarp + rr;
    raws[rr] = make_uint4(0, 0, 0, 0);
    if (i < nrows && lane_in) raws[rr] = __ldg(reinterpret_cast<const uint4*>(x + (r0 + i) * cols + c0 + lane * 8));
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = warp * kRowsPerWarp + rr;
    const uint4 raw = raws[rr];
    *reinterpret_cast<uint4*>(&tile[i][lane * 8]) = raw;
    const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw);
    float v[8];
    uint32_t amax = 0;
    for (int j = 0; j < 8; ++j) amax = mx_amax_bits_update(amax, v[j] = bf16_to_f32(h[j]));
    amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
    if (q_row == nullptr || i >= nrows || !lane_in) continue;
    const uint8_t code = e8m0_from_amax(f32_from_bits(amax), F, rnd);
    const float s = mx_inv_scale(code, inv);
    uint2 out;
    out.x = fp8x2_encode<F>(v[0] * s, v[1] * s) | uint32_t{fp8x2_encode<F>(v[2] * s, v[3] * s)} << 16;
    out.y = fp8x2_encode<F>(v[4] * s, v[5] * s) | uint32_t{fp8x2_encode<F>(v[6] * s, v[7] * s)} << 16;
    *reinterpret_cast<uint2*>(q_row + (r0 + i) * cols + c0 + lane * 8) = out;
    if (lane % 4 == 0) s_row[(r0 + i) * nb + (c0 + lane * 8) / kMxBlock] = code;
  }
  if (q_col == nullptr || nrows < kVecRows) return;  // columnwise needs whole 32-row blocks
  __syncthreads();
  const int t = threadIdx.x;
  if (t < ncols) {
    uint32_t amax = 0;
    for (int i = 0; i < kVecRows; ++i) amax = mx_amax_bits_update(amax, bf16_to_f32(tile[i][t]));
    const uint8_t code = e8m0_from_amax(f32_from_bits(amax), F, rnd);
    const float s = mx_inv_scale(code, inv);
    for (int i = 0; i < kVecRows; i += 2) {
      const uint16_t two = fp8x2_encode<F>(bf16_to_f32(tile[i][t]) * s, bf16_to_f32(tile[i + 1][t]) * s);
      qc[i][t] = static_cast<uint8_t>(two & 0xFFu);
      qc[i + 1][t] = static_cast<uint8_t>(two >> 8);
    }
    s_col[(r0 / kMxBlock) * cols + c0 + t] = code;
  }
  __syncthreads();
  for (int idx = t; idx < kVecRows * kVecCols / 16; idx += kVecThreads) {
    const int i = idx / (kVecCols / 16), c = idx % (kVecCols / 16) * 16;
    if (c < ncols)
      *reinterpret_cast<uint4*>(q_col + (r0 + i) * cols + c0 + c) = *reinterpret_cast<const uint4*>(&qc[i][c]);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__global__ void mx_swizzle_kernel(const uint8_t* plain, int64_t rows, int64_t scale_cols, bool transposed,
                                  uint8_t* out) {
  const int64_t prow = (rows + 127) / 128 * 128, pcol = (scale_cols + 3) / 4 * 4;
  const int64_t n = prow * pcol;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / pcol, j = idx % pcol;
    uint8_t v = 0;
    if (i < rows && j < scale_cols) v = transposed ? plain[j * rows + i] : plain[i * scale_cols + j];
    out[mx_swizzle_index(i, j, scale_cols)] = v;
  }
}

__global__ void mx_dequantize_kernel(const uint8_t* q, const uint8_t* sc, int64_t rows, int64_t cols, Fp8Format fmt,
                                     bool columnwise, uint16_t* out, unsigned int* inexact) {
  const int64_t n = rows * cols;
  const int64_t nb = cols / kMxBlock;
  unsigned int bad = 0;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / cols, j = idx % cols;
    const uint8_t code = columnwise ? sc[(i / kMxBlock) * cols + j] : sc[i * nb + j / kMxBlock];
    const float v = mx_dequantize_element(q[idx], code, fmt);
    const uint16_t b = bf16_bits_rn(v);
    out[idx] = b;
    bad += (v == v) && bf16_to_f32(b) != v;
  }
  if (inexact && bad) atomicAdd(inexact, bad);
}

}  // namespace

void launch_mx_dequantize_bf16(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t cols, Fp8Format fmt,
                               bool columnwise, uint16_t* out, unsigned int* inexact, cudaStream_t st) {
  MOENUM_CHECK(cols % kMxBlock == 0, "mx_dequantize: cols must be a multiple of 32");
  MOENUM_CHECK(!columnwise || rows % kMxBlock == 0, "mx_dequantize: columnwise needs rows % 32 == 0");
  const int64_t n = rows * cols;
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 8192));
  mx_dequantize_kernel<<<blocks, threads, 0, st>>>(q, s, rows, cols, fmt, columnwise, out, inexact);
  MOENUM_CUDA_LAUNCH_CHECK();
}

void launch_mx_quantize_bf16(const uint16_t* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleRounding rounding,
                             InvScaleRule inv_scale, uint8_t* q_row, uint8_t* s_row, uint8_t* q_col, uint8_t* s_col,
                             cudaStream_t s, MxQuantizeKernel kernel) {
  MOENUM_CHECK(cols % kMxBlock == 0, "mx_quantize: cols must be a multiple of 32");
  MOENUM_CHECK(!q_col || rows % kMxBlock == 0, "mx_quantize: columnwise needs rows % 32 == 0");
  if (rows == 0 || cols == 0) return;
  if (kernel == MxQuantizeKernel::Pipelined && mx_quantize_pipelined_supports(x, q_row, q_col)) {
    launch_mx_quantize_pipelined(x, rows, cols, fmt, rounding, inv_scale, q_row, s_row, q_col, s_col, s);
    return;
  }
  if (kernel == MxQuantizeKernel::Vectorized && aligned16(x) && aligned16(q_row) && aligned16(q_col)) {
    dim3 grid(static_cast<unsigned>((cols + kVecCols - 1) / kVecCols), static_cast<unsigned>((rows + kVecRows - 1) / kVecRows));
    auto* k = fmt == Fp8Format::E4M3 ? mx_quantize_vec_kernel<Fp8Format::E4M3> : mx_quantize_vec_kernel<Fp8Format::E5M2>;
    k<<<grid, kVecThreads, 0, s>>>(x, rows, cols, rounding, inv_scale, q_row, s_row, q_col, s_col);
    MOENUM_CUDA_LAUNCH_CHECK();
    return;
  }
  dim3 grid(static_cast<unsigned>((cols + kTileCols - 1) / kTileCols), static_cast<unsigned>((rows + kTileRows - 1) / kTileRows));
  mx_quantize_kernel<<<grid, kTileCols, 0, s>>>(x, rows, cols, fmt, rounding, inv_scale, q_row, s_row, q_col, s_col);
  MOENUM_CUDA_LAUNCH_CHECK();
}

void launch_mx_swizzle_scales(const uint8_t* plain, int64_t rows, int64_t scale_cols, bool transposed,
                              uint8_t* swizzled, cudaStream_t s) {
  const int64_t n = mx_swizzled_size(rows, scale_cols);
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  mx_swizzle_kernel<<<blocks, threads, 0, s>>>(plain, rows, scale_cols, transposed, swizzled);
  MOENUM_CUDA_LAUNCH_CHECK();
}

}  // namespace moenum::gpu
