// Generated routing (numerics.md §2): popularity from the skew model, Gumbel-top-k over
// log(popularity), fp32 score functions. Every random number is a pure function of its counter
// coordinates, so the routing depends on the seed and the routing/model sizes only.
#include "moenum/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "moenum/activation.h"
#include "moenum/det_math.h"
#include "moenum/error.h"
#include "moenum/rng.h"

namespace moenum {
namespace {

[[noreturn]] void config_error(const Scenario& sc, const std::string& key, const std::string& what) {
  throw ConfigError(key, what, sc.name);
}

std::vector<double> normalised(std::vector<double> w) {
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  MOENUM_CHECK(sum > 0.0 && std::isfinite(sum), "popularity does not normalise");
  for (double& v : w) v /= sum;
  return w;
}

// ---- skew models --------------------------------------------------------------------------------

std::vector<double> zipf(const Scenario& sc, int64_t E) {
  const double s = sc.routing.skew.s;
  if (!std::isfinite(s)) config_error(sc, "routing.skew.s", "must be finite");
  std::vector<double> w(E);
  for (int64_t e = 0; e < E; ++e) w[e] = det::pow(double(e + 1), -s);
  return normalised(std::move(w));
}

// The first n experts share `share` of the mass; n = 0 or n = E leaves nothing to skew: uniform.
std::vector<double> hot(const Scenario& sc, int64_t E) {
  const int64_t n = sc.routing.skew.hot_experts;
  const double share = sc.routing.skew.hot_share;
  if (n < 0 || n > E) config_error(sc, "routing.skew.hot_experts", "must be in [0, experts]");
  if (!(share >= 0.0 && share <= 1.0)) config_error(sc, "routing.skew.hot_share", "must be in [0, 1]");
  if (n == 0 || n == E) return std::vector<double>(E, 1.0 / double(E));
  std::vector<double> w(E);
  for (int64_t e = 0; e < E; ++e) w[e] = e < n ? share / double(n) : (1.0 - share) / double(E - n);
  return normalised(std::move(w));
}

// Counter index of the j-th uniform (j < 4) of attempt `a` for expert e: depends on nothing else.
uint64_t gamma_index(int64_t e, uint64_t a, uint64_t j) { return (uint64_t(e) << 32) | (a << 2) | j; }
constexpr uint64_t kMaxGammaAttempts = uint64_t(1) << 29;

// log of a Gamma(alpha, 1) draw by Marsaglia-Tsang; alpha < 1 via Gamma(alpha+1) * U^(1/alpha),
// kept in log space so that tiny alphas do not underflow to a zero popularity.
double log_gamma_draw(uint64_t seed, int64_t e, double alpha) {
  double boost = 0.0;
  if (alpha < 1.0) {
    boost = det::log(rng::uniform(seed, rng::kPopularity, gamma_index(e, 0, 3))) / alpha;
    alpha += 1.0;
  }
  const double d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (uint64_t a = 0; a < kMaxGammaAttempts; ++a) {
    const double u1 = rng::uniform(seed, rng::kPopularity, gamma_index(e, a, 0));
    const double u2 = rng::uniform(seed, rng::kPopularity, gamma_index(e, a, 1));
    const double x = std::sqrt(-2.0 * det::log(u1)) * det::cos_2pi(u2);
    const double t = 1.0 + c * x;
    if (t <= 0.0) continue;
    const double v = t * t * t;
    const double u = rng::uniform(seed, rng::kPopularity, gamma_index(e, a, 2));
    if (det::log(u) < 0.5 * x * x + d - d * v + d * det::log(v)) return det::log(d * v) + boost;
  }
  throw InternalError("gamma sampler did not accept in 2^29 attempts");
}

std::vector<double> dirichlet(const Scenario& sc, int64_t E) {
  const double alpha = sc.routing.skew.alpha;
  if (!(alpha > 0.0 && std::isfinite(alpha))) config_error(sc, "routing.skew.alpha", "must be > 0");
  std::vector<double> lw(E);
  for (int64_t e = 0; e < E; ++e) lw[e] = log_gamma_draw(sc.seed, e, alpha);
  const double m = *std::max_element(lw.begin(), lw.end());
  for (double& v : lw) v = det::exp(v - m);
  return normalised(std::move(lw));
}

void check_counts(const Scenario& sc) {
  const auto& c = sc.routing.skew.counts;
  const int64_t E = sc.model.experts, T = sc.tokens, k = sc.model.topk;
  const std::string key = "routing.skew.counts";
  if (int64_t(c.size()) != E)
    config_error(sc, key, "has " + std::to_string(c.size()) + " entries, expected experts = " + std::to_string(E));
  int64_t sum = 0;
  for (size_t e = 0; e < c.size(); ++e) {
    if (c[e] < 0 || c[e] > T)
      config_error(sc, key, "entry " + std::to_string(e) + " = " + std::to_string(c[e]) +
                                " is outside [0, tokens = " + std::to_string(T) + "]");
    sum += c[e];
  }
  if (sum != T * k)
    config_error(sc, key, "sums to " + std::to_string(sum) + ", expected tokens * topk = " + std::to_string(T * k));
}

// Fisher-Yates over [0, n): returns src with shuffled[i] = original[src[i]].
std::vector<int64_t> fisher_yates(uint64_t seed, uint64_t stream, int64_t n) {
  std::vector<int64_t> src(n);
  std::iota(src.begin(), src.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = std::min<int64_t>(i, int64_t(rng::uniform(seed, stream, i) * double(i + 1)));
    std::swap(src[i], src[j]);
  }
  return src;
}

template <class V>
V permuted(const V& v, const std::vector<int64_t>& src) {
  V out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[src[i]];
  return out;
}

// ---- scores -------------------------------------------------------------------------------------

enum class Score { softmax, softmax_pre, sigmoid };

Score parse_score(const Scenario& sc) {
  const std::string& s = sc.routing.score;
  if (s == "softmax") return Score::softmax;
  if (s == "softmax_pre") return Score::softmax_pre;
  if (s == "sigmoid") return Score::sigmoid;
  config_error(sc, "routing.score", "unknown score function '" + s + "' (softmax, softmax_pre, sigmoid)");
}

// fp32 softmax with max subtraction, summed in index order.
std::vector<float> softmax(const std::vector<float>& x) {
  const float m = *std::max_element(x.begin(), x.end());
  std::vector<float> p(x.size());
  float sum = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) sum += (p[i] = exp_f32(x[i] - m));
  for (float& v : p) v /= sum;
  return p;
}

float sigmoid(float x) { return sigmoid_f32(x); }

// What top-k ranks, as Megatron's router does: the logits (softmax), the full softmax
// (softmax_pre) or the sigmoids (sigmoid). All monotone in the logit; they differ only in ties.
std::vector<float> selection_keys(Score score, const std::vector<float>& logits) {
  if (score == Score::softmax_pre) return softmax(logits);
  if (score == Score::sigmoid) {
    std::vector<float> s(logits.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = sigmoid(logits[i]);
    return s;
  }
  return logits;
}

// Probs of the chosen experts (slot order), before topk_scaling.
std::vector<float> chosen_probs(Score score, const std::vector<float>& logits, const std::vector<float>& keys,
                                const std::vector<int32_t>& chosen) {
  std::vector<float> sel(chosen.size());
  if (score == Score::softmax) {
    for (size_t s = 0; s < chosen.size(); ++s) sel[s] = logits[chosen[s]];
    return softmax(sel);
  }
  for (size_t s = 0; s < chosen.size(); ++s) sel[s] = keys[chosen[s]];
  if (score == Score::sigmoid && chosen.size() > 1) {
    float sum = 0.0f;
    for (float v : sel) sum += v;
    for (float& v : sel) v /= sum + 1e-20f;  // Megatron's epsilon: all-underflowed sigmoids give 0, not NaN
  }
  return sel;
}

// logits[e] = fp32(log(pop_e) + gumbel(seed, t, e)), computed in double.
std::vector<float> token_logits(uint64_t seed, int64_t t, const std::vector<double>& log_pop) {
  const int64_t E = int64_t(log_pop.size());
  std::vector<float> l(E);
  for (int64_t e = 0; e < E; ++e) {
    const double u = rng::uniform(seed, rng::kGumbel, uint64_t(t * E + e));
    l[e] = static_cast<float>(log_pop[e] - det::log(-det::log(u)));
  }
  return l;
}

// Descending key, ties to the lower id.
void sort_slots(std::vector<int32_t>& ids, const std::vector<float>& keys) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return keys[a] > keys[b] || (keys[a] == keys[b] && a < b);
  });
}

