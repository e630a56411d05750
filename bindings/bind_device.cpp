// What this module was built with and which GPU it sees (the results files' root attribute gpu).
#include "binding_registry.h"
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
}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
