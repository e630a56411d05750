// The automatic Fprop configuration of gpu.grouped that is picked on the device from the counts
// (grouped_sm90.h, fprop_tiles): the class of the counts puts the bench's routings on the intended
// side, and the automatic engine gives the single-configuration engine's output bit for bit on
// counts of every class, eagerly and replayed from one CUDA graph across changes of the counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <iterator>
#include <tuple>
#include <utility>
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

// The device's class of the counts, laid out back to back from row 0; equal_rows: the rows per group
// of a strided batch on offer (0: none).
sm90::CountsClass device_class(const std::vector<int64_t>& counts, int64_t equal_rows = 0) {
  const int groups = static_cast<int>(counts.size());
  DeviceBuffer<int64_t> d, offsets(groups + 1);
  d.upload(counts);
  gpu::launch_counts_to_offsets(d.get(), offsets.get(), groups, nullptr);
  DeviceBuffer<int> counts_class(1);
  sm90::launch_counts_class(d.get(), offsets.get(), groups, equal_rows, counts_class.get(), nullptr);
  return static_cast<sm90::CountsClass>(counts_class.download()[0]);
}
using Class = sm90::CountsClass;

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

// One Fprop GEMM with N >= 1024, where the counts can decide: with K < 2048 or N >= 4096 (H200) between
// pingpong and its transposed form (small groups), with K < 4096 and N a multiple of 192 the same pair
// 192 weight rows wide, with other N among three 2x1 configurations (pingpong; torch's 128x256 tile
// for small groups; the transposed pingpong for skewed counts); with K >= 4096 the 128x256 2x1 tile
// alone.
struct FpropCase {
  static constexpr int kGroups = 8;
  static constexpr int64_t kRows = 8192, kN = 1024;
  int groups;
  int64_t k, n;
  DeviceBuffer<uint16_t> a, b, d;
  DeviceBuffer<int64_t> counts, offsets;
  gpu::GroupedGemmDesc g;

  explicit FpropCase(int64_t k_, int groups_ = kGroups, int64_t rows = kRows, int64_t n_ = kN)
      : groups(groups_), k(k_), n(n_) {
    a.upload(bf16_values(rows * k, 1));
    b.upload(bf16_values(groups * n * k, 2));
    d.reset(rows * n);
    counts.reset(groups);
    offsets.reset(groups + 1);
    g.kind = gpu::GemmKind::Fprop, g.groups = groups, g.n = n, g.k = k, g.a = a.get(), g.d_rows = d.get(), g.rows = rows;
    g.counts = counts.get(), g.offsets = offsets.get();
    for (int e = 0; e < groups; ++e) g.b_expert.push_back(b.get() + size_t(e) * n * k);
  }
  void set_counts(const std::vector<int64_t>& c, cudaStream_t s) {
    counts.upload(c, s);
    gpu::launch_counts_to_offsets(counts.get(), offsets.get(), groups, s);
  }
  void poison(cudaStream_t s) { ASSERT_EQ(cudaSuccess, cudaMemsetAsync(d.get(), 0xFF, d.size() * 2, s)); }
  std::vector<uint16_t> run(gpu::GemmEngine& eng, cudaStream_t s) {
    poison(s);
    eng.run(g, s);
    return d.download(s);
  }
};

// Devices of the rule's table (grouped_fprop.cu): 132 SMs and 4.9 TB/s (H200) or 3.35 TB/s (H100 SXM).
const sm90::FpropDevice kH200{132, 4915}, kH100{132, 3352};

// 1024 rows per group; 256 (two M tiles: small groups, three quarters of the rows unused); zipf s=1.2
const std::vector<int64_t> kEven(FpropCase::kGroups, FpropCase::kRows / FpropCase::kGroups);
const std::vector<int64_t> kSmallGroups(FpropCase::kGroups, 256);
const std::vector<int64_t> kSkewed = bench_counts(FpropCase::kGroups, FpropCase::kRows, true);
const std::vector<int64_t>* const kCountSets[] = {&kEven, &kSmallGroups, &kSkewed};
const char* set_name(const std::vector<int64_t>* c) {
  return c == &kEven ? "even counts" : c == &kSmallGroups ? "small groups" : "skewed counts";
}

