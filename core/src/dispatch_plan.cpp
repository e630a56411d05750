// The dispatch plan (numerics.md §3). Rank r holds a contiguous token range, so "source ranks in
// order, each in ascending token order" is simply ascending global token id: every segment lists its
// real rows (routed and router-padded) in ascending token id, then its zero pad rows.
#include "moenum/dispatch_plan.h"

#include <algorithm>
#include <numeric>
#include <span>

#include "moenum/error.h"

namespace moenum {
namespace {

[[noreturn]] void config_error(const Scenario& sc, const std::string& key, const std::string& what) {
  throw ConfigError(key, what, sc.name);
}

enum class Padding { none, router, router_post, module, hybridep };

Padding parse_padding(const Scenario& sc) {
  const std::string& p = sc.dispatch.padding;
  if (p == "none") return Padding::none;
  if (p == "router") return Padding::router;
  if (p == "router_post") return Padding::router_post;
  if (p == "module") return Padding::module;
  if (p == "hybridep") return Padding::hybridep;
  config_error(sc, "dispatch.padding",
               "unknown padding source '" + p + "' (none, router, router_post, module, hybridep)");
}

// A real row: slot -1 marks a token flipped in by router padding (prob 0).
struct Row {
  int64_t token;
  int32_t slot;
  float prob;
};

struct Segment {
  std::vector<Row> rows;  // real rows, ascending token id
  int64_t zero_pad = 0;   // zero rows appended at the end
};

// Rows to add so that count becomes a multiple of align (align 0: none).
int64_t pad_needed(int64_t count, int64_t align) { return align > 0 ? (align - count % align) % align : 0; }

// Per expert, its routed (token, slot, prob) in ascending token id.
std::vector<std::vector<Row>> routed_by_expert(const Routing& r) {
  std::vector<std::vector<Row>> by(r.E);
  for (int64_t t = 0; t < r.T; ++t)
    for (int64_t s = 0; s < r.k; ++s) {
      const int32_t e = r.topk_idx[t * r.k + s];
      by[e].push_back({t, int32_t(s), r.probs[t * r.k + s]});
    }
  return by;
}

// Routed rows whose token lies in [lo, hi).
std::span<const Row> token_range(const std::vector<Row>& rows, int64_t lo, int64_t hi) {
  auto first = std::lower_bound(rows.begin(), rows.end(), lo, [](const Row& a, int64_t t) { return a.token < t; });
  auto last = std::lower_bound(first, rows.end(), hi, [](const Row& a, int64_t t) { return a.token < t; });
  return {first, last};
}

// Megatron pad_routing_map on one routing-map column: merge `routed` with the first n candidate
// tokens (ascending) that are not routed, as prob-0 rows. The caller checked there are enough.
void append_router_padded(std::span<const Row> routed, std::span<const int64_t> candidates, int64_t n,
                          std::vector<Row>& out) {
  size_t j = 0;
  for (size_t i = 0; n > 0 && i < candidates.size(); ++i) {
    const int64_t c = candidates[i];
    while (j < routed.size() && routed[j].token < c) out.push_back(routed[j++]);
    if (j < routed.size() && routed[j].token == c) continue;  // routed: appended by the next step
    out.push_back({c, -1, 0.0f});
    --n;
  }
  MOENUM_CHECK(n == 0, "router padding ran out of candidate tokens");
  out.insert(out.end(), routed.begin() + j, routed.end());
}

struct Layout {
  int64_t P, T_rank, E_rank, align;
};

// router: padding on each source rank's routing map before the all-to-all.
std::vector<Segment> router_segments(const Scenario& sc, const Layout& L, int64_t rank,
                                     const std::vector<std::vector<Row>>& routed) {
  std::vector<Segment> segs(L.E_rank);
  std::vector<int64_t> src_tokens(L.T_rank);
  for (int64_t src = 0; src < L.P; ++src) {
    std::iota(src_tokens.begin(), src_tokens.end(), src * L.T_rank);
    for (int64_t le = 0; le < L.E_rank; ++le) {
      const int64_t e = rank * L.E_rank + le;
      const auto chunk = token_range(routed[e], src * L.T_rank, (src + 1) * L.T_rank);
      const int64_t count = int64_t(chunk.size()), n = pad_needed(count, L.align);
      if (count + n > L.T_rank)
        config_error(sc, "dispatch.padding",
                     "router padding of expert " + std::to_string(e) + " on source rank " + std::to_string(src) +
                         " needs " + std::to_string(count + n) + " rows (align " + std::to_string(L.align) +
                         ") but the rank holds only " + std::to_string(L.T_rank) + " tokens");
      append_router_padded(chunk, src_tokens, n, segs[le].rows);
    }
  }
  return segs;
}

// Real rows only, then zero rows up to the alignment (module, hybridep and the router_post fallback).
std::vector<Segment> zero_padded_segments(const Layout& L, int64_t rank, const std::vector<std::vector<Row>>& routed) {
  std::vector<Segment> segs(L.E_rank);
  for (int64_t le = 0; le < L.E_rank; ++le) {
    const auto& rows = routed[rank * L.E_rank + le];
    segs[le].rows = rows;
    segs[le].zero_pad = pad_needed(int64_t(rows.size()), L.align);
  }
  return segs;
}

// router_post: pad_routing_map on the rank's received map (DeepEP flex); falls back to zero padding
// for the whole rank when some expert's padded target exceeds what the rank received.
std::vector<Segment> router_post_segments(const Layout& L, int64_t rank, const std::vector<std::vector<Row>>& routed,
                                          RankPlan& plan, std::vector<std::string>& warnings) {
  std::vector<int64_t> received;
  for (int64_t le = 0; le < L.E_rank; ++le)
    for (const Row& row : routed[rank * L.E_rank + le]) received.push_back(row.token);
  std::sort(received.begin(), received.end());
  received.erase(std::unique(received.begin(), received.end()), received.end());

  for (int64_t le = 0; le < L.E_rank; ++le) {
    const int64_t e = rank * L.E_rank + le, count = int64_t(routed[e].size());
    const int64_t target = count + pad_needed(count, L.align);
    if (target > int64_t(received.size())) {
      plan.fell_back_to_module = true;
      warnings.push_back("rank " + std::to_string(rank) + ": router_post padding of expert " + std::to_string(e) +
                         " needs " + std::to_string(target) + " rows but the rank received only " +
                         std::to_string(received.size()) + " tokens; the rank falls back to module zero padding");
      return zero_padded_segments(L, rank, routed);
    }
  }
  std::vector<Segment> segs(L.E_rank);
  for (int64_t le = 0; le < L.E_rank; ++le) {
    const auto& rows = routed[rank * L.E_rank + le];
    append_router_padded(rows, received, pad_needed(int64_t(rows.size()), L.align), segs[le].rows);
  }
  return segs;
}

void write_rank(const Layout& L, int64_t rank, const std::vector<Segment>& segs, RankPlan& plan) {
  plan.segment_offset.assign(1, 0);
  for (int64_t le = 0; le < L.E_rank; ++le) {
    const int32_t e = int32_t(rank * L.E_rank + le);
    for (const Row& row : segs[le].rows) {
      plan.row_token.push_back(row.token);
      plan.row_expert.push_back(e);
      plan.row_slot.push_back(row.slot);
      plan.row_prob.push_back(row.prob);
    }
    plan.row_token.insert(plan.row_token.end(), segs[le].zero_pad, -1);
    plan.row_expert.insert(plan.row_expert.end(), segs[le].zero_pad, e);
    plan.row_slot.insert(plan.row_slot.end(), segs[le].zero_pad, -1);
    plan.row_prob.insert(plan.row_prob.end(), segs[le].zero_pad, 0.0f);
    plan.tokens_per_expert.push_back(int64_t(segs[le].rows.size()) + segs[le].zero_pad);
    plan.segment_offset.push_back(int64_t(plan.row_token.size()));
  }
}

void check_routing(const Routing& r) {
  MOENUM_CHECK(r.T >= 1 && r.E >= 1 && r.k >= 1 && r.k <= r.E, "routing sizes out of range");
  MOENUM_CHECK(int64_t(r.topk_idx.size()) == r.T * r.k && int64_t(r.probs.size()) == r.T * r.k,
               "routing arrays are not T x k");
  for (int64_t t = 0; t < r.T; ++t)
    for (int64_t s = 0; s < r.k; ++s) {
      const int32_t e = r.topk_idx[t * r.k + s];
      MOENUM_CHECK(e >= 0 && e < r.E, "routing expert id out of range");
      for (int64_t s2 = 0; s2 < s; ++s2)
        MOENUM_CHECK(r.topk_idx[t * r.k + s2] != e, "token routed twice to one expert");
    }
}

}  // namespace

DispatchPlan plan_dispatch(const Scenario& sc, const Routing& routing) {
  check_routing(routing);
  const Padding padding = parse_padding(sc);
  const int64_t P = sc.dispatch.ep;
  if (P < 1 || routing.T % P != 0 || routing.E % P != 0)
    config_error(sc, "dispatch.ep",
                 "ep (" + std::to_string(P) + ") must divide tokens (" + std::to_string(routing.T) +
                     ") and experts (" + std::to_string(routing.E) + ")");
  if (sc.dispatch.align < 0) config_error(sc, "dispatch.align", "must be >= 0");
  const int64_t align = padding == Padding::none ? 0 : sc.dispatch.align;
  const Layout L{P, routing.T / P, routing.E / P, align};

  DispatchPlan plan;
  plan.ep = P;
  plan.experts_per_rank = L.E_rank;
  plan.padding = sc.dispatch.padding;
  plan.align = sc.dispatch.align;
  plan.ranks.resize(P);
  const std::vector<bool> simulated = simulated_ranks(sc);
  const auto routed = routed_by_expert(routing);
  for (int64_t rank = 0; rank < P; ++rank) {
    // Planned even when left out: a configuration error anywhere is the full run's error.
    std::vector<Segment> segs;
    std::vector<std::string> warnings;
    switch (padding) {
      case Padding::router: segs = router_segments(sc, L, rank, routed); break;
      case Padding::router_post: segs = router_post_segments(L, rank, routed, plan.ranks[rank], warnings); break;
      // hybridep (TP=1) emits real rows in global token order then zero rows: the same rows as module.
      case Padding::none:
      case Padding::module:
      case Padding::hybridep: segs = zero_padded_segments(L, rank, routed); break;
    }
    if (simulated[rank]) {
      plan.warnings.insert(plan.warnings.end(), warnings.begin(), warnings.end());
    } else {  // no rows, and no warnings about rows that never run
      plan.ranks[rank] = RankPlan{};
      plan.ranks[rank].simulated = false;
      segs.assign(L.E_rank, Segment{});
    }
    write_rank(L, rank, segs, plan.ranks[rank]);
  }
  return plan;
}

}  // namespace moenum
