// What this module was built with and which GPU it sees (the results files' root attribute gpu), and
// where the oracles' GEMMs run (execution.device).
#include "binding_registry.h"
#include "device_gemm.h"
#ifdef MOENUM_HAVE_CUDA
#include "device.h"
#endif

namespace py = pybind11;

namespace moenum::bindings {
namespace {

void bind(py::module_& m) {
#ifdef MOENUM_HAVE_CUDA
  m.attr("built_with_cuda") = true;
  m.def("gpu_description", &gpu::device_description, "The CUDA device: name, sm, driver, runtime, cuBLASLt; or \"none\"");
  m.def("gpu_memory", [] {
    const gpu::DeviceMemory mem = gpu::device_memory();
    return py::make_tuple(mem.free, mem.total);
  }, "(free, total) bytes of the CUDA device's memory; (0, 0) without a device");
#else
  m.attr("built_with_cuda") = false;
  m.def("gpu_description", [] { return std::string("none"); }, "\"none\": this module was built without CUDA");
  m.def("gpu_memory", [] { return py::make_tuple(0, 0); }, "(0, 0): this module was built without CUDA");
#endif
  m.def("execution_device", [](const std::string& requested) {
    const reference::ExecutionChoice c = reference::resolve_execution_device(requested);
    return py::make_tuple(c.ok, c.device == reference::ExecutionDevice::gpu ? "gpu" : "cpu", c.reason);
  }, py::arg("requested"),
  "(ok, device, reason): execution.device (auto | cpu | gpu) resolved on this machine; ok is false for gpu "
  "without a usable GPU or without CUDA in this build");
}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
