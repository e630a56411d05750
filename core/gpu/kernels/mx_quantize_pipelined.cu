// The pipelined MXFP8 quantizer: bf16 [rows, cols] -> rowwise and columnwise codes and scales in one
// pass, at close to copy bandwidth.
//
// Work unit: a 32 x 256 tile (one columnwise block high, eight rowwise blocks wide). A persistent
// grid (as many 256-thread blocks as fit, three per SM) walks the tiles with a stride of the grid;
// each block keeps kStages tiles in a shared-memory ring, filled by cp.async 16 bytes at a time, so
// two tiles (32 KB) per block, 96 KB per SM, are in flight while one is quantized. Per tile:
//   rowwise:    warp w takes rows 4w..4w+3, lane l columns 8l..8l+7 (one 16-byte shared load per
//               row). The four lanes of a block reduce the four rows' amax in three shuffles so that
//               lane j ends with row j's, which computes that one scale; four shuffles hand the
//               inverse scales back. Codes go out as 8 bytes a lane, 256 contiguous bytes a warp.
//   columnwise: lane l of warp w takes columns 4q..4q+3 (q = 8w + l/4) on rows g, g+4, ..., g+28
//               (g = l%4): eight 8-byte shared loads. The same four-lane exchange gives lane g the
//               amax of column 4q+g. Codes are staged in shared memory as 4-byte words and written
//               out as 16-byte vectors, 256 contiguous bytes per row per tile, like the rowwise ones.
// Row pitches are 32 bytes over a multiple of 128, so the four rows one columnwise access spans land
// on four different 32-byte bank groups: no bank conflicts in either direction.
// Amax runs on packed bf16 pairs (max.bf16x2 skips NaN as mx_amax_bits_update does); the bf16 max is
// the fp32 max of the same values, so scales are those of mx.h's rules. Rounding mode, inverse-scale
// rule and format are template arguments, so no runtime choice is left in the inner code.
// Resources (sm_90a, nvcc 13.0): 71 registers, no spills, 60 KB dynamic shared memory per block.
#include "kernels/mx_quantize_pipelined.h"

#include <algorithm>
#include <atomic>

#include "cuda_check.h"
#include "kernels/fp8x4_encode.cuh"

