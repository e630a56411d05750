// Errors that reach Python as exceptions with the same text. ConfigError is bad input (exit code 2);
// the text names the scenario and, where known, the key.
#pragma once
#include <stdexcept>
#include <string>

namespace moenum {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define MOENUM_CHECK(cond, msg)                                                                    \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      throw ::moenum::InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                                    (msg));                                                        \
  } while (0)

}  // namespace moenum
