// The backend registry's facts, exposed to Python: every known backend's traits and the disposition
// strings, so that Python holds no lists of backend names or dispositions of its own.
#include <pybind11/stl.h>

#include "binding_registry.h"
#include "moenum/backend.h"
#include "moenum/disposition.h"

namespace py = pybind11;

namespace moenum::bindings {
namespace {

void bind(py::module_& m) {
  py::class_<BackendTraits>(m, "BackendTraits", "What the registry knows about a backend without running it")
      .def_readonly("name", &BackendTraits::name)
      .def_property_readonly("role", [](const BackendTraits& t) { return std::string(to_string(t.role)); },
                             "oracle (golden, reference: the yardsticks) or under_test")
      .def_property_readonly("device", [](const BackendTraits& t) { return std::string(to_string(t.device)); },
                             "cpu or gpu")
      .def_readonly("stages", &BackendTraits::stages, "the stage tensors it can save")
      .def_readonly("layout_sensitive", &BackendTraits::layout_sensitive,
                    "whether single vs discrete weights can change its result")
      .def_readonly("recipes", &BackendTraits::recipes)
      .def_readonly("bias_modes", &BackendTraits::bias_modes)
      .def_readonly("modelled_accumulate", &BackendTraits::modelled_accumulate,
                    "the recipe.accumulate modes whose model its GEMMs follow bit for bit")
      .def("__repr__", [](const BackendTraits& t) {
        return "<BackendTraits " + t.name + ": " + std::string(to_string(t.role)) + ", " +
               std::string(to_string(t.device)) + ">";
      });

  m.def("backend_names", &backend_names, "Every known backend, built into this module or not, sorted");
  m.def("backends", &backend_traits_all, "The traits of every known backend, sorted by name");
  m.def("backend_traits", &backend_traits, py::arg("name"), py::return_value_policy::copy,
        "The traits of one backend; ConfigError (key 'backends') if unknown");

  py::tuple names(kDispositions.size());
  for (size_t i = 0; i < kDispositions.size(); ++i) names[i] = std::string(to_string(kDispositions[i]));
  m.attr("DISPOSITIONS") = names;
}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
