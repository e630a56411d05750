// ConfigError carries the key it is about as a field, with the message and the scenario, and reads
// "scenario 'NAME': KEY: MESSAGE".
#include <gtest/gtest.h>

#include "moenum/error.h"
#include "moenum/scenario.h"

using namespace moenum;

TEST(ConfigError, CarriesItsKeyMessageAndScenario) {
  const ConfigError e("dispatch.padding", "needs align > 0", "smoke");
  EXPECT_EQ(e.key(), "dispatch.padding");
  EXPECT_EQ(e.message(), "needs align > 0");
  EXPECT_EQ(e.scenario(), "smoke");
  EXPECT_STREQ(e.what(), "scenario 'smoke': dispatch.padding: needs align > 0");
  EXPECT_STREQ(ConfigError("", "bad").what(), "bad");
  Scenario sc;
  sc.name = "odd";
  sc.tokens = 64;
  sc.dispatch.ep = 3;
  try {
    validate(sc);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "dispatch.ep");
    EXPECT_EQ(e.scenario(), "odd");
    EXPECT_EQ(std::string(e.what()), "scenario 'odd': dispatch.ep: " + e.message());
  }
}
