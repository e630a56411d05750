// Large copies between the device and pageable host memory. A pageable cudaMemcpy runs at a few GB/s
// (2.6 GB/s for a production layer's weight gradients on the H200 host): the driver stages it on one
// thread. Above kStagedCopyMin the copy goes through two pinned buffers instead, chunk by chunk: the
// DMA engine fills (or drains) one while every core copies the other to (or from) its destination.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace moenum::gpu {

inline constexpr size_t kStagedCopyMin = size_t{64} << 20;
inline constexpr size_t kStagedChunk = size_t{64} << 20;

// Both return when the bytes are at dst. chunk: the staging chunk (tests use small ones).
void copy_to_host(void* dst, const void* src_device, size_t bytes, cudaStream_t s, size_t chunk = kStagedChunk);
void copy_to_device(void* dst_device, const void* src, size_t bytes, cudaStream_t s, size_t chunk = kStagedChunk);

}  // namespace moenum::gpu
