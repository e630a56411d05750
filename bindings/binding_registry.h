// Each bindings/bind_*.cpp registers a function that adds its part of the _core module, so a new
// part is a new file, not an edit to module.cpp.
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <vector>

namespace moenum::bindings {

using BindFn = std::function<void(pybind11::module_&)>;
std::vector<BindFn>& bind_functions();

struct BindRegistrar {
  explicit BindRegistrar(BindFn f) { bind_functions().push_back(std::move(f)); }
};

}  // namespace moenum::bindings
