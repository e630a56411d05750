// The teacher-forced stage checks (numerics.md §7). Every stage of layer.h's table that a backend
// saved is recomputed on the CPU from THAT backend's own inputs to the stage, so that a fault is
// pinned to the stage that made it instead of being smeared over everything after it:
//
//   exact      recomputed with the reference's rounding rules; every element bitwise (classify.h).
//   gemm       the reference GEMM (correctly rounded fp32 of the exact sum) on the backend's own
//              operands (for mxfp8 the codes and scales it saved, dequantized), each element inside
//              the bound of bounds.h after the stage's output rounding.
//   reduction  dprobs, db1, db2: the same bound over their terms.
//   mx         the operand quantized from the backend's own bf16 tensor; scales compared first.
//
// Work runs per expert segment in parallel (OpenMP). GEMM stages, whose recomputation costs K
// multiply-adds per element, can be sampled (SampleSpec): a deterministic set of output rows per
// (stage, expert) that always holds the segment's first and last rows, its pad rows and any probed
// element; the other stages cost one pass over their elements and are always checked in full.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "classify.h"
#include "elementwise_interval.h"
#include "error_stats.h"
#include "input_codes.h"
#include "moenum/dispatch_plan.h"
#include "moenum/fp8.h"
#include "moenum/layer.h"
#include "moenum/mx.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "moenum/scenario.h"
#include "device_gemm.h"
#include "view.h"

namespace moenum::verify {

// The recipe facts the recomputation needs.
struct RecipeFacts {
  Grid act = Grid::kBf16;  // the activation stages' dtype (fp32 for the fp32 recipe)
  bool bias = false;
  bool epilogue = false;   // FC1 bias inside the GEMM (one more exact term) instead of after it
  bool mx = false;
  Fp8Format grad_format = Fp8Format::E4M3;
  ScaleRounding scale_rounding = ScaleRounding::Rceil;
  InvScaleRule inv_scale = kDefaultInvScale;
};

// The problem as the stage checks see it: the inputs and every rank's rows concatenated in plan order.
struct LayerContext {
  int64_t T = 0, H = 0, F = 0, E = 0, k = 0;
  View x, w1, b1, w2, b2, dy;
  std::vector<int64_t> row_token, row_expert, row_slot;
  std::vector<float> row_prob;
  std::vector<int64_t> seg_begin, seg_end;  // per expert, rows in the order above
  std::vector<int64_t> combine;             // [T * k]: each token's routed rows, ascending expert, -1 none
  std::vector<int64_t> topk_idx;            // [T * k]
  RecipeFacts recipe;
  uint64_t seed = 0;
  // execution.device gpu: the GEMM stages' fp64 products there (reference/device_gemm.h); null: CPU
  reference::DeviceGemm* device = nullptr;
  // the expected codes of the operands drawn from the inputs, shared by a point's backends; null:
  // computed for this check only
  InputCodes* input_codes = nullptr;
};

// `inputs` views the problem's x, w1, b1, w2, b2, dy (kept alive by the caller).
LayerContext make_layer_context(const Scenario& sc, const Routing& routing, const DispatchPlan& plan,
                                const std::map<std::string, View>& inputs);

struct SampleSpec {
  enum class Mode { kAll, kAuto, kCount } mode = Mode::kAll;
  int64_t count = 0;  // elements per (stage, expert) for kCount
};
// Auto: a GEMM stage whose full recomputation would exceed this many multiply-adds is sampled with
// kAutoSampleCount elements per (stage, expert).
inline constexpr double kAutoFullCheckMacs = 2147483648.0;  // 2^31
inline constexpr int64_t kAutoSampleCount = 65536;

// An element whose class the caller wants to know (a planted fault): always checked.
struct Probe {
  std::string tensor;
  std::vector<int64_t> index;
};
struct ProbeResult {
  std::string tensor;
  std::vector<int64_t> index;
  bool checked = false;
  Class cls = Class::kBitwiseEqual;
  double value = 0, ref = 0;
  std::optional<Interval> bound;
};

struct FirstFailure {
  std::string tensor;
  std::vector<int64_t> index;
  Class cls = Class::kBoundViolation;
  double value = 0, ref = 0;
  std::optional<Interval> bound;
  std::string where;  // human-readable position: expert, row, token
};

struct StageReport {
  int stage = -1;  // index into layer::kStages
  enum class Status { kPassed, kFailed, kSkipped } status = Status::kSkipped;
  std::string reason;  // skipped: why; failed: the first failing element
  ClassCounts classes;                     // whole stage (an mx stage: codes and scales)
  std::map<int64_t, ClassCounts> per_expert;  // an mx stage: its codes
  UlpBuckets ulps;                         // not for mx stages
  std::map<int64_t, UlpBuckets> per_expert_ulps;
  int64_t checked = 0, total = 0;          // elements checked, elements in the stage's tensor(s)
  bool sampled = false;
  bool bitwise = false;  // every difference fails (bit-exact stage, or GemmRule::kHopperMma GEMM stage)
  std::optional<FirstFailure> first;
  int64_t failing = 0;
  std::vector<ProbeResult> probes;         // in the order of the probes passed in

  const layer::StageDesc& desc() const { return layer::kStages[stage]; }
};

using TensorMap = std::map<std::string, View>;  // a backend's stages and outputs by name

// How a backend's GEMM stages are checked: against the §7 bound around the ideal accumulator, or,
// for a backend whose GEMMs the scenario's recipe.accumulate models bit for bit (hopper_mma:
// gpu.grouped's CUTLASS sm90 kernels; the reference in that mode), bitwise against that model
// (reference/hopper_mma.h) recomputed from the backend's own operands.
enum class GemmRule { kBound, kHopperMma };

// Whether a stage applies to this recipe and model (mx stages: mxfp8; db1/db2: with bias).
bool stage_applies(const layer::StageDesc& st, const RecipeFacts& recipe);

// Every applicable stage of layer::kStages, in dataflow order; a stage whose tensors or inputs the
// backend did not save is skipped with the reason. `elementwise`: how the stages act, a, out and dh
// are checked: bitwise (moenum's own functions) or against the interval of elementwise_interval.h
// (code that does not share them). The combines y and dx are moenum's own and always bitwise. `gemm`:
// how the GEMM stages are checked (GemmRule).
std::vector<StageReport> check_stages(const LayerContext& ctx, const TensorMap& tensors, const SampleSpec& sample,
                                      const std::vector<Probe>& probes = {},
                                      ElementwiseRule elementwise = ElementwiseRule::kBitwise,
                                      GemmRule gemm = GemmRule::kBound);

// The /checks/stage.<backend> verdict: the first failing stage, expert and element, or a summary.
struct StageVerdict {
  bool passed = true;  // also when nothing was checked: the caller sees that in the reports' statuses
  std::string detail;
};
StageVerdict summarize(const std::string& backend, const std::vector<StageReport>& reports);

}  // namespace moenum::verify
