#include "device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace moenum::gpu {

Availability cuda_availability() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    std::string why = "no CUDA device";
    if (e != cudaSuccess) why += std::string(" (") + cudaGetErrorString(e) + ")";
    return Availability::not_run(why);
  }
  return {};
}

int device_sm() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return (void)cudaGetLastError(), 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major * 10 + minor;
}

DeviceMemory device_memory() {
  DeviceMemory m;
  if (!cuda_availability().ok) return m;
  if (cudaMemGetInfo(&m.free, &m.total) != cudaSuccess) return (void)cudaGetLastError(), DeviceMemory{};
  return m;
}

std::string device_description() {
  if (!cuda_availability().ok) return "none";
  int dev = 0, drv = 0, rt = 0;
  cudaDeviceProp p{};
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&p, dev);
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  return std::string(p.name) + " sm_" + std::to_string(p.major * 10 + p.minor) + " driver " +
         std::to_string(drv) + " runtime " + std::to_string(rt) + " cublasLt " + std::to_string(cublasLtGetVersion());
}

}  // namespace moenum::gpu
