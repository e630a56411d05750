#include "moenum/backend_traits.h"

#include <algorithm>

namespace moenum {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

Availability BackendTraits::supports(const Scenario& sc) const {
  if (!contains(recipes, sc.recipe.name))
    return Availability::not_supported(name + ": recipe '" + sc.recipe.name + "' is not implemented (" +
                                       name + " implements " + joined(recipes) + ")");
  if (!contains(bias_modes, sc.recipe.bias_mode))
    return Availability::not_supported(name + ": bias_mode '" + sc.recipe.bias_mode + "' is not implemented (" +
                                       name + " implements " + joined(bias_modes) + ")");
  return {};
}

}  // namespace moenum
