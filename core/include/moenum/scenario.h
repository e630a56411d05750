// The expanded, validated scenario (interfaces.md). Python loads, validates and fills it; C++ trusts
// the values but re-checks the combinations that would make the computation meaningless.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moenum {

struct ModelConfig {
  int64_t experts = 8;
  int64_t hidden = 64;
  int64_t ffn = 64;
  int64_t topk = 2;
  std::string activation = "swiglu";
  bool bias = true;
};

struct SkewConfig {
  std::string kind = "uniform";      // uniform | zipf | hot | dirichlet | counts
  double s = 0.0;                    // zipf exponent
  int64_t hot_experts = 1;           // hot: number of hot experts
  double hot_share = 0.5;            // hot: share of routing mass on the hot experts
  double alpha = 1.0;                // dirichlet concentration
  std::vector<int64_t> counts;       // counts: exact tokens per expert (sum = tokens * topk)
};

struct RoutingConfig {
  std::string score = "softmax";     // softmax | softmax_pre | sigmoid
  SkewConfig skew;
  bool permute_experts = false;
  double topk_scaling = 1.0;         // multiplies the probs after normalisation
};

struct DispatchConfig {
  int64_t ep = 1;
  std::string padding = "none";      // none | router | router_post | module | hybridep
  int64_t align = 0;                 // 0 = no padding; defaults from the recipe are filled in Python
  std::vector<int64_t> ranks;        // EP ranks to simulate (empty = all): the others compute nothing
};

struct RecipeConfig {
  std::string name = "bf16";         // fp32 | bf16 | mxfp8
  std::string scale_rounding = "rceil";  // rceil | floor
  std::string grad_format = "e4m3";  // e4m3 | e5m2
  std::string bias_mode = "separate";  // separate | epilogue
  std::string inv_scale = "te_kernel";  // te_kernel | spec: the MXFP8 inverse scale (moenum/mx.h)
  std::string accumulate = "ideal";     // ideal | hopper_mma: the reference's GEMM accumulator (numerics.md §6)
};

// Regime `special`: the fractions of a tensor's elements replaced by special values (each element
// independently, from its own random stream); the others are drawn as in regime `normal`.
struct SpecialValues {
  double nan = 0.001;
  double inf = 0.001;                // +inf or -inf, even odds
  double subnormal = 0.01;           // +-bf16 subnormals (fp32 subnormals too): k * 2^-133, 1 <= k < 128
  double huge = 0.001;               // +-[2^127, 1.99 * 2^127]: finite, near the bf16/fp32 overflow
  double value = 0.0;                // a stated value (NaN and +-inf allowed), rounded to bf16 ...
  double value_fraction = 0.0;       // ... at this fraction
  double total() const { return nan + inf + subnormal + huge + value_fraction; }
};

// How one input tensor's values are drawn (numerics.md §2, "Input values"; problem.cpp).
//   normal, uniform  the distribution (dist) times the default std (1 for x/dy, 1/sqrt(fan_in) for
//                    weights, 0.1 for biases) times scale
//   subnormal        dist * 2^-130 * scale: bf16/fp32 subnormals (|v| < 2^-126), whatever the tensor
//   near_overflow    dist * 2^124 * scale: |v| up to about 2^127, next to the bf16/fp32 max (2^128)
//   special          as normal, with the fractions of `special` replaced by NaN, +-inf, subnormals,
//                    huge values and a stated value
// Outliers (a fraction multiplied by outlier_scale) apply in every regime.
struct InputRegime {
  std::string dist = "normal";       // normal | uniform (regime uniform: always uniform)
  double scale = 1.0;
  double outlier_fraction = 0.0;     // fraction of elements multiplied by outlier_scale
  double outlier_scale = 1.0;
  std::string regime = "normal";     // normal | uniform | subnormal | near_overflow | special
  SpecialValues special;
};

struct OutputConfig {
  bool inputs = false;
  bool intermediates = false;
  std::string diffs = "summary";     // summary | full
};

struct Scenario {
  std::string name;
  std::string description;
  uint64_t seed = 0;
  ModelConfig model;
  int64_t tokens = 64;
  RoutingConfig routing;
  DispatchConfig dispatch;
  RecipeConfig recipe;
  std::string weights = "single";    // single | discrete
  OutputConfig output;
  std::map<std::string, InputRegime> inputs;  // keyed by x, w1, b1, w2, b2, dy
};

// Throws ConfigError naming the scenario and key for combinations the computation cannot honour.
void validate(const Scenario& sc);

// Per EP rank, whether it is simulated (dispatch.ranks). Throws ConfigError for a rank outside
// [0, ep) or listed twice.
std::vector<bool> simulated_ranks(const Scenario& sc);

}  // namespace moenum
