// The error table's statistics of one tensor (or one expert's part of it) against another
// (interfaces.md, error table columns): max and mean absolute error, max relative error, relative
// Frobenius error, DeepGEMM's calc_diff, the ULP histogram (ulp.h) and the count of bitwise-equal
// elements (bitwise.h), and the non-finite elements: where both are NaN or the same infinity
// (nonfinite, also bitwise equal) and where only one is, or they differ (nonfinite_mismatch). The sums
// (mean_abs, rel_fro, calc_diff) run over the elements where both are finite; the maxima and the ULP
// histogram over all (a mismatch makes max_abs NaN or inf). Sums run over fixed blocks in parallel
// and are added in block order, so the figures do not depend on the thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "ulp.h"
#include "view.h"

namespace moenum::verify {

struct UlpBuckets {
  double max_ulp = 0.0;  // the largest finite distance
  int64_t le0 = 0, le1 = 0, le2 = 0, gt2 = 0;  // 0, (0, 1], (1, 2], beyond 2 (or NaN against a number)
  double max_abs = 0.0;  // the largest absolute difference (NaN-free)
  // Without data-dependent branches: the table's loop runs this for every element of every pair.
  void add(double ulps, double absdiff) {
    le0 += ulps == 0.0;
    le1 += (ulps != 0.0) & (ulps <= 1.0);
    le2 += (ulps > 1.0) & (ulps <= 2.0);
    gt2 += !(ulps <= 2.0);  // NaN too
    max_ulp = ulps > max_ulp ? ulps : max_ulp;
    max_abs = absdiff > max_abs ? absdiff : max_abs;
  }
  UlpBuckets& operator+=(const UlpBuckets& o);
};

struct ErrorStats {
  int64_t n = 0;
  double max_abs = 0, max_rel = 0, mean_abs = 0, rel_fro = 0, calc_diff = 0;
  UlpBuckets ulps;
  int64_t bitwise_equal = 0;
  int64_t nonfinite = 0, nonfinite_mismatch = 0;
};

// a (the backend) against b (the other) over the elements `index` (all when null), ULPs measured on
// `grid` at b's values.
ErrorStats error_stats(const View& a, const View& b, Grid grid, const std::vector<int64_t>* index = nullptr);

// Per-expert rows: for a tensor whose leading dim is the expert (dw1, dw2, db1, db2: every expert and
// the whole tensor, in one pass), or one whose elements carry an expert label (dprobs: topk_idx; one
// ErrorStats per expert that has elements, label -1 = none), in expert order, with its expert id.
struct ExpertStats {
  int64_t expert;
  ErrorStats stats;
};
struct GroupedStats {
  ErrorStats whole;
  std::vector<ExpertStats> per_expert;
};
GroupedStats error_stats_by_leading_dim(const View& a, const View& b, Grid grid);
std::vector<ExpertStats> error_stats_by_label(const View& a, const View& b, Grid grid,
                                              const std::vector<int64_t>& label);

// Bitwise comparison of two tensors (bitwise.h): the count of differing elements and the first one.
struct BitwiseDiff {
  bool same_shape = true;
  int64_t differing = 0;
  int64_t first = -1;  // flat index
};
BitwiseDiff bitwise_diff(const View& a, const View& b);

// Elements that are NaN or +-inf (the outputs-complete check).
int64_t count_nonfinite(const View& v);

}  // namespace moenum::verify
