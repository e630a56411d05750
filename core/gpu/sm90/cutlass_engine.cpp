#include "sm90/cutlass_engine.h"

#include <map>

#include "sm90/grouped_sm90.h"

namespace moenum::gpu {
namespace {

class CutlassSm90Engine final : public GemmEngine {
 public:
  explicit CutlassSm90Engine(const CutlassSm90Options& o) {
    opts_.tile = o.tile;
    opts_.chunks = o.chunks;
    opts_.run = o.run;
    opts_.sm_count = o.sm_count;
    opts_.strided_batch = o.strided_batch;
    opts_.batch_l2 = o.batch_l2;
    opts_.batch_every_cta = o.batch_every_cta;
  }
  std::string path() const override { return "cutlass_sm90_grouped_device_sizes"; }
  void begin(const int64_t*, int, cudaStream_t) override {}
  void run(const GroupedGemmDesc& g, cudaStream_t s) override {
    auto it = plans_.find(g.id);
    if (it == plans_.end()) {
      std::unique_ptr<sm90::GroupedGemmPlan> p;
      switch (g.kind) {
        case GemmKind::Fprop: p = sm90::make_fprop_plan(g, opts_); break;
        case GemmKind::Dgrad: p = sm90::make_dgrad_plan(g, opts_); break;
        case GemmKind::Wgrad: p = sm90::make_wgrad_plan(g, opts_); break;
      }
      it = plans_.emplace(g.id, std::move(p)).first;
    }
    it->second->launch(g, s);
  }

 private:
  sm90::PlanOptions opts_;
  std::map<int, std::unique_ptr<sm90::GroupedGemmPlan>> plans_;
};

}  // namespace

std::unique_ptr<GemmEngine> make_cutlass_sm90_engine(const CutlassSm90Options& o) {
  return std::make_unique<CutlassSm90Engine>(o);
}

}  // namespace moenum::gpu
