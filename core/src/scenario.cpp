// Re-checks, on the C++ side, the combinations the computation cannot honour. Python validates the
// file first (with file and line); this guards scenarios built directly through the API.
#include "moenum/scenario.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "moenum/error.h"

namespace moenum {
namespace {
void require(bool ok, const Scenario& sc, const std::string& key, const std::string& what) {
  if (!ok) throw ConfigError(key, what, sc.name);
}

bool is_fraction(double f) { return f >= 0.0 && f <= 1.0; }  // false for NaN

void validate_regime(const Scenario& sc, const std::string& key, const InputRegime& r) {
  static const std::set<std::string> kRegimes = {"normal", "uniform", "subnormal", "near_overflow", "special"};
  require(kRegimes.count(r.regime) > 0, sc, key + ".regime",
          "unknown regime '" + r.regime + "' (normal, uniform, subnormal, near_overflow or special)");
  require(r.dist == "normal" || r.dist == "uniform", sc, key + ".dist", "unknown dist '" + r.dist + "'");
  require(std::isfinite(r.scale) && r.scale > 0, sc, key + ".scale", "must be a finite number > 0");
  require(is_fraction(r.outlier_fraction), sc, key + ".outliers.fraction", "must be in [0, 1]");
  require(std::isfinite(r.outlier_scale) && r.outlier_scale > 0, sc, key + ".outliers.scale",
          "must be a finite number > 0");
  const SpecialValues& sp = r.special;
  for (const auto& [name, f] : {std::pair{"nan", sp.nan}, {"inf", sp.inf}, {"subnormal", sp.subnormal},
                                {"huge", sp.huge}, {"value_fraction", sp.value_fraction}})
    require(is_fraction(f), sc, key + ".special." + name, "must be in [0, 1]");
  require(sp.total() <= 1.0, sc, key + ".special", "the fractions add up to more than 1");
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
  simulated_ranks(sc);
  for (const auto& [tensor, reg] : sc.inputs) validate_regime(sc, "inputs." + tensor, reg);
}

std::vector<bool> simulated_ranks(const Scenario& sc) {
  const auto& d = sc.dispatch;
  std::vector<bool> simulated(std::max<int64_t>(d.ep, 0), d.ranks.empty());
  for (const int64_t r : d.ranks) {
    require(r >= 0 && r < d.ep, sc, "dispatch.ranks",
            "rank " + std::to_string(r) + " is not in [0, ep) = [0, " + std::to_string(d.ep) + ")");
    require(!simulated[r], sc, "dispatch.ranks", "lists rank " + std::to_string(r) + " twice");
    simulated[r] = true;
  }
  return simulated;
}

}  // namespace moenum
