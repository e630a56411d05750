#include "host_transfer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "cuda_check.h"

namespace moenum::gpu {
namespace {

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

// The shared staging of each chunk size (tests use small chunks), never destroyed: no CUDA calls
// after the runtime shuts down.
struct SharedStaging {
  std::mutex mutex;
  HostStaging staging;
  explicit SharedStaging(size_t chunk) : staging(chunk) {}
};

SharedStaging& shared_staging(size_t chunk) {
  static auto* by_chunk = new std::map<size_t, std::unique_ptr<SharedStaging>>;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto& s = (*by_chunk)[chunk];
  if (!s) s = std::make_unique<SharedStaging>(chunk);
  return *s;
}

// Small copies gain nothing from staging.
bool plain_copy(size_t bytes, size_t chunk) { return bytes < std::min(kStagedCopyMin, 2 * chunk); }

}  // namespace

HostStaging::~HostStaging() {
  for (int i = 0; i < 2; ++i) {
    if (buf_[i]) (void)cudaFreeHost(buf_[i]);
    if (done_[i]) (void)cudaEventDestroy(done_[i]);
  }
}

void HostStaging::ensure() {
  for (int i = 0; i < 2; ++i) {
    if (!buf_[i]) MOENUM_CUDA_CHECK(cudaMallocHost(&buf_[i], chunk_));
    if (!done_[i]) MOENUM_CUDA_CHECK(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
  }
}

void HostStaging::to_host(void* dst, const void* src_device, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return;
  ensure();
  const auto* src = static_cast<const unsigned char*>(src_device);
  auto* out = static_cast<unsigned char*>(dst);
  const size_t chunks = (bytes + chunk_ - 1) / chunk_;
  const auto enqueue = [&](size_t c) {
    const size_t n = std::min(chunk_, bytes - c * chunk_);
    MOENUM_CUDA_CHECK(cudaMemcpyAsync(buf_[c % 2], src + c * chunk_, n, cudaMemcpyDeviceToHost, s));
    MOENUM_CUDA_CHECK(cudaEventRecord(done_[c % 2], s));
  };
  enqueue(0);
  for (size_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) enqueue(c + 1);  // the other buffer: drained by the host in iteration c - 1
    MOENUM_CUDA_CHECK(cudaEventSynchronize(done_[c % 2]));
    parallel_memcpy(out + c * chunk_, buf_[c % 2], std::min(chunk_, bytes - c * chunk_));
  }
}

void HostStaging::to_device(void* dst_device, const void* src, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return;
  ensure();
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst_device);
  const size_t chunks = (bytes + chunk_ - 1) / chunk_;
  // A buffer's previous DMA must have left it before the host refills it (also across calls).
  for (size_t c = 0; c < chunks; ++c) {
    const size_t n = std::min(chunk_, bytes - c * chunk_);
    MOENUM_CUDA_CHECK(cudaEventSynchronize(done_[c % 2]));
    parallel_memcpy(buf_[c % 2], in + c * chunk_, n);
    MOENUM_CUDA_CHECK(cudaMemcpyAsync(out + c * chunk_, buf_[c % 2], n, cudaMemcpyHostToDevice, s));
    MOENUM_CUDA_CHECK(cudaEventRecord(done_[c % 2], s));
  }
  MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));
}

void copy_to_host(void* dst, const void* src_device, size_t bytes, cudaStream_t s, size_t chunk) {
  if (plain_copy(bytes, chunk)) {
    if (bytes) MOENUM_CUDA_CHECK(cudaMemcpyAsync(dst, src_device, bytes, cudaMemcpyDeviceToHost, s));
    MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  SharedStaging& st = shared_staging(chunk);
  std::lock_guard<std::mutex> lock(st.mutex);
  st.staging.to_host(dst, src_device, bytes, s);
}

void copy_to_device(void* dst_device, const void* src, size_t bytes, cudaStream_t s, size_t chunk) {
  if (plain_copy(bytes, chunk)) {
    if (bytes) MOENUM_CUDA_CHECK(cudaMemcpyAsync(dst_device, src, bytes, cudaMemcpyHostToDevice, s));
    MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  SharedStaging& st = shared_staging(chunk);
  std::lock_guard<std::mutex> lock(st.mutex);
  st.staging.to_device(dst_device, src, bytes, s);
}

}  // namespace moenum::gpu
