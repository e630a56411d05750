// Forward grouped GEMM throughput of the two GPU engines on the MoE shapes of gpu-machine.md
// (D[M,N] = A[M,K] . B_e^T per expert, bf16 in, fp32 accumulate, bf16 out). Prints CSV:
//   shape,dist,engine,groups,M,N,K,ms,tflops
// Counts: uniform, or zipf s=1.2 over the experts, both rounded to multiples of 16 (the same rule as
// bench/gpu_peer_torch.py, so the peer runs the identical problem). Median of 20 after 3 warm-ups,
// the engines interleaved round by round.
// MOENUM_GEMM_BENCH_ENGINES=name,name,... times only those engines (the bitwise check still runs
// every CUTLASS variant against gpu.grouped.base), e.g. to time one variant alone, in the same
// duty cycle as the torch peer's default.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "gemm/cublaslt_engine.h"
#include "kernels/layer_kernels.h"
#ifdef MOENUM_HAVE_CUTLASS
#include "sm90/cutlass_engine.h"
#include "sm90/grouped_sm90.h"
#endif

using namespace moenum::gpu;

struct BenchShape {
  const char* name;
  int groups;
  int64_t M, N, K;
};

std::vector<int64_t> make_counts(int G, int64_t M, bool zipf) {
  std::vector<double> w(G);
  for (int e = 0; e < G; ++e) w[e] = zipf ? 1.0 / std::pow(e + 1.0, 1.2) : 1.0;
  double sum = 0;
  for (double v : w) sum += v;
  std::vector<int64_t> c(G);
  int64_t used = 0;
  for (int e = 0; e < G; ++e) used += (c[e] = static_cast<int64_t>(std::floor(M * w[e] / sum / 16)) * 16);
  c[0] += M - used;  // remainder (a multiple of 16 when M is) to the first expert
  return c;
}

// Engines named in MOENUM_GEMM_BENCH_ENGINES (comma-separated), or every engine when it is unset.
bool timed_engine(const std::string& name) {
  const char* list = std::getenv("MOENUM_GEMM_BENCH_ENGINES");
  if (list == nullptr || *list == '\0') return true;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');)
    if (item == name) return true;
  return false;
}

__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = (static_cast<float>(h & 0xFFFF) / 65536.0f - 0.5f) * 0.25f;
    p[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
  }
}

// Bitwise comparison of two bf16 outputs: mismatching elements counted into *n.
__global__ void count_mismatch(const uint16_t* a, const uint16_t* b, size_t n, unsigned long long* out) {
  unsigned long long c = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) c += a[i] != b[i];
  atomicAdd(out, c);
}

#ifdef MOENUM_HAVE_CUTLASS
// Which configuration gpu.grouped runs on these counts (one launch of the automatic plan, which says
// whether it offered the strided batch, and one host read of the device's class of the counts,
// outside any timed region; D is overwritten), to stderr.
void report_auto_choice(const GroupedGemmDesc& g, const char* shape, const char* dist, cudaStream_t s) {
  namespace sm90 = moenum::gpu::sm90;
  const sm90::FpropTiles tiles = sm90::fprop_tiles(g, sm90::FpropDevice::current());
  std::string how = "static";
  sm90::Tile tile = tiles.even;
  if (tiles.chosen_on_device()) {
    const auto plan = sm90::make_fprop_plan(g, sm90::PlanOptions{});
    plan->launch(g, s);
    DeviceBuffer<int> counts_class(1);
    const int64_t equal_rows = plan->offered_strided_batch() ? sm90::equal_groups_rows(g) : 0;
    sm90::launch_counts_class(g.counts, g.offsets, g.groups, equal_rows, counts_class.get(), s);
    const auto c = static_cast<sm90::CountsClass>(counts_class.download(s)[0]);
    how = std::string("device: ") + sm90::counts_class_name(c);
    tile = tiles.for_class(c);
  }
  std::fprintf(stderr, "%s %s: auto tile %s (%s), sub-groups per group %d\n", shape, dist, sm90::tile_name(tile),
               how.c_str(), sm90::default_chunks(g));
}
#endif

