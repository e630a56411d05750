// Router: generated logits (log popularity + Gumbel noise), top-k, scores (numerics.md §2).
#pragma once
#include <cstdint>
#include <vector>

#include "moenum/scenario.h"

namespace moenum {

struct Routing {
  int64_t T = 0, E = 0, k = 0;
  std::vector<int32_t> topk_idx;          // T x k, slots in descending score order
  std::vector<float> probs;               // T x k, fp32
  std::vector<int64_t> tokens_per_expert; // E, unpadded
  std::vector<double> popularity;         // E, the skew model's popularity after permutation
};

// Expert popularity from the skew model, normalised to sum 1 (before permute_experts).
std::vector<double> skew_popularity(const Scenario& sc);

Routing route(const Scenario& sc);

// Helper, exposed for tests: indices of the k largest keys, in descending key order, ties to the
// lower index.
std::vector<int32_t> topk_lower_id(const std::vector<float>& keys, int64_t k);

}  // namespace moenum
