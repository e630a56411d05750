// Counter-based random numbers: a value depends only on (seed, stream, index), never on thread
// count, EP size or generation order (numerics.md §2). SplitMix64 finaliser over a mixed key.
#pragma once
#include <cstdint>

#include "moenum/hd.h"

namespace moenum::rng {

MOENUM_HD uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

MOENUM_HD uint64_t bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

// Uniform in the open interval (0, 1): 53 random bits, offset by half a step so 0 never appears.
MOENUM_HD double uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (static_cast<double>(bits(seed, stream, index) >> 11) + 0.5) * 0x1.0p-53;
}

// Named streams, one per tensor; new streams get new numbers, old ones never change.
enum Stream : uint64_t {
  kX = 1, kW1 = 2, kB1 = 3, kW2 = 4, kB2 = 5, kDy = 6, kGumbel = 7, kPopularity = 8,
  kPermuteExperts = 9, kCountsShuffle = 10, kOutliers = 11, kSpecial = 12,
};

}  // namespace moenum::rng
