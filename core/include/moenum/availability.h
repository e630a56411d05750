// Whether a backend can run a scenario here, and if not, the disposition that says why.
#pragma once
#include <string>

#include "moenum/disposition.h"

namespace moenum {

struct Availability {
  bool ok = true;
  Disposition disposition = Disposition::passed;  // when !ok: not_run (e.g. no GPU) or not_supported
  std::string reason;

  static Availability not_run(std::string why) { return {false, Disposition::not_run, std::move(why)}; }
  static Availability not_supported(std::string why) { return {false, Disposition::not_supported, std::move(why)}; }
};

}  // namespace moenum
