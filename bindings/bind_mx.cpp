// MXFP8 formats and the block quantizer (core/include/moenum/{fp8,e8m0,mx}.h) exposed to Python.
// moenum.mx wraps mx_quantize / mx_dequantize; the scalar-array helpers exist for the tests.
// Loops run without the GIL; large inputs are split over OpenMP threads by whole blocks, so the bytes
// never depend on the thread count.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <vector>

#include "binding_registry.h"
#include "moenum/mx.h"
#include "moenum/mx_names.h"

namespace py = pybind11;

namespace moenum::bindings {
namespace {

using F32Array = py::array_t<float, py::array::c_style>;
using U8Array = py::array_t<uint8_t, py::array::c_style>;

// The names are parsed once, in moenum/mx_names.h; an unknown one is a ValueError here.
Fp8Format parse_format(const std::string& s) {
  if (const auto f = fp8_format_from_name(s)) return *f;
  throw py::value_error("unknown FP8 format '" + s + "': expected 'e4m3' or 'e5m2'");
}

ScaleRounding parse_rounding(const std::string& s) {
  if (const auto r = scale_rounding_from_name(s)) return *r;
  throw py::value_error("unknown scale_rounding '" + s + "': expected 'rceil' or 'floor'");
}

InvScaleRule parse_inv_scale(const std::string& s) {
  if (const auto r = inv_scale_rule_from_name(s)) return *r;
  throw py::value_error("unknown inv_scale '" + s + "': expected 'te_kernel' or 'spec'");
}

std::vector<py::ssize_t> shape_of(const py::array& a) { return {a.shape(), a.shape() + a.ndim()}; }

// Below this many elements the OpenMP fork/join costs more than it saves.
constexpr int64_t kParallelMin = 1 << 16;

// Calls fn(begin, end) over [0, n) in contiguous chunks, in parallel when the work is large.
template <typename Fn>
void for_chunks(int64_t n, int64_t elems_per_item, Fn fn) {
  if (n * elems_per_item < kParallelMin) {
    fn(int64_t{0}, n);
    return;
  }
  constexpr int64_t kChunk = 256;
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; ++c) fn(c * kChunk, std::min(n, (c + 1) * kChunk));
}

// Elementwise map from one array to a new array of the same shape, GIL released.
template <typename In, typename Out, typename Fn>
py::array_t<Out> map_elements(const py::array_t<In, py::array::c_style>& in, Fn fn) {
  py::array_t<Out> out(shape_of(in));
  const In* src = in.data();
  Out* dst = out.mutable_data();
  const int64_t n = in.size();
  {
    py::gil_scoped_release release;
    for_chunks(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = fn(src[i]);
    });
  }
  return out;
}

void check_2d(const py::array& a, const char* what) {
  if (a.ndim() != 2) throw py::value_error(std::string(what) + " must be 2-D, got " + std::to_string(a.ndim()) + "-D");
}

py::tuple mx_quantize(const F32Array& x, const std::string& fmt, const std::string& rounding, bool columnwise,
                      const std::string& inv_scale) {
  const Fp8Format f = parse_format(fmt);
  const ScaleRounding r = parse_rounding(rounding);
  const InvScaleRule rule = parse_inv_scale(inv_scale);
  check_2d(x, "x");
  const int64_t rows = x.shape(0), cols = x.shape(1);
  const int64_t blocked = columnwise ? rows : cols;
  if (blocked % kMxBlock != 0)
    throw py::value_error("MXFP8 blocks run along " + std::string(columnwise ? "rows" : "columns") + ": length " +
                          std::to_string(blocked) + " is not a multiple of 32");
  U8Array q({rows, cols});
  U8Array s = columnwise ? U8Array({rows / kMxBlock, cols}) : U8Array({rows, cols / kMxBlock});
  const float* px = x.data();
  uint8_t* pq = q.mutable_data();
  uint8_t* ps = s.mutable_data();
  {
    py::gil_scoped_release release;
    if (!columnwise) {
      // A C-contiguous [rows, cols] array blocked along rows is [rows*cols/32, 32] blocked the same
      // way, so split over blocks: a single huge row still spreads over the threads.
      for_chunks(rows * (cols / kMxBlock), kMxBlock, [&](int64_t b, int64_t e) {
        mx_quantize_rowwise(px + b * kMxBlock, e - b, kMxBlock, pq + b * kMxBlock, ps + b, f, r, rule);
      });
    } else {
      for_chunks(rows / kMxBlock, kMxBlock * cols, [&](int64_t b, int64_t e) {
        mx_quantize_columnwise(px + b * kMxBlock * cols, (e - b) * kMxBlock, cols, pq + b * kMxBlock * cols,
                               ps + b * cols, f, r, rule);
      });
    }
  }
  return py::make_tuple(q, s);
}

