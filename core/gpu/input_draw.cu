// The inputs drawn on the GPU (moenum/problem.h, DeviceDrawer): draw::element of each index, the
// very function the CPU draws by, compiled here with --fmad=false, so the bits are the CPU's. At a
// production layer the CPU spends seconds in the deterministic log and cos of every weight.
#include <algorithm>
#include <cstdint>
#include <span>

#include "cuda_check.h"
#include "device.h"
#include "device_buffer.h"
#include "host_transfer.h"
#include "moenum/input_draw.h"
#include "moenum/problem.h"

namespace moenum::gpu {
namespace {

__global__ void draw_kernel(draw::DrawSpec d, uint64_t i0, int64_t n, float* out) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x)
    out[j] = draw::element(d, i0 + uint64_t(j));
}

// Elements per chunk: the device holds one chunk at a time.
constexpr int64_t kChunk = int64_t{64} << 20;

bool draw_on_device(const draw::DrawSpec& d, std::span<float> out) {
  static const bool usable = cuda_availability().ok;
  if (!usable) return false;
  const int64_t n = int64_t(out.size());
  if (n == 0) return true;
  DeviceBuffer<float> buf(size_t(std::min(n, kChunk)));
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, n - i0);
    const int blocks = int(std::min<int64_t>((len + 255) / 256, 4096));
    draw_kernel<<<blocks, 256>>>(d, uint64_t(i0), len, buf.get());
    MOENUM_CUDA_CHECK(cudaGetLastError());
    copy_to_host(out.data() + i0, buf.get(), size_t(len) * sizeof(float), nullptr);
  }
  return true;
}

const DeviceDrawerRegistrar registrar(draw_on_device);

}  // namespace
}  // namespace moenum::gpu