namespace moenum::gpu {
namespace {

constexpr int kRows = 32;
constexpr int kCols = 256;
constexpr int kThreads = 256;
constexpr int kStages = 3;
constexpr int kBlocksPerSm = 3;
constexpr int kInPitch = kCols * 2 + 32;  // bytes per bf16 tile row in shared memory
constexpr int kCodePitch = kCols + 32;    // bytes per staged columnwise code row
constexpr int kStageBytes = kRows * kInPitch;
constexpr int kSmemBytes = kStages * kStageBytes + kRows * kCodePitch;
static_assert(kInPitch % 128 == 32 && kCodePitch % 128 == 32, "pitches keep the columnwise access conflict-free");
static_assert(kRows * kCols * 2 / 16 == 4 * kThreads, "each thread copies four 16-byte chunks per tile");

// cp.async and max.bf16x2 need sm_80: builds for older targets (CI's default architecture) compile
// these to a trap, and the launcher never picks this kernel on such a device.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MOENUM_PIPELINED_UNSUPPORTED 1
#endif

__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool fill) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  // A source size of 0 writes 16 zero bytes and reads nothing.
#ifdef MOENUM_PIPELINED_UNSUPPORTED
  (void)dst, (void)gmem_src, (void)fill;
  __trap();
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(fill ? 16 : 0)
               : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifndef MOENUM_PIPELINED_UNSUPPORTED
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
#ifndef MOENUM_PIPELINED_UNSUPPORTED
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Running amax of two bf16 lanes at once: sign cleared, then max.bf16x2, which returns the other
// operand when one is NaN (and canonical NaN only when both are).
__device__ __forceinline__ uint32_t bf16x2_absmax(uint32_t acc, uint32_t w) {
  uint32_t out;
#ifdef MOENUM_PIPELINED_UNSUPPORTED
  out = acc | w;
  __trap();
#else
  asm("max.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(acc), "r"(w & 0x7FFF7FFFu));
#endif
  return out;
}
__device__ __forceinline__ uint32_t bf16x2_max(uint32_t a, uint32_t b) {
  uint32_t out;
#ifdef MOENUM_PIPELINED_UNSUPPORTED
  out = a | b;
  __trap();
#else
  asm("max.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(a), "r"(b));
#endif
  return out;
}
// A bf16 magnitude as the fp32 amax of mx.h: a NaN left over (every element NaN) counts as 0.
__device__ __forceinline__ float amax_of_bf16_magnitude(uint32_t m16) {
  m16 &= 0x7FFFu;
  return f32_from_bits(m16 > 0x7F80u ? 0u : m16 << 16);
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return f32_from_bits(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return f32_from_bits(w & 0xFFFF0000u); }
// The sign-carrying high bytes of the four bf16 values in (w0, w1), in fp8x4_encode's `signs` order.
__device__ __forceinline__ uint32_t bf16x4_sign_bytes(uint32_t w0, uint32_t w1) { return __byte_perm(w0, w1, 0x7531); }

// Four bf16 (two words) times their inverse scales to four codes. The product has the sign of the
// bf16 value whenever it is not NaN: an inverse scale is never negative (only code 0xFF's is, and an
// amax without NaNs never gives it), so the input's sign bytes serve fp8x4_encode.
template <Fp8Format F>
__device__ __forceinline__ uint32_t encode4(uint32_t w0, uint32_t w1, float s0, float s1, float s2, float s3) {
  return fp8x4_encode<F>(bf16_lo(w0) * s0, bf16_hi(w0) * s1, bf16_lo(w1) * s2, bf16_hi(w1) * s3,
                         bf16x4_sign_bytes(w0, w1));
}

// Lane j (= lane % 4) of each group of four holds m[0..3]; afterwards it holds the max over the group
// of m[j]. Three shuffles where a butterfly per value would take eight.
__device__ __forceinline__ uint32_t group4_reduce_scatter(const uint32_t (&m)[4], int lane) {
  const bool b0 = lane & 1, b1 = lane & 2;
  const uint32_t lo = bf16x2_max(b0 ? m[1] : m[0], __shfl_xor_sync(0xFFFFFFFFu, b0 ? m[0] : m[1], 1));  // m[b0]
  const uint32_t hi = bf16x2_max(b0 ? m[3] : m[2], __shfl_xor_sync(0xFFFFFFFFu, b0 ? m[2] : m[3], 1));  // m[2+b0]
  return bf16x2_max(b1 ? hi : lo, __shfl_xor_sync(0xFFFFFFFFu, b1 ? lo : hi, 2));
}

struct TileGeometry {
  int64_t r0, c0;
  int nrows, ncols;  // ncols a multiple of 32
};

// Walks one block's tiles, blockIdx.x, blockIdx.x + gridDim.x, ..., in row-major tile order (32-bit
// indices: 2^31 tiles would be 2^44 elements), one division at the start and none per step.
struct TileCursor {
  uint32_t tx, ty, dx, dy, tiles_x;
  __device__ __forceinline__ explicit TileCursor(uint32_t tiles_x_)
      : tx(blockIdx.x % tiles_x_), ty(blockIdx.x / tiles_x_), dx(gridDim.x % tiles_x_), dy(gridDim.x / tiles_x_),
        tiles_x(tiles_x_) {}
  __device__ __forceinline__ void advance() {
    tx += dx, ty += dy;
    if (tx >= tiles_x) tx -= tiles_x, ++ty;
  }
  __device__ __forceinline__ TileGeometry geometry(int64_t rows, int64_t cols) const {
    TileGeometry g;
    g.r0 = int64_t{ty} * kRows;
    g.c0 = int64_t{tx} * kCols;
    g.nrows = static_cast<int>(rows - g.r0 < kRows ? rows - g.r0 : kRows);
    g.ncols = static_cast<int>(cols - g.c0 < kCols ? cols - g.c0 : kCols);
    return g;
  }
};

// Thread t copies the 16-byte chunk t % 32 of rows t / 32 + 8i (i < 4), so a warp reads one 512-byte
// row segment per copy. Parts outside the tensor are zero-filled.
__device__ __forceinline__ void load_tile(uint8_t* stage, const uint16_t* x, int64_t cols, const TileGeometry& g) {
  const int row = threadIdx.x / 32, col = threadIdx.x % 32 * 8;
  const bool col_in = col < g.ncols;
  const uint16_t* src = x + (g.r0 + row) * cols + g.c0 + col;
  uint8_t* dst = stage + row * kInPitch + col * 2;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const bool inside = col_in && row + 8 * i < g.nrows;
    cp_async_16(dst + 8 * i * kInPitch, inside ? src : x, inside);
    src += 8 * cols;
  }
}

template <Fp8Format F, ScaleRounding R, InvScaleRule I>
__device__ __forceinline__ void quantize_rowwise(const uint8_t* tile, const TileGeometry& g, int64_t cols,
                                                 uint8_t* q_row, uint8_t* s_row) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint4 v[4];
  uint32_t m[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    v[r] = *reinterpret_cast<const uint4*>(tile + (warp * 4 + r) * kInPitch + lane * 16);
    m[r] = bf16x2_absmax(bf16x2_absmax(bf16x2_absmax(bf16x2_absmax(0u, v[r].x), v[r].y), v[r].z), v[r].w);
  }
  const uint32_t both = group4_reduce_scatter(m, lane);  // row warp*4 + lane%4, both halves of the block
  const float amax = fmaxf(amax_of_bf16_magnitude(both), amax_of_bf16_magnitude(both >> 16));
  const uint8_t code = e8m0_from_amax(amax, F, R);
  const float inv = mx_inv_scale(code, I);
  const bool lane_in = lane * 8 < g.ncols;  // whole groups of four are in or out
  const int rows_here = lane_in ? g.nrows - warp * 4 : 0;  // rows of this warp's four to write
  const int64_t nb = cols / kMxBlock;
  if (lane % 4 < rows_here) s_row[(g.r0 + warp * 4 + lane % 4) * nb + g.c0 / kMxBlock + lane / 4] = code;
  uint8_t* out = q_row + (g.r0 + warp * 4) * cols + g.c0 + lane * 8;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float s = __shfl_sync(0xFFFFFFFFu, inv, (lane & ~3) | r);
    const uint2 codes = make_uint2(encode4<F>(v[r].x, v[r].y, s, s, s, s), encode4<F>(v[r].z, v[r].w, s, s, s, s));
    if (r < rows_here) *reinterpret_cast<uint2*>(out) = codes;
    out += cols;
  }
}

// Needs a whole tile of 32 rows. Writes the codes into `codes` (kRows x kCodePitch) and the scales
// to s_col; store_columnwise_codes moves the codes out after a barrier.
template <Fp8Format F, ScaleRounding R, InvScaleRule I>
__device__ __forceinline__ void quantize_columnwise(const uint8_t* tile, uint8_t* codes, const TileGeometry& g,
                                                    int64_t cols, uint8_t* s_col) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q = warp * 8 + lane / 4, grp = lane % 4;
  uint2 v[8];
  uint32_t m01 = 0, m23 = 0;  // columns 4q, 4q+1 and 4q+2, 4q+3
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    v[k] = *reinterpret_cast<const uint2*>(tile + (grp + 4 * k) * kInPitch + q * 8);
    m01 = bf16x2_absmax(m01, v[k].x);
    m23 = bf16x2_absmax(m23, v[k].y);
  }
  // Over the four lanes of the quad: lanes with bit 1 set keep columns 2, 3, the others 0, 1; then
  // both halves are reduced and lane grp keeps column grp's half.
  const bool b1 = grp & 2;
  const uint32_t pair = bf16x2_max(b1 ? m23 : m01, __shfl_xor_sync(0xFFFFFFFFu, b1 ? m01 : m23, 2));
  const uint32_t full = bf16x2_max(pair, __shfl_xor_sync(0xFFFFFFFFu, pair, 1));
  const uint8_t code = e8m0_from_amax(amax_of_bf16_magnitude(grp & 1 ? full >> 16 : full), F, R);
  const float inv = mx_inv_scale(code, I);
  if (q * 4 < g.ncols) s_col[g.r0 / kMxBlock * cols + g.c0 + q * 4 + grp] = code;
  const int base = lane & ~3;
  const float s0 = __shfl_sync(0xFFFFFFFFu, inv, base), s1 = __shfl_sync(0xFFFFFFFFu, inv, base + 1);
  const float s2 = __shfl_sync(0xFFFFFFFFu, inv, base + 2), s3 = __shfl_sync(0xFFFFFFFFu, inv, base + 3);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    *reinterpret_cast<uint32_t*>(codes + (grp + 4 * k) * kCodePitch + q * 4) = encode4<F>(v[k].x, v[k].y, s0, s1, s2, s3);
}

