// The interval rule for the elementwise stages of external backends (elementwise_interval.h):
// moenum's own fp32 results and other fp32 evaluations (std::exp-based silu) lie inside it; a bf16
// intermediate before the probs multiply and an unscaled FC2 bias do not.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "elementwise_interval.h"
#include "moenum/activation.h"
#include "moenum/bf16.h"
#include "moenum/layer.h"

namespace moenum::verify {
namespace {

bool inside(double v, Interval i) { return v >= i.lo && v <= i.hi; }

float torch_like_silu(float x) { return x * (1.0f / (1.0f + std::exp(-x))); }  // another fp32 evaluation

TEST(ElementwiseInterval, HoldsMoenumsAndOtherFp32Evaluations) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (int i = 0; i < 200000; ++i) {
    const float g = round_bf16(n(rng)), l = round_bf16(n(rng)), p = std::abs(n(rng)) / 10.0f, da = round_bf16(n(rng));
    const float act = layer::swiglu_fwd(g, l);
    ASSERT_TRUE(inside(act, stored_interval(act_interval(g, l), Grid::kF32))) << g << " " << l;
    ASSERT_TRUE(inside(torch_like_silu(g) * l, stored_interval(act_interval(g, l), Grid::kF32))) << g;
    ASSERT_TRUE(inside(round_bf16(act * p), stored_interval(a_interval(g, l, p), Grid::kBf16)));
    ASSERT_TRUE(inside(round_bf16(torch_like_silu(g) * l * p), stored_interval(a_interval(g, l, p), Grid::kBf16)));
    const auto grad = layer::swiglu_bwd(da, g, l, p);
    ASSERT_TRUE(inside(round_bf16(grad.dg), stored_interval(dg_interval(da, g, l, p), Grid::kBf16))) << g;
    ASSERT_TRUE(inside(round_bf16(grad.dl), stored_interval(dl_interval(da, g, p), Grid::kBf16))) << g;
  }
}

TEST(ElementwiseInterval, FindsABf16IntermediateAndAnUnscaledBias) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 2.0f);
  int double_rounded_outside = 0, differing = 0;
  for (int i = 0; i < 20000; ++i) {
    const float g = round_bf16(n(rng)), l = round_bf16(n(rng)), p = std::abs(n(rng)) / 4.0f + 0.01f;
    const float fused = round_bf16(layer::swiglu_fwd(g, l) * p);
    const float unfused = round_bf16(round_bf16(layer::swiglu_fwd(g, l)) * p);
    const Interval allowed = stored_interval(a_interval(g, l, p), Grid::kBf16);
    if (unfused != fused && allowed.lo == allowed.hi) {  // not within 2^-20 of a bf16 midpoint
      ++differing;
      double_rounded_outside += !inside(unfused, allowed);
    }
    const float o = round_bf16(n(rng)), b2 = round_bf16(n(rng) / 8.0f);
    const float unscaled = round_bf16(o + b2);
    if (unscaled != round_bf16(o + b2 * p) && std::abs(b2 * (1.0f - p)) > (std::abs(o) + std::abs(b2)) * 0x1p-5f)
      EXPECT_FALSE(inside(unscaled, stored_interval(out_interval(o, b2, p, true), Grid::kBf16))) << o << " " << b2;
  }
  EXPECT_GT(differing, 1000);
  EXPECT_EQ(double_rounded_outside, differing);  // every element the double rounding moved is found
}

TEST(ElementwiseInterval, NearTheRootOfSiluPrimeTheErrorIsAbsolute) {
  // silu'(x) = 0 at x ~ -1.2785: a relative bound would be empty there, the rule's is not
  const double root = -1.2784645427610738;
  const Approx d = dsilu_approx(root);
  EXPECT_GT(d.err, 0.0);
  EXPECT_TRUE(inside(layer::detail::dsilu(float(root)), {d.v - d.err, d.v + d.err}));
}

}  // namespace
}  // namespace moenum::verify
