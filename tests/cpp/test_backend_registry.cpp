// The backend registry: every backend has traits, a build without CUDA still knows the GPU backends,
// traits decide recipe and bias-mode support, and each CPU backend saves exactly the stages its
// traits name. Also the Disposition strings.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "moenum/backend.h"
#include "moenum/disposition.h"
#include "moenum/error.h"

using namespace moenum;

namespace {

Scenario tiny(const std::string& recipe) {
  Scenario sc;
  sc.name = "registry-test";
  sc.seed = 3;
  sc.tokens = 64;
  sc.model = {.experts = 2, .hidden = 32, .ffn = 32, .topk = 1};
  sc.dispatch = {.ep = 1, .padding = "module", .align = 32};
  sc.recipe.name = recipe;
  sc.output.intermediates = true;
  return sc;
}

BackendResult run(const std::string& backend, const Scenario& sc) {
  const Problem prob = generate_problem(sc);
  const Routing routing = route(sc);
  const DispatchPlan plan = plan_dispatch(sc, routing);
  return make_backend(backend)->run(RunContext{sc, prob, routing, plan});
}

std::string key_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.key();
  }
  return "(no ConfigError)";
}

}  // namespace

TEST(BackendRegistry, EveryBackendHasTraitsUnderItsName) {
  const auto names = backend_names();
  for (const char* n : {"golden", "reference", "cpu.eigen", "gpu.grouped", "gpu.multistream"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  for (const auto& t : backend_traits_all()) {
    EXPECT_EQ(backend_traits(t.name).name, t.name);
    EXPECT_FALSE(t.recipes.empty()) << t.name;
    EXPECT_FALSE(t.bias_modes.empty()) << t.name;
    EXPECT_FALSE(t.stages.empty()) << t.name;
    EXPECT_EQ(t.layout_sensitive, t.device == DeviceKind::gpu) << t.name;
  }
}

TEST(BackendRegistry, TheOraclesAreGoldenAndReference) {
  for (const auto& t : backend_traits_all()) {
    const bool oracle = t.name == "golden" || t.name == "reference";
    EXPECT_EQ(t.role, oracle ? BackendRole::oracle : BackendRole::under_test) << t.name;
  }
  EXPECT_EQ(to_string(BackendRole::under_test), "under_test");
  EXPECT_EQ(to_string(DeviceKind::gpu), "gpu");
}

TEST(BackendRegistry, GpuBackendsAreKnownInEveryBuild) {
  for (const char* n : {"gpu.grouped", "gpu.multistream"}) {
    const BackendTraits& t = backend_traits(n);
    EXPECT_EQ(t.device, DeviceKind::gpu);
    EXPECT_EQ(t.recipes, (std::vector<std::string>{"bf16", "mxfp8"}));
    const auto& s = t.stages;
    EXPECT_EQ(std::count(s.begin(), s.end(), "act") + std::count(s.begin(), s.end(), "out"), 0) << n;
  }
  EXPECT_EQ(backend_traits("gpu.multistream").bias_modes, (std::vector<std::string>{"separate", "epilogue"}));
  EXPECT_EQ(backend_traits("gpu.grouped").bias_modes, (std::vector<std::string>{"separate"}));
#ifndef MOENUM_HAVE_CUDA
  const Availability a = backend_availability("gpu.grouped", tiny("bf16"));
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.disposition, Disposition::not_run);
  EXPECT_NE(a.reason.find("without CUDA"), std::string::npos) << a.reason;
  EXPECT_EQ(key_of([] { make_backend("gpu.multistream"); }), "backends");
#endif
}

TEST(BackendRegistry, UnknownBackendIsAConfigErrorOnKeyBackends) {
  EXPECT_EQ(key_of([] { backend_traits("gpu.magic"); }), "backends");
  EXPECT_EQ(key_of([] { make_backend("gpu.magic"); }), "backends");
  EXPECT_EQ(key_of([] { backend_availability("gpu.magic", tiny("bf16")); }), "backends");
}

TEST(BackendRegistry, TraitsDecideRecipeAndBiasModeSupport) {
  Scenario sc = tiny("fp8_block");
  for (const char* n : {"golden", "reference", "cpu.eigen", "gpu.grouped", "gpu.multistream"}) {
    const Availability a = backend_availability(n, sc);
    EXPECT_FALSE(a.ok) << n;
  }
  const Availability a = make_backend("cpu.eigen")->available(sc);
  EXPECT_EQ(a.disposition, Disposition::not_supported);
  EXPECT_NE(a.reason.find("recipe 'fp8_block'"), std::string::npos) << a.reason;
  sc = tiny("bf16");
  sc.recipe.bias_mode = "fused";
  EXPECT_EQ(make_backend("reference")->available(sc).disposition, Disposition::not_supported);
}

TEST(BackendRegistry, RunningWhatIsNotAvailableIsAnInternalError) {
  EXPECT_THROW(run("cpu.eigen", tiny("fp8_block")), InternalError);
}

// Each CPU backend runs every recipe of its traits, and over them saves exactly the stages its
// traits name; seconds is measured.
TEST(BackendRegistry, CpuBackendsRunTheirRecipesAndSaveTheirStages) {
  for (const auto& t : backend_traits_all()) {
    if (t.device != DeviceKind::cpu) continue;
    std::set<std::string> saved;
    for (const auto& recipe : t.recipes) {
      const BackendResult r = run(t.name, tiny(recipe));
      EXPECT_GT(r.seconds, 0.0) << t.name << " " << recipe;
      for (const auto& [name, _] : r.stages) saved.insert(name);
    }
    EXPECT_EQ(saved, std::set<std::string>(t.stages.begin(), t.stages.end())) << t.name;
  }
}

TEST(Disposition, StringsRoundTrip) {
  std::vector<std::string> names;
  for (Disposition d : kDispositions) {
    names.emplace_back(to_string(d));
    EXPECT_EQ(parse_disposition(to_string(d)), d);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"passed", "failed", "error", "not_verified", "not_run", "not_supported"}));
  EXPECT_EQ(key_of([] { parse_disposition("skipped"); }), "disposition");
}