// 32 rows x 16 chunks of 16 bytes; thread t moves chunk t % 16 of rows t / 16 and t / 16 + 16, so a
// warp writes two whole 256-byte row segments per store.
__device__ __forceinline__ void store_columnwise_codes(const uint8_t* codes, const TileGeometry& g, int64_t cols,
                                                       uint8_t* q_col) {
  const int row = threadIdx.x / 16, col = threadIdx.x % 16 * 16;
  if (col >= g.ncols) return;
  uint8_t* out = q_col + (g.r0 + row) * cols + g.c0 + col;
  const uint4 top = *reinterpret_cast<const uint4*>(codes + row * kCodePitch + col);
  const uint4 bottom = *reinterpret_cast<const uint4*>(codes + (row + 16) * kCodePitch + col);
  *reinterpret_cast<uint4*>(out) = top;
  *reinterpret_cast<uint4*>(out + 16 * cols) = bottom;
}

template <Fp8Format F, ScaleRounding R, InvScaleRule I>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
mx_quantize_pipelined_kernel(const uint16_t* __restrict__ x, int64_t rows, int64_t cols, uint32_t tiles_x, uint32_t tiles,
                             uint8_t* __restrict__ q_row, uint8_t* __restrict__ s_row, uint8_t* __restrict__ q_col,
                             uint8_t* __restrict__ s_col) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* codes = smem + kStages * kStageBytes;
  // This block's tiles: blockIdx.x, blockIdx.x + gridDim.x, ...
  const uint32_t mine = tiles > blockIdx.x ? (tiles - blockIdx.x - 1) / gridDim.x + 1 : 0;
  TileCursor loading(tiles_x), current(tiles_x);

  // One commit group per tile, empty ones included, so "all but the newest kStages - 1 groups done"
  // always means "tile k has landed".
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < mine) load_tile(smem + k * kStageBytes, x, cols, loading.geometry(rows, cols));
    loading.advance();
    cp_async_commit();
  }
  int stage = 0, refill = kStages - 1;  // the stages of tile k and of tile k + kStages - 1
  for (uint32_t k = 0; k < mine; ++k) {
    // The stage refilled here was last read in iteration k - 1, before its second barrier.
    if (k + kStages - 1 < mine) load_tile(smem + refill * kStageBytes, x, cols, loading.geometry(rows, cols));
    loading.advance();
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();  // tile k visible to all threads; the previous tile's codes are out of `codes`

    const TileGeometry g = current.geometry(rows, cols);
    current.advance();
    const uint8_t* tile = smem + stage * kStageBytes;
    stage = stage + 1 == kStages ? 0 : stage + 1;
    refill = refill + 1 == kStages ? 0 : refill + 1;
    if (q_row) quantize_rowwise<F, R, I>(tile, g, cols, q_row, s_row);
    if (q_col) quantize_columnwise<F, R, I>(tile, codes, g, cols, s_col);
    __syncthreads();
    if (q_col) store_columnwise_codes(codes, g, cols, q_col);
  }
  cp_async_wait<0>();  // nothing is outstanding by now; leave no copy in flight past the exit anyway
}

