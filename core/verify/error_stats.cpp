#include "error_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "bitwise.h"

namespace moenum::verify {

UlpBuckets& UlpBuckets::operator+=(const UlpBuckets& o) {
  max_ulp = std::max(max_ulp, o.max_ulp);
  max_abs = std::max(max_abs, o.max_abs);
  le0 += o.le0, le1 += o.le1, le2 += o.le2, gt2 += o.gt2;
  return *this;
}

namespace {

// Partial sums of one block of elements. Non-finite values: a NaN against a NaN, or an infinity
// against the same infinity, agree (difference 0, counted in `nonfinite`); a non-finite value against
// anything else is a mismatch (counted, and the maxima become NaN or inf). Neither enters the sums, so
// mean_abs, rel_fro and calc_diff describe the elements where both are finite.
struct Partial {
  int64_t n = 0, bitwise = 0, finite = 0, nonfinite = 0, nonfinite_mismatch = 0;
  bool nan_abs = false, nan_rel = false;  // a difference of a NaN and a number: the maximum is NaN
  double max_abs = 0, max_rel = 0, sum_abs = 0, sum_d2 = 0, sum_b2 = 0, sum_a2 = 0, sum_ab = 0;
  UlpBuckets ulps;

  void add(double a, double b, Grid g) {
    ++n;
    if (!std::isfinite(a) || !std::isfinite(b)) [[unlikely]] {
      if (same_bits(a, b, Grid::kF64)) ++bitwise;  // as stored: NaNs are equal
      if ((std::isnan(a) && std::isnan(b)) || a == b) {
        ++nonfinite;
        ulps.add(0.0, 0.0);
        return;
      }
      ++nonfinite_mismatch;
      const double diff = std::fabs(a - b);  // inf, or NaN when one is NaN
      if (std::isnan(diff)) nan_abs = true;
      else max_abs = std::max(max_abs, diff);
      if (b != 0.0) {
        const double rel = diff / std::fabs(b);
        if (std::isnan(rel)) nan_rel = true;
        else max_rel = std::max(max_rel, rel);
      }
      ulps.add(ulp_distance(a, b, g), diff);
      return;
    }
    // Both finite, the common case: no data-dependent branch but the quotient's (b is rarely 0).
    bitwise += bits_of(a) == bits_of(b);  // as stored: the sign of zero counts
    ++finite;
    const double diff = std::fabs(a - b);
    max_abs = std::max(max_abs, diff);
    if (b != 0.0) max_rel = std::max(max_rel, diff / std::fabs(b));
    sum_abs += diff;
    sum_d2 += (a - b) * (a - b);
    sum_a2 += a * a;
    sum_b2 += b * b;
    sum_ab += a * b;
    ulps.add(ulp_distance_finite(a, b, g), diff);
  }
  static uint64_t bits_of(double v) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    return u;
  }
  void merge(const Partial& o) {
    n += o.n, bitwise += o.bitwise;
    finite += o.finite, nonfinite += o.nonfinite, nonfinite_mismatch += o.nonfinite_mismatch;
    nan_abs |= o.nan_abs, nan_rel |= o.nan_rel;
    max_abs = std::max(max_abs, o.max_abs);
    max_rel = std::max(max_rel, o.max_rel);
    sum_abs += o.sum_abs, sum_d2 += o.sum_d2, sum_a2 += o.sum_a2, sum_b2 += o.sum_b2, sum_ab += o.sum_ab;
    ulps += o.ulps;
  }
};

ErrorStats finish(const Partial& p) {
  ErrorStats s;
  s.n = p.n;
  if (p.n == 0) return s;
  s.max_abs = p.nan_abs ? std::nan("") : p.max_abs;
  s.max_rel = p.nan_rel ? std::nan("") : p.max_rel;
  s.mean_abs = p.finite ? p.sum_abs / double(p.finite) : 0.0;
  const double norm_b = std::sqrt(p.sum_b2), norm_d = std::sqrt(p.sum_d2);
  s.rel_fro = norm_b > 0 ? norm_d / norm_b : norm_d;
  const double denom = p.sum_a2 + p.sum_b2;
  s.calc_diff = denom == 0.0 ? 0.0 : 1.0 - 2.0 * p.sum_ab / denom;
  s.ulps = p.ulps;
  s.bitwise_equal = p.bitwise;
  s.nonfinite = p.nonfinite;
  s.nonfinite_mismatch = p.nonfinite_mismatch;
  return s;
}

constexpr int64_t kBlock = 1 << 14;

// The elements [i0, i1) (or those `index` names) of a and b, read at their stored types: a View's
// per-element switch on its storage stays out of the error table's hot loop.
// Four partials, one per lane of four consecutive elements: the sums' and maxima's dependency chains
// interleave, where one chain would bound the loop by the latency of its additions.
template <Grid g, class TA, class TB>
void add_block(Partial& p, const TA* a, const TB* b, int64_t i0, int64_t i1, const int64_t* index) {
  constexpr int kLanes = 4;
  Partial lane[kLanes];
  int64_t i = i0;
  if (index) {
    for (; i + kLanes <= i1; i += kLanes)
      for (int l = 0; l < kLanes; ++l)
        lane[l].add(static_cast<double>(a[index[i + l]]), static_cast<double>(b[index[i + l]]), g);
  } else {
    for (; i + kLanes <= i1; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l].add(static_cast<double>(a[i + l]), static_cast<double>(b[i + l]), g);
  }
  for (; i < i1; ++i) {
    const int64_t at = index ? index[i] : i;
    lane[0].add(static_cast<double>(a[at]), static_cast<double>(b[at]), g);
  }
  for (const Partial& l : lane) p.merge(l);
}

template <class Fn>
void with_storage(const View& v, Fn&& fn) {
  switch (v.storage) {
    case Storage::kF32: return fn(static_cast<const float*>(v.data));
    case Storage::kU8: return fn(static_cast<const uint8_t*>(v.data));
    default: return fn(static_cast<const double*>(v.data));
  }
}

// The grid as a constant of the loop: its format is then known where each element's spacing is read.
template <class Fn>
void with_grid(Grid g, Fn&& fn) {
  switch (g) {
    case Grid::kBf16: return fn(std::integral_constant<Grid, Grid::kBf16>{});
    case Grid::kF32: return fn(std::integral_constant<Grid, Grid::kF32>{});
    default: return fn(std::integral_constant<Grid, Grid::kF64>{});
  }
}

void add_range(Partial& p, const View& a, const View& b, int64_t i0, int64_t i1, const int64_t* index, Grid g) {
  with_grid(g, [&](auto grid) {
    with_storage(a, [&](const auto* pa) {
      with_storage(b, [&](const auto* pb) { add_block<decltype(grid)::value>(p, pa, pb, i0, i1, index); });
    });
  });
}

}  // namespace

