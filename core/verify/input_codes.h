// The expected MX codes of the operands a layer quantizes straight from its inputs (x, dy, w1, w2).
// They depend on the inputs and the recipe only, so every backend of a point is checked against the
// same bytes: the mx stages compute them once per (source, direction, format, expert) and keep them
// here for the next backend (a point's Prepared owns one; the memory estimate counts it).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "moenum/fp8.h"
#include "moenum/layer.h"
#include "moenum/mx.h"

namespace moenum::verify {

// Codes and scales of one natural-layout block [rows, cols]: rowwise scales [rows, cols/32],
// columnwise [rows/32, cols].
struct MxCodes {
  std::vector<uint8_t> codes, scales;
};

inline bool drawn_from_inputs(layer::Source s) {
  return s == layer::Source::kX || s == layer::Source::kDy || layer::is_weight(s);
}

class InputCodes {
 public:
  // The kept codes of one expert's part, or null. Safe to call from the stage checks' parallel loop.
  const MxCodes* find(layer::Source s, layer::Direction d, Fp8Format f, int64_t expert) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = parts_.find(Key{int(s), int(d), int(f), expert});
    return it == parts_.end() ? nullptr : &it->second;
  }
  // Keeps q (the first kept copy stays: every copy holds the same bytes); returns the kept one.
  const MxCodes& keep(layer::Source s, layer::Direction d, Fp8Format f, int64_t expert, MxCodes q) {
    std::lock_guard<std::mutex> lock(mu_);
    return parts_.try_emplace(Key{int(s), int(d), int(f), expert}, std::move(q)).first->second;
  }
  int64_t bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (const auto& [key, q] : parts_) n += int64_t(q.codes.size() + q.scales.size());
    return n;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    parts_.clear();
  }

 private:
  using Key = std::tuple<int, int, int, int64_t>;
  mutable std::mutex mu_;
  std::map<Key, MxCodes> parts_;  // node-based: a kept part's address stays while others are added
};

}  // namespace moenum::verify
