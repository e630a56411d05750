// Everything the backends and the verifier need of one scenario, built once by _core.prepare and
// shared by all of them.
#pragma once
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
};

}  // namespace moenum::bindings