ErrorStats error_stats(const View& a, const View& b, Grid grid, const std::vector<int64_t>* index) {
  MOENUM_CHECK(a.size() == b.size(), "error_stats: tensors of different sizes");
  const int64_t n = index ? int64_t(index->size()) : a.size();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<Partial> parts(size_t(std::max<int64_t>(blocks, 1)));
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk)
    add_range(parts[blk], a, b, blk * kBlock, std::min(n, (blk + 1) * kBlock), index ? index->data() : nullptr, grid);
  Partial all;
  for (const Partial& p : parts) all.merge(p);
  return finish(all);
}

GroupedStats error_stats_by_leading_dim(const View& a, const View& b, Grid grid) {
  MOENUM_CHECK(a.size() == b.size(), "error_stats: tensors of different sizes");
  const int64_t E = a.dim(0), per = E ? a.size() / E : 0;
  const int64_t per_blocks = std::max<int64_t>((per + kBlock - 1) / kBlock, 1);
  // blocks never cross an expert, so one pass gives every expert's figures and the whole tensor's
  std::vector<Partial> parts(size_t(E * per_blocks));
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < E * per_blocks; ++blk) {
    const int64_t e = blk / per_blocks, b0 = e * per + (blk % per_blocks) * kBlock;
    add_range(parts[blk], a, b, b0, std::min(e * per + per, b0 + kBlock), nullptr, grid);
  }
  GroupedStats out;
  Partial all;
  for (int64_t e = 0; e < E; ++e) {
    Partial pe;
    for (int64_t k = 0; k < per_blocks; ++k) pe.merge(parts[e * per_blocks + k]);
    all.merge(pe);
    out.per_expert.push_back({e, finish(pe)});
  }
  out.whole = finish(all);
  return out;
}

std::vector<ExpertStats> error_stats_by_label(const View& a, const View& b, Grid grid,
                                              const std::vector<int64_t>& label) {
  MOENUM_CHECK(int64_t(label.size()) == a.size(), "error_stats_by_label: one label per element");
  int64_t E = 0;
  for (int64_t l : label) E = std::max(E, l + 1);
  std::vector<std::vector<int64_t>> idx(static_cast<size_t>(E));
  for (int64_t i = 0; i < int64_t(label.size()); ++i)
    if (label[i] >= 0) idx[label[i]].push_back(i);
  std::vector<ExpertStats> out;
  for (int64_t e = 0; e < E; ++e)
    if (!idx[e].empty()) out.push_back({e, error_stats(a, b, grid, &idx[e])});
  return out;
}

BitwiseDiff bitwise_diff(const View& a, const View& b) {
  BitwiseDiff d;
  if (a.shape != b.shape) {
    d.same_shape = false;
    return d;
  }
  const int64_t n = a.size();
  int64_t differing = 0, first = n;
#pragma omp parallel for schedule(static) reduction(+ : differing) reduction(min : first)
  for (int64_t i = 0; i < n; ++i)
    if (!same_bits(a.at(i), b.at(i), Grid::kF64)) {
      ++differing;
      first = std::min(first, i);
    }
  d.differing = differing;
  d.first = first < n ? first : -1;
  return d;
}

int64_t count_nonfinite(const View& v) {
  const int64_t n = v.size();
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : count)
  for (int64_t i = 0; i < n; ++i) count += !std::isfinite(v.at(i));
  return count;
}

}  // namespace moenum::verify
