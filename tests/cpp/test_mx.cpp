// MXFP8 rules of numerics.md section 5: FP8 encode/decode, E8M0 scales, the block quantizer.
// The FP8 oracle here is deliberately naive (nearest value in a table of all FP8 values, in double,
// ties to the even code) so it shares nothing with the bit tricks under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "moenum/mx.h"

namespace moenum {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::E4M3, Fp8Format::E5M2};
const char* name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

float bits(uint32_t u) { return f32_from_bits(u); }
float pow2f(int e) { return std::ldexp(1.0f, e); }

// Value of a finite FP8 code from the textbook formula.
double fp8_value_ref(uint8_t c, Fp8Format f) {
  const int m = f == Fp8Format::E4M3 ? 3 : 2, bias = f == Fp8Format::E4M3 ? 7 : 15;
  const int e = (c & 0x7F) >> m, man = c & ((1 << m) - 1);
  const double mag = e == 0 ? std::ldexp(man, 1 - bias - m) : std::ldexp((1 << m) + man, e - bias - m);
  return (c & 0x80) ? -mag : mag;
}

// Nearest FP8 code by table search: ties to the even code, |x| beyond max -> max, NaN -> 0x7F.
uint8_t fp8_encode_ref(float x, Fp8Format f) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t maxc = f == Fp8Format::E4M3 ? 0x7E : 0x7B;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= fp8_value_ref(maxc, f)) return sign | maxc;
  uint8_t lo = 0;
  while (fp8_value_ref(lo + 1, f) <= a) ++lo;  // codes 0..maxc are increasing in value
  const double dlo = a - fp8_value_ref(lo, f), dhi = fp8_value_ref(lo + 1, f) - a;
  const uint8_t c = (dlo < dhi || (dlo == dhi && (lo & 1) == 0)) ? lo : static_cast<uint8_t>(lo + 1);
  return sign | c;
}

TEST(Mx, Fp8EncodeAllBf16MatchesTableOracle) {
  for (Fp8Format f : kFormats)
    for (uint32_t b = 0; b < 65536; ++b) {
      const float x = bf16_to_f32(static_cast<uint16_t>(b));
      ASSERT_EQ(fp8_encode(x, f), fp8_encode_ref(x, f)) << name(f) << " bf16 0x" << std::hex << b;
    }
}

TEST(Mx, Fp8EncodeMidpointsAndNeighbours) {
  for (Fp8Format f : kFormats) {
    const uint8_t maxc = fp8_max_code(f);
    for (uint8_t c = 0; c < maxc; ++c) {
      // The midpoint of two neighbours is exact in fp32 (at most 5 significant bits).
      const float mid = static_cast<float>((fp8_value_ref(c, f) + fp8_value_ref(c + 1, f)) / 2);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)})
        for (float s : {1.0f, -1.0f})
          ASSERT_EQ(fp8_encode(s * x, f), fp8_encode_ref(s * x, f)) << name(f) << " x=" << s * x;
    }
  }
}

TEST(Mx, Fp8DecodeAllCodesAndReencode) {
  for (Fp8Format f : kFormats)
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_decode(static_cast<uint8_t>(c), f);
      const bool nan = f == Fp8Format::E4M3 ? (c & 0x7F) == 0x7F : (c & 0x7F) > 0x7C;
      const bool inf = f == Fp8Format::E5M2 && (c & 0x7F) == 0x7C;
      if (nan) {
        EXPECT_TRUE(std::isnan(v)) << name(f) << " code " << c;
        EXPECT_EQ(fp8_encode(v, f), kFp8NaN);
      } else if (inf) {
        EXPECT_EQ(v, (c & 0x80) ? -INFINITY : INFINITY);
        EXPECT_EQ(fp8_encode(v, f), (c & 0x80) | 0x7B);  // satfinite
      } else {
        EXPECT_EQ(static_cast<double>(v), fp8_value_ref(static_cast<uint8_t>(c), f)) << name(f) << " " << c;
        EXPECT_EQ(std::signbit(v), (c & 0x80) != 0);
        EXPECT_EQ(fp8_encode(v, f), c) << name(f) << " code " << c;
      }
    }
}

