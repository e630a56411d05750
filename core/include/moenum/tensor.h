// A dense row-major tensor whose values are stored in their logical width: fp64 as double; fp32 and
// bf16 as float (every bf16 value is a float); FP8 codes (e4m3, e5m2) and E8M0 scale codes as uint8.
// Typed code uses the storage itself (f64(), f32(), u8(), or values<T>() in templates); generic code
// uses get/set and read/write, which convert to and from double (exact for every value of a dtype).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "moenum/error.h"
#include "moenum/huge_pages.h"

namespace moenum {

enum class Storage { kF32, kF64, kU8 };

// InternalError for a dtype no tensor has.
inline Storage storage_of(const std::string& dtype) {
  if (dtype == "fp32" || dtype == "bf16") return Storage::kF32;
  if (dtype == "fp64") return Storage::kF64;
  if (dtype == "e4m3" || dtype == "e5m2" || dtype == "e8m0") return Storage::kU8;
  throw InternalError("tensor: unknown dtype '" + dtype + "'");
}

// A vector whose elements start uninitialised: Tensor zeroes its storage with every core instead
// (zero_fill), since first touching a production layer's gigabytes of outputs on one thread costs
// seconds per backend.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    T* p = std::allocator<T>::allocate(n);
    advise_huge_pages(p, n * sizeof(T));  // before the first touch (moenum/huge_pages.h)
    return p;
  }
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <class T>
using TensorBuffer = std::vector<T, UninitializedAllocator<T>>;

// bytes zeroed in parallel above a few MB (core/src/tensor.cpp)
void zero_fill(void* data, size_t bytes);

struct Tensor {
  std::vector<int64_t> shape;
  std::string dtype = "fp32";  // logical dtype: fp64 | fp32 | bf16 | e4m3 | e5m2 | e8m0

  Tensor() = default;
  Tensor(std::vector<int64_t> s, std::string dt) : Tensor(std::move(s), std::move(dt), true) {}
  // Storage left uninitialised, for a producer that writes every element with all cores (a device
  // download through the staged copies, a parallel conversion): zeroing first would touch it twice.
  static Tensor for_overwrite(std::vector<int64_t> s, std::string dt) { return Tensor(std::move(s), std::move(dt), false); }

  static int64_t count(const std::vector<int64_t>& s) {
    return std::accumulate(s.begin(), s.end(), int64_t{1}, [](int64_t a, int64_t b) { return a * b; });
  }
  Storage storage() const { return Storage(values_.index()); }
  int64_t size() const {
    return std::visit([](const auto& v) { return int64_t(v.size()); }, values_);
  }
  size_t itemsize() const {
    return std::visit([](const auto& v) { return sizeof(v[0]); }, values_);
  }
  void* bytes() {
    return std::visit([](auto& v) { return static_cast<void*>(v.data()); }, values_);
  }
  const void* bytes() const {
    return std::visit([](const auto& v) { return static_cast<const void*>(v.data()); }, values_);
  }

  // The storage as T (float, double, uint8_t); InternalError when it is not T.
  template <class T>
  std::span<T> values() {
    return *checked<TensorBuffer<T>>(std::get_if<TensorBuffer<T>>(&values_));
  }
  template <class T>
  std::span<const T> values() const {
    return *checked<const TensorBuffer<T>>(std::get_if<TensorBuffer<T>>(&values_));
  }
  std::span<double> f64() { return values<double>(); }
  std::span<const double> f64() const { return values<double>(); }
  std::span<float> f32() { return values<float>(); }
  std::span<const float> f32() const { return values<float>(); }
  std::span<uint8_t> u8() { return values<uint8_t>(); }
  std::span<const uint8_t> u8() const { return values<uint8_t>(); }

  // One element as double, and back (set rounds to the storage: exact for values of the dtype).
  double get(int64_t i) const {
    return std::visit([i](const auto& v) { return double(v[size_t(i)]); }, values_);
  }
  void set(int64_t i, double x) {
    std::visit([i, x](auto& v) { v[size_t(i)] = static_cast<std::decay_t<decltype(v[0])>>(x); }, values_);
  }
  // n consecutive elements from flat index `begin`, as double, and back.
  void read(int64_t begin, int64_t n, double* out) const {
    std::visit([&](const auto& v) { std::copy(v.begin() + begin, v.begin() + begin + n, out); }, values_);
  }
  void write(int64_t begin, int64_t n, const double* in) {
    std::visit(
        [&](auto& v) {
          using T = std::decay_t<decltype(v[0])>;
          for (int64_t j = 0; j < n; ++j) v[size_t(begin + j)] = static_cast<T>(in[j]);
        },
        values_);
  }

 private:
  Tensor(std::vector<int64_t> s, std::string dt, bool zeroed) : shape(std::move(s)), dtype(std::move(dt)) {
    const size_t n = size_t(count(shape));
    switch (storage_of(dtype)) {
      case Storage::kF32: values_ = TensorBuffer<float>(n); break;
      case Storage::kF64: values_ = TensorBuffer<double>(n); break;
      case Storage::kU8: values_ = TensorBuffer<uint8_t>(n); break;
    }
    if (zeroed) zero_fill(bytes(), n * itemsize());
  }
  template <class V>
  V* checked(V* v) const {
    if (!v) throw InternalError("tensor: " + dtype + " values are not stored as the type asked for");
    return v;
  }

  std::variant<TensorBuffer<float>, TensorBuffer<double>, TensorBuffer<uint8_t>> values_;
};

}  // namespace moenum
