// Acceptance 1: MXFP8 codes and scales from the GPU quantizer are bitwise identical to the shared
// CPU rules (mx.h) on random data over a wide exponent range, on special-value blocks and on odd
// shapes (rows not a multiple of 128, columns not a multiple of 128); plus the 128x4 scale swizzle.
// The pipelined kernel's tiles are 32 x 256: 96x160, 64x800 and 16384x1056 end in partial column
// tiles, 200x64 and 4100x288 in a partial row tile (rowwise only), and 16384x1056 (2560 tiles) gives
// every block of its persistent grid (at most 3 per SM) several trips around the 3-stage ring.
#include <gtest/gtest.h>

#include <random>

#include "device_buffer.h"
#include "gpu_test_util.h"
#include "kernels/mx_quantize.h"
#include "moenum/mx.h"

namespace moenum::gputest {
namespace {

std::vector<uint16_t> test_data(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint16_t> v(rows * cols);
  for (auto& b : v) {
    const uint32_t sign = g() & 1, exp = g() % 256, man = g() % 128;
    b = static_cast<uint16_t>(sign << 15 | std::min<uint32_t>(exp, 254) << 7 | man);  // finite over all exponents
  }
  // Special blocks along the first rows (rowwise) and first column blocks (columnwise).
  const uint16_t specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x807F, 0x7F7F, 0x3F80};
  // Rows 0, 1 and 5 are whole blocks of +0, -0 and the tiniest bf16 subnormal (amax <= 448 * 2^-127:
  // code 0, where the te_kernel and spec inverse scales differ).
  for (int64_t i = 0; i < std::min<int64_t>(rows, 9); ++i)
    for (int64_t j = 0; j < 32 && j < cols; ++j)
      v[i * cols + j] = (j % 3 == 0 || i == 0 || i == 1 || i == 5) ? specials[i] : v[i * cols + j];
  for (int64_t j = 0; j < cols; ++j) v[(rows > 40 ? 40 : 0) * cols + j] = 0;  // an all-zero row
  // All-NaN blocks of both signs (amax of nothing: code 0x00, NaN codes): rowwise block 0 of row 6,
  // columnwise the last column's second row block.
  for (int64_t j = 0; j < 32 && rows > 6; ++j) v[6 * cols + j] = j % 2 ? 0xFFC1 : 0x7FC0;
  for (int64_t i = 32; i < 64 && i < rows; ++i) v[i * cols + cols - 1] = i % 2 ? 0x7FC0 : 0xFF81;
  return v;
}

struct Shape {
  int64_t rows, cols;
};

const char* kernel_suffix(gpu::MxQuantizeKernel k) {
  switch (k) {
    case gpu::MxQuantizeKernel::Tiled: return "_tiled";
    case gpu::MxQuantizeKernel::Vectorized: return "_vectorized";
    case gpu::MxQuantizeKernel::Pipelined: return "_pipelined";
  }
  return "_unknown";
}

class GpuMx : public ::testing::TestWithParam<std::tuple<Shape, int, int, int, gpu::MxQuantizeKernel>> {};

TEST_P(GpuMx, CodesAndScalesBitwise) {
  MOENUM_REQUIRE_GPU();
  const auto [shape, fmt_i, rnd_i, inv_i, kernel] = GetParam();
  const auto fmt = static_cast<Fp8Format>(fmt_i);
  const auto rnd = static_cast<ScaleRounding>(rnd_i);
  const auto inv = static_cast<InvScaleRule>(inv_i);
  const int64_t R = shape.rows, C = shape.cols;
  const bool colwise = R % 32 == 0;
  auto host = test_data(R, C, static_cast<uint32_t>(R * 131 + C + fmt_i * 7 + rnd_i));
  std::vector<float> xf(host.size());
  for (size_t i = 0; i < host.size(); ++i) xf[i] = bf16_to_f32(host[i]);
  std::vector<uint8_t> q_row(R * C), s_row(R * C / 32), q_col(R * C), s_col(colwise ? R / 32 * C : 0);
  mx_quantize_rowwise(xf.data(), R, C, q_row.data(), s_row.data(), fmt, rnd, inv);
  if (colwise) mx_quantize_columnwise(xf.data(), R, C, q_col.data(), s_col.data(), fmt, rnd, inv);

  gpu::DeviceBuffer<uint16_t> dx;
  dx.upload(host);
  gpu::DeviceBuffer<uint8_t> dqr(R * C), dsr(R * C / 32), dqc(R * C), dsc(s_col.size());
  gpu::launch_mx_quantize_bf16(dx.get(), R, C, fmt, rnd, inv, dqr.get(), dsr.get(), colwise ? dqc.get() : nullptr,
                               colwise ? dsc.get() : nullptr, nullptr, kernel);
  // Compare scales first: one wrong scale explains up to 32 wrong codes.
  EXPECT_EQ(s_row, dsr.download()) << "rowwise scales";
  EXPECT_EQ(q_row, dqr.download()) << "rowwise codes";
  if (colwise) {
    EXPECT_EQ(s_col, dsc.download()) << "columnwise scales";
    EXPECT_EQ(q_col, dqc.download()) << "columnwise codes";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuMx,
                         ::testing::Combine(::testing::Values(Shape{32, 32}, Shape{96, 160}, Shape{200, 64},
                                                              Shape{256, 1024}, Shape{1000, 96}, Shape{64, 800},
                                                              Shape{4100, 288}, Shape{16384, 1056}),
                                            ::testing::Values(0, 1), ::testing::Values(0, 1), ::testing::Values(0, 1),
                                            ::testing::Values(gpu::MxQuantizeKernel::Tiled,
                                                              gpu::MxQuantizeKernel::Vectorized,
                                                              gpu::MxQuantizeKernel::Pipelined)),
                         [](const auto& info) {
                           const Shape s = std::get<0>(info.param);
                           return std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                                  (std::get<1>(info.param) ? "_e5m2" : "_e4m3") +
                                  (std::get<2>(info.param) ? "_floor" : "_rceil") +
                                  (std::get<3>(info.param) ? "_te_kernel" : "_spec") +
                                  kernel_suffix(std::get<4>(info.param));
                         });

// The 128x4 layout restated: tile (i/128, j/4) of 512 bytes, inside it row i%32 picks a 16-byte
// chunk, (i%128)/32 the 4-byte group within it, j%4 the byte.
TEST(GpuMxSwizzle, MatchesLayoutAndZeroPads) {
  MOENUM_REQUIRE_GPU();
  for (bool transposed : {false, true}) {
    const int64_t rows = 200, sc = 5;  // pads to 256 x 8
    std::vector<uint8_t> plain(rows * sc);
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<uint8_t>(1 + i % 250);
    gpu::DeviceBuffer<uint8_t> dp, out(gpu::mx_swizzled_size(rows, sc));
    dp.upload(plain);
    gpu::launch_mx_swizzle_scales(dp.get(), rows, sc, transposed, out.get(), nullptr);
    auto got = out.download();
    ASSERT_EQ(got.size(), size_t(256 * 8));
    std::vector<uint8_t> want(got.size(), 0);
    const int64_t col_tiles = 2;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < sc; ++j) {
        const int64_t tile = (i / 128) * col_tiles + j / 4;
        const int64_t idx = tile * 512 + (i % 32) * 16 + ((i % 128) / 32) * 4 + j % 4;
        want[idx] = transposed ? plain[j * rows + i] : plain[i * sc + j];
      }
    EXPECT_EQ(want, got) << (transposed ? "transposed" : "plain");
  }
}

}  // namespace
}  // namespace moenum::gputest