// The 128x128 tile's output for each of kCountSets, in order: what every other engine must give.
std::vector<std::vector<uint16_t>> base_outputs(FpropCase& c, cudaStream_t s) {
  auto base = gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1});
  std::vector<std::vector<uint16_t>> want;
  for (const auto* counts : kCountSets) {
    c.set_counts(*counts, s);
    want.push_back(c.run(*base, s));
  }
  return want;
}

using CountSets = std::vector<const std::vector<int64_t>*>;

// `launch` (one GEMM on c.g, on s) called `calls` times back to back, call i on the counts
// sets[i % size] and into an output of its own, with no host synchronisation: the outputs in order.
template <class Launch>
std::vector<std::vector<uint16_t>> queued_outputs(FpropCase& c, const CountSets& sets, int calls, Launch launch,
                                                  cudaStream_t s) {
  std::vector<DeviceBuffer<uint16_t>> outs(calls);
  uint16_t* const d = c.g.d_rows;
  for (int i = 0; i < calls; ++i) {
    outs[i].reset(c.d.size());
    EXPECT_EQ(cudaSuccess, cudaMemsetAsync(outs[i].get(), 0xFF, outs[i].size() * 2, s));
    c.set_counts(*sets[i % sets.size()], s);
    c.g.d_rows = outs[i].get();
    launch();
  }
  c.g.d_rows = d;
  std::vector<std::vector<uint16_t>> got;
  for (auto& out : outs) got.push_back(out.download(s));
  return got;
}

// `launch` captured once in a CUDA graph and replayed on the counts sets[i] for each i of `order`
// (same buffers, new values): the outputs in order.
template <class Launch>
std::vector<std::vector<uint16_t>> replayed_outputs(FpropCase& c, const CountSets& sets, std::initializer_list<int> order,
                                                    Launch launch, cudaStream_t s) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT_EQ(cudaSuccess, cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  launch();
  EXPECT_EQ(cudaSuccess, cudaStreamEndCapture(s, &graph));
  EXPECT_EQ(cudaSuccess, cudaGraphInstantiate(&exec, graph, 0));
  std::vector<std::vector<uint16_t>> got;
  for (int set : order) {
    c.set_counts(*sets[set], s);
    c.poison(s);
    EXPECT_EQ(cudaSuccess, cudaGraphLaunch(exec, s));
    got.push_back(c.d.download(s));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return got;
}

// Every test here needs the CUTLASS sm_90a kernels on an sm_90 device, and gets a stream.
class GpuGroupedChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    MOENUM_REQUIRE_GPU();
    if (gpu::device_sm() != 90) GTEST_SKIP() << "CUTLASS sm_90a kernels need an sm_90 device";
    ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (s) cudaStreamDestroy(s);
  }
  cudaStream_t s = nullptr;
};

// DeepSeek-V3 FC2 (K 2048, N 7168): the 1x2 pingpong pair where DRAM bandwidth is to spare, torch's
// tile for every class of counts elsewhere; the other shapes choose alike on both devices. No device
// needed.
TEST(FpropRule, WideMidKFollowsMemoryBandwidth) {
  using sm90::Tile;
  EXPECT_TRUE(kH200.memory_rich());
  EXPECT_FALSE(kH100.memory_rich());
  gpu::GroupedGemmDesc g;
  g.kind = gpu::GemmKind::Fprop, g.groups = 32, g.n = 7168, g.k = 2048;
  const sm90::FpropTiles rich = sm90::fprop_tiles(g, kH200), lean = sm90::fprop_tiles(g, kH100);
  EXPECT_EQ(rich.even, Tile::T128x128Pingpong);
  EXPECT_EQ(rich.small_groups, Tile::T128x128PingpongT);
  EXPECT_EQ(rich.skewed, Tile::T128x128Pingpong);
  EXPECT_FALSE(lean.chosen_on_device());
  EXPECT_EQ(lean.even, Tile::T128x256M2);
  for (auto [k, n] : {std::pair{int64_t{768}, int64_t{2048}}, std::pair{int64_t{2048}, int64_t{1024}},
                      std::pair{int64_t{2048}, int64_t{1536}}, std::pair{int64_t{7168}, int64_t{4096}}}) {
    g.k = k, g.n = n;
    const sm90::FpropTiles a = sm90::fprop_tiles(g, kH200), b = sm90::fprop_tiles(g, kH100);
    EXPECT_TRUE(a.even == b.even && a.small_groups == b.small_groups && a.skewed == b.skewed) << "K " << k << ", N " << n;
  }
}

