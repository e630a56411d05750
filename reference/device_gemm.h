// Where the oracles' fp64 GEMMs run (scenario key execution.device): on the CPU, or on a device
// engine that the CUDA build registers (core/gpu/oracle/). An engine computes plain fp64 products in
// its own summation order. golden takes them as they are (they agree with the CPU's k-ordered sums to
// rounding); the reference certifies them exactly as it certifies Eigen's (certify_gemm_nt), so its
// outputs are bitwise the CPU reference's. Everything else (quantization, elementwise stages,
// reductions, the rare exact sums) stays on the CPU.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "exact_gemm.h"
#include "moenum/availability.h"

namespace moenum {
struct BackendResult;
}

namespace moenum::reference {

class DeviceGemm {
 public:
  virtual ~DeviceGemm() = default;
  // C = A . B^T in fp64 (A: M x K, B: N x K, row-major); with S non-null also S = |A| . |B|^T.
  // Safe to call from several threads at once (grouped_mlp's segments run in parallel).
  virtual void gemm_nt(const Matrix& A, const Matrix& B, Matrix& C, Matrix* S) = 0;
  // The device, as the GPU backends' attribute `device` reads ("NVIDIA H200 sm_90 driver ...").
  virtual std::string description() const = 0;
};

// What a build with a device engine registers: whether a device is usable here, and a new engine.
struct DeviceGemmProvider {
  std::function<Availability()> available;
  std::function<std::unique_ptr<DeviceGemm>()> make;
};
struct DeviceGemmRegistrar {
  explicit DeviceGemmRegistrar(DeviceGemmProvider p);
};

// The two fp64 products of the certified GEMM (exact_gemm.h, products_nt) on `device`, or with Eigen
// on the CPU when it is null; left empty when A or B has no rows.
void products_nt(DeviceGemm* device, const Matrix& A, const Matrix& B, Matrix& Cd, Matrix& S);

enum class ExecutionDevice { cpu, gpu };

// execution.device resolved here: "cpu"; "gpu"; "auto", the GPU when this build has the device
// engine and a device is usable, else the CPU. ok is false (with the reason) for "gpu" when no
// device engine can run, and for an unknown name.
struct ExecutionChoice {
  bool ok = true;
  ExecutionDevice device = ExecutionDevice::cpu;
  std::string reason;
};
ExecutionChoice resolve_execution_device(const std::string& requested);

// One oracle run's GEMM device: null engine = the CPU. Throws InternalError when execution.device
// cannot be honoured (the Python runner refuses such a run up front: exit 3).
struct OracleDevice {
  std::unique_ptr<DeviceGemm> engine;
  // attrs execution_device ("cpu" | "gpu") and device ("cpu" or the device's description)
  void describe(BackendResult& out) const;
};
OracleDevice oracle_device(const std::string& requested);

}  // namespace moenum::reference
