// The automatic Fprop configuration of gpu.grouped that is picked on the device from the counts
// (grouped_sm90.h, fprop_tiles): the skew flag puts the bench's routings on the intended side, and
// the automatic engine gives the single-configuration engine's output bit for bit on even and
// skewed counts, eagerly and replayed from one CUDA graph across a change of counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "device_buffer.h"
#include "gpu_test_util.h"
#include "kernels/layer_kernels.h"
#ifdef MOENUM_HAVE_CUTLASS
#include "sm90/cutlass_engine.h"
#include "sm90/grouped_sm90.h"
#endif

namespace moenum::gputest {
namespace {

#ifdef MOENUM_HAVE_CUTLASS
using gpu::DeviceBuffer;
namespace sm90 = gpu::sm90;

// The bench's counts (bench/gpu_gemm_bench.cu): uniform or zipf s=1.2 over the groups, rounded down
// to multiples of 16, the remainder to the first group.
std::vector<int64_t> bench_counts(int groups, int64_t rows, bool zipf) {
  std::vector<double> w(groups);
  double sum = 0;
  for (int e = 0; e < groups; ++e) sum += (w[e] = zipf ? 1.0 / std::pow(e + 1.0, 1.2) : 1.0);
  std::vector<int64_t> c(groups);
  int64_t used = 0;
  for (int e = 0; e < groups; ++e) used += (c[e] = static_cast<int64_t>(std::floor(rows * w[e] / sum / 16)) * 16);
  c[0] += rows - used;
  return c;
}

bool device_says_skewed(const std::vector<int64_t>& counts) {
  DeviceBuffer<int64_t> d;
  d.upload(counts);
  DeviceBuffer<int> flag(1);
  sm90::launch_counts_skewed(d.get(), static_cast<int>(counts.size()), flag.get(), nullptr);
  return flag.download()[0] != 0;
}

// Deterministic bf16 patterns of small finite values (sign, exponent 120..127, random mantissa).
std::vector<uint16_t> bf16_values(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  uint32_t h = seed;
  for (auto& x : v) {
    h = h * 1664525u + 1013904223u;
    x = static_cast<uint16_t>((h >> 16 & 0x8000u) | (120u + (h >> 8 & 7u)) << 7 | (h & 0x7Fu));
  }
  return v;
}

// One Fprop GEMM in the range where the choice is made on the device (K >= 4096, N >= 1024).
struct FpropCase {
  static constexpr int kGroups = 8;
  static constexpr int64_t kRows = 2048, kN = 1024, kK = 4096;
  DeviceBuffer<uint16_t> a, b, d;
  DeviceBuffer<int64_t> counts{kGroups}, offsets{kGroups + 1};
  gpu::GroupedGemmDesc g;