// The batch's weights go evict-first only where one cluster holds a group's rows and the k loop is
// long: the bench's gpt-oss-120b and Qwen3.5-35B FC1 cells, not Qwen3-30B (512 rows, two clusters of
// 256) nor Qwen3.5-35B FC2 (K 512).
TEST(FpropRule, BatchWeightsEvictFirstWhereOneClusterReadsThem) {
  using sm90::L2Priority;
  auto weights = [](int64_t k, int64_t rows) { return sm90::batch_l2_rule(k, rows, 256).weights; };
  EXPECT_EQ(weights(2048, 256), L2Priority::EvictFirst);  // Qwen3.5-35B FC1
  EXPECT_EQ(weights(2880, 256), L2Priority::EvictFirst);  // gpt-oss-120b FC1, FC2
  EXPECT_EQ(weights(512, 256), L2Priority::Normal);       // Qwen3.5-35B FC2
  EXPECT_EQ(weights(2048, 512), L2Priority::Normal);      // Qwen3-30B FC1
  EXPECT_EQ(weights(768, 512), L2Priority::Normal);       // Qwen3-30B FC2
  EXPECT_EQ(sm90::batch_l2_rule(2048, 256, 256).rows, L2Priority::Normal);
}

// The batch runs on the fewest clusters that deal its tiles in as many waves as the whole grid: the
// bench's uniform cells whose last wave is short (on 66 clusters of two SMs) lose it, the others keep
// every cluster.
TEST(FpropRule, BatchGridKeepsItsWavesOnFewerClusters) {
  EXPECT_EQ(sm90::batch_clusters(256 * 4, 66), 64);      // Qwen3.5-35B FC1, 128x256 2x1: 15.5 waves -> 16 of 64
  EXPECT_EQ(sm90::batch_clusters(128 * 8 * 2, 66), 64);  // Qwen3-30B FC1, 192x128 1x2 transposed: 31.03 -> 32
  EXPECT_EQ(sm90::batch_clusters(128 * 15, 66), 64);     // gpt-oss-120b FC2, 192x128 1x2 transposed: 29.09 -> 30
  EXPECT_EQ(sm90::batch_clusters(128 * 30, 66), 66);     // gpt-oss-120b FC1: 58.18 waves, 65.08 clusters needed
  EXPECT_EQ(sm90::batch_clusters(128 * 16 * 2, 66), 66); // Qwen3-30B FC2, 128x128 1x2 transposed: 62.06 waves
  EXPECT_EQ(sm90::batch_clusters(66 * 3, 66), 66);       // whole waves: every cluster
  EXPECT_EQ(sm90::batch_clusters(10, 66), 10);           // under one wave: one tile each
  EXPECT_EQ(sm90::batch_clusters(0, 66), 66);
}

