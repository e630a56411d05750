// Re-checks, on the C++ side, the combinations the computation cannot honour. Python validates the
// file first (with file and line); this guards scenarios built directly through the API.
#include "moenum/scenario.h"

#include "moenum/error.h"

namespace moenum {
namespace {
void require(bool ok, const Scenario& sc, const std::string& key, const std::string& what) {
  if (!ok) throw ConfigError(key, what, sc.name);
}
}  // namespace

void validate(const Scenario& sc) {
  const auto& m = sc.model;
  require(m.experts >= 1, sc, "model.experts", "must be >= 1");
  require(m.hidden >= 1, sc, "model.hidden", "must be >= 1");
  require(m.ffn >= 1, sc, "model.ffn", "must be >= 1");
  require(m.topk >= 1 && m.topk <= m.experts, sc, "model.topk", "must be in [1, experts]");
  require(sc.tokens >= 1, sc, "tokens", "must be >= 1");
  require(sc.dispatch.ep >= 1, sc, "dispatch.ep", "must be >= 1");
  require(sc.tokens % sc.dispatch.ep == 0, sc, "dispatch.ep",
          "tokens (" + std::to_string(sc.tokens) + ") not divisible by ep (" + std::to_string(sc.dispatch.ep) + ")");
  require(m.experts % sc.dispatch.ep == 0, sc, "dispatch.ep",
          "experts (" + std::to_string(m.experts) + ") not divisible by ep (" + std::to_string(sc.dispatch.ep) + ")");
  require(sc.dispatch.align >= 0, sc, "dispatch.align", "must be >= 0");
  require(sc.dispatch.padding == "none" || sc.dispatch.align > 0, sc, "dispatch.align",
          "padding '" + sc.dispatch.padding + "' needs align > 0");
}

}  // namespace moenum
