#include "oracle/cublas_fp64_gemm.h"

#include <algorithm>

#include "cuda_check.h"
#include "device.h"
#include "large_matrix.h"
#include "oracle/abs_f64.h"

namespace moenum::gpu {
namespace {

// Grow-only: a slot keeps its largest buffers for the next expert.
void ensure(DeviceBuffer<double>& buf, size_t n) {
  if (buf.size() < n) buf.reset(n);
}

// Row-major C[M x N] = A[M x K] . B[N x K]^T is column-major C^T = B^T(as stored: op T of the
// column-major K x N view) . A (column-major K x M): cuBLAS sees m = N, n = M, k = K.
void dgemm_nt(cublasHandle_t h, int64_t M, int64_t N, int64_t K, const double* A, const double* B, double* C) {
  const double one = 1.0, zero = 0.0;
  MOENUM_CUBLAS_CHECK(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, B, int(K), A, int(K),
                                  &zero, C, int(N)));
}

}  // namespace

CublasFp64Gemm::CublasFp64Gemm(int slots, size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  for (int i = 0; i < std::max(slots, 1); ++i) {
    auto s = std::make_unique<Slot>();
    MOENUM_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    MOENUM_CUBLAS_CHECK(cublasCreate(&s->handle));
    MOENUM_CUBLAS_CHECK(cublasSetStream(s->handle, s->stream));
    free_.push_back(s.get());
    slots_.push_back(std::move(s));
  }
}

CublasFp64Gemm::~CublasFp64Gemm() {
  for (auto& s : slots_) {
    if (s->handle) cublasDestroy(s->handle);
    if (s->stream) cudaStreamDestroy(s->stream);
  }
}

std::string CublasFp64Gemm::description() const { return device_description(); }

CublasFp64Gemm::Slot* CublasFp64Gemm::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  freed_.wait(lock, [this] { return !free_.empty(); });
  Slot* s = free_.back();
  free_.pop_back();
  return s;
}

void CublasFp64Gemm::release(Slot* slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }
  freed_.notify_one();
}

void CublasFp64Gemm::gemm_nt(const reference::Matrix& A, const reference::Matrix& B, reference::Matrix& C,
                             reference::Matrix* S) {
  const int64_t M = A.rows(), N = B.rows(), K = A.cols();
  MOENUM_CHECK(B.cols() == K, "CublasFp64Gemm: A and B disagree on K");
  MOENUM_CHECK(M < (int64_t{1} << 31) && N < (int64_t{1} << 31) && K < (int64_t{1} << 31),
               "CublasFp64Gemm: a dimension exceeds cuBLAS's int range");
  reference::resize_large(C, M, N);
  if (S) reference::resize_large(*S, M, N);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum (an expert without rows, in a wgrad): zeros, as on the CPU
    C.setZero();
    if (S) S->setZero();
    return;
  }
  struct Lease {  // the slot goes back even when a CUDA call throws
    CublasFp64Gemm& engine;
    Slot* slot;
    ~Lease() {
      (void)cudaStreamSynchronize(slot->stream);
      engine.release(slot);
    }
  } lease{*this, acquire()};
  Slot& s = *lease.slot;
  const size_t nk = size_t(N) * size_t(K);
  ensure(s.b, nk);
  s.staging.to_device(s.b.get(), B.data(), nk * sizeof(double), s.stream);
  if (S) {
    ensure(s.b_abs, nk);
    abs_f64(s.b_abs.get(), s.b.get(), int64_t(nk), s.stream);
  }
  // Rows of A per chunk: its A rows and C (and S) rows within chunk_bytes_.
  const size_t row_bytes = sizeof(double) * (size_t(K) + size_t(N) * (S ? 2 : 1));
  const int64_t rows = std::clamp<int64_t>(int64_t(chunk_bytes_ / row_bytes), 1, M);
  ensure(s.a, size_t(rows) * size_t(K));
  ensure(s.c, size_t(rows) * size_t(N));
  if (S) ensure(s.s, size_t(rows) * size_t(N));
  for (int64_t i0 = 0; i0 < M; i0 += rows) {
    const int64_t r = std::min(rows, M - i0);
    const size_t rk = size_t(r) * size_t(K), rn = size_t(r) * size_t(N);
    s.staging.to_device(s.a.get(), A.data() + i0 * K, rk * sizeof(double), s.stream);
    dgemm_nt(s.handle, r, N, K, s.a.get(), s.b.get(), s.c.get());
    s.staging.to_host(C.data() + i0 * N, s.c.get(), rn * sizeof(double), s.stream);
    if (S) {
      abs_f64(s.a.get(), s.a.get(), int64_t(rk), s.stream);
      dgemm_nt(s.handle, r, N, K, s.a.get(), s.b_abs.get(), s.s.get());
      s.staging.to_host(S->data() + i0 * N, s.s.get(), rn * sizeof(double), s.stream);
    }
  }
  MOENUM_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

namespace {

// The oracles' GEMM device of this build (execution.device gpu / auto).
const reference::DeviceGemmRegistrar registrar({.available = [] { return cuda_availability(); },
                                                .make = [] { return std::make_unique<CublasFp64Gemm>(); }});

}  // namespace
}  // namespace moenum::gpu
