// Host-side entry points of the CUTLASS sm_90a grouped GEMMs (one translation unit per operand
// layout, see grouped_sm90.cuh). Problem sizes and operand pointers are written on the device by a
// small kernel from the device-resident counts and offsets, so launching needs no host sync and the
// whole sequence can be captured in a CUDA graph.
//
// Both choices below are made once per plan from host-known static information only (groups, N, K,
// the GEMM kind), never from the device-side counts:
//   tile  : 128x128x64 cooperative (every kind), or 128x256x64 cooperative with a 1x2 cluster
//           (Fprop only, N >= 1024 and a multiple of 512: fprop_wide_tile). A third, 128x256x64 with
//           a 2x1 cluster (the two CTAs share the B tile: torch._grouped_mm's choice for large
//           shapes), is there on request only (Tile::T128x256M2) until the bench shows where it wins.
//   chunks: Fprop/Dgrad split each group's rows, on the device, into up to `chunks` sub-groups of at
//           least `chunk_rows` rows (multiples of the tile's M). CUTLASS's grouped tile scheduler
//           walks a group's tiles along M (no swizzle without host problem sizes), so one wave of a
//           large group covers every M tile of one or two N columns and streams that group's whole
//           A through L2 per wave; a sub-group of 16 M tiles makes each wave a compact block
//           instead. Only the order of the output tiles changes: every element is computed exactly
//           as before (same K order, same fp32 accumulate), so results are bitwise unchanged.
#pragma once
#include <memory>

#include "gemm/grouped_gemm.h"

namespace moenum::gpu::sm90 {

// Holds the per-group device arrays and the CUTLASS operator for one GEMM of the layer. Created on
// the first run of a GroupedGemmDesc id (allocation happens there, never inside a graph capture).
class GroupedGemmPlan {
 public:
  virtual ~GroupedGemmPlan() = default;
  virtual void launch(const GroupedGemmDesc& g, cudaStream_t s) = 0;
};

enum class Tile { Auto, T128x128, T128x256, T128x256M2 };

struct PlanOptions {
  Tile tile = Tile::Auto;  // T128x256 and T128x256M2 are honoured for Fprop only
  int chunks = -1;         // max sub-groups per group (1 = no split); -1 = choose from the groups
  int chunk_rows = 2048;   // minimum rows of a sub-group
};

std::unique_ptr<GroupedGemmPlan> make_fprop_plan(const GroupedGemmDesc& g, const PlanOptions& o);  // A row, B col, D bf16
std::unique_ptr<GroupedGemmPlan> make_dgrad_plan(const GroupedGemmDesc& g, const PlanOptions& o);  // A row, B row, D bf16
std::unique_ptr<GroupedGemmPlan> make_wgrad_plan(const GroupedGemmDesc& g, const PlanOptions& o);  // A col, B row, D fp32

// The static choices (see above); exposed so the bench can report them.
bool fprop_wide_tile(const GroupedGemmDesc& g);
int default_chunks(const GroupedGemmDesc& g);

}  // namespace moenum::gpu::sm90