TEST(Mx, Fp8SaturationAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(fp8_encode(448.0f, Fp8Format::E4M3), 0x7E);
  EXPECT_EQ(fp8_encode(464.0f, Fp8Format::E4M3), 0x7E);  // the would-be tie with 480
  EXPECT_EQ(fp8_encode(1e30f, Fp8Format::E4M3), 0x7E);
  EXPECT_EQ(fp8_encode(INFINITY, Fp8Format::E4M3), 0x7E);
  EXPECT_EQ(fp8_encode(-INFINITY, Fp8Format::E4M3), 0xFE);
  EXPECT_EQ(fp8_encode(-3e38f, Fp8Format::E4M3), 0xFE);
  EXPECT_EQ(fp8_encode(57344.0f, Fp8Format::E5M2), 0x7B);
  EXPECT_EQ(fp8_encode(61440.0f, Fp8Format::E5M2), 0x7B);
  EXPECT_EQ(fp8_encode(INFINITY, Fp8Format::E5M2), 0x7B);
  EXPECT_EQ(fp8_encode(-INFINITY, Fp8Format::E5M2), 0xFB);
  for (Fp8Format f : kFormats) {
    EXPECT_EQ(fp8_encode(nan, f), 0x7F);
    EXPECT_EQ(fp8_encode(-nan, f), 0x7F);
    EXPECT_EQ(fp8_encode(bits(0xFFFFFFFFu), f), 0x7F);
    EXPECT_EQ(fp8_encode(bits(0x7F800001u), f), 0x7F);  // signalling NaN
  }
}

TEST(Mx, Fp8SubnormalsAndTies) {
  const auto e4 = Fp8Format::E4M3;
  EXPECT_EQ(fp8_encode(pow2f(-9), e4), 0x01);                 // smallest subnormal
  EXPECT_EQ(fp8_encode(pow2f(-10), e4), 0x00);                // half of it: tie to even (0)
  EXPECT_EQ(fp8_encode(std::nextafter(pow2f(-10), 1.f), e4), 0x01);
  EXPECT_EQ(fp8_encode(-pow2f(-10), e4), 0x80);               // sign kept on zero
  EXPECT_EQ(fp8_encode(3 * pow2f(-10), e4), 0x02);            // 1.5 units: tie to even (2)
  EXPECT_EQ(fp8_encode(7.5f * pow2f(-9), e4), 0x08);          // tie between 7 units and min normal
  EXPECT_EQ(fp8_encode(bits(0x00000001u), e4), 0x00);         // fp32 subnormals
  EXPECT_EQ(fp8_encode(bits(0x807FFFFFu), e4), 0x80);
  EXPECT_EQ(fp8_encode(pow2f(-16), Fp8Format::E5M2), 0x01);
  EXPECT_EQ(fp8_encode(pow2f(-17), Fp8Format::E5M2), 0x00);
  EXPECT_EQ(fp8_encode(1.0f, e4), 0x38);
  EXPECT_EQ(fp8_encode(1.0625f, e4), 0x38);                   // tie between 1 and 1.125 -> even
  EXPECT_EQ(fp8_encode(1.1875f, e4), 0x3A);                   // tie between 1.125 and 1.25 -> even
}

TEST(Mx, E8M0DecodeAllCodes) {
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(e8m0_to_f32(static_cast<uint8_t>(c)), std::ldexp(1.0f, c - 127)) << c;
    EXPECT_EQ(e8m0_inv_scale(static_cast<uint8_t>(c)) * e8m0_to_f32(static_cast<uint8_t>(c)), 1.0f) << c;
  }
  EXPECT_EQ(f32_bits(e8m0_to_f32(0)), 0x00400000u);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