// Equal groups may run as one strided batch where the host knows the rows, they split evenly into at
// most four M tiles per group, and the weights are one tensor with a fixed stride. No device needed.
TEST(FpropRule, StridedBatchNeedsRowsAndOneWeightTensor) {
  gpu::GroupedGemmDesc g;
  g.kind = gpu::GemmKind::Fprop, g.groups = 4, g.n = 1024, g.k = 2048, g.rows = 4 * 512;
  const int64_t per = g.n * g.k;
  const std::vector<uint16_t> storage(g.groups * (per + 8));  // host stand-in: only addresses are read
  const uint16_t* weights = storage.data();
  for (int e = 0; e < g.groups; ++e) g.b_expert.push_back(weights + e * per);
  EXPECT_EQ(sm90::equal_groups_rows(g), 512);
  EXPECT_TRUE(sm90::fprop_tiles(g, kH200).batch_equal_groups);
  auto with = [&](auto change) {
    gpu::GroupedGemmDesc h = g;
    change(h);
    return sm90::equal_groups_rows(h);
  };
  EXPECT_EQ(with([](auto& h) { h.rows = 0; }), 0) << "rows not known on the host";
  EXPECT_EQ(with([](auto& h) { h.rows = 4 * 512 - 2; }), 0) << "rows not a whole number per group";
  EXPECT_EQ(with([](auto& h) { h.rows -= 4; }), 511);
  EXPECT_EQ(with([](auto& h) { h.rows = 4 * 528; }), 0) << "over four M tiles per group";
  EXPECT_EQ(with([](auto& h) { h.kind = gpu::GemmKind::Dgrad; }), 0);
  EXPECT_EQ(with([&](auto& h) { std::swap(h.b_expert[1], h.b_expert[2]); }), 0) << "weights out of order";
  EXPECT_EQ(with([&](auto& h) { h.b_expert[3] += 8; }), 0) << "stride not fixed";
  EXPECT_EQ(with([&](auto& h) { for (int e = 0; e < 4; ++e) h.b_expert[e] = weights + e * (per - 8); }), 0) << "overlap";
  EXPECT_EQ(with([&](auto& h) { for (int e = 0; e < 4; ++e) h.b_expert[e] = weights + e * (per + 8); }), 512);
  EXPECT_EQ(with([&](auto& h) { for (int e = 0; e < 4; ++e) h.b_expert[e] = weights + e * (per + 4); }), 0)
      << "stride not whole 16-byte units";
  g.k = 4096;  // long K: one configuration, no batch
  EXPECT_FALSE(sm90::fprop_tiles(g, kH200).batch_equal_groups);
}

TEST_F(GpuGroupedChoice, CountsClassSplitsTheBenchRoutings) {
  // The bench's group counts and rows: uniform Qwen3-30B (128 experts, 64k rows), Qwen3.5-35B (256
  // experts) and gpt-oss-120b (128 experts, 32k rows) have 256 or 512 rows per group, the others more.
  const std::tuple<int, int64_t, Class> shapes[] = {{8, 16384, Class::kEven},
                                                     {32, 32768, Class::kEven},
                                                     {128, 65536, Class::kSmallGroups},
                                                     {128, 32768, Class::kSmallGroups},
                                                     {256, 65536, Class::kSmallGroups}};
  for (auto [groups, rows, uniform] : shapes) {
    EXPECT_EQ(device_class(bench_counts(groups, rows, false)), uniform) << groups << " groups, uniform";
    EXPECT_EQ(device_class(bench_counts(groups, rows, true)), Class::kSkewed) << groups << " groups, zipf 1.2";
  }
  // The thresholds: the largest group more than twice the mean; at most 512 rows per group on average.
  EXPECT_EQ(device_class({2048, 1024, 1024, 0}), Class::kEven);  // max 2048 = 2 x mean 1024
  EXPECT_EQ(device_class({2064, 1008, 1024, 0}), Class::kSkewed);
  EXPECT_EQ(device_class({1024, 512, 512, 0}), Class::kSmallGroups);  // mean 512
  EXPECT_EQ(device_class({1024, 528, 512, 0}), Class::kEven);         // mean 516
  EXPECT_EQ(device_class({0, 0, 0, 0}), Class::kSmallGroups);
  EXPECT_EQ(device_class(std::vector<int64_t>(1000, 16)), Class::kSmallGroups);  // more groups than threads
  EXPECT_EQ(device_class(std::vector<int64_t>(1000, 600)), Class::kEven);
  // Equal small groups: only with a strided batch on offer, and only for its rows per group.
  EXPECT_EQ(device_class(std::vector<int64_t>(1000, 256), 256), Class::kEqualSmallGroups);
  EXPECT_EQ(device_class(std::vector<int64_t>(1000, 256), 0), Class::kSmallGroups);
  EXPECT_EQ(device_class(std::vector<int64_t>(1000, 256), 240), Class::kSmallGroups);
  EXPECT_EQ(device_class({256, 256, 256, 240}, 256), Class::kSmallGroups);
  EXPECT_EQ(device_class({240, 272, 256, 256}, 256), Class::kSmallGroups);  // same total, not equal
  EXPECT_EQ(device_class({0, 0, 0, 0}, 256), Class::kSmallGroups);
}

