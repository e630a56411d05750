// The backend interface and its registry. One backend = one file that registers itself by name
// (MOENUM_REGISTER_BACKEND); nothing switches over backend names.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "moenum/scenario.h"
#include "moenum/tensor.h"

namespace moenum {

struct RunContext {
  const Scenario& scenario;
  const Problem& problem;
  const Routing& routing;
  const DispatchPlan& plan;
};

// Whether a backend can run a scenario here; disposition not_run (e.g. no GPU) or not_supported.
struct Availability {
  bool ok = true;
  std::string disposition;  // "" when ok, else "not_run" | "not_supported"
  std::string reason;
};

struct BackendResult {
  std::map<std::string, Tensor> outputs;     // y, dx, dw1, dw2, db1, db2, dprobs
  std::map<std::string, Tensor> stages;      // intermediates, when asked
  std::map<std::string, std::string> attrs;  // e.g. which GEMM path ran
  double seconds = 0.0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Availability available(const Scenario&) const { return {}; }
  virtual BackendResult run(const RunContext& ctx) = 0;
};

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

std::map<std::string, BackendFactory>& backend_registry();
std::vector<std::string> backend_names();
std::unique_ptr<Backend> make_backend(const std::string& name);  // throws ConfigError if unknown

struct BackendRegistrar {
  BackendRegistrar(const std::string& name, BackendFactory f) { backend_registry()[name] = std::move(f); }
};

#define MOENUM_REGISTER_BACKEND(NAME, CLASS) \
  static ::moenum::BackendRegistrar moenum_registrar_##CLASS(NAME, [] { return std::make_unique<CLASS>(); })

}  // namespace moenum
