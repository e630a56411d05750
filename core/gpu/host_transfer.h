// Large copies between the device and pageable host memory. A pageable cudaMemcpy runs at a few GB/s
// (2.6 GB/s for a production layer's weight gradients on the H200 host): the driver stages it on one
// thread. A HostStaging copies through two pinned buffers instead, chunk by chunk: the DMA engine
// fills (or drains) one while the host copies the other to (or from) its destination.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace moenum::gpu {

inline constexpr size_t kStagedCopyMin = size_t{64} << 20;
inline constexpr size_t kStagedChunk = size_t{64} << 20;

// A pinned pair of `chunk` bytes each, allocated at the first copy and kept (pinning costs
// milliseconds per call). One copy at a time: a thread that copies owns it, or locks it. The host's
// share of a copy runs on every core of an OpenMP team, or on the calling thread inside one.
class HostStaging {
 public:
  explicit HostStaging(size_t chunk = kStagedChunk) : chunk_(chunk) {}
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Both return when the bytes are at dst.
  void to_host(void* dst, const void* src_device, size_t bytes, cudaStream_t s);
  void to_device(void* dst_device, const void* src, size_t bytes, cudaStream_t s);

 private:
  void ensure();
  size_t chunk_;
  void* buf_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
};

// Through the process's shared staging above kStagedCopyMin (and two chunks), a plain copy below.
// chunk: the shared staging's chunk (tests use small ones; the first large copy fixes it).
void copy_to_host(void* dst, const void* src_device, size_t bytes, cudaStream_t s, size_t chunk = kStagedChunk);
void copy_to_device(void* dst_device, const void* src, size_t bytes, cudaStream_t s, size_t chunk = kStagedChunk);

}  // namespace moenum::gpu
