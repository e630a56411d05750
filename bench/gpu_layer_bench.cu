// The whole gpu.grouped layer, forward and backward, on the MoE shapes of gpu-machine.md, eagerly
// and replayed from one CUDA graph; and the MXFP8 quantize kernel beside a device-to-device copy.
//
//   moenum_gpu_layer_bench layer PLAN_DIR   CSV on stdout:
//       shape,dist,engine,experts,hidden,ffn,topk,tokens,rows,fwd_ms,ms,tflops
//     and, per shape and routing, PLAN_DIR/<shape>_<dist>.plan for bench/gpu_layer_peer_torch.py
//     (the torch.grouped_mm adapter runs the identical routing: same counts, same rows).
//   moenum_gpu_layer_bench quantize         CSV on stdout: rows,cols,what,ms,gbps,vs_copy (the three
//     quantize kernels, which must give the same bytes)
//
// The layer is what gpu.grouped runs (core/gpu/grouped_mlp.h): dispatch gather, FC1, bias,
// activation and probs, FC2, combine, and the backward of all of them with the six GEMMs; the
// routing is moenum's own (uniform, or zipf s=1.2), padding none, bf16. One GPU holds the layer:
// "dsv3_ep8r0" is DeepSeek-V3's EP8 rank 0 as one GPU sees it (its 32 local experts and ~32k
// rows). Median of 10 after 2 warm-up rounds; fwd_ms is the forward alone inside the same rounds.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "device_buffer.h"
#include "grouped_mlp.h"
#include "kernels/mx_quantize.h"
#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#ifdef MOENUM_HAVE_CUTLASS
#include "sm90/cutlass_engine.h"
#endif

using namespace moenum;

namespace {

#define BENCH_CUDA(expr)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

struct LayerShape {
  const char* name;
  int64_t experts, hidden, ffn, topk, tokens;
  bool bias;
};

// Shapes of gpu-machine.md (hidden, expert ffn, experts, top-k); tokens chosen so that the rows
// (tokens * top-k) are those of the GEMM bench. "tiny" is where launch overhead dominates.
constexpr LayerShape kShapes[] = {
    {"tiny", 8, 512, 256, 2, 256, false},
    {"dsv3_ep8r0", 32, 7168, 2048, 8, 4096, false},
    {"qwen3_30b", 128, 2048, 768, 8, 8192, false},
    {"qwen3.5_35b", 256, 2048, 512, 8, 8192, false},
    {"gpt_oss_120b", 128, 2880, 2880, 4, 8192, true},
    {"mixtral", 8, 4096, 14336, 2, 8192, false},
};

// bf16 values uniform in [-scale/2, scale/2) from a hash of the index, filled on all cores (the
// counter-based generator of generate_problem would take tens of seconds at these sizes; the
// values only need to be realistic for the tensor cores, not reproducible across tools).
Tensor random_bf16(std::vector<int64_t> shape, uint32_t seed, float scale) {
  Tensor t(std::move(shape), "bf16");
  std::span<float> v = t.f32();
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < nt; ++w)
    pool.emplace_back([&, w] {
      for (size_t i = w; i < v.size(); i += nt) {
        uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        const float f = (static_cast<float>(h & 0xFFFF) / 65536.0f - 0.5f) * scale;
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        bits &= 0xFFFF0000u;  // truncate to bf16: the tensor holds bf16 values
        std::memcpy(&v[i], &bits, 4);
      }
    });
  for (auto& th : pool) th.join();
  return t;
}

Problem make_problem(const LayerShape& sh) {
  Problem p;
  p.T = sh.tokens, p.H = sh.hidden, p.F = sh.ffn, p.E = sh.experts, p.k = sh.topk;
  p.x = random_bf16({p.T, p.H}, 1, 2.0f);
  p.dy = random_bf16({p.T, p.H}, 2, 2.0f);
  p.w1 = random_bf16({p.E, 2 * p.F, p.H}, 3, 2.0f / std::sqrt(float(p.H)));
  p.w2 = random_bf16({p.E, p.H, p.F}, 4, 2.0f / std::sqrt(float(p.F)));
  p.b1 = random_bf16({p.E, 2 * p.F}, 5, sh.bias ? 0.2f : 0.0f);
  p.b2 = random_bf16({p.E, p.H}, 6, sh.bias ? 0.2f : 0.0f);
  return p;
}

Scenario make_scenario(const LayerShape& sh, bool zipf) {
  Scenario sc;
  sc.name = sh.name;
  sc.seed = 11;
  sc.model.experts = sh.experts, sc.model.hidden = sh.hidden, sc.model.ffn = sh.ffn, sc.model.topk = sh.topk;
  sc.model.bias = sh.bias;
  sc.tokens = sh.tokens;
  sc.routing.skew.kind = zipf ? "zipf" : "uniform";
  sc.routing.skew.s = zipf ? 1.2 : 0.0;
  return sc;
}