TEST_F(GpuGroupedChoice, AutomaticEngineMatchesBaseBitwise) {
  EXPECT_EQ(device_class(kEven), Class::kEven);
  EXPECT_EQ(device_class(kSmallGroups), Class::kSmallGroups);
  EXPECT_EQ(device_class(kSkewed), Class::kSkewed);
  using sm90::Tile;
  for (auto [k, n, even, small_groups, skewed] :
       {std::tuple{int64_t{1024}, FpropCase::kN, Tile::T128x128Pingpong, Tile::T128x128PingpongT, Tile::T128x128Pingpong},
        std::tuple{int64_t{2048}, int64_t{1536}, Tile::T128x192Pingpong, Tile::T192x128PingpongT, Tile::T128x192Pingpong},
        std::tuple{int64_t{2048}, FpropCase::kN, Tile::T128x128PingpongM2, Tile::T128x256M2, Tile::T128x128PingpongTM2},
        std::tuple{int64_t{2048}, int64_t{4096}, Tile::T128x128Pingpong, Tile::T128x128PingpongT, Tile::T128x128Pingpong}}) {
    FpropCase c(k, FpropCase::kGroups, FpropCase::kRows, n);
    // The table as on the H200; the automatic engine below picks for this device, whichever it is.
    const sm90::FpropTiles tiles = sm90::fprop_tiles(c.g, kH200);
    ASSERT_TRUE(tiles.chosen_on_device()) << "K " << k << " should be a case where the counts decide";
    EXPECT_EQ(tiles.even, even) << "K " << k << ", N " << n;
    EXPECT_EQ(tiles.small_groups, small_groups) << "K " << k << ", N " << n;
    EXPECT_EQ(tiles.skewed, skewed) << "K " << k << ", N " << n;
    auto base = gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1});
    auto automatic = gpu::make_cutlass_sm90_engine();
    for (const auto* counts : kCountSets) {
      const std::string what = std::string(set_name(counts)) + ", K " + std::to_string(k) + ", N " + std::to_string(n);
      c.set_counts(*counts, s);
      const std::vector<uint16_t> want = c.run(*base, s);
      EXPECT_EQ(want, c.run(*automatic, s)) << what;
      // Each configuration alone gives the same bits too.
      for (sm90::Tile t : {tiles.even, tiles.small_groups, tiles.skewed})
        EXPECT_EQ(want, c.run(*gpu::make_cutlass_sm90_engine({t, -1}), s)) << what << ", " << sm90::tile_name(t);
    }
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
}

// Equal small groups (512 rows each, filling the rows the host was told, back to back) run as one
// strided batched GEMM where the device finds them so: bitwise the 128x128 tile's output, eagerly,
// with a partial last k-tile, queued with changing counts and replayed from a graph. Counts that are
// not equal, or equal but short of the rows, run the grouped kernels. 16 groups: enough tiles for every
// SM, so the batch's persistent grid is the grouped kernels' (a launch carries one grid).
TEST_F(GpuGroupedChoice, EqualSmallGroupsRunAsStridedBatchBitwise) {
  constexpr int kGroups = 16;
  constexpr int64_t kPerGroup = 512, kRows = kGroups * kPerGroup;
  const std::vector<int64_t> equal(kGroups, kPerGroup), short_of_rows(kGroups, 256);
  std::vector<int64_t> unequal = equal;
  unequal[0] -= 16, unequal[1] += 16;
  const CountSets sets = {&equal, &unequal, &short_of_rows};
  for (auto [k, n] : {std::pair<int64_t, int64_t>{1024, 1024}, {2000, 1024}, {2048, 1536}, {2048, 1024}, {2048, 4096}}) {
    FpropCase c(k, kGroups, kRows, n);
    const std::string shape = "K " + std::to_string(k) + ", N " + std::to_string(n);
    const sm90::FpropTiles tiles = sm90::fprop_tiles(c.g, sm90::FpropDevice::current());
    ASSERT_EQ(sm90::equal_groups_rows(c.g), kPerGroup) << shape;
    auto base = gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1});
    auto plan = sm90::make_fprop_plan(c.g, sm90::PlanOptions{});
    std::vector<std::vector<uint16_t>> want;
    for (const auto* counts : sets) {
      c.set_counts(*counts, s);
      want.push_back(c.run(*base, s));
      c.poison(s);
      plan->launch(c.g, s);
      EXPECT_EQ(want.back(), c.d.download(s)) << shape << ", counts set " << want.size() - 1;
      EXPECT_EQ(plan->offered_strided_batch(), tiles.batch_equal_groups) << shape;
    }
    if (!tiles.batch_equal_groups) continue;  // N 4096 on a device with less DRAM bandwidth per SM
    EXPECT_EQ(device_class(equal, kPerGroup), Class::kEqualSmallGroups) << shape;
    auto launch = [&] { plan->launch(c.g, s); };
    const auto queued = queued_outputs(c, sets, 6, launch, s);
    for (size_t i = 0; i < queued.size(); ++i) EXPECT_EQ(want[i % 3], queued[i]) << shape << ", queued call " << i;
    const std::initializer_list<int> order = {0, 1, 0, 2, 0};
    const auto replayed = replayed_outputs(c, sets, order, launch, s);
    for (size_t i = 0; i < replayed.size(); ++i)
      EXPECT_EQ(want[order.begin()[i]], replayed[i]) << shape << ", replay " << i;
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
}