  FpropCase() {
    a.upload(bf16_values(kRows * kK, 1));
    b.upload(bf16_values(kGroups * kN * kK, 2));
    d.reset(kRows * kN);
    g.kind = gpu::GemmKind::Fprop, g.groups = kGroups, g.n = kN, g.k = kK, g.a = a.get(), g.d_rows = d.get();
    g.counts = counts.get(), g.offsets = offsets.get();
    for (int e = 0; e < kGroups; ++e) g.b_expert.push_back(b.get() + size_t(e) * kN * kK);
  }
  void set_counts(const std::vector<int64_t>& c, cudaStream_t s) {
    counts.upload(c, s);
    gpu::launch_counts_to_offsets(counts.get(), offsets.get(), kGroups, s);
  }
  void poison(cudaStream_t s) { ASSERT_EQ(cudaSuccess, cudaMemsetAsync(d.get(), 0xFF, d.size() * 2, s)); }
  std::vector<uint16_t> run(gpu::GemmEngine& eng, cudaStream_t s) {
    poison(s);
    eng.run(g, s);
    return d.download(s);
  }
};

const std::vector<int64_t> kEven(FpropCase::kGroups, FpropCase::kRows / FpropCase::kGroups);
const std::vector<int64_t> kSkewed = bench_counts(FpropCase::kGroups, FpropCase::kRows, true);
#endif

TEST(GpuGroupedChoice, SkewFlagSplitsTheBenchRoutings) {
  MOENUM_REQUIRE_GPU();
#ifndef MOENUM_HAVE_CUTLASS
  GTEST_SKIP() << "built without CUTLASS: gpu.grouped not available";
#else
  // The bench's group counts and rows (the 8 and 32 expert shapes are the ones with K >= 4096).
  const std::pair<int, int64_t> shapes[] = {{8, 16384}, {32, 32768}, {128, 65536}, {256, 65536}};
  for (auto [groups, rows] : shapes) {
    EXPECT_FALSE(device_says_skewed(bench_counts(groups, rows, false))) << groups << " groups, uniform";
    EXPECT_TRUE(device_says_skewed(bench_counts(groups, rows, true))) << groups << " groups, zipf 1.2";
  }
  // The threshold: the largest group more than twice the mean.
  EXPECT_FALSE(device_says_skewed({512, 256, 256, 0}));  // max 512 = 2 x mean 256
  EXPECT_TRUE(device_says_skewed({528, 240, 256, 0}));
  EXPECT_FALSE(device_says_skewed({0, 0, 0, 0}));
  EXPECT_FALSE(device_says_skewed(std::vector<int64_t>(1000, 16)));  // more groups than threads
#endif
}

TEST(GpuGroupedChoice, AutomaticEngineMatchesBaseBitwise) {
  MOENUM_REQUIRE_GPU();
#ifndef MOENUM_HAVE_CUTLASS
  GTEST_SKIP() << "built without CUTLASS: gpu.grouped not available";
#else
  if (gpu::device_sm() != 90) GTEST_SKIP() << "CUTLASS sm_90a kernels need an sm_90 device";
  FpropCase c;
  const sm90::FpropTiles tiles = sm90::fprop_tiles(c.g);
  ASSERT_TRUE(tiles.chosen_on_device()) << "the case should be one where the counts decide";
  EXPECT_EQ(tiles.even, sm90::Tile::T128x128Pingpong);
  EXPECT_EQ(tiles.skewed, sm90::Tile::T128x256);
  EXPECT_FALSE(device_says_skewed(kEven));
  EXPECT_TRUE(device_says_skewed(kSkewed));

  cudaStream_t s;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto base = gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1});
  auto automatic = gpu::make_cutlass_sm90_engine();
  for (const auto* counts : {&kEven, &kSkewed}) {
    const char* what = counts == &kEven ? "even counts" : "skewed counts";
    c.set_counts(*counts, s);
    const std::vector<uint16_t> want = c.run(*base, s);
    EXPECT_EQ(want, c.run(*automatic, s)) << what;
    // Each of the two configurations alone gives the same bits too.
    EXPECT_EQ(want, c.run(*gpu::make_cutlass_sm90_engine({tiles.even, -1}), s)) << what << ", " << sm90::tile_name(tiles.even);
    EXPECT_EQ(want, c.run(*gpu::make_cutlass_sm90_engine({tiles.skewed, -1}), s)) << what << ", " << sm90::tile_name(tiles.skewed);
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
#endif
}

TEST(GpuGroupedChoice, GraphReplayFollowsNewCounts) {
  MOENUM_REQUIRE_GPU();
#ifndef MOENUM_HAVE_CUTLASS
  GTEST_SKIP() << "built without CUTLASS: gpu.grouped not available";
#else
  if (gpu::device_sm() != 90) GTEST_SKIP() << "CUTLASS sm_90a kernels need an sm_90 device";
  FpropCase c;
  cudaStream_t s;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto base = gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1});
  c.set_counts(kEven, s);
  const std::vector<uint16_t> want_even = c.run(*base, s);
  c.set_counts(kSkewed, s);
  const std::vector<uint16_t> want_skewed = c.run(*base, s);

  auto automatic = gpu::make_cutlass_sm90_engine();
  c.run(*automatic, s);  // first run outside the capture: creates the plans (allocations)
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  automatic->run(c.g, s);
  ASSERT_EQ(cudaSuccess, cudaStreamEndCapture(s, &graph));
  ASSERT_EQ(cudaSuccess, cudaGraphInstantiate(&exec, graph, 0));

  for (const auto* counts : {&kEven, &kSkewed, &kEven}) {
    c.set_counts(*counts, s);  // same buffers, new values
    c.poison(s);
    ASSERT_EQ(cudaSuccess, cudaGraphLaunch(exec, s));
    EXPECT_EQ(counts == &kEven ? want_even : want_skewed, c.d.download(s))
        << (counts == &kEven ? "replay, even counts" : "replay, skewed counts");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

}  // namespace
}  // namespace moenum::gputest