// counts kind: the multiset of expert ids, heaviest expert first, laid out column by column in a
// T x k matrix, so an expert's (<= T) consecutive entries always land on distinct tokens.
std::vector<int32_t> counts_matrix(const std::vector<int64_t>& counts, int64_t T, int64_t k) {
  std::vector<int32_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
  std::vector<int32_t> m(T * k);
  int64_t j = 0;
  for (int32_t e : order)
    for (int64_t c = 0; c < counts[e]; ++c, ++j) m[(j % T) * k + j / T] = e;
  return m;
}

void fill_tokens_per_expert(Routing& r) {
  r.tokens_per_expert.assign(r.E, 0);
  for (int32_t e : r.topk_idx) ++r.tokens_per_expert[e];
}

}  // namespace

std::vector<int32_t> topk_lower_id(const std::vector<float>& keys, int64_t k) {
  MOENUM_CHECK(k >= 0 && k <= int64_t(keys.size()), "top-k larger than the key count");
  std::vector<int32_t> idx(keys.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return keys[a] > keys[b] || (keys[a] == keys[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

std::vector<double> skew_popularity(const Scenario& sc) {
  const int64_t E = sc.model.experts;
  if (E < 1) config_error(sc, "model.experts", "must be >= 1");
  const std::string& kind = sc.routing.skew.kind;
  if (kind == "uniform") return std::vector<double>(E, 1.0 / double(E));
  if (kind == "zipf") return zipf(sc, E);
  if (kind == "hot") return hot(sc, E);
  if (kind == "dirichlet") return dirichlet(sc, E);
  if (kind == "counts") {
    check_counts(sc);
    return normalised(std::vector<double>(sc.routing.skew.counts.begin(), sc.routing.skew.counts.end()));
  }
  config_error(sc, "routing.skew.kind",
               "unknown skew model '" + kind + "' (uniform, zipf, hot, dirichlet, counts)");
}

Routing route(const Scenario& sc) {
  Routing r;
  r.T = sc.tokens;
  r.E = sc.model.experts;
  r.k = sc.model.topk;
  if (r.T < 1) config_error(sc, "tokens", "must be >= 1");
  if (r.k < 1 || r.k > r.E) config_error(sc, "model.topk", "must be in [1, experts]");
  const Score score = parse_score(sc);
  const bool counts_kind = sc.routing.skew.kind == "counts";

  r.popularity = skew_popularity(sc);
  std::vector<int64_t> counts = sc.routing.skew.counts;
  if (sc.routing.permute_experts) {
    const auto src = fisher_yates(sc.seed, rng::kPermuteExperts, r.E);
    r.popularity = permuted(r.popularity, src);
    if (counts_kind) counts = permuted(counts, src);  // the counts move with their popularity
  }

  // counts: which experts a token gets is fixed by the matrix; the logits only order its slots.
  std::vector<int32_t> matrix, row_of;
  std::vector<double> log_pop(r.E, det::log(1.0 / double(r.E)));
  if (counts_kind) {
    matrix = counts_matrix(counts, r.T, r.k);
    const auto src = fisher_yates(sc.seed, rng::kCountsShuffle, r.T);
    row_of.assign(src.begin(), src.end());
  } else {
    for (int64_t e = 0; e < r.E; ++e) log_pop[e] = det::log(r.popularity[e]);
  }

  const float scaling = static_cast<float>(sc.routing.topk_scaling);
  r.topk_idx.resize(r.T * r.k);
  r.probs.resize(r.T * r.k);
  for (int64_t t = 0; t < r.T; ++t) {
    const auto logits = token_logits(sc.seed, t, log_pop);
    const auto keys = selection_keys(score, logits);
    std::vector<int32_t> chosen;
    if (counts_kind) {
      chosen.assign(matrix.begin() + row_of[t] * r.k, matrix.begin() + (row_of[t] + 1) * r.k);
      sort_slots(chosen, keys);
    } else {
      chosen = topk_lower_id(keys, r.k);
    }
    const auto p = chosen_probs(score, logits, keys, chosen);
    for (int64_t s = 0; s < r.k; ++s) {
      r.topk_idx[t * r.k + s] = chosen[s];
      r.probs[t * r.k + s] = p[s] * scaling;
    }
  }
  fill_tokens_per_expert(r);
  return r;
}

}  // namespace moenum
