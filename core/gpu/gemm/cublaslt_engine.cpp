#include "gemm/cublaslt_engine.h"

#include "cuda_check.h"

namespace moenum::gpu {

namespace {
constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommended size on Hopper
}

CublasLtEngine::CublasLtEngine(int streams) {
  MOENUM_CUBLAS_CHECK(cublasLtCreate(&handle_));
  MOENUM_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  for (int i = 0; i < streams; ++i) {
    cudaStream_t st;
    cudaEvent_t ev;
    MOENUM_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    MOENUM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    streams_.push_back(st);
    done_.push_back(ev);
    workspace_.emplace_back(kWorkspaceBytes);
  }
}

CublasLtEngine::~CublasLtEngine() {
  for (auto st : streams_) cudaStreamDestroy(st);
  for (auto ev : done_) cudaEventDestroy(ev);
  if (fork_) cudaEventDestroy(fork_);
  if (pinned_counts_) cudaFreeHost(pinned_counts_);
  if (handle_) cublasLtDestroy(handle_);
}

void CublasLtEngine::begin(const int64_t* counts, int groups, cudaStream_t s) {
  if (pinned_size_ < groups) {
    if (pinned_counts_) MOENUM_CUDA_CHECK(cudaFreeHost(pinned_counts_));
    pinned_counts_ = nullptr;
    MOENUM_CUDA_CHECK(cudaMallocHost(&pinned_counts_, sizeof(int64_t) * std::max(groups, 1)));
    pinned_size_ = groups;
  }
  // The one device-to-host copy of the layer pass: the host needs m_splits to size each GEMM.
  MOENUM_CUDA_CHECK(cudaMemcpyAsync(pinned_counts_, counts, sizeof(int64_t) * groups, cudaMemcpyDeviceToHost, s));
  MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));
  counts_.assign(pinned_counts_, pinned_counts_ + groups);
  offsets_.assign(groups + 1, 0);
  for (int e = 0; e < groups; ++e) offsets_[e + 1] = offsets_[e] + counts_[e];
}

void CublasLtEngine::gemm(cudaStream_t s, int slot, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                          const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd, bool d_fp32,
                          const void* bias) {
  // Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: swap the operands; a row-major
  // [r, c] matrix is a column-major [c, r] one with the same leading dimension.
  cublasLtMatmulDesc_t op;
  MOENUM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;  // first cuBLAS operand: B
  cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;  // second: A
  MOENUM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)));
  MOENUM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)));
  if (bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;  // bias per row of D^T = per output feature
    cudaDataType_t bt = CUDA_R_16BF;
    MOENUM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    MOENUM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    MOENUM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  cublasLtMatrixLayout_t lb, la, ld;
  // B stored row-major [K, N] (or [N, K] when transposed): column-major [N, K] (or [K, N]).
  MOENUM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, transB ? K : N, transB ? N : K, ldb));
  MOENUM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, transA ? M : K, transA ? K : M, lda));
  MOENUM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, d_fp32 ? CUDA_R_32F : CUDA_R_16BF, N, M, ldd));

  cublasLtMatmulPreference_t pref;
  MOENUM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kWorkspaceBytes;
  MOENUM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  MOENUM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, op, lb, la, ld, ld, pref, 1, &heur, &found));
  MOENUM_CHECK(found > 0, "cuBLASLt found no algorithm for a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                              std::to_string(K) + " GEMM");
  const float alpha = 1.0f, beta = 0.0f;
  MOENUM_CUBLAS_CHECK(cublasLtMatmul(handle_, op, &alpha, B, lb, A, la, &beta, D, ld, D, ld, &heur.algo,
                                     workspace_[slot].get(), kWorkspaceBytes, s));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
}

void CublasLtEngine::run(const GroupedGemmDesc& g, cudaStream_t s) {
  MOENUM_CHECK(static_cast<int>(counts_.size()) == g.groups, "CublasLtEngine::run before begin()");
  const int ns = static_cast<int>(streams_.size());
  MOENUM_CUDA_CHECK(cudaEventRecord(fork_, s));
  for (int i = 0; i < ns; ++i) MOENUM_CUDA_CHECK(cudaStreamWaitEvent(streams_[i], fork_, 0));
  int next = 0;
  for (int e = 0; e < g.groups; ++e) {
    const int64_t cnt = counts_[e], off = offsets_[e];
    if (cnt == 0) continue;  // empty expert: no GEMM; the layer zeroed its outputs
    const int slot = next++ % ns;
    cudaStream_t st = streams_[slot];
    switch (g.kind) {
      case GemmKind::Fprop:
        gemm(st, slot, false, true, cnt, g.n, g.k, g.a + off * g.k, g.k, g.b_expert[e], g.k, g.d_rows + off * g.n,
             g.n, false, g.bias_expert.empty() ? nullptr : g.bias_expert[e]);
        break;
      case GemmKind::Dgrad:
        gemm(st, slot, false, false, cnt, g.n, g.k, g.a + off * g.k, g.k, g.b_expert[e], g.n,
             g.d_rows + off * g.n, g.n, false, nullptr);
        break;
      case GemmKind::Wgrad:
        gemm(st, slot, true, false, g.m, g.n, cnt, g.a + off * g.m, g.m, g.b_rows + off * g.n, g.n, g.d_expert[e],
             g.n, true, nullptr);
        break;
    }
  }
  for (int i = 0; i < ns; ++i) {
    MOENUM_CUDA_CHECK(cudaEventRecord(done_[i], streams_[i]));
    MOENUM_CUDA_CHECK(cudaStreamWaitEvent(s, done_[i], 0));
  }
}

}  // namespace moenum::gpu
