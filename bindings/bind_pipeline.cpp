// Scenario struct, input generation, routing, dispatch plan and backends, exposed to Python.
// Tensors cross without a copy: numpy views of their storage (float32 for bf16 and fp32, float64 for
// fp64, uint8 for FP8 and E8M0 codes), kept alive by the object that owns them.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "binding_registry.h"
#include "prepared.h"
#include "moenum/backend.h"
#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "moenum/scenario.h"

namespace py = pybind11;

namespace moenum::bindings {
namespace {

template <typename T>
py::array_t<T> to_numpy(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
  py::array_t<T> a(shape);
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

py::dtype numpy_dtype(Storage s) {
  switch (s) {
    case Storage::kF32: return py::dtype::of<float>();
    case Storage::kF64: return py::dtype::of<double>();
    case Storage::kU8: return py::dtype::of<uint8_t>();
  }
  throw InternalError("numpy_dtype: unknown storage");
}

// A writable numpy view of t's storage; `owner` must keep t alive (it becomes the array's base).
py::array tensor_view(Tensor& t, py::handle owner) {
  return py::array(numpy_dtype(t.storage()), std::vector<py::ssize_t>(t.shape.begin(), t.shape.end()), t.bytes(),
                   owner);
}

// Each tensor moves into a capsule of its own that lives as long as its array: dropping one array
// (a backend's stage tensors once checked) frees that tensor, whatever else the caller keeps.
py::dict tensors_to_dict(std::map<std::string, Tensor>&& m) {
  py::dict d;
  for (auto& [name, t] : m) {
    auto owned = std::make_unique<Tensor>(std::move(t));
    py::capsule owner(owned.get(), [](void* p) { delete static_cast<Tensor*>(p); });
    Tensor& kept = *owned.release();
    d[py::str(name)] = py::make_tuple(tensor_view(kept, owner), kept.dtype);
  }
  m.clear();
  return d;
}

py::dict problem_to_dict(Problem& p, py::handle owner) {
  py::dict d;
  for (auto [name, t] : {std::pair<const char*, Tensor*>{"x", &p.x}, {"w1", &p.w1}, {"b1", &p.b1},
                         {"w2", &p.w2}, {"b2", &p.b2}, {"dy", &p.dy}})
    d[name] = tensor_view(*t, owner);
  return d;
}

py::dict plan_to_dict(const DispatchPlan& plan) {
  py::dict d;
  d["ep"] = plan.ep;
  d["padding"] = plan.padding;
  d["align"] = plan.align;
  d["warnings"] = plan.warnings;
  py::list ranks;
  for (const auto& r : plan.ranks) {
    py::dict rd;
    auto n = static_cast<py::ssize_t>(r.row_token.size());
    rd["row_token"] = to_numpy(r.row_token, {n});
    rd["row_expert"] = to_numpy(r.row_expert, {n});
    rd["row_slot"] = to_numpy(r.row_slot, {n});
    rd["row_prob"] = to_numpy(r.row_prob, {n});
    rd["tokens_per_expert"] = to_numpy(r.tokens_per_expert, {static_cast<py::ssize_t>(r.tokens_per_expert.size())});
    rd["fell_back_to_module"] = r.fell_back_to_module;
    rd["simulated"] = r.simulated;
    ranks.append(rd);
  }
  d["ranks"] = ranks;
  return d;
}

void bind(py::module_& m) {
  py::class_<ModelConfig>(m, "ModelConfig")
      .def(py::init<>())
      .def_readwrite("experts", &ModelConfig::experts)
      .def_readwrite("hidden", &ModelConfig::hidden)
      .def_readwrite("ffn", &ModelConfig::ffn)
      .def_readwrite("topk", &ModelConfig::topk)
      .def_readwrite("activation", &ModelConfig::activation)
      .def_readwrite("bias", &ModelConfig::bias);
  py::class_<SkewConfig>(m, "SkewConfig")
      .def(py::init<>())
      .def_readwrite("kind", &SkewConfig::kind)
      .def_readwrite("s", &SkewConfig::s)
      .def_readwrite("hot_experts", &SkewConfig::hot_experts)
      .def_readwrite("hot_share", &SkewConfig::hot_share)
      .def_readwrite("alpha", &SkewConfig::alpha)
      .def_readwrite("counts", &SkewConfig::counts);
  py::class_<RoutingConfig>(m, "RoutingConfig")
      .def(py::init<>())
      .def_readwrite("score", &RoutingConfig::score)
      .def_readwrite("skew", &RoutingConfig::skew)
      .def_readwrite("permute_experts", &RoutingConfig::permute_experts)
      .def_readwrite("topk_scaling", &RoutingConfig::topk_scaling);
  py::class_<DispatchConfig>(m, "DispatchConfig")
      .def(py::init<>())
      .def_readwrite("ep", &DispatchConfig::ep)
      .def_readwrite("padding", &DispatchConfig::padding)
      .def_readwrite("align", &DispatchConfig::align)
      .def_readwrite("ranks", &DispatchConfig::ranks);
  py::class_<RecipeConfig>(m, "RecipeConfig")
      .def(py::init<>())
      .def_readwrite("name", &RecipeConfig::name)
      .def_readwrite("scale_rounding", &RecipeConfig::scale_rounding)
      .def_readwrite("grad_format", &RecipeConfig::grad_format)
      .def_readwrite("bias_mode", &RecipeConfig::bias_mode)
      .def_readwrite("inv_scale", &RecipeConfig::inv_scale)
      .def_readwrite("accumulate", &RecipeConfig::accumulate);
  py::class_<SpecialValues>(m, "SpecialValues")
      .def(py::init<>())
      .def_readwrite("nan", &SpecialValues::nan)
      .def_readwrite("inf", &SpecialValues::inf)
      .def_readwrite("subnormal", &SpecialValues::subnormal)
      .def_readwrite("huge", &SpecialValues::huge)
      .def_readwrite("value", &SpecialValues::value)
      .def_readwrite("value_fraction", &SpecialValues::value_fraction);
  py::class_<InputRegime>(m, "InputRegime")
      .def(py::init<>())
      .def_readwrite("regime", &InputRegime::regime)
      .def_readwrite("special", &InputRegime::special)
      .def_readwrite("dist", &InputRegime::dist)
      .def_readwrite("scale", &InputRegime::scale)
      .def_readwrite("outlier_fraction", &InputRegime::outlier_fraction)
      .def_readwrite("outlier_scale", &InputRegime::outlier_scale);
  py::class_<OutputConfig>(m, "OutputConfig")
      .def(py::init<>())
      .def_readwrite("inputs", &OutputConfig::inputs)
      .def_readwrite("intermediates", &OutputConfig::intermediates)
      .def_readwrite("diffs", &OutputConfig::diffs);
  py::class_<ExecutionConfig>(m, "ExecutionConfig")
      .def(py::init<>())
      .def_readwrite("device", &ExecutionConfig::device);
  py::class_<Scenario>(m, "Scenario")
      .def(py::init<>())
      .def_readwrite("name", &Scenario::name)
      .def_readwrite("description", &Scenario::description)
      .def_readwrite("seed", &Scenario::seed)
      .def_readwrite("model", &Scenario::model)
      .def_readwrite("tokens", &Scenario::tokens)
      .def_readwrite("routing", &Scenario::routing)
      .def_readwrite("dispatch", &Scenario::dispatch)
      .def_readwrite("recipe", &Scenario::recipe)
      .def_readwrite("weights", &Scenario::weights)
      .def_readwrite("output", &Scenario::output)
      .def_readwrite("execution", &Scenario::execution)
      .def_readwrite("inputs", &Scenario::inputs)
      .def("validate", [](const Scenario& sc) { validate(sc); });

  py::class_<Prepared, std::shared_ptr<Prepared>>(m, "Prepared",
                                                  "Inputs, routing and dispatch plan of one scenario")
      .def_property_readonly("inputs",
                             [](py::object self) { return problem_to_dict(self.cast<Prepared&>().problem, self); })
      .def_property_readonly("topk_idx", [](const Prepared& p) {
        return to_numpy(p.routing.topk_idx, {static_cast<py::ssize_t>(p.routing.T), static_cast<py::ssize_t>(p.routing.k)});
      })
      .def_property_readonly("probs", [](const Prepared& p) {
        return to_numpy(p.routing.probs, {static_cast<py::ssize_t>(p.routing.T), static_cast<py::ssize_t>(p.routing.k)});
      })
      .def_property_readonly("tokens_per_expert", [](const Prepared& p) {
        return to_numpy(p.routing.tokens_per_expert, {static_cast<py::ssize_t>(p.routing.E)});
      })
      .def_property_readonly("plan", [](const Prepared& p) { return plan_to_dict(p.plan); })
      .def_property_readonly("kept_input_codes_bytes", [](const Prepared& p) { return p.input_codes->bytes(); },
                             "Bytes of expected MX codes the stage checks keep for the point's next backend.");

  m.def("prepare", [](const Scenario& sc) {
    validate(sc);
    auto p = std::make_shared<Prepared>();
    {
      py::gil_scoped_release release;
      p->scenario = sc;
      p->problem = generate_problem(sc);
      p->routing = route(sc);
      p->plan = plan_dispatch(sc, p->routing);
    }
    return p;
  }, py::arg("scenario"), "Generate the inputs, route and plan the dispatch of one scenario");

  m.def("backend_availability", [](const std::string& name, const Scenario& sc) {
    const Availability a = backend_availability(name, sc);
    return py::make_tuple(a.ok, a.ok ? "" : std::string(to_string(a.disposition)), a.reason);
  }, py::arg("name"), py::arg("scenario"),
  "(ok, disposition, reason): whether the backend can run the scenario here; not_run when it is not built in");
  m.def("run_backend", [](const std::string& name, const Prepared& p, std::optional<bool> keep_stages,
                          std::optional<std::string> weights) {
    auto backend = make_backend(name);
    // Stage tensors cost memory and time: only the backends whose stages are checked or written keep them.
    Scenario sc = p.scenario;
    if (keep_stages) sc.output.intermediates = *keep_stages;
    // The inputs do not depend on the weights layout, so the invariance rerun shares them.
    if (weights) sc.weights = *weights;
    BackendResult r;
    {
      py::gil_scoped_release release;
      r = backend->run(RunContext{sc, p.problem, p.routing, p.plan});
    }
    py::dict d;
    d["outputs"] = tensors_to_dict(std::move(r.outputs));
    d["stages"] = tensors_to_dict(std::move(r.stages));
    d["attrs"] = r.attrs;
    d["seconds"] = r.seconds;
    return d;
  }, py::arg("name"), py::arg("prepared"), py::arg("keep_stages") = py::none(), py::arg("weights") = py::none(),
     "Run one backend; returns outputs, stages, attrs, seconds. keep_stages overrides output.intermediates, "
     "weights the weights layout (single | discrete)");
}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
