// Acceptance 4: the whole gpu.grouped layer (forward and backward) is captured in one CUDA graph and
// replayed, also after the routing changed (new plan uploaded into the same buffers): proof that
// nothing in it synchronises with the host. Replays must match eager runs bit for bit.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "grouped_mlp.h"
#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#ifdef MOENUM_HAVE_CUTLASS
#include "sm90/cutlass_engine.h"
#endif

namespace moenum::gputest {
namespace {

#ifdef MOENUM_HAVE_CUTLASS
void expect_same(const BackendResult& a, const BackendResult& b, const char* what) {
  for (const auto& [name, t] : a.outputs) EXPECT_TRUE(moenum::testing::same_bits(t, b.outputs.at(name))) << what << ": " << name;
}

BackendResult eager(const RunContext& ctx, cudaStream_t s) {
  gpu::GroupedMlp mlp(ctx, gpu::make_cutlass_sm90_engine(), {});
  mlp.poison_outputs(s);
  mlp.forward(s);
  mlp.backward(s);
  return mlp.download(false, s);
}
#endif

TEST(GpuGraph, GroupedLayerCapturedAndReplayedWithNewRouting) {
  MOENUM_REQUIRE_GPU();
#ifndef MOENUM_HAVE_CUTLASS
  GTEST_SKIP() << "built without CUTLASS: gpu.grouped not available";
#else
  if (gpu::device_sm() != 90) GTEST_SKIP() << "CUTLASS sm_90a kernels need an sm_90 device";
  ScenarioSpec sa;  // padding none: the row count T*k does not depend on the routing
  sa.E = 16, sa.T = 512, sa.k = 4;
  ScenarioSpec sb = sa;
  sb.skew = "zipf", sb.zipf_s = 1.5;
  Scenario sca = make_scenario(sa), scb = make_scenario(sb);
  Problem prob = generate_problem(sca);
  Routing ra = route(sca), rb = route(scb);
  ASSERT_NE(ra.tokens_per_expert, rb.tokens_per_expert) << "the two routings should differ";
  DispatchPlan pa = plan_dispatch(sca, ra), pb = plan_dispatch(scb, rb);
  RunContext ca{sca, prob, ra, pa}, cb{scb, prob, rb, pb};

  cudaStream_t s;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const BackendResult want_a = eager(ca, s), want_b = eager(cb, s);

  gpu::GroupedMlp mlp(ca, gpu::make_cutlass_sm90_engine(), {});
  mlp.forward(s);  // first run outside the capture: creates the CUTLASS plans (allocations)
  mlp.backward(s);
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  mlp.forward(s);
  mlp.backward(s);
  ASSERT_EQ(cudaSuccess, cudaStreamEndCapture(s, &graph));
  ASSERT_EQ(cudaSuccess, cudaGraphInstantiate(&exec, graph, 0));

  mlp.poison_outputs(s);
  ASSERT_EQ(cudaSuccess, cudaGraphLaunch(exec, s));
  expect_same(want_a, mlp.download(false, s), "replay, routing A");

  mlp.set_plan(rb, pb, s);  // new counts and rows, same buffers
  mlp.poison_outputs(s);
  ASSERT_EQ(cudaSuccess, cudaGraphLaunch(exec, s));
  expect_same(want_b, mlp.download(false, s), "replay, routing B");

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

}  // namespace
}  // namespace moenum::gputest