TEST(Mx, InvScaleEdges) {
  EXPECT_EQ(e8m0_inv_scale(127), 1.0f);
  EXPECT_EQ(e8m0_inv_scale(0), pow2f(127));
  EXPECT_EQ(f32_bits(e8m0_inv_scale(0xFE)), 0x00400000u);  // 2^-127, an fp32 subnormal
  EXPECT_TRUE(std::isnan(e8m0_inv_scale(0xFF)));
  // TransformerEngine's kernel variant (ptx.cuh exp2f_rcp).
  EXPECT_EQ(e8m0_inv_scale_te_kernel(0), 1.0f);
  EXPECT_EQ(f32_bits(e8m0_inv_scale_te_kernel(0xFE)), 0u);
  EXPECT_EQ(e8m0_inv_scale_te_kernel(0xFF), -INFINITY);
  for (int c = 1; c < 254; ++c)
    EXPECT_EQ(e8m0_inv_scale_te_kernel(static_cast<uint8_t>(c)), e8m0_inv_scale(static_cast<uint8_t>(c)));
  // The rule selector, and the default (numerics.md §5: TE's kernel rule).
  EXPECT_EQ(kDefaultInvScale, InvScaleRule::TeKernel);
  for (int c = 0; c < 256; ++c) {
    const auto u = static_cast<uint8_t>(c);
    EXPECT_EQ(f32_bits(mx_inv_scale(u, InvScaleRule::Spec)), f32_bits(e8m0_inv_scale(u))) << c;
    EXPECT_EQ(f32_bits(mx_inv_scale(u, InvScaleRule::TeKernel)), f32_bits(e8m0_inv_scale_te_kernel(u))) << c;
  }
}

// The largest amax with code 0 (just above fmt_max * 2^-127, the rceil subnormal edge) and the
// smallest with code 1, under both rules: te_kernel zeros the code-0 block, spec scales it by 2^127;
// from code 1 on the rules agree.
TEST(Mx, TinyAmaxBlocksByRule) {
  for (Fp8Format f : kFormats) {
    float a = fp8_max_normal(f) * pow2f(-127);
    while (e8m0_rceil(std::nextafter(a, INFINITY), f) == 0) a = std::nextafter(a, INFINITY);
    const float above = std::nextafter(a, INFINITY);
    ASSERT_EQ(e8m0_rceil(above, f), 1);
    float x[32], y[32];
    uint8_t qs[32], qt[32];
    for (int i = 0; i < 32; ++i) x[i] = a * (static_cast<float>(i) - 15.5f) / 16.5f;  // |x| <= a, signed
    x[0] = -a;
    EXPECT_EQ(mx_quantize_block(x, 1, qt, 1, f, ScaleRounding::Rceil, InvScaleRule::TeKernel), 0);
    EXPECT_EQ(mx_quantize_block(x, 1, qs, 1, f, ScaleRounding::Rceil, InvScaleRule::Spec), 0);
    int nonzero_spec = 0;
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(qt[i], std::signbit(x[i]) ? 0x80 : 0x00) << name(f) << " " << i;
      nonzero_spec += (qs[i] & 0x7F) != 0;
    }
    EXPECT_GT(nonzero_spec, 16);
    mx_dequantize_block(qt, 1, 0, y, 1, f);
    for (float v : y) EXPECT_EQ(v, 0.0f);
    x[0] = -above;
    EXPECT_EQ(mx_quantize_block(x, 1, qt, 1, f, ScaleRounding::Rceil, InvScaleRule::TeKernel), 1);
    EXPECT_EQ(mx_quantize_block(x, 1, qs, 1, f, ScaleRounding::Rceil, InvScaleRule::Spec), 1);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(qt[i], qs[i]) << name(f) << " " << i;
  }
}

