// Everything the backends and the verifier need of one scenario, built once by _core.prepare and
// shared by all of them.
#pragma once
#include <memory>

#include "input_codes.h"
#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "moenum/scenario.h"

namespace moenum::bindings {

struct Prepared {
  Scenario scenario;
  Problem problem;
  Routing routing;
  DispatchPlan plan;
  // the stage checks' expected codes of the input-drawn operands, kept between a point's backends
  std::shared_ptr<verify::InputCodes> input_codes = std::make_shared<verify::InputCodes>();
};

}  // namespace moenum::bindings