template <Fp8Format F, ScaleRounding R, InvScaleRule I>
void launch_t(const uint16_t* x, int64_t rows, int64_t cols, uint8_t* q_row, uint8_t* s_row, uint8_t* q_col,
              uint8_t* s_col, cudaStream_t s) {
  auto* kernel = mx_quantize_pipelined_kernel<F, R, I>;
  // Blocks per SM, per device: the attributes are per device, and the query is too slow to repeat
  // between a bench's event and the launch.
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached_blocks_per_sm[kMaxDevices];
  int dev = 0;
  MOENUM_CUDA_CHECK(cudaGetDevice(&dev));
  int per_sm = dev < kMaxDevices ? cached_blocks_per_sm[dev].load(std::memory_order_relaxed) : 0;
  if (per_sm == 0) {
    MOENUM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    MOENUM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared));
    MOENUM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmemBytes));
    per_sm = std::max(per_sm, 1);
    if (dev < kMaxDevices) cached_blocks_per_sm[dev].store(per_sm, std::memory_order_relaxed);
  }
  int sms = 0;
  MOENUM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t tiles_x = (cols + kCols - 1) / kCols, tiles = tiles_x * ((rows + kRows - 1) / kRows);
  MOENUM_CHECK(tiles < (int64_t{1} << 31), "mx_quantize: tensor too large for 32-bit tile indices");
  const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{sms} * per_sm));
  kernel<<<grid, kThreads, kSmemBytes, s>>>(x, rows, cols, static_cast<uint32_t>(tiles_x), static_cast<uint32_t>(tiles), q_row, s_row, q_col, s_col);
  MOENUM_CUDA_LAUNCH_CHECK();
}

