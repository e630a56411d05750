// A backend's result in one scenario point (interfaces.md, "Dispositions"). The strings are the
// contract shared by Python, the HDF5 attributes, index.json and JUnit: a skip is never a pass.
#pragma once
#include <array>
#include <string>
#include <string_view>

#include "moenum/error.h"

namespace moenum {

enum class Disposition {
  passed,         // verified and correct (an oracle: ran to completion)
  failed,         // verified and wrong: a bound violation, a bit-exact stage that differs, an invariance
  error,          // the backend crashed or raised
  not_verified,   // it ran, but nothing could check it
  not_run,        // not possible here: no GPU, not built
  not_supported,  // the backend does not implement this recipe or option
};

inline constexpr std::array<Disposition, 6> kDispositions = {
    Disposition::passed, Disposition::failed, Disposition::error,
    Disposition::not_verified, Disposition::not_run, Disposition::not_supported};

constexpr std::string_view to_string(Disposition d) {
  switch (d) {
    case Disposition::passed: return "passed";
    case Disposition::failed: return "failed";
    case Disposition::error: return "error";
    case Disposition::not_verified: return "not_verified";
    case Disposition::not_run: return "not_run";
    case Disposition::not_supported: return "not_supported";
  }
  return "?";
}

inline Disposition parse_disposition(std::string_view s) {
  for (Disposition d : kDispositions)
    if (to_string(d) == s) return d;
  throw ConfigError("disposition", "unknown disposition '" + std::string(s) + "'");
}

}  // namespace moenum
