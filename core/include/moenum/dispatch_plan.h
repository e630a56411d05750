// The dispatch plan (numerics.md §3): for every EP rank and local expert, its rows in order. A row
// is a global token id or -1 for a zero pad row. Router padding adds real tokens with prob 0.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "moenum/routing.h"
#include "moenum/scenario.h"

namespace moenum {

struct RankPlan {
  std::vector<int64_t> row_token;         // global token id, -1 = zero pad row
  std::vector<int32_t> row_expert;        // global expert id
  std::vector<int32_t> row_slot;          // top-k slot of (token, expert), -1 = pad row (no prob)
  std::vector<float> row_prob;            // prob of the row, 0 for pad rows
  std::vector<int64_t> tokens_per_expert; // E/P, padded counts
  std::vector<int64_t> segment_offset;    // E/P + 1, row offsets of the local experts' segments
  bool fell_back_to_module = false;       // router_post could not pad this rank
  bool simulated = true;                  // false: left out by dispatch.ranks, no rows
};

struct DispatchPlan {
  int64_t ep = 1;
  int64_t experts_per_rank = 0;
  std::string padding = "none";
  int64_t align = 0;
  std::vector<RankPlan> ranks;
  std::vector<std::string> warnings;
};

// Every rank is planned as in the full run; with dispatch.ranks, the ranks left out then keep no rows
// (their segments empty, tokens_per_expert zero), so the simulated ranks' rows are the full run's.
DispatchPlan plan_dispatch(const Scenario& sc, const Routing& routing);

}  // namespace moenum