F32Array mx_dequantize(const U8Array& q, const U8Array& s, const std::string& fmt, bool columnwise) {
  const Fp8Format f = parse_format(fmt);
  check_2d(q, "codes");
  check_2d(s, "scales");
  const int64_t rows = q.shape(0), cols = q.shape(1);
  const int64_t blocked = columnwise ? rows : cols;
  if (blocked % kMxBlock != 0)
    throw py::value_error("codes: blocked length " + std::to_string(blocked) + " is not a multiple of 32");
  const int64_t srows = columnwise ? rows / kMxBlock : rows, scols = columnwise ? cols : cols / kMxBlock;
  if (s.shape(0) != srows || s.shape(1) != scols)
    throw py::value_error("scales have shape (" + std::to_string(s.shape(0)) + ", " + std::to_string(s.shape(1)) +
                          "), expected (" + std::to_string(srows) + ", " + std::to_string(scols) + ")");
  F32Array y({rows, cols});
  const uint8_t* pq = q.data();
  const uint8_t* ps = s.data();
  float* py_ = y.mutable_data();
  {
    py::gil_scoped_release release;
    if (!columnwise) {
      for_chunks(rows * (cols / kMxBlock), kMxBlock, [&](int64_t b, int64_t e) {
        mx_dequantize_rowwise(pq + b * kMxBlock, ps + b, e - b, kMxBlock, py_ + b * kMxBlock, f);
      });
    } else {
      for_chunks(rows / kMxBlock, kMxBlock * cols, [&](int64_t b, int64_t e) {
        mx_dequantize_columnwise(pq + b * kMxBlock * cols, ps + b * cols, (e - b) * kMxBlock, cols,
                                 py_ + b * kMxBlock * cols, f);
      });
    }
  }
  return y;
}

void bind(py::module_& m) {
  m.def("mx_quantize", &mx_quantize, py::arg("x"), py::arg("fmt") = "e4m3", py::arg("scale_rounding") = "rceil",
        py::arg("columnwise") = false, py::arg("inv_scale") = inv_scale_rule_name(kDefaultInvScale),
        "MXFP8-quantize a C-contiguous 2-D float32 array, blocks of 32 along the last axis (or down the\n"
        "columns when columnwise). Returns (codes uint8 like x, scales uint8 E8M0). inv_scale: 'te_kernel'\n"
        "(the default: TransformerEngine's kernel rule, 1.0 for code 0, +0.0 for 0xFE) or 'spec' (2^(127-code)\n"
        "exactly); see e8m0.h.");
  m.def("mx_dequantize", &mx_dequantize, py::arg("codes"), py::arg("scales"), py::arg("fmt") = "e4m3",
        py::arg("columnwise") = false, "codes * 2^(scale-127) as float32, exact (inf past the fp32 range)");
  m.def("fp8_encode", [](const F32Array& x, const std::string& fmt) {
    const Fp8Format f = parse_format(fmt);
    return map_elements<float, uint8_t>(x, [f](float v) { return fp8_encode(v, f); });
  }, py::arg("x"), py::arg("fmt"), "float32 -> FP8 codes, round to nearest even, satfinite, NaN -> 0x7F");
  m.def("fp8_decode", [](const U8Array& c, const std::string& fmt) {
    const Fp8Format f = parse_format(fmt);
    return map_elements<uint8_t, float>(c, [f](uint8_t v) { return fp8_decode(v, f); });
  }, py::arg("codes"), py::arg("fmt"), "FP8 codes -> float32, exact");
  m.def("e8m0_from_amax", [](const F32Array& amax, const std::string& fmt, const std::string& rounding) {
    const Fp8Format f = parse_format(fmt);
    const ScaleRounding r = parse_rounding(rounding);
    return map_elements<float, uint8_t>(amax, [f, r](float a) { return e8m0_from_amax(a, f, r); });
  }, py::arg("amax"), py::arg("fmt"), py::arg("scale_rounding") = "rceil", "block amax -> E8M0 scale code");
  m.def("e8m0_from_f32_rceil", [](const F32Array& s) {
    return map_elements<float, uint8_t>(s, [](float v) { return e8m0_from_f32_rceil(v); });
  }, py::arg("s"), "float32 -> E8M0 rounding up (the cvt.rp.satfinite.ue8m0x2.f32 rule)");
  m.def("e8m0_to_f32", [](const U8Array& c) {
    return map_elements<uint8_t, float>(c, [](uint8_t v) { return e8m0_to_f32(v); });
  }, py::arg("codes"), "E8M0 code -> 2^(code-127) (0xFF -> NaN)");
  m.def("e8m0_inv_scale", [](const U8Array& c, const std::string& rule) {
    const InvScaleRule ru = parse_inv_scale(rule);
    return map_elements<uint8_t, float>(c, [ru](uint8_t v) { return mx_inv_scale(v, ru); });
  }, py::arg("codes"), py::arg("rule") = inv_scale_rule_name(kDefaultInvScale),
     "E8M0 code -> the inverse scale the quantizer multiplies by (rule te_kernel or spec)");
}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
