#include "moenum/tensor.h"

#include <cstring>

namespace moenum {

void zero_fill(void* data, size_t bytes) {
  constexpr size_t kChunk = size_t(4) << 20;  // below one chunk, threads cost more than they save
  const int64_t chunks = int64_t((bytes + kChunk - 1) / kChunk);
  auto* p = static_cast<unsigned char*>(data);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t at = size_t(c) * kChunk;
    std::memset(p + at, 0, std::min(kChunk, bytes - at));
  }
}

}  // namespace moenum
