// moenum._core: the C++ core exposed to Python. The parts are added by bindings/bind_*.cpp.
#include <pybind11/pybind11.h>

#include "binding_registry.h"
#include "moenum/error.h"

namespace py = pybind11;

namespace moenum::bindings {
std::vector<BindFn>& bind_functions() {
  static std::vector<BindFn> fns;
  return fns;
}
}  // namespace moenum::bindings

PYBIND11_MODULE(_core, m) {
  m.doc() = "moenum C++ core: inputs, routing, dispatch plans, backends, MX formats";
  m.attr("__version__") = MOENUM_VERSION;
#ifdef MOENUM_HAVE_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  py::register_exception<moenum::ConfigError>(m, "ConfigError", PyExc_ValueError);
  py::register_exception<moenum::InternalError>(m, "InternalError", PyExc_RuntimeError);
  for (auto& fn : moenum::bindings::bind_functions()) fn(m);
}