TEST(Mx, E8M0RceilBitRecipe) {
  EXPECT_EQ(e8m0_from_f32_rceil(0.0f), 0x00);
  EXPECT_EQ(e8m0_from_f32_rceil(bits(0x00000001u)), 0x00);
  EXPECT_EQ(e8m0_from_f32_rceil(bits(0x00400000u)), 0x00);  // exactly 2^-127
  EXPECT_EQ(e8m0_from_f32_rceil(bits(0x00400001u)), 0x01);
  EXPECT_EQ(e8m0_from_f32_rceil(bits(0x007FFFFFu)), 0x01);
  EXPECT_EQ(e8m0_from_f32_rceil(bits(0x00800000u)), 0x01);  // 2^-126
  EXPECT_EQ(e8m0_from_f32_rceil(bits(0x00800001u)), 0x02);
  EXPECT_EQ(e8m0_from_f32_rceil(1.0f), 127);
  EXPECT_EQ(e8m0_from_f32_rceil(1.5f), 128);
  EXPECT_EQ(e8m0_from_f32_rceil(pow2f(127)), 0xFE);
  EXPECT_EQ(e8m0_from_f32_rceil(std::nextafter(pow2f(127), INFINITY)), 0xFE);  // saturates
  EXPECT_EQ(e8m0_from_f32_rceil(std::numeric_limits<float>::max()), 0xFE);
  EXPECT_EQ(e8m0_from_f32_rceil(INFINITY), 0xFE);
  EXPECT_EQ(e8m0_from_f32_rceil(std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(f32_bits(f32_from_bits(fp8_max_rcp_bits(Fp8Format::E4M3))), f32_bits(1.0f / 448.0f));
  EXPECT_EQ(f32_bits(f32_from_bits(fp8_max_rcp_bits(Fp8Format::E5M2))), f32_bits(1.0f / 57344.0f));
}

TEST(Mx, RceilPowersOfTwo) {
  for (Fp8Format f : kFormats)
    for (int k = -126 + 1; k <= 127 - fp8_emax(f) - 1; ++k) {  // s stays an fp32 normal
      const float a = fp8_max_normal(f) * pow2f(k);
      EXPECT_EQ(e8m0_rceil(a, f), 127 + k) << name(f) << " k=" << k;
      EXPECT_EQ(e8m0_rceil(std::nextafter(a, INFINITY), f), 128 + k) << name(f) << " k=" << k;
      EXPECT_EQ(e8m0_rceil(std::nextafter(a, 0.0f), f), 127 + k) << name(f) << " k=" << k;
    }
}

// Exact code 127 + ceil(log2(amax / fmt_max)) clamped to [0, 254], in integers: amax = M * 2^E,
// fmt_max = 7 * 2^p, and ceil(log2(M / 7)) is the least t with M <= 7 * 2^t.
int rceil_exact(float amax, Fp8Format f) {
  const uint32_t a = f32_bits(amax);
  const uint32_t ef = a >> 23;
  const int64_t M = ef ? ((a & 0x7FFFFF) | 0x800000) : (a & 0x7FFFFF);
  const int E = ef ? static_cast<int>(ef) - 150 : -149;
  const int p = f == Fp8Format::E4M3 ? 6 : 13;
  int t = -3;
  while (t < 0 ? (M << -t) > 7 : M > (int64_t{7} << t)) ++t;
  return std::clamp(t + E - p + 127, 0, 254);
}

TEST(Mx, RceilMatchesExactCeilExceptSubnormalEdge) {
  std::mt19937 rng(7);
  for (Fp8Format f : kFormats) {
    const float R = f32_from_bits(fp8_max_rcp_bits(f));
    // Random mantissas at every exponent, the extreme mantissas, and +-4 ulps around fmt_max*2^k.
    std::vector<float> sweep;
    for (uint32_t ef = 0; ef < 255; ++ef) {
      for (uint32_t man : {0u, 1u, 2u, 0x400000u, 0x7FFFFEu, 0x7FFFFFu}) sweep.push_back(bits((ef << 23) | man));
      for (int i = 0; i < 4000; ++i) sweep.push_back(bits((ef << 23) | (rng() & 0x7FFFFF)));
      const float c = fp8_max_normal(f) * std::ldexp(1.0f, static_cast<int>(ef) - 127);
      if (!std::isfinite(c) || c == 0.0f) continue;
      float lo = c, hi = c;
      for (int i = 0; i < 4; ++i) sweep.push_back(lo = std::nextafter(lo, 0.0f)), sweep.push_back(hi = std::nextafter(hi, INFINITY));
      sweep.push_back(c);
    }
    int64_t edge = 0;
    for (float amax : sweep) {
      if (amax == 0.0f || !std::isfinite(amax)) continue;
      const int got = e8m0_rceil(amax, f), want = rceil_exact(amax, f);
      if (got != want) {
        // Only where amax*R is an fp32 subnormal, rounded down onto 2^-127: code 0 for exact 1.
        ASSERT_LT(amax * R, pow2f(-126)) << name(f) << " amax bits 0x" << std::hex << f32_bits(amax);
        ASSERT_EQ(got, 0);
        ASSERT_EQ(want, 1);
        ++edge;
      }
    }
    EXPECT_GT(edge, 0) << "the sweep should touch the subnormal edge";
  }
}

TEST(Mx, RceilSubnormalEdge) {
  for (Fp8Format f : kFormats) {
    const float R = f32_from_bits(fp8_max_rcp_bits(f));
    const float lo = fp8_max_normal(f) * pow2f(-127);  // amax/fmt_max == 2^-127 exactly
    EXPECT_EQ(f32_bits(lo * R), 0x00400000u);
    EXPECT_EQ(e8m0_rceil(lo, f), 0);
    // Above lo the exact ratio exceeds 2^-127 (exact code 1), but amax*R is a subnormal rounded to
    // 2^-127 (ulp 2^-149) until it passes the midpoint: rceil gives code 0 there.
    float a = std::nextafter(lo, INFINITY);
    int n = 0;
    for (; e8m0_rceil(a, f) == 0; a = std::nextafter(a, INFINITY), ++n) EXPECT_EQ(rceil_exact(a, f), 1);
    EXPECT_GT(n, 0);
    EXPECT_EQ(e8m0_rceil(a, f), 1);
    // Under the spec rule such a block saturates: its amax scaled by 2^127 exceeds max normal. Under
    // te_kernel (inverse 1.0 for code 0) it quantizes to zero, as every code-0 block does.
    const float edge = std::nextafter(lo, INFINITY);
    float x[32] = {edge};
    uint8_t q[32];
    EXPECT_EQ(mx_quantize_block(x, 1, q, 1, f, ScaleRounding::Rceil, InvScaleRule::Spec), 0);
    EXPECT_EQ(q[0], fp8_max_code(f));
    EXPECT_EQ(mx_quantize_block(x, 1, q, 1, f, ScaleRounding::Rceil, InvScaleRule::TeKernel), 0);
    EXPECT_EQ(q[0], 0x00);
    // amax*R just below 2^-126 is a subnormal above 2^-127: code 1, as exact.
    EXPECT_EQ(e8m0_rceil(std::nextafter(fp8_max_normal(f) * pow2f(-126), 0.0f), f), 1);
  }
}

TEST(Mx, FloorExamples) {
  const auto e4 = Fp8Format::E4M3, e5 = Fp8Format::E5M2;
  EXPECT_EQ(e8m0_floor(1.0f, e4), 119);
  EXPECT_EQ(e8m0_floor(448.0f, e4), 127);
  EXPECT_EQ(e8m0_floor(511.0f, e4), 127);
  EXPECT_EQ(e8m0_floor(512.0f, e4), 128);
  EXPECT_EQ(e8m0_floor(57344.0f, e5), 127);
  EXPECT_EQ(e8m0_floor(65535.0f, e5), 127);
  EXPECT_EQ(e8m0_floor(1.0f, e5), 112);
  EXPECT_EQ(e8m0_floor(0.0f, e4), 0);
  EXPECT_EQ(e8m0_floor(bits(0x00000001u), e4), 0);
  EXPECT_EQ(e8m0_floor(pow2f(-119), e4), 0);
  EXPECT_EQ(e8m0_floor(pow2f(-118), e4), 1);
  EXPECT_EQ(e8m0_floor(std::numeric_limits<float>::max(), e4), 246);
  EXPECT_EQ(e8m0_floor(INFINITY, e4), 0xFE);
  EXPECT_EQ(e8m0_floor(std::numeric_limits<float>::quiet_NaN(), e4), 0xFF);
  // floor can saturate the block max (rceil never does): 500 -> scale 1, 500 -> 448.
  float x[32] = {500.0f, -1.0f};
  uint8_t q[32];
  EXPECT_EQ(mx_quantize_block(x, 1, q, 1, e4, ScaleRounding::Floor), 127);
  EXPECT_EQ(q[0], 0x7E);
  EXPECT_EQ(q[1], 0xB8);
  EXPECT_EQ(mx_quantize_block(x, 1, q, 1, e4, ScaleRounding::Rceil), 128);
  EXPECT_EQ(q[0], fp8_encode(250.0f, e4));
}

TEST(Mx, ZeroBlock) {
  for (Fp8Format f : kFormats)
    for (ScaleRounding r : {ScaleRounding::Rceil, ScaleRounding::Floor}) {
      float x[32] = {};
      x[5] = -0.0f;
      uint8_t q[32];
      EXPECT_EQ(mx_quantize_block(x, 1, q, 1, f, r), 0x00);
      for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], i == 5 ? 0x80 : 0x00);
      float y[32];
      mx_dequantize_block(q, 1, 0, y, 1, f);
      for (int i = 0; i < 32; ++i) EXPECT_EQ(f32_bits(y[i]), f32_bits(x[i]));
    }
}

