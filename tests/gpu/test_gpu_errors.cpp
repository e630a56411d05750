// Acceptance 6: a missing GPU and an out-of-memory give clear errors (not_run with a reason, an
// InternalError with file:line), not crashes; the device stays usable after an OOM.
#include <gtest/gtest.h>

#include "device_buffer.h"
#include "gpu_test_util.h"
#include "moenum/backend.h"
#include "moenum/error.h"

namespace moenum::gputest {
namespace {

TEST(GpuErrors, NoDeviceMeansNotRun) {
  auto av = gpu::cuda_availability();
  if (av.ok) GTEST_SKIP() << "a GPU is present: the no-device path cannot be exercised here";
  EXPECT_EQ(av.disposition, Disposition::not_run);
  EXPECT_NE(av.reason.find("no CUDA device"), std::string::npos);
  Scenario sc = make_scenario({});
  for (const char* name : {"gpu.grouped", "gpu.multistream"}) {
    auto be = make_backend(name);
    Availability a = be->available(sc);
    EXPECT_FALSE(a.ok) << name;
    EXPECT_EQ(a.disposition, Disposition::not_run) << name;
  }
}

TEST(GpuErrors, OutOfMemoryIsAnExceptionWithFileLine) {
  MOENUM_REQUIRE_GPU();
  try {
    gpu::DeviceBuffer<uint8_t> huge(size_t(1) << 50);  // 1 PiB
    FAIL() << "allocation of 1 PiB succeeded?";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaMalloc"), std::string::npos) << what;
    EXPECT_NE(what.find("device_buffer.h:"), std::string::npos) << what;
  }
  gpu::DeviceBuffer<float> small(1024);  // the context survives
  small.zero();
  EXPECT_EQ(small.download()[0], 0.0f);
}

TEST(GpuErrors, UnsupportedRecipeIsNotSupported) {
  MOENUM_REQUIRE_GPU();
  ScenarioSpec s;
  Scenario sc = make_scenario(s);
  sc.recipe.name = "fp32";
  for (const char* name : {"gpu.grouped", "gpu.multistream"}) {
    Availability a = make_backend(name)->available(sc);
    EXPECT_FALSE(a.ok) << name;
    EXPECT_EQ(a.disposition, Disposition::not_supported) << name;
  }
}

}  // namespace
}  // namespace moenum::gputest
