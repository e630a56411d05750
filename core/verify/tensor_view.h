// Views of the core's tensors (moenum/tensor.h), for the verifier: the one place that knows how a
// Tensor stores its values.
#pragma once
#include <map>
#include <string>

#include "moenum/problem.h"
#include "moenum/tensor.h"
#include "view.h"

namespace moenum::verify {

inline View view_of(const Tensor& t) {
  View v;
  v.data = t.bytes();
  v.storage = t.storage();
  v.shape = t.shape;
  v.dtype = t.dtype;
  return v;
}

inline std::map<std::string, View> input_views(const Problem& p) {
  return {{"x", view_of(p.x)},   {"w1", view_of(p.w1)}, {"b1", view_of(p.b1)},
          {"w2", view_of(p.w2)}, {"b2", view_of(p.b2)}, {"dy", view_of(p.dy)}};
}

// A backend's stages and outputs by name.
inline std::map<std::string, View> result_views(const std::map<std::string, Tensor>& stages,
                                                const std::map<std::string, Tensor>& outputs) {
  std::map<std::string, View> m;
  for (const auto& [name, t] : stages) m[name] = view_of(t);
  for (const auto& [name, t] : outputs) m[name] = view_of(t);
  return m;
}

}  // namespace moenum::verify