TEST(Mx, NanInBlockDoesNotCountTowardAmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Fp8Format f : kFormats) {
    float x[32], x0[32];
    for (int i = 0; i < 32; ++i) x[i] = x0[i] = 0.37f * static_cast<float>(i - 11);
    x[3] = nan;
    x[7] = -nan;
    x0[3] = x0[7] = 0.0f;
    uint8_t q[32], q0[32];
    const uint8_t s = mx_quantize_block(x, 1, q, 1, f, ScaleRounding::Rceil);
    EXPECT_EQ(s, mx_quantize_block(x0, 1, q0, 1, f, ScaleRounding::Rceil));
    for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], (i == 3 || i == 7) ? kFp8NaN : q0[i]) << i;
    // All NaN: amax 0 -> code 0, every element NaN.
    for (float& v : x) v = nan;
    EXPECT_EQ(mx_quantize_block(x, 1, q, 1, f, ScaleRounding::Rceil), 0x00);
    for (uint8_t c : q) EXPECT_EQ(c, kFp8NaN);
  }
}

TEST(Mx, InfBlock) {
  for (Fp8Format f : kFormats)
    for (ScaleRounding r : {ScaleRounding::Rceil, ScaleRounding::Floor}) {
      float x[32];
      for (int i = 0; i < 32; ++i) x[i] = 3.5f * static_cast<float>(i - 16);
      x[2] = INFINITY;
      x[9] = -INFINITY;
      x[20] = std::ldexp(1.0f, 125);  // huge finite: 2^125 * 2^-127 = 0.25, representable
      uint8_t q[32];
      EXPECT_EQ(mx_quantize_block(x, 1, q, 1, f, r, InvScaleRule::Spec), 0xFE);
      for (int i = 0; i < 32; ++i) {
        if (i == 2) EXPECT_EQ(q[i], fp8_max_code(f));
        else if (i == 9) EXPECT_EQ(q[i], 0x80 | fp8_max_code(f));
        else if (i == 20) EXPECT_EQ(q[i], fp8_encode(0.25f, f));
        else EXPECT_EQ(q[i], x[i] < 0 ? 0x80 : 0x00) << i;
      }
      // TransformerEngine's kernel rule, the default, multiplies by +0 instead: +-inf -> NaN, finite
      // (the huge one too) -> +-0; dequantized, NaN and signed zeros.
      for (InvScaleRule rule : {InvScaleRule::TeKernel, kDefaultInvScale}) {
        EXPECT_EQ(mx_quantize_block(x, 1, q, 1, f, r, rule), 0xFE);
        for (int i = 0; i < 32; ++i)
          EXPECT_EQ(q[i], (i == 2 || i == 9) ? kFp8NaN : (x[i] < 0 ? 0x80 : 0x00)) << i;
      }
      float y[32];
      mx_dequantize_block(q, 1, 0xFE, y, 1, f);
      for (int i = 0; i < 32; ++i)
        EXPECT_TRUE((i == 2 || i == 9) ? std::isnan(y[i]) : y[i] == 0.0f && std::signbit(y[i]) == (x[i] < 0)) << i;
    }
}

