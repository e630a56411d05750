#include "host_transfer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "cuda_check.h"

namespace moenum::gpu {
namespace {

// The pinned pair, allocated at the first large copy and kept: pinning costs milliseconds per call.
struct Staging {
  std::mutex mutex;
  void* buf[2] = {nullptr, nullptr};
  size_t bytes = 0;
  cudaEvent_t done[2] = {nullptr, nullptr};

  void ensure(size_t n) {
    if (bytes >= n) return;
    for (int i = 0; i < 2; ++i) {
      if (buf[i]) MOENUM_CUDA_CHECK(cudaFreeHost(buf[i]));
      buf[i] = nullptr;
    }
    bytes = 0;
    for (int i = 0; i < 2; ++i) {
      MOENUM_CUDA_CHECK(cudaMallocHost(&buf[i], n));
      if (!done[i]) MOENUM_CUDA_CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    }
    bytes = n;
  }
};

Staging& staging() {
  static Staging* s = new Staging;  // never destroyed: no CUDA calls after the runtime shuts down
  return *s;
}

void parallel_memcpy(void* dst, const void* src, size_t n) {
  constexpr size_t kPiece = size_t{1} << 20;
  const int64_t pieces = int64_t((n + kPiece - 1) / kPiece);
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pieces; ++p) {
    const size_t at = size_t(p) * kPiece;
    std::memcpy(d + at, s + at, std::min(kPiece, n - at));
  }
}

}  // namespace

void copy_to_host(void* dst, const void* src_device, size_t bytes, cudaStream_t s, size_t chunk) {
  if (bytes < std::min(kStagedCopyMin, 2 * chunk)) {
    if (bytes) MOENUM_CUDA_CHECK(cudaMemcpyAsync(dst, src_device, bytes, cudaMemcpyDeviceToHost, s));
    MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  Staging& st = staging();
  std::lock_guard<std::mutex> lock(st.mutex);
  st.ensure(chunk);
  const auto* src = static_cast<const unsigned char*>(src_device);
  auto* out = static_cast<unsigned char*>(dst);
  const size_t chunks = (bytes + chunk - 1) / chunk;
  const auto enqueue = [&](size_t c) {
    const size_t n = std::min(chunk, bytes - c * chunk);
    MOENUM_CUDA_CHECK(cudaMemcpyAsync(st.buf[c % 2], src + c * chunk, n, cudaMemcpyDeviceToHost, s));
    MOENUM_CUDA_CHECK(cudaEventRecord(st.done[c % 2], s));
  };
  enqueue(0);
  for (size_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) enqueue(c + 1);  // the other buffer: drained by the host in iteration c - 1
    MOENUM_CUDA_CHECK(cudaEventSynchronize(st.done[c % 2]));
    parallel_memcpy(out + c * chunk, st.buf[c % 2], std::min(chunk, bytes - c * chunk));
  }
}

void copy_to_device(void* dst_device, const void* src, size_t bytes, cudaStream_t s, size_t chunk) {
  if (bytes < std::min(kStagedCopyMin, 2 * chunk)) {
    if (bytes) MOENUM_CUDA_CHECK(cudaMemcpyAsync(dst_device, src, bytes, cudaMemcpyHostToDevice, s));
    MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  Staging& st = staging();
  std::lock_guard<std::mutex> lock(st.mutex);
  st.ensure(chunk);
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst_device);
  const size_t chunks = (bytes + chunk - 1) / chunk;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t n = std::min(chunk, bytes - c * chunk);
    // the buffer's previous DMA (chunk c - 2) must have left it before the host refills it
    if (c >= 2) MOENUM_CUDA_CHECK(cudaEventSynchronize(st.done[c % 2]));
    parallel_memcpy(st.buf[c % 2], in + c * chunk, n);
    MOENUM_CUDA_CHECK(cudaMemcpyAsync(out + c * chunk, st.buf[c % 2], n, cudaMemcpyHostToDevice, s));
    MOENUM_CUDA_CHECK(cudaEventRecord(st.done[c % 2], s));
  }
  MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace moenum::gpu
