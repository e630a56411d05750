// The staged host copies (core/gpu/host_transfer.h): every byte arrives, whatever the number of
// chunks, a partial last chunk, or a size below the staging threshold.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda_check.h"
#include "gpu_test_util.h"
#include "host_transfer.h"

namespace moenum::gputest {
namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed;
  for (auto& b : v) b = uint8_t((x = x * 1664525u + 1013904223u) >> 24);
  return v;
}

void round_trip(size_t bytes, size_t chunk) {
  const std::vector<uint8_t> in = pattern(bytes, uint32_t(bytes));
  void* dev = nullptr;
  MOENUM_CUDA_CHECK(cudaMalloc(&dev, bytes));
  gpu::copy_to_device(dev, in.data(), bytes, nullptr, chunk);
  std::vector<uint8_t> plain(bytes), staged(bytes, 0xA5);
  MOENUM_CUDA_CHECK(cudaMemcpy(plain.data(), dev, bytes, cudaMemcpyDeviceToHost));
  gpu::copy_to_host(staged.data(), dev, bytes, nullptr, chunk);
  MOENUM_CUDA_CHECK(cudaFree(dev));
  EXPECT_TRUE(plain == in) << bytes << " bytes in chunks of " << chunk << ": upload";
  EXPECT_TRUE(staged == in) << bytes << " bytes in chunks of " << chunk << ": download";
}

TEST(GpuHostTransfer, EveryByteArrivesInBothDirections) {
  MOENUM_REQUIRE_GPU();
  round_trip(0, size_t{1} << 20);
  round_trip(1000, size_t{1} << 20);                       // below the threshold: one plain copy
  round_trip((size_t{7} << 20) + 3, size_t{1} << 20);      // 8 chunks, the last partial
  round_trip(size_t{4} << 20, size_t{1} << 20);            // whole chunks only
  round_trip((size_t{150} << 20) + 17, gpu::kStagedChunk); // the production chunk size
}

}  // namespace
}  // namespace moenum::gputest
