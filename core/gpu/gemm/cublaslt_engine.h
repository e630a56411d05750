// TE's multi-stream fallback: the counts are copied to the host once per layer pass (one sync),
// then each non-empty expert gets its own cuBLASLt GEMM, round-robin over a few streams forked from
// and joined back to the caller's stream. FC1's bias goes in the cuBLASLt epilogue when asked.
#pragma once
#include <cublasLt.h>

#include <memory>
#include <vector>

#include "device_buffer.h"
#include "gemm/grouped_gemm.h"

namespace moenum::gpu {

class CublasLtEngine final : public GemmEngine {
 public:
  explicit CublasLtEngine(int streams = 4);
  ~CublasLtEngine() override;
  std::string path() const override { return "cublaslt_per_expert_multistream"; }
  void begin(const int64_t* counts, int groups, cudaStream_t s) override;
  void run(const GroupedGemmDesc& g, cudaStream_t s) override;

 private:
  // D[M,N] (row-major) = op(A) . op(B), one cuBLASLt call; bias (bf16, length N) in the epilogue.
  void gemm(cudaStream_t s, int slot, bool transA, bool transB, int64_t M, int64_t N, int64_t K, const void* A,
            int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd, bool d_fp32, const void* bias);

  cublasLtHandle_t handle_ = nullptr;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> done_;
  cudaEvent_t fork_ = nullptr;
  std::vector<DeviceBuffer<uint8_t>> workspace_;
  std::vector<int64_t> counts_, offsets_;
  int64_t* pinned_counts_ = nullptr;
  int pinned_size_ = 0;
};

}  // namespace moenum::gpu
