// The GPU's pairwise FP8 encoder (hardware cvt.rn.satfinite on sm_89+) against the shared software
// encoder fp8_encode_t, over every fp32 bit pattern, in both lanes of the pair: the vectorized MXFP8
// quantizer relies on the two being the same function.
#include <gtest/gtest.h>

#include "device_buffer.h"
#include "gpu_test_util.h"
#include "kernels/fp8x2_encode.cuh"

namespace moenum::gputest {
namespace {

template <Fp8Format F>
__global__ void count_encode_mismatches(unsigned long long* count, unsigned int* first) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32);
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float x = f32_from_bits(u), y = f32_from_bits(u ^ 0x80000000u);  // y: x with the other sign
    const uint16_t got = gpu::fp8x2_encode<F>(x, y);
    const uint16_t want = static_cast<uint16_t>(fp8_encode_t<F>(x) | fp8_encode_t<F>(y) << 8);
    if (got != want) {
      atomicAdd(count, 1ull);
      atomicMin(first, u);
    }
  }
}

template <Fp8Format F>
void expect_no_mismatch(const char* name) {
  gpu::DeviceBuffer<unsigned long long> count(1);
  gpu::DeviceBuffer<unsigned int> first(1);
  count.upload(std::vector<unsigned long long>{0});
  first.upload(std::vector<unsigned int>{0xFFFFFFFFu});
  count_encode_mismatches<F><<<4096, 256>>>(count.get(), first.get());
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
  EXPECT_EQ(0ull, count.download()[0]) << name << ": first fp32 bit pattern that differs: 0x" << std::hex
                                        << first.download()[0];
}

TEST(GpuFp8Encode, PairEncoderMatchesSoftwareOnEveryFp32) {
  MOENUM_REQUIRE_GPU();
  expect_no_mismatch<Fp8Format::E4M3>("e4m3");
  expect_no_mismatch<Fp8Format::E5M2>("e5m2");
}

}  // namespace
}  // namespace moenum::gputest