TEST(Mx, Fp32SubnormalInputs) {
  for (Fp8Format f : kFormats) {
    float x[32];
    for (int i = 0; i < 32; ++i) x[i] = bits((0x7FFFFFu / 37u) * static_cast<uint32_t>(i)) * ((i % 3) ? 1.f : -1.f);
    x[1] = bits(0x00000001u);   // the smallest subnormal, 2^-149
    x[31] = bits(0x007FFFFFu);  // the largest, ~2^-126
    uint8_t q[32];
    const uint8_t s = mx_quantize_block(x, 1, q, 1, f, ScaleRounding::Rceil, InvScaleRule::Spec);
    EXPECT_EQ(s, 0);  // amax*R is far below 2^-127
    for (int i = 0; i < 32; ++i) {
      const float scaled = x[i] * pow2f(127);  // exact: subnormal times 2^127 is normal
      EXPECT_EQ(static_cast<double>(scaled), std::ldexp(static_cast<double>(x[i]), 127));
      EXPECT_EQ(q[i], fp8_encode_ref(scaled, f)) << name(f) << " " << i;
    }
    EXPECT_NE(q[31], 0);
    // te_kernel (the default) multiplies a code-0 block by 1.0: fp32 subnormals quantize to +-0.
    EXPECT_EQ(mx_quantize_block(x, 1, q, 1, f, ScaleRounding::Rceil), 0);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], std::signbit(x[i]) ? 0x80 : 0x00) << name(f) << " " << i;
    // Next to a normal element the subnormals vanish.
    x[0] = 1.0f;
    mx_quantize_block(x, 1, q, 1, f, ScaleRounding::Rceil);
    for (int i = 1; i < 32; ++i) EXPECT_EQ(q[i] & 0x7F, 0) << i;
  }
}

