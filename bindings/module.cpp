// moenum._core: the C++ core exposed to Python. The parts are added by bindings/bind_*.cpp.
#include <pybind11/gil_safe_call_once.h>
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

namespace {

// ConfigError reaches Python with its parts as attributes (key, message, scenario), so that the
// loader can name the key's file and line without parsing the text.
void bind_config_error(py::module_& m) {
  PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<py::object> type;
  type.call_once_and_store_result([&] {
    py::object t = py::exception<moenum::ConfigError>(m, "ConfigError", PyExc_ValueError);
    t.attr("key") = "";
    t.attr("message") = "";
    t.attr("scenario") = "";
    return t;
  });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const moenum::ConfigError& e) {
      py::object exc = type.get_stored()(e.what());
      exc.attr("key") = e.key();
      exc.attr("message") = e.message();
      exc.attr("scenario") = e.scenario();
      PyErr_SetObject(type.get_stored().ptr(), exc.ptr());
    }
  });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "moenum C++ core: inputs, routing, dispatch plans, backends, MX formats";
  m.attr("__version__") = MOENUM_VERSION;
  bind_config_error(m);
  py::register_exception<moenum::InternalError>(m, "InternalError", PyExc_RuntimeError);
  for (auto& fn : moenum::bindings::bind_functions()) fn(m);
}
