// Whether a CUDA device is usable here, in the Availability form the backend registry expects.
#pragma once
#include <string>

#include "moenum/availability.h"

namespace moenum::gpu {

// not_run with reason "no CUDA device" when cudaGetDeviceCount fails or reports 0.
Availability cuda_availability();

// "NVIDIA H200 sm_90 driver 13000 runtime 13000 cublasLt 130100" or "none" (the results files'
// root attribute gpu, and each GPU result's attribute device).
std::string device_description();

// Compute capability major*10+minor of the current device, 0 if none.
int device_sm();

// Free and total bytes of the current device's memory (cudaMemGetInfo); {0, 0} without a device.
struct DeviceMemory {
  size_t free = 0, total = 0;
};
DeviceMemory device_memory();

}  // namespace moenum::gpu