template <Fp8Format F, ScaleRounding R>
void launch_rule(InvScaleRule inv, const uint16_t* x, int64_t rows, int64_t cols, uint8_t* q_row, uint8_t* s_row,
                 uint8_t* q_col, uint8_t* s_col, cudaStream_t s) {
  if (inv == InvScaleRule::Spec) launch_t<F, R, InvScaleRule::Spec>(x, rows, cols, q_row, s_row, q_col, s_col, s);
  else launch_t<F, R, InvScaleRule::TeKernel>(x, rows, cols, q_row, s_row, q_col, s_col, s);
}

template <Fp8Format F>
void launch_rounding(ScaleRounding rnd, InvScaleRule inv, const uint16_t* x, int64_t rows, int64_t cols,
                     uint8_t* q_row, uint8_t* s_row, uint8_t* q_col, uint8_t* s_col, cudaStream_t s) {
  if (rnd == ScaleRounding::Rceil) launch_rule<F, ScaleRounding::Rceil>(inv, x, rows, cols, q_row, s_row, q_col, s_col, s);
  else launch_rule<F, ScaleRounding::Floor>(inv, x, rows, cols, q_row, s_row, q_col, s_col, s);
}

bool aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

}  // namespace

bool mx_quantize_pipelined_supports(const uint16_t* x, const uint8_t* q_row, const uint8_t* q_col) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  return major >= 8 && aligned(x, 16) && aligned(q_row, 8) && aligned(q_col, 16);
}

void launch_mx_quantize_pipelined(const uint16_t* x, int64_t rows, int64_t cols, Fp8Format fmt,
                                  ScaleRounding rounding, InvScaleRule inv_scale, uint8_t* q_row, uint8_t* s_row,
                                  uint8_t* q_col, uint8_t* s_col, cudaStream_t s) {
  if (fmt == Fp8Format::E4M3)
    launch_rounding<Fp8Format::E4M3>(rounding, inv_scale, x, rows, cols, q_row, s_row, q_col, s_col, s);
  else
    launch_rounding<Fp8Format::E5M2>(rounding, inv_scale, x, rows, cols, q_row, s_row, q_col, s_col, s);
}

}  // namespace moenum::gpu
