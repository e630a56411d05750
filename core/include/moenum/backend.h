// The backend interface and its registry. One backend = one file that registers itself with its
// traits (MOENUM_REGISTER_BACKEND); nothing switches over backend names. A backend this build cannot
// hold (a GPU backend without CUDA) is still known by its traits and reports not_run.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moenum/availability.h"
#include "moenum/backend_traits.h"
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

struct BackendResult {
  std::map<std::string, Tensor> outputs;     // y, dx, dw1, dw2, db1, db2, dprobs
  std::map<std::string, Tensor> stages;      // intermediates, when asked
  std::map<std::string, std::string> attrs;  // e.g. which GEMM path ran
  double seconds = 0.0;                      // wall time of the backend's own computation
};

class Backend {
 public:
  virtual ~Backend() = default;
  const BackendTraits& traits() const { return *traits_; }
  // Its traits first (recipe, bias mode), then its own conditions (a device, the activation, shapes).
  Availability available(const Scenario& sc) const;
  // The layer forward and backward. Throws InternalError when it is not available for the scenario,
  // ConfigError for bad input found while running. Sets BackendResult::seconds.
  BackendResult run(const RunContext& ctx);

 protected:
  virtual Availability can_run(const Scenario&) const { return {}; }
  virtual BackendResult compute(const RunContext& ctx) = 0;

 private:
  friend std::unique_ptr<Backend> make_backend(const std::string& name);
  const BackendTraits* traits_ = nullptr;
};

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

std::vector<std::string> backend_names();         // every known backend, built here or not, sorted
std::vector<BackendTraits> backend_traits_all();  // the same, their traits
const BackendTraits& backend_traits(const std::string& name);  // throws ConfigError if unknown
// Not built here -> not_run; else the backend's own available(). Throws ConfigError if unknown.
Availability backend_availability(const std::string& name, const Scenario& sc);
std::unique_ptr<Backend> make_backend(const std::string& name);  // throws ConfigError if unknown or not built

struct BackendRegistrar {
  BackendRegistrar(BackendTraits traits, BackendFactory factory);  // a backend built into this library
  explicit BackendRegistrar(BackendTraits traits);                 // known here, its factory maybe not
  BackendRegistrar(const std::string& name, BackendFactory factory);  // the factory of a known backend
};

// MOENUM_REGISTER_BACKEND(kTraits, MyBackend): traits and factory in the backend's own file.
#define MOENUM_REGISTER_BACKEND(TRAITS, CLASS) \
  static ::moenum::BackendRegistrar moenum_registrar_##CLASS(TRAITS, [] { return std::make_unique<CLASS>(); })

// MOENUM_REGISTER_BACKEND_FACTORY("gpu.x", GpuX): a backend whose traits are registered in an
// always-compiled file (core/src/gpu_backend_traits.cpp), so that builds without it know it too.
#define MOENUM_REGISTER_BACKEND_FACTORY(NAME, CLASS) \
  static ::moenum::BackendRegistrar moenum_registrar_##CLASS(NAME, [] { return std::make_unique<CLASS>(); })

}  // namespace moenum