// Long K loops: one configuration for every class of counts, bitwise the 128x128 tile's output.
TEST_F(GpuGroupedChoice, LongKRunsOneConfiguration) {
  for (int64_t n : {FpropCase::kN, int64_t{4096}}) {  // wide weights too (DeepSeek-V3 FC1, Mixtral FC2)
    FpropCase wide(4096, FpropCase::kGroups, FpropCase::kRows, n);
    const sm90::FpropTiles tiles = sm90::fprop_tiles(wide.g, sm90::FpropDevice::current());
    EXPECT_FALSE(tiles.chosen_on_device()) << "N " << n;
    EXPECT_EQ(tiles.even, sm90::Tile::T128x256M2) << "N " << n;
  }
  FpropCase c(4096);
  auto base = gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1});
  auto automatic = gpu::make_cutlass_sm90_engine();
  for (const auto* counts : kCountSets) {
    c.set_counts(*counts, s);
    EXPECT_EQ(c.run(*base, s), c.run(*automatic, s)) << set_name(counts);
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
}

// The automatic GEMM is a programmatic dependent launch of its fill kernel. Queued back to back with
// the counts changing before every call and no host synchronisation, each call still computes its
// own counts' groups: a GEMM that read its problem array before the fill had written it would
// compute the previous call's. K 1024 chooses among configurations, K 4096 runs one.
TEST_F(GpuGroupedChoice, QueuedCallsSeeTheirOwnCounts) {
  for (int64_t k : {int64_t{1024}, int64_t{4096}}) {
    FpropCase c(k);
    const std::vector<std::vector<uint16_t>> want = base_outputs(c, s);
    auto automatic = gpu::make_cutlass_sm90_engine();
    const auto got = queued_outputs(c, {std::begin(kCountSets), std::end(kCountSets)}, 12,
                                    [&] { automatic->run(c.g, s); }, s);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(want[i % 3], got[i]) << "call " << i << ", " << set_name(kCountSets[i % 3]) << ", K " << k;
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
}

// Every configuration of sm90::Tile, forced, on counts of every class and a K with a partial last
// k-tile (zero-filled by TMA): bitwise the 128x128 tile's output.
TEST_F(GpuGroupedChoice, EveryTileMatchesBaseBitwise) {
  FpropCase c(2000);
  auto base = gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1});
  int tiles = 0;
  for (int t = static_cast<int>(sm90::Tile::T128x128) + 1; t < static_cast<int>(sm90::Tile::kCount); ++t) {
    const auto tile = static_cast<sm90::Tile>(t);
    auto engine = gpu::make_cutlass_sm90_engine({tile, -1});
    for (const auto* counts : kCountSets) {
      c.set_counts(*counts, s);
      EXPECT_EQ(c.run(*base, s), c.run(*engine, s)) << sm90::tile_name(tile) << ", " << set_name(counts);
    }
    ++tiles;
  }
  EXPECT_GE(tiles, 9) << "every configuration of Tile after T128x128";
}

