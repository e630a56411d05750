// The GPU's pairwise FP8 encoder (hardware cvt.rn.satfinite on sm_89+) against the shared software
// encoder fp8_encode_t, over every fp32 bit pattern, in both lanes of the pair: the vectorized MXFP8
// quantizer relies on the two being the same function. Likewise the four-wide encoder of the pipelined
// quantizer, in all four lanes, with its sign bytes taken the way the quantizer takes them (the whole
// high byte of each value, exponent bits included).
#include <gtest/gtest.h>

#include "device_buffer.h"
#include "gpu_test_util.h"
#include "kernels/fp8x2_encode.cuh"
#include "kernels/fp8x4_encode.cuh"

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

// Lanes 0..3 get x, -x, -x, x: every lane sees every fp32 bit pattern over the loop.
template <Fp8Format F>
__global__ void count_encode4_mismatches(unsigned long long* count, unsigned int* first) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32);
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t u = static_cast<uint32_t>(i), n = u ^ 0x80000000u;
    const float v[4] = {f32_from_bits(u), f32_from_bits(n), f32_from_bits(n), f32_from_bits(u)};
    const uint32_t signs = (u >> 24) | (n >> 24) << 8 | (n >> 24) << 16 | (u >> 24) << 24;
    const uint32_t got = gpu::fp8x4_encode<F>(v[0], v[1], v[2], v[3], signs);
    uint32_t want = 0;
    for (int k = 0; k < 4; ++k) want |= uint32_t{fp8_encode_t<F>(v[k])} << (8 * k);
    if (got != want) {
      atomicAdd(count, 1ull);
      atomicMin(first, u);
    }
  }
}

template <Fp8Format F, bool Four = false>
void expect_no_mismatch(const char* name) {
  gpu::DeviceBuffer<unsigned long long> count(1);
  gpu::DeviceBuffer<unsigned int> first(1);
  count.upload(std::vector<unsigned long long>{0});
  first.upload(std::vector<unsigned int>{0xFFFFFFFFu});
  if (Four) count_encode4_mismatches<F><<<4096, 256>>>(count.get(), first.get());
  else count_encode_mismatches<F><<<4096, 256>>>(count.get(), first.get());
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
  EXPECT_EQ(0ull, count.download()[0]) << name << ": first fp32 bit pattern that differs: 0x" << std::hex
                                        << first.download()[0];
}

TEST(GpuFp8Encode, PairEncoderMatchesSoftwareOnEveryFp32) {
  MOENUM_REQUIRE_GPU();
  expect_no_mismatch<Fp8Format::E4M3>("e4m3");
  expect_no_mismatch<Fp8Format::E5M2>("e5m2");
}

TEST(GpuFp8Encode, QuadEncoderMatchesSoftwareOnEveryFp32) {
  MOENUM_REQUIRE_GPU();
  expect_no_mismatch<Fp8Format::E4M3, true>("e4m3 x4");
  expect_no_mismatch<Fp8Format::E5M2, true>("e5m2 x4");
}

}  // namespace
}  // namespace moenum::gputest
