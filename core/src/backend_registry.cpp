#include "moenum/backend.h"
#include "moenum/error.h"

namespace moenum {

std::map<std::string, BackendFactory>& backend_registry() {
  static std::map<std::string, BackendFactory> registry;  // function-local: safe from init order
  return registry;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : backend_registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  auto it = backend_registry().find(name);
  if (it == backend_registry().end()) {
    std::string known;
    for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("backends", "unknown backend '" + name + "' (known: " + known + ")");
  }
  return it->second();
}

}  // namespace moenum