// Every configuration forced with its strided batch (PlanOptions::strided_batch, for the bench's
// sweeps): equal small groups run the batch, which the plan must have offered, and unequal counts the
// tile; both bitwise the 128x128 tile's output. 16 groups of 512 rows: a full persistent grid.
TEST_F(GpuGroupedChoice, EveryTileWithStridedBatchMatchesBaseBitwise) {
  constexpr int kGroups = 16;
  constexpr int64_t kPerGroup = 512;
  FpropCase c(2000, kGroups, kGroups * kPerGroup);
  const std::vector<int64_t> equal(kGroups, kPerGroup), unequal = [&] {
    std::vector<int64_t> u = equal;
    u[0] -= 16, u[1] += 16;
    return u;
  }();
  auto base = gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1});
  for (int t = static_cast<int>(sm90::Tile::T128x128); t < static_cast<int>(sm90::Tile::kCount); ++t) {
    sm90::PlanOptions o;
    o.tile = static_cast<sm90::Tile>(t);
    o.strided_batch = true;
    auto plan = sm90::make_fprop_plan(c.g, o);
    for (const auto* counts : {&equal, &unequal}) {
      c.set_counts(*counts, s);
      const std::vector<uint16_t> want = c.run(*base, s);
      c.poison(s);
      plan->launch(c.g, s);
      EXPECT_EQ(want, c.d.download(s)) << sm90::tile_name(o.tile) << (counts == &equal ? ", equal" : ", unequal");
      EXPECT_TRUE(plan->offered_strided_batch()) << sm90::tile_name(o.tile);
    }
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
}

// The strided batch's L2 priorities (cache_hinted_mainloop.cuh) choose what L2 keeps, never the
// values: every pair of priorities, on a batch with the weights as A (transposed) and as B.
TEST_F(GpuGroupedChoice, EveryL2PriorityOfTheBatchBitwise) {
  constexpr int kGroups = 16;
  constexpr int64_t kPerGroup = 256;
  FpropCase c(2048, kGroups, kGroups * kPerGroup, 1536);
  c.set_counts(std::vector<int64_t>(kGroups, kPerGroup), s);
  const std::vector<uint16_t> want = c.run(*gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1}), s);
  const auto priorities = {sm90::L2Priority::Normal, sm90::L2Priority::EvictFirst, sm90::L2Priority::EvictLast};
  for (sm90::Tile t : {sm90::Tile::T192x128PingpongT, sm90::Tile::T128x256M2}) {
    for (auto weights : priorities) {
      for (auto rows : priorities) {
        sm90::PlanOptions o;
        o.tile = t;
        o.strided_batch = true;
        o.batch_l2 = sm90::BatchL2{weights, rows};
        auto plan = sm90::make_fprop_plan(c.g, o);
        c.poison(s);
        plan->launch(c.g, s);
        const std::string what = std::string(sm90::tile_name(t)) + ", weights " + sm90::l2_priority_name(weights) +
                                 ", rows " + sm90::l2_priority_name(rows);
        EXPECT_EQ(want, c.d.download(s)) << what;
        EXPECT_TRUE(plan->offered_strided_batch()) << what;
      }
    }
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
}

