// One GEMM of the layer, over every expert's row segment at once, and the engines that run it.
// Row-major everywhere; bf16 operands are passed as their 16-bit patterns (uint16_t).
//
//   Fprop: D_e[m_e, n] (bf16) = A[rows_e, k] . B_e^T   B_e stored [n, k]   (FC1/FC2 forward)
//   Dgrad: D_e[m_e, n] (bf16) = A[rows_e, k] . B_e     B_e stored [k, n]   (FC1/FC2 dgrad)
//   Wgrad: D_e[m, n]   (fp32) = A[rows_e, m]^T . B[rows_e, n]             (reduction over rows_e)
//
// rows_e = [offsets[e], offsets[e] + counts[e]) of the dispatched row buffers; counts and offsets
// live on the device. An empty segment leaves its D untouched: the layer zeroes wgrad outputs
// first, so an empty expert's weight gradient is exactly zero (a K = 0 GEMM is never launched).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moenum::gpu {

enum class GemmKind { Fprop, Dgrad, Wgrad };

struct GroupedGemmDesc {
  int id = 0;                  // which GEMM of the layer (0..5): engines cache per-id state
  GemmKind kind = GemmKind::Fprop;
  int groups = 0;
  int64_t m = 0;               // Wgrad only: rows of D_e
  int64_t rows = 0;            // Fprop/Dgrad: rows of the a and d_rows buffers (0: not known on the host)
  int64_t n = 0;               // columns of D
  int64_t k = 0;               // Fprop/Dgrad: reduction length
  const uint16_t* a = nullptr;                 // rows operand
  const uint16_t* b_rows = nullptr;            // Wgrad: second rows operand
  std::vector<const uint16_t*> b_expert;       // Fprop/Dgrad: weights per expert
  uint16_t* d_rows = nullptr;                  // Fprop/Dgrad: output rows
  std::vector<float*> d_expert;                // Wgrad: output per expert
  std::vector<const uint16_t*> bias_expert;    // Fprop: bias fused in the epilogue (multistream), else empty
  const int64_t* counts = nullptr;             // device, [groups]
  const int64_t* offsets = nullptr;            // device, [groups + 1]
};

class GemmEngine {
 public:
  virtual ~GemmEngine() = default;
  virtual std::string path() const = 0;  // recorded in the results' attrs
  // Called once per layer pass, before its GEMMs. The multistream engine copies the counts to the
  // host here (its one synchronisation); the grouped engine does nothing.
  virtual void begin(const int64_t* counts, int groups, cudaStream_t s) = 0;
  virtual void run(const GroupedGemmDesc& g, cudaStream_t s) = 0;
};

}  // namespace moenum::gpu
