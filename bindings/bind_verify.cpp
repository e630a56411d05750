// The verifier (core/verify/) exposed to Python: the layer's stage and GEMM tables, the
// teacher-forced stage checks, the error-table statistics, ULPs, bitwise comparison and bounds.
// Tensors cross as numpy arrays viewed in place (float32, float64 or uint8; anything else is
// converted to float64 once).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "binding_registry.h"
#include "bounds.h"
#include "device_gemm.h"
#include "error_stats.h"
#include "moenum/layer.h"
#include "prepared.h"
#include "stage_check.h"
#include "stage_ops.h"
#include "tensor_view.h"
#include "ulp.h"

namespace py = pybind11;

namespace moenum::bindings {
namespace {

using namespace moenum::verify;

// Views of numpy arrays; arrays that needed a conversion are kept alive here while the views live.
struct ViewArena {
  std::vector<py::array> keep;

  View view(const py::handle& obj, const std::string& dtype) {
    py::array a = py::array::ensure(obj, py::array::c_style);
    if (!a) a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(obj);
    Storage st;
    if (a.dtype().is(py::dtype::of<float>())) st = Storage::kF32;
    else if (a.dtype().is(py::dtype::of<uint8_t>())) st = Storage::kU8;
    else if (a.dtype().is(py::dtype::of<double>())) st = Storage::kF64;
    else {
      a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
      st = Storage::kF64;
    }
    keep.push_back(a);
    View v;
    v.data = a.data();
    v.storage = st;
    v.dtype = dtype;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) v.shape.push_back(a.shape(i));
    return v;
  }
};

// {name: (array, dtype)} or {name: array} (dtype fp32) -> views.
TensorMap tensor_views(ViewArena& arena, const py::dict& tensors) {
  TensorMap m;
  for (auto [k, v] : tensors) {
    const std::string name = py::cast<std::string>(k);
    if (py::isinstance<py::tuple>(v)) {
      auto tup = py::reinterpret_borrow<py::tuple>(v);
      m[name] = arena.view(tup[0], py::cast<std::string>(tup[1]));
    } else {
      m[name] = arena.view(v, "fp32");
    }
  }
  return m;
}

SampleSpec parse_sample(const py::object& s) {
  SampleSpec spec;
  if (s.is_none()) return spec;
  if (py::isinstance<py::str>(s)) {
    const std::string v = py::cast<std::string>(s);
    if (v == "all") return spec;
    if (v == "auto") {
      spec.mode = SampleSpec::Mode::kAuto;
      return spec;
    }
    throw ConfigError("verify.sample", "must be all, auto or a positive number of elements, got '" + v + "'");
  }
  spec.mode = SampleSpec::Mode::kCount;
  spec.count = py::cast<int64_t>(s);
  if (spec.count <= 0) throw ConfigError("verify.sample", "must be a positive number of elements");
  return spec;
}

py::dict counts_dict(const ClassCounts& c) {
  py::dict d;
  for (int i = 0; i < kNumClasses; ++i) d[kClassNames[i]] = c.n[i];
  return d;
}

py::dict ulps_dict(const UlpBuckets& u) {
  py::dict d;
  d["max_ulp"] = u.max_ulp;
  d["ulp_le0"] = u.le0;
  d["ulp_le1"] = u.le1;
  d["ulp_le2"] = u.le2;
  d["ulp_gt2"] = u.gt2;
  d["max_abs"] = u.max_abs;
  return d;
}

py::dict stats_dict(const ErrorStats& s) {
  py::dict d = ulps_dict(s.ulps);
  d["n"] = s.n;
  d["max_abs"] = s.max_abs;
  d["max_rel"] = s.max_rel;
  d["mean_abs"] = s.mean_abs;
  d["rel_fro"] = s.rel_fro;
  d["calc_diff"] = s.calc_diff;
  d["bitwise_equal"] = s.bitwise_equal;
  d["nonfinite"] = s.nonfinite;
  d["nonfinite_mismatch"] = s.nonfinite_mismatch;
  return d;
}

py::object bound_obj(const std::optional<Interval>& b) {
  if (!b) return py::none();
  return py::make_tuple(b->lo, b->hi);
}

py::dict report_dict(const StageReport& r) {
  static const char* status[] = {"passed", "failed", "skipped"};
  py::dict d;
  const layer::StageDesc& st = r.desc();
  d["stage"] = st.name;
  d["status"] = status[static_cast<int>(r.status)];
  d["reason"] = r.reason;
  d["bitwise"] = r.bitwise;
  d["classes"] = counts_dict(r.classes);
  py::dict per, per_ulps;
  for (const auto& [e, c] : r.per_expert) per[py::int_(e)] = counts_dict(c);
  for (const auto& [e, u] : r.per_expert_ulps) per_ulps[py::int_(e)] = ulps_dict(u);
  d["per_expert"] = per;
  d["per_expert_ulps"] = per_ulps;
  d["ulps"] = st.kind == layer::StageKind::kMx ? py::object(py::none()) : py::object(ulps_dict(r.ulps));
  d["checked"] = r.checked;
  d["total"] = r.total;
  d["sampled"] = r.sampled;
  d["failing"] = r.failing;
  if (r.first) d["first"] = py::make_tuple(r.first->tensor, py::tuple(py::cast(r.first->index)));
  else d["first"] = py::none();
  py::list probes;
  for (const ProbeResult& p : r.probes) {
    py::dict pd;
    pd["tensor"] = p.tensor;
    pd["index"] = py::tuple(py::cast(p.index));
    pd["checked"] = p.checked;
    pd["cls"] = kClassNames[static_cast<int>(p.cls)];
    pd["value"] = p.value;
    pd["ref"] = p.ref;
    pd["bound"] = bound_obj(p.bound);
    probes.append(pd);
  }
  d["probes"] = probes;
  return d;
}

void bind(py::module_& m) {
  py::list stages;
  for (const layer::StageDesc& st : layer::kStages) {
    py::dict d;
    d["name"] = st.name;
    d["kind"] = layer::stage_kind_name(st.kind);
    d["where"] = st.where == layer::StageWhere::kStages ? "stages" : "outputs";
    py::list inputs;
    for (const char* in : st.inputs)
      if (*in) inputs.append(in);
    d["inputs"] = py::tuple(inputs);
    d["gemm"] = st.gemm >= 0 ? layer::kGemms[st.gemm].name : "";
    d["operand"] = st.operand >= 0 ? layer::operand_suffix(layer::Operand(st.operand)) : "";
    d["needs_bias"] = st.needs_bias;
    d["mx_only"] = st.kind == layer::StageKind::kMx;
    d["doc"] = st.doc;
    stages.append(d);
  }
  m.attr("STAGES") = stages;

  py::list gemms;
  for (const layer::GemmDesc& g : layer::kGemms) {
    py::dict d;
    d["name"] = g.name;
    d["output"] = g.output;
    for (auto [key, od] : {std::pair<const char*, const layer::OperandDesc*>{"A", &g.a}, {"B", &g.b}}) {
      py::dict o;
      o["source"] = layer::source_name(od->source);
      o["direction"] = od->direction == layer::Direction::kRowwise ? "rowwise" : "columnwise";
      o["gradient"] = od->gradient;
      d[key] = o;
    }
    gemms.append(d);
  }
  m.attr("GEMMS") = gemms;
  m.attr("CLASSES") = py::make_tuple(kClassNames[0], kClassNames[1], kClassNames[2], kClassNames[3], kClassNames[4]);

  m.def("check_stages", [](const std::string& backend, const Prepared& p, const py::dict& tensors, const py::object& sample,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>>& probes,
                           const std::string& elementwise, const std::string& gemm, bool keep_input_codes) {
    if (elementwise != "bitwise" && elementwise != "interval")
      throw ConfigError("elementwise", "must be bitwise or interval, got '" + elementwise + "'");
    const ElementwiseRule rule = elementwise == "interval" ? ElementwiseRule::kInterval : ElementwiseRule::kBitwise;
    if (gemm != "bound" && gemm != "hopper_mma")
      throw ConfigError("gemm", "must be bound or hopper_mma, got '" + gemm + "'");
    const GemmRule gemm_rule = gemm == "hopper_mma" ? GemmRule::kHopperMma : GemmRule::kBound;
    ViewArena arena;
    const TensorMap t = tensor_views(arena, tensors);
    const SampleSpec spec = parse_sample(sample);
    std::vector<Probe> pr;
    for (const auto& [name, idx] : probes) pr.push_back({name, idx});
    std::vector<StageReport> reports;
    {
      py::gil_scoped_release release;
      LayerContext ctx = make_layer_context(p.scenario, p.routing, p.plan, input_views(p.problem));
      // the recomputation is the reference's arithmetic: it runs where execution.device puts the oracles
      const reference::OracleDevice device = reference::oracle_device(p.scenario.execution.device);
      ctx.device = device.engine.get();
      ctx.input_codes = p.input_codes.get();
      reports = check_stages(ctx, t, spec, pr, rule, gemm_rule);
      if (!keep_input_codes) p.input_codes->clear();
    }
    py::list list;
    for (const auto& r : reports) list.append(report_dict(r));
    const StageVerdict v = summarize(backend, reports);
    py::dict out;
    out["reports"] = list;
    out["passed"] = v.passed;
    out["detail"] = v.detail;
    return out;
  }, py::arg("backend"), py::arg("prepared"), py::arg("tensors"), py::arg("sample") = py::none(),
     py::arg("probes") = std::vector<std::pair<std::string, std::vector<int64_t>>>{},
     py::arg("elementwise") = "bitwise", py::arg("gemm") = "bound", py::arg("keep_input_codes") = false,
  "Teacher-forced stage checks of one backend's tensors ({name: (array, dtype)}): {reports: one per\n"
  "applicable stage of STAGES (status, class counts, per-expert counts and ULPs, first failure,\n"
  "probes), passed, detail (the verdict)}. sample: None/'all', 'auto' or elements\n"
  "per (stage, expert) for the GEMM stages. elementwise: 'bitwise' (moenum's own functions) or 'interval'\n"
  "(act, a, out, dh of code that does not share them: core/verify/elementwise_interval.h). gemm: 'bound'\n"
  "(the GEMM stages inside the bound of numerics.md §7) or 'hopper_mma' (bitwise against the model of\n"
  "reference/hopper_mma.h). keep_input_codes: keep the expected MX codes of the operands drawn from\n"
  "the inputs (x, dy, w1, w2) for the point's next backend; without it they are dropped after this check.");

  m.def("error_stats", [](const py::object& a, const std::string& dtype_a, const py::object& b,
                          const std::string& dtype_b, const std::optional<std::vector<int64_t>>& labels,
                          bool leading_expert) {
    ViewArena arena;
    const View va = arena.view(a, dtype_a), vb = arena.view(b, dtype_b);
    if (va.size() != vb.size()) throw ConfigError("b", "error_stats: tensors of different sizes");
    const Grid g = coarser(parse_grid(dtype_a), parse_grid(dtype_b));
    ErrorStats whole;
    std::vector<ExpertStats> per;
    {
      py::gil_scoped_release release;
      if (leading_expert) {
        GroupedStats gs = error_stats_by_leading_dim(va, vb, g);
        whole = gs.whole;
        per = std::move(gs.per_expert);
      } else {
        whole = error_stats(va, vb, g);
        if (labels) per = error_stats_by_label(va, vb, g, *labels);
      }
    }
    py::list out;
    out.append(py::make_tuple(-1, stats_dict(whole)));
    for (const auto& es : per) out.append(py::make_tuple(es.expert, stats_dict(es.stats)));
    return out;
  }, py::arg("a"), py::arg("dtype_a"), py::arg("b"), py::arg("dtype_b"), py::arg("labels") = py::none(),
     py::arg("leading_expert") = false,
  "Error-table statistics of a (the backend) against b (the other), ULPs on the coarser of the two\n"
  "dtypes' grids at b: [(-1, whole tensor), (expert, ...)...], per expert by the leading dim\n"
  "(leading_expert) or by a label per element (labels, -1 = none).");

  m.def("exact_gemm_nt", [](const py::array_t<double, py::array::c_style | py::array::forcecast>& A,
                            const py::array_t<double, py::array::c_style | py::array::forcecast>& B) {
    if (A.ndim() != 2 || B.ndim() != 2 || A.shape(1) != B.shape(1))
      throw ConfigError("B", "exact_gemm_nt: A [M, K] and B [N, K] with the same K");
    const reference::Matrix a = Eigen::Map<const reference::Matrix>(A.data(), A.shape(0), A.shape(1));
    const reference::Matrix b = Eigen::Map<const reference::Matrix>(B.data(), B.shape(0), B.shape(1));
    reference::stage_ops::GemmRef g;
    {
      py::gil_scoped_release release;
      g = reference::stage_ops::exact_gemm_ref(a, b, nullptr);
    }
    const auto np = [](const reference::Matrix& m) {
      py::array_t<double> out({m.rows(), m.cols()});
      std::copy(m.data(), m.data() + m.size(), out.mutable_data());
      return out;
    };
    return py::make_tuple(np(g.c32), np(g.absprod), np(g.c64));
  }, py::arg("A"), py::arg("B"),
  "C = A . B^T of the reference: (c_rn_f32, absprod, c64). c_rn_f32: correctly rounded fp32 of the exact\n"
  "sum; absprod: sum_k |a_k b_k|; c64: the exact sum where fp64 certifies it, else NaN.");

  m.def("bitwise_diff", [](const py::object& a, const py::object& b) {
    ViewArena arena;
    const View va = arena.view(a, "fp64"), vb = arena.view(b, "fp64");
    BitwiseDiff d;
    {
      py::gil_scoped_release release;
      d = bitwise_diff(va, vb);
    }
    return py::make_tuple(d.same_shape, d.differing, d.first);
  }, py::arg("a"), py::arg("b"), "(same_shape, differing elements, first differing flat index or -1), bitwise.h");

  m.def("count_nonfinite", [](const py::object& a) {
    ViewArena arena;
    const View v = arena.view(a, "fp64");
    py::gil_scoped_release release;
    return count_nonfinite(v);
  }, py::arg("a"), "Elements of a that are NaN or +-inf");

  m.def("ulp_distance", [](const py::object& v, const py::object& ref, const std::string& grid) {
    ViewArena arena;
    const View a = arena.view(v, grid), b = arena.view(ref, grid);
    if (a.size() != b.size()) throw ConfigError("refs", "ulp_distance: arrays of different sizes");
    const Grid g = parse_grid(grid);
    py::array_t<double> out(a.shape);
    double* o = out.mutable_data();
    for (int64_t i = 0; i < a.size(); ++i) o[i] = ulp_distance(a.at(i), b.at(i), g);
    return out;
  }, py::arg("values"), py::arg("refs"), py::arg("grid"), "|v - ref| in units of the grid's spacing at ref (ulp.h)");

  m.def("grid_step", [](double v, int64_t n, const std::string& grid) { return grid_step(v, n, parse_grid(grid)); },
        py::arg("value"), py::arg("n"), py::arg("grid"), "The value n grid points away (ulp.h)");

  m.def("accumulator_interval", [](double c32, double absprod, int64_t K) {
    const Interval i = accumulator_interval(c32, absprod, K);
    return py::make_tuple(i.lo, i.hi);
  }, py::arg("c32"), py::arg("absprod"), py::arg("K"),
  "Where an fp32 accumulator of K terms may land around the correctly rounded c32 (bounds.h)");

  m.def("gamma", [](int64_t n, double u) { return gamma(n, u); }, py::arg("n"), py::arg("u") = kU32,
        "gamma(n, u) = n*u / (1 - n*u), the relative error bound of an n-term dot product");

  m.def("round_to", [](const py::array_t<double, py::array::c_style | py::array::forcecast>& v, const std::string& dtype) {
    const Grid g = parse_grid(dtype);
    MOENUM_CHECK(g != Grid::kF64, "round_to: fp64 values need no rounding");
    py::array_t<double> out(v.request().shape);
    const double* in = v.data();
    double* o = out.mutable_data();
    for (py::ssize_t i = 0; i < v.size(); ++i) {
      const float f = float(in[i]);
      o[i] = g == Grid::kBf16 ? double(round_bf16(f)) : double(f);
    }
    return out;
  }, py::arg("values"), py::arg("dtype"), "fp64 values -> fp32 (RN) -> dtype (bf16 RN-even or fp32)");
}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