int main() {
  const BenchShape shapes[] = {
      {"dsv3_fc1_ep8", 32, 32768, 4096, 7168}, {"dsv3_fc2_ep8", 32, 32768, 7168, 2048},
      {"qwen3_30b_fc1", 128, 65536, 1536, 2048}, {"qwen3_30b_fc2", 128, 65536, 2048, 768},
      {"qwen3.5_35b_fc1", 256, 65536, 1024, 2048}, {"qwen3.5_35b_fc2", 256, 65536, 2048, 512},
      {"gpt_oss_120b_fc1", 128, 32768, 5760, 2880}, {"gpt_oss_120b_fc2", 128, 32768, 2880, 2880},
      {"mixtral_fc1", 8, 16384, 28672, 4096}, {"mixtral_fc2", 8, 16384, 4096, 14336},
  };
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  std::printf("shape,dist,engine,groups,M,N,K,ms,tflops\n");
  for (const auto& sh : shapes) {
    DeviceBuffer<uint16_t> A(sh.M * sh.K), B(size_t(sh.groups) * sh.N * sh.K), D(sh.M * sh.N), Dref(sh.M * sh.N);
    DeviceBuffer<unsigned long long> mism(1);
    fill_bf16<<<1024, 256, 0, s>>>(A.get(), A.size(), 1);
    fill_bf16<<<1024, 256, 0, s>>>(B.get(), B.size(), 2);
    DeviceBuffer<int64_t> counts(sh.groups), offsets(sh.groups + 1);
    for (bool zipf : {false, true}) {
      counts.upload(make_counts(sh.groups, sh.M, zipf), s);
      launch_counts_to_offsets(counts.get(), offsets.get(), sh.groups, s);
      GroupedGemmDesc g;
      g.id = 0, g.kind = GemmKind::Fprop, g.groups = sh.groups, g.n = sh.N, g.k = sh.K, g.a = A.get(),
      g.d_rows = D.get(), g.rows = sh.M, g.counts = counts.get(), g.offsets = offsets.get();
      for (int e = 0; e < sh.groups; ++e) g.b_expert.push_back(B.get() + size_t(e) * sh.N * sh.K);
      std::vector<std::pair<std::string, std::unique_ptr<GemmEngine>>> engines;
#ifdef MOENUM_HAVE_CUTLASS
      // .base = the single 128x128x64 configuration without sub-groups (the engine before the
      // tile/sub-group choice); gpu.grouped = the backend's choice (the tile picked on the device
      // from the counts where fprop_tiles says so); the others force one tile
      // configuration each (grouped_sm90.h, Tile) with the automatic sub-groups; .wide_m2_whole is
      // torch._grouped_mm's sm90 configuration exactly (128x256, 2x1 cluster, no sub-groups).
      using moenum::gpu::sm90::Tile;
      engines.emplace_back("gpu.grouped.base", make_cutlass_sm90_engine({Tile::T128x128, 1}));
      engines.emplace_back("gpu.grouped", make_cutlass_sm90_engine());
      engines.emplace_back("gpu.grouped.split", make_cutlass_sm90_engine({Tile::T128x128, -1}));
      engines.emplace_back("gpu.grouped.wide", make_cutlass_sm90_engine({Tile::T128x256, -1}));
      engines.emplace_back("gpu.grouped.wide_m2", make_cutlass_sm90_engine({Tile::T128x256M2, -1}));
      engines.emplace_back("gpu.grouped.wide_m2_whole", make_cutlass_sm90_engine({Tile::T128x256M2, 1}));
      engines.emplace_back("gpu.grouped.n192", make_cutlass_sm90_engine({Tile::T128x192, -1}));
      engines.emplace_back("gpu.grouped.pingpong", make_cutlass_sm90_engine({Tile::T128x128Pingpong, -1}));
      engines.emplace_back("gpu.grouped.pingpong_m2", make_cutlass_sm90_engine({Tile::T128x128PingpongM2, -1}));
      engines.emplace_back("gpu.grouped.pingpong_t", make_cutlass_sm90_engine({Tile::T128x128PingpongT, -1}));
      engines.emplace_back("gpu.grouped.pingpong_t_m2", make_cutlass_sm90_engine({Tile::T128x128PingpongTM2, -1}));
      report_auto_choice(g, sh.name, zipf ? "zipf1.2" : "uniform", s);
#endif
      engines.emplace_back("gpu.multistream", std::make_unique<CublasLtEngine>());
      // Correctness first: every CUTLASS variant must give the .base output bitwise (same per-element
      // K order, fp32 accumulate); this also builds every engine's plan outside the timed region.
      // D is poisoned (all-ones bf16: NaN) before each run, so a variant that writes nothing fails.
      for (auto& [name, eng] : engines) {
        cudaMemsetAsync(D.get(), 0xFF, D.size() * sizeof(uint16_t), s);
        eng->begin(counts.get(), sh.groups, s);
        eng->run(g, s);
        if (name == "gpu.grouped.base") {
          cudaMemcpyAsync(Dref.get(), D.get(), D.size() * sizeof(uint16_t), cudaMemcpyDeviceToDevice, s);
        } else if (name.rfind("gpu.grouped", 0) == 0) {
          cudaMemsetAsync(mism.get(), 0, sizeof(unsigned long long), s);
          count_mismatch<<<1024, 256, 0, s>>>(D.get(), Dref.get(), D.size(), mism.get());
          unsigned long long bad = 0;
          cudaMemcpyAsync(&bad, mism.get(), sizeof bad, cudaMemcpyDeviceToHost, s);
          cudaStreamSynchronize(s);
          std::fprintf(stderr, "check %s %s %s: %llu of %zu elements differ from gpu.grouped.base\n", sh.name,
                       zipf ? "zipf1.2" : "uniform", name.c_str(), bad, D.size());
        }
      }
      // Timing interleaved round by round (engine 1, 2, ..., then again), so clock and power drift
      // over the run falls on every engine alike; 3 warm-up rounds, median of 20.
      cudaEvent_t t0, t1;
      cudaEventCreate(&t0);
      cudaEventCreate(&t1);
      std::vector<std::vector<float>> ms(engines.size());
      for (int it = 0; it < 23; ++it) {
        for (size_t i = 0; i < engines.size(); ++i) {
          if (!timed_engine(engines[i].first)) continue;
          auto& eng = engines[i].second;
          cudaEventRecord(t0, s);
          eng->begin(counts.get(), sh.groups, s);  // multistream: its D2H copy + sync is part of the cost
          eng->run(g, s);
          cudaEventRecord(t1, s);
          cudaEventSynchronize(t1);
          float m = 0;
          cudaEventElapsedTime(&m, t0, t1);
          if (it >= 3) ms[i].push_back(m);
        }
      }
      cudaEventDestroy(t0);
      cudaEventDestroy(t1);
      for (size_t i = 0; i < engines.size(); ++i) {
        if (ms[i].empty()) continue;
        std::sort(ms[i].begin(), ms[i].end());
        const double med = ms[i][ms[i].size() / 2];
        const double tflops = 2.0 * sh.M * sh.N * sh.K / (med * 1e-3) / 1e12;
        std::printf("%s,%s,%s,%d,%ld,%ld,%ld,%.4f,%.1f\n", sh.name, zipf ? "zipf1.2" : "uniform",
                    engines[i].first.c_str(), sh.groups, long(sh.M), long(sh.N), long(sh.K), med, tflops);
        std::fflush(stdout);
      }
    }
  }
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