TEST(Mx, MaxNormalSaturationNeverUnderRceil) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (Fp8Format f : kFormats)
    for (int trial = 0; trial < 2000; ++trial) {
      float x[32];
      const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 200) - 100);
      for (float& v : x) v = u(rng) * scale;
      uint8_t q[32];
      mx_quantize_block(x, 1, q, 1, f, ScaleRounding::Rceil);
      // The amax element lands in (fmt_max/2, fmt_max] after scaling: never above, never NaN.
      uint8_t mx = 0;
      for (uint8_t c : q) mx = std::max<uint8_t>(mx, c & 0x7F);
      EXPECT_LE(mx, fp8_max_code(f));
      EXPECT_GE(fp8_decode(mx, f), fp8_max_normal(f) / 2);
    }
}

TEST(Mx, DequantizeIsExact) {
  for (Fp8Format f : kFormats)
    for (int s = 0; s < 255; ++s)
      for (int c = 0; c < 256; ++c) {
        const float v = fp8_decode(static_cast<uint8_t>(c), f);
        if (!std::isfinite(v)) continue;
        const float y = mx_dequantize_element(static_cast<uint8_t>(c), static_cast<uint8_t>(s), f);
        const double want = std::ldexp(static_cast<double>(v), s - 127);
        if (std::fabs(want) > std::numeric_limits<float>::max())  // beyond fp32: overflows to inf
          ASSERT_EQ(y, want > 0 ? INFINITY : -INFINITY) << s << " " << c;
        else
          ASSERT_EQ(static_cast<double>(y), want) << s << " " << c;
      }
}

TEST(Mx, RowwiseColumnwiseTransposeConsistency) {
  const int64_t R = 64, C = 96;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(R * C), xt(R * C);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      float v = n(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
      if (rng() % 97 == 0) v = INFINITY;
      if (rng() % 89 == 0) v = std::numeric_limits<float>::quiet_NaN();
      x[i * C + j] = xt[j * R + i] = v;
    }
  for (Fp8Format f : kFormats) {
    std::vector<uint8_t> qc(R * C), sc(R / 32 * C), qr(R * C), sr(C * (R / 32));
    mx_quantize_columnwise(x.data(), R, C, qc.data(), sc.data(), f, ScaleRounding::Rceil);
    mx_quantize_rowwise(xt.data(), C, R, qr.data(), sr.data(), f, ScaleRounding::Rceil);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) ASSERT_EQ(qc[i * C + j], qr[j * R + i]);
    for (int64_t rb = 0; rb < R / 32; ++rb)
      for (int64_t j = 0; j < C; ++j) ASSERT_EQ(sc[rb * C + j], sr[j * (R / 32) + rb]);
    std::vector<float> yc(R * C), yr(R * C);
    mx_dequantize_columnwise(qc.data(), sc.data(), R, C, yc.data(), f);
    mx_dequantize_rowwise(qr.data(), sr.data(), C, R, yr.data(), f);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) ASSERT_EQ(f32_bits(yc[i * C + j]), f32_bits(yr[j * R + i]));
  }
}

}  // namespace
}  // namespace moenum
