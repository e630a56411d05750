#include "device_gemm.h"

#include <optional>

#include "moenum/backend.h"
#include "moenum/error.h"

namespace moenum::reference {
namespace {

std::optional<DeviceGemmProvider>& provider() {
  static std::optional<DeviceGemmProvider> p;  // function-local: safe from static init order
  return p;
}

}  // namespace

DeviceGemmRegistrar::DeviceGemmRegistrar(DeviceGemmProvider p) { provider() = std::move(p); }

void products_nt(DeviceGemm* device, const Matrix& A, const Matrix& B, Matrix& Cd, Matrix& S) {
  if (!device) return products_nt(A, B, Cd, S);
  if (A.rows() > 0 && B.rows() > 0) device->gemm_nt(A, B, Cd, &S);
}

ExecutionChoice resolve_execution_device(const std::string& requested) {
  if (requested == "cpu") return {};
  if (requested != "auto" && requested != "gpu")
    return {false, ExecutionDevice::cpu, "execution.device: unknown device '" + requested + "' (auto, cpu or gpu)"};
  if (!provider()) {
    if (requested == "auto") return {};
    return {false, ExecutionDevice::cpu,
            "execution.device: gpu, but this moenum was built without CUDA (rebuild with -Ccmake.define.MOENUM_CUDA=ON)"};
  }
  const Availability av = provider()->available();
  if (av.ok) return {true, ExecutionDevice::gpu, ""};
  if (requested == "auto") return {};
  return {false, ExecutionDevice::cpu, "execution.device: gpu, but no usable CUDA GPU: " + av.reason};
}

OracleDevice oracle_device(const std::string& requested) {
  const ExecutionChoice choice = resolve_execution_device(requested);
  if (!choice.ok) throw InternalError(choice.reason);
  OracleDevice d;
  if (choice.device == ExecutionDevice::gpu) d.engine = provider()->make();
  return d;
}

void OracleDevice::describe(BackendResult& out) const {
  out.attrs["execution_device"] = engine ? "gpu" : "cpu";
  out.attrs["device"] = engine ? engine->description() : "cpu";
}

}  // namespace moenum::reference