// The strided batch's tiles on batch_clusters' clusters (cut_grid_scheduler.cuh: the other CTAs of
// the launch idle) and on every CTA: the same bits. 130 groups of 128 rows and N 1536 leave a short
// last wave on 66 clusters of two SMs for each tile below (128x256 2x1: 780 cluster tiles, 11.8
// waves), so 65 clusters take the batch; uneven counts run the grouped configurations in that launch.
TEST_F(GpuGroupedChoice, BatchOnFewerCtasBitwise) {
  constexpr int kGroups = 130;
  constexpr int64_t kPerGroup = 128;
  FpropCase c(1024, kGroups, kGroups * kPerGroup, 1536);
  std::vector<int64_t> equal(kGroups, kPerGroup), unequal = equal;
  unequal[0] += 64, unequal[1] -= 64;
  for (const auto* counts : {&equal, &unequal}) {
    c.set_counts(*counts, s);
    const std::vector<uint16_t> want = c.run(*gpu::make_cutlass_sm90_engine({sm90::Tile::T128x128, 1}), s);
    for (sm90::Tile t : {sm90::Tile::T128x128PingpongT, sm90::Tile::T192x128PingpongT, sm90::Tile::T128x256M2}) {
      for (bool every_cta : {false, true}) {
        sm90::PlanOptions o;
        o.tile = t;
        o.strided_batch = true;
        o.batch_every_cta = every_cta;
        auto plan = sm90::make_fprop_plan(c.g, o);
        c.poison(s);
        plan->launch(c.g, s);
        const std::string what = std::string(sm90::tile_name(t)) + (every_cta ? ", every CTA" : ", fewest clusters") +
                                 (counts == &equal ? ", equal counts" : ", unequal counts");
        EXPECT_EQ(want, c.d.download(s)) << what;
        EXPECT_TRUE(plan->offered_strided_batch()) << what;
      }
    }
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
}

// Tiles dealt out in runs per cluster (run_scheduler.cuh), forced: bitwise CUTLASS's order. Enough
// groups that the grid's blocks of `run` waves fill (one cluster per two SMs, 8 weight tiles per
// group), so the remapped blocks and the partial last block (CUTLASS's order) both run; counts
// uniform, skewed, and with empty groups.
TEST_F(GpuGroupedChoice, RunsMatchCutlassOrderBitwise) {
  constexpr int kManyGroups = 128;
  constexpr int64_t kManyRows = kManyGroups * 256;
  FpropCase c(320, kManyGroups, kManyRows);
  std::vector<int64_t> gaps(kManyGroups, 0);
  for (int e = 0; e < kManyGroups; e += 2) gaps[e] = 512;
  const std::vector<int64_t> sets[] = {std::vector<int64_t>(kManyGroups, 256), bench_counts(kManyGroups, kManyRows, true),
                                       gaps};
  for (sm90::Tile t : {sm90::Tile::T128x128PingpongT, sm90::Tile::T192x128PingpongT, sm90::Tile::T128x128Pingpong}) {
    gpu::CutlassSm90Options base_opts{t, 1};
    base_opts.run = 1;
    auto base = gpu::make_cutlass_sm90_engine(base_opts);
    for (int run : {2, 4, 8}) {
      gpu::CutlassSm90Options o{t, 1};
      o.run = run;
      auto engine = gpu::make_cutlass_sm90_engine(o);
      for (size_t i = 0; i < std::size(sets); ++i) {
        c.set_counts(sets[i], s);
        EXPECT_EQ(c.run(*base, s), c.run(*engine, s)) << sm90::tile_name(t) << ", runs of " << run << ", counts set " << i;
      }
    }
  }
}

TEST_F(GpuGroupedChoice, GraphReplayFollowsNewCounts) {
  for (auto [k, n] : {std::pair<int64_t, int64_t>{1024, FpropCase::kN}, {2048, 1536}, {2048, FpropCase::kN}}) {
    FpropCase c(k, FpropCase::kGroups, FpropCase::kRows, n);
    const std::vector<std::vector<uint16_t>> want = base_outputs(c, s);

    auto automatic = gpu::make_cutlass_sm90_engine();
    c.run(*automatic, s);  // first run outside the capture: creates the plans (allocations)
    const std::initializer_list<int> order = {0, 1, 2, 0, 2, 1};
    const auto got = replayed_outputs(c, {std::begin(kCountSets), std::end(kCountSets)}, order,
                                      [&] { automatic->run(c.g, s); }, s);
    for (size_t i = 0; i < got.size(); ++i) {
      const int set = order.begin()[i];
      EXPECT_EQ(want[set], got[i]) << "replay, " << set_name(kCountSets[set]) << ", K " << k << ", N " << n;
    }
  }
}

#else
TEST(GpuGroupedChoice, NeedsCutlass) { GTEST_SKIP() << "built without CUTLASS: gpu.grouped not available"; }
#endif

}  // namespace
}  // namespace moenum::gputest