// The routing for the torch peer: experts, rows, then counts (int64 [E]), each row's token
// (int32 [R]) and prob (fp32 [R]), rows grouped by ascending expert as gpu.grouped runs them.
void write_plan(const std::string& path, const gpu::FlatPlan& f, int64_t E) {
  std::ofstream out(path, std::ios::binary);
  const int64_t head[2] = {E, f.rows};
  out.write(reinterpret_cast<const char*>(head), sizeof head);
  out.write(reinterpret_cast<const char*>(f.counts.data()), E * sizeof(int64_t));
  out.write(reinterpret_cast<const char*>(f.row_token.data()), f.rows * sizeof(int32_t));
  out.write(reinterpret_cast<const char*>(f.row_prob.data()), f.rows * sizeof(float));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kWarmup = 2, kRounds = 10;

#ifdef MOENUM_HAVE_CUTLASS
int bench_layer(const std::string& plan_dir) {
  std::printf("shape,dist,engine,experts,hidden,ffn,topk,tokens,rows,fwd_ms,ms,tflops\n");
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t t0, t1, t2;
  BENCH_CUDA(cudaEventCreate(&t0));
  BENCH_CUDA(cudaEventCreate(&t1));
  BENCH_CUDA(cudaEventCreate(&t2));
  auto elapsed = [](cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    return ms;
  };
  for (const LayerShape& sh : kShapes) {
    const Problem prob = make_problem(sh);
    std::unique_ptr<gpu::GroupedMlp> mlp;
    cudaGraphExec_t exec = nullptr;
    for (bool zipf : {false, true}) {
      const Scenario sc = make_scenario(sh, zipf);
      const Routing routing = route(sc);
      const DispatchPlan plan = plan_dispatch(sc, routing);
      const gpu::FlatPlan flat = gpu::flatten_plan(routing, plan, sh.tokens, sh.experts, sh.topk);
      const char* dist = zipf ? "zipf1.2" : "uniform";
      write_plan(plan_dir + "/" + sh.name + "_" + dist + ".plan", flat, sh.experts);
      if (!mlp) {
        const RunContext ctx{sc, prob, routing, plan};
        gpu::MlpOptions opt;
        opt.bias = sh.bias;
        mlp = std::make_unique<gpu::GroupedMlp>(ctx, gpu::make_cutlass_sm90_engine(), opt);
        mlp->forward(s);  // the first run creates the CUTLASS plans, outside the capture
        mlp->backward(s);
        cudaGraph_t graph;
        BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        mlp->forward(s);
        mlp->backward(s);
        BENCH_CUDA(cudaStreamEndCapture(s, &graph));
        BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
        BENCH_CUDA(cudaGraphDestroy(graph));
      } else {
        mlp->set_plan(routing, plan, s);  // same rows (padding none): the graph stays valid
      }
      std::vector<float> fwd, total, replay;
      for (int it = 0; it < kWarmup + kRounds; ++it) {
        BENCH_CUDA(cudaEventRecord(t0, s));
        mlp->forward(s);
        BENCH_CUDA(cudaEventRecord(t1, s));
        mlp->backward(s);
        BENCH_CUDA(cudaEventRecord(t2, s));
        BENCH_CUDA(cudaEventSynchronize(t2));
        if (it >= kWarmup) fwd.push_back(elapsed(t0, t1)), total.push_back(elapsed(t0, t2));
        BENCH_CUDA(cudaEventRecord(t0, s));
        BENCH_CUDA(cudaGraphLaunch(exec, s));
        BENCH_CUDA(cudaEventRecord(t2, s));
        BENCH_CUDA(cudaEventSynchronize(t2));
        if (it >= kWarmup) replay.push_back(elapsed(t0, t2));
      }
      const double flop = 18.0 * flat.rows * sh.hidden * sh.ffn;  // six GEMMs of 2*R*H*F*{2,1}
      auto row = [&](const char* engine, double fwd_ms, double ms) {
        std::printf("%s,%s,%s,%ld,%ld,%ld,%ld,%ld,%ld,%.4f,%.4f,%.1f\n", sh.name, dist, engine, long(sh.experts),
                    long(sh.hidden), long(sh.ffn), long(sh.topk), long(sh.tokens), long(flat.rows), fwd_ms, ms,
                    flop / (ms * 1e-3) / 1e12);
      };
      row("gpu.grouped", median(fwd), median(total));
      row("gpu.grouped.graph", NAN, median(replay));
      std::fflush(stdout);
    }
    BENCH_CUDA(cudaGraphExecDestroy(exec));
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  return 0;
}
#endif

// The quantize kernels (both directions, one pass) against cudaMemcpy of the same source: bytes
// read plus bytes written over time, for each.
int bench_quantize() {
  std::printf("rows,cols,what,ms,gbps,vs_copy\n");
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t t0, t1;
  BENCH_CUDA(cudaEventCreate(&t0));
  BENCH_CUDA(cudaEventCreate(&t1));
  const int64_t sizes[][2] = {{32768, 7168}, {65536, 2048}, {16384, 4096}};
  for (const auto& rc : sizes) {
    const int64_t rows = rc[0], cols = rc[1], n = rows * cols;
    gpu::DeviceBuffer<uint16_t> x(n), copy(n);
    gpu::DeviceBuffer<uint8_t> q_row(n), q_col(n), s_row(n / kMxBlock), s_col(n / kMxBlock);
    Tensor host = random_bf16({rows, cols}, 7, 4.0f);
    std::vector<uint16_t> bits(n);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t b;
      std::memcpy(&b, &host.f32()[i], 4);
      bits[i] = static_cast<uint16_t>(b >> 16);
    }
    x.upload(bits, s);
    auto time = [&](auto&& launch) {
      std::vector<float> ms;
      for (int it = 0; it < kWarmup + 2 * kRounds; ++it) {
        BENCH_CUDA(cudaEventRecord(t0, s));
        launch();
        BENCH_CUDA(cudaEventRecord(t1, s));
        BENCH_CUDA(cudaEventSynchronize(t1));
        float m = 0;
        BENCH_CUDA(cudaEventElapsedTime(&m, t0, t1));
        if (it >= kWarmup) ms.push_back(m);
      }
      return median(ms);
    };
    const double copy_ms = time([&] {
      BENCH_CUDA(cudaMemcpyAsync(copy.get(), x.get(), n * 2, cudaMemcpyDeviceToDevice, s));
    });
    const double copy_bytes = 2.0 * n * 2;                              // read + write
    const double quant_bytes = n * 2.0 + 2.0 * n + 2.0 * n / kMxBlock;  // bf16 in; codes and scales out, both ways
    const double copy_gbps = copy_bytes / (copy_ms * 1e-3) / 1e9;
    std::printf("%ld,%ld,cudaMemcpy D2D,%.4f,%.0f,1.00\n", long(rows), long(cols), copy_ms, copy_gbps);
    std::vector<std::vector<uint8_t>> bytes;  // each kernel's codes and scales, to compare
    for (auto [kernel, name] : {std::pair{gpu::MxQuantizeKernel::Tiled, "mx_quantize tiled"},
                                std::pair{gpu::MxQuantizeKernel::Vectorized, "mx_quantize vectorized"},
                                std::pair{gpu::MxQuantizeKernel::Pipelined, "mx_quantize pipelined (default)"}}) {
      const double quant_ms = time([&] {
        gpu::launch_mx_quantize_bf16(x.get(), rows, cols, Fp8Format::E4M3, ScaleRounding::Rceil, kDefaultInvScale,
                                     q_row.get(), s_row.get(), q_col.get(), s_col.get(), s, kernel);
      });
      const double gbps = quant_bytes / (quant_ms * 1e-3) / 1e9;
      std::printf("%ld,%ld,%s (rowwise+columnwise),%.4f,%.0f,%.2f\n", long(rows), long(cols), name, quant_ms, gbps,
                  gbps / copy_gbps);
      std::vector<uint8_t> all;
      for (auto* b : {&q_row, &s_row, &q_col, &s_col}) {
        const std::vector<uint8_t> part = b->download();
        all.insert(all.end(), part.begin(), part.end());
      }
      bytes.push_back(std::move(all));
    }
    for (size_t k = 1; k < bytes.size(); ++k)
      if (bytes[k] != bytes[0]) {
        std::fprintf(stderr, "%ld x %ld: quantizer %zu's bytes differ from the tiled one's\n", long(rows), long(cols),
                     k);
        return 1;
      }
    std::fflush(stdout);
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "quantize") return bench_quantize();
  if (mode == "layer" && argc > 2) {
#ifdef MOENUM_HAVE_CUTLASS
    return bench_layer(argv[2]);
#else
    std::fprintf(stderr, "built without CUTLASS: gpu.grouped is not available\n");
    return 3;
#endif
  }
  std::fprintf(stderr, "usage: %s layer PLAN_DIR | quantize\n", argv[0]);
  return 2;
}
