// The GPU tests check a GPU backend's stages with the project's one verifier (core/verify/): the
// same recomputation, bound and classes as `moenum run`, teacher-forced on the backend's own inputs.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "stage_check.h"
#include "tensor_view.h"

namespace moenum::gputest {

inline std::vector<verify::StageReport> check_stages(const LayerRun& r) {
  const verify::LayerContext ctx = verify::make_layer_context(r.sc, r.routing, r.plan, verify::input_views(r.prob));
  return verify::check_stages(ctx, verify::result_views(r.res.stages, r.res.outputs), {});
}

// Every named stage was checked (its tensors saved) and passed; the first failure's text otherwise.
inline void expect_stages_pass(const LayerRun& r, const std::vector<std::string>& names) {
  const auto reports = check_stages(r);
  for (const std::string& name : names) {
    const verify::StageReport* rep = nullptr;
    for (const auto& x : reports)
      if (name == x.desc().name) rep = &x;
    ASSERT_NE(rep, nullptr) << "stage " << name << " does not apply to this scenario";
    EXPECT_EQ(rep->status, verify::StageReport::Status::kPassed) << name << ": " << rep->reason;
    EXPECT_GT(rep->checked, 0) << name;
  }
}

}  // namespace moenum::gputest
