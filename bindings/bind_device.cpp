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
#else
  m.attr("built_with_cuda") = false;
  m.def("gpu_description", [] { return std::string("none"); }, "\"none\": this module was built without CUDA");
#endif
}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
