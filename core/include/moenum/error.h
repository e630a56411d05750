// Errors that reach Python as exceptions with the same text. ConfigError is bad input (exit code 2):
// it carries the scenario key it is about as a field, so that Python can point at the key's line.
#pragma once
#include <stdexcept>
#include <string>

namespace moenum {

// what() reads "scenario 'NAME': KEY: MESSAGE"; the parts that are empty are left out.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string key, std::string message, std::string scenario = "")
      : std::runtime_error(text(key, message, scenario)),
        key_(std::move(key)),
        message_(std::move(message)),
        scenario_(std::move(scenario)) {}

  const std::string& key() const { return key_; }          // e.g. "dispatch.padding"; "" when none applies
  const std::string& message() const { return message_; }  // the text without scenario and key
  const std::string& scenario() const { return scenario_; }

 private:
  static std::string text(const std::string& key, const std::string& message, const std::string& scenario) {
    std::string t = scenario.empty() ? "" : "scenario '" + scenario + "': ";
    if (!key.empty()) t += key + ": ";
    return t + message;
  }
  std::string key_, message_, scenario_;
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
