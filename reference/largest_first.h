// The order the parallel loops over experts run in: the largest first. Under skewed routing the
// expert with the most rows would otherwise start wherever its index puts it and could hold up the
// loop alone. Only the schedule follows it; results are written per item or merged in index order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace moenum::reference {

// Indices of sizes in descending size, ties in index order.
inline std::vector<int64_t> largest_first(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sizes[size_t(a)] > sizes[size_t(b)]; });
  return order;
}

}  // namespace moenum::reference
