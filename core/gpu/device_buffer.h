// RAII device allocation. Allocation failures (out of memory) throw InternalError with the size
// asked for, rather than leaving a null pointer for a kernel to crash on.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.h"
#include "host_transfer.h"

namespace moenum::gpu {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { reset(n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  void reset(size_t n) {
    release();
    n_ = n;
    if (n == 0) return;
    cudaError_t e = cudaMalloc(&p_, n * sizeof(T));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      p_ = nullptr;
      n_ = 0;
      throw InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": cudaMalloc of " +
                          std::to_string(n * sizeof(T)) + " bytes failed: " + cudaGetErrorString(e));
    }
  }
  void upload(const std::vector<T>& v, cudaStream_t s = nullptr) {
    if (v.size() != n_) reset(v.size());
    if (n_) MOENUM_CUDA_CHECK(cudaMemcpyAsync(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, s));
  }
  std::vector<T> download(cudaStream_t s = nullptr) const {
    std::vector<T> v(n_);
    download_to(v.data(), s);
    return v;
  }
  // All size() elements into host memory at dst; returns when they are there.
  void download_to(T* dst, cudaStream_t s = nullptr) const { copy_to_host(dst, p_, n_ * sizeof(T), s); }
  void zero(cudaStream_t s = nullptr) {
    if (n_) MOENUM_CUDA_CHECK(cudaMemsetAsync(p_, 0, n_ * sizeof(T), s));
  }
  // Poison with 0xFF bytes (a NaN in bf16/fp32): an output element a kernel forgot shows up.
  void poison(cudaStream_t s = nullptr) {
    if (n_) MOENUM_CUDA_CHECK(cudaMemsetAsync(p_, 0xFF, n_ * sizeof(T), s));
  }

  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void release() {
    if (p_) (void)cudaFree(p_);
    p_ = nullptr;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace moenum::gpu
