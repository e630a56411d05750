// The oracles' fp64 GEMMs on the GPU (reference/device_gemm.h): cuBLAS DGEMM, which runs on the fp64
// tensor cores of Hopper (IEEE fp64 fused multiply-adds: any summation order, which the reference's
// certificate allows for). One call is one expert's GEMM: B once, then A in row chunks, so device
// memory stays bounded (a few slots of B, |B| and one chunk each) whatever the number of tokens.
// Several host threads may call at once: each takes a slot (its own stream, cuBLAS handle and
// buffers, and a pinned staging pair: a pageable copy runs at a few GB/s), so transfers of one
// expert overlap the GEMMs of another.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "device_buffer.h"
#include "device_gemm.h"
#include "host_transfer.h"

namespace moenum::gpu {

class CublasFp64Gemm final : public reference::DeviceGemm {
 public:
  // slots: concurrent GEMMs; chunk_bytes: the device memory of one chunk of A with its C (and S) rows.
  explicit CublasFp64Gemm(int slots = 8, size_t chunk_bytes = size_t{512} << 20);
  ~CublasFp64Gemm() override;
  void gemm_nt(const reference::Matrix& A, const reference::Matrix& B, reference::Matrix& C,
               reference::Matrix* S) override;
  std::string description() const override;

 private:
  struct Slot {
    cublasHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    DeviceBuffer<double> a, b, b_abs, c, s;
    HostStaging staging{size_t{32} << 20};
  };
  Slot* acquire();
  void release(Slot* slot);

  size_t chunk_bytes_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_;
  std::mutex mutex_;
  std::condition_variable freed_;
};

}  // namespace moenum::gpu
