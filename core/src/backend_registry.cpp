#include <chrono>
#include <optional>

#include "moenum/backend.h"
#include "moenum/error.h"

namespace moenum {
namespace {

// Traits and factory arrive from different files in any static-initialisation order, so an entry
// is filled in two steps; lookups insist on the traits.
struct Entry {
  std::optional<BackendTraits> traits;
  BackendFactory factory;  // empty: known, but not built into this library
};

std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> r;  // function-local: safe from init order
  return r;
}

const Entry& entry(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("backends", "unknown backend '" + name + "' (known: " + known + ")");
  }
  MOENUM_CHECK(it->second.traits, "backend '" + name + "' has a factory but no traits");
  return it->second;
}

std::string not_built_reason(const BackendTraits& t) {
  return t.device == DeviceKind::gpu ? "this moenum was built without CUDA (MOENUM_CUDA=OFF or no nvcc)"
                                     : "not built into this moenum";
}

}  // namespace

Availability Backend::available(const Scenario& sc) const {
  Availability a = traits().supports(sc);
  return a.ok ? can_run(sc) : a;
}

BackendResult Backend::run(const RunContext& ctx) {
  const Availability a = available(ctx.scenario);
  MOENUM_CHECK(a.ok, traits().name + " cannot run scenario '" + ctx.scenario.name + "': " + a.reason);
  const auto t0 = std::chrono::steady_clock::now();
  BackendResult r = compute(ctx);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : registry()) names.push_back(name);
  return names;
}

std::vector<BackendTraits> backend_traits_all() {
  std::vector<BackendTraits> all;
  for (const auto& [name, _] : registry()) all.push_back(*entry(name).traits);
  return all;
}

const BackendTraits& backend_traits(const std::string& name) { return *entry(name).traits; }

Availability backend_availability(const std::string& name, const Scenario& sc) {
  const Entry& e = entry(name);
  if (!e.factory) return Availability::not_run(not_built_reason(*e.traits));
  return make_backend(name)->available(sc);
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  const Entry& e = entry(name);
  if (!e.factory) throw ConfigError("backends", name + ": " + not_built_reason(*e.traits));
  std::unique_ptr<Backend> b = e.factory();
  b->traits_ = &*e.traits;
  return b;
}

BackendRegistrar::BackendRegistrar(BackendTraits traits, BackendFactory factory) {
  Entry& e = registry()[traits.name];
  e.factory = std::move(factory);
  e.traits = std::move(traits);
}

BackendRegistrar::BackendRegistrar(BackendTraits traits) { registry()[traits.name].traits = std::move(traits); }

BackendRegistrar::BackendRegistrar(const std::string& name, BackendFactory factory) {
  registry()[name].factory = std::move(factory);
}

}  // namespace moenum
