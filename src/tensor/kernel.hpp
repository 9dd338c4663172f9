// Private helpers for the CPU kernels in src/tensor. C++17 only: this is the
// one place that includes xtensor (see DESIGN.md, "Tensors and xtensor").
#pragma once

#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>

#include "loops.hpp"
#include "refgrad/ops.hpp"
#include "refgrad/tensor.hpp"

namespace refgrad::kernel {

template <class T>
struct Tag {
  using type = T;
};

// The error for a dtype that reached a kernel which does not compute in it:
// a storage format (float16, bfloat16, the narrower integers) that the op did
// not first read into its opmath type, or a complex dtype given to an op that
// has no complex kernel.
[[noreturn]] void fail_not_computed(DType dtype, const char* op);

// Calls f(Tag<T>{}) with T the C++ type of `dtype`, one of the compute types
// (bool, int64, float32, float64). An op on a storage format computes in
// opmath_dtype() and rounds its result back (see in_opmath below).
template <class F>
decltype(auto) dispatch(DType dtype, F&& f, const char* op = "dispatch") {
  switch (dtype) {
    case DType::Bool: return f(Tag<bool>{});
    case DType::Int64: return f(Tag<std::int64_t>{});
    case DType::Float32: return f(Tag<float>{});
    case DType::Float64: return f(Tag<double>{});
    default: fail_not_computed(dtype, op);
  }
}

// Like dispatch, and complex64/complex128 as std::complex<float>/<double>: for
// the ops that have complex kernels (arithmetic, the analytic functions,
// where, equality). Nothing here uses std::complex's fast paths: g++ without
// -ffast-math multiplies and divides as C's Annex G says (inf and NaN parts
// handled), as ATen's c10::complex does up to rounding.
template <class F>
decltype(auto) dispatch_with_complex(DType dtype, F&& f, const char* op = "dispatch") {
  switch (dtype) {
    case DType::ComplexFloat: return f(Tag<std::complex<float>>{});
    case DType::ComplexDouble: return f(Tag<std::complex<double>>{});
    default: return dispatch(dtype, std::forward<F>(f), op);
  }
}

// Like dispatch, for ops defined only on floating dtypes.
template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(Tag<float>{});
    case DType::Float64: return f(Tag<double>{});
    case DType::Float16:
    case DType::BFloat16: fail_not_computed(dtype, op);
    default: fail(concat(op, ": expected a floating point tensor, got ", dtype_name(dtype)));
  }
}

// Like dispatch_floating, and complex64/complex128 (std::complex).
template <class F>
decltype(auto) dispatch_floating_or_complex(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::ComplexFloat: return f(Tag<std::complex<float>>{});
    case DType::ComplexDouble: return f(Tag<std::complex<double>>{});
    default: return dispatch_floating(dtype, op, std::forward<F>(f));
  }
}

// Calls f(Tag<T>{}) with T the type stored for any dtype: for code that moves
// or converts elements without computing on them (casts, copies, item()).
template <class F>
decltype(auto) dispatch_storage(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Bool: return f(Tag<bool>{});
    case DType::UInt8: return f(Tag<std::uint8_t>{});
    case DType::Int8: return f(Tag<std::int8_t>{});
    case DType::Int16: return f(Tag<std::int16_t>{});
    case DType::Int32: return f(Tag<std::int32_t>{});
    case DType::Int64: return f(Tag<std::int64_t>{});
    case DType::UInt16: return f(Tag<std::uint16_t>{});
    case DType::UInt32: return f(Tag<std::uint32_t>{});
    case DType::UInt64: return f(Tag<std::uint64_t>{});
    case DType::Float16: return f(Tag<Half>{});
    case DType::BFloat16: return f(Tag<BFloat16>{});
    case DType::Float32: return f(Tag<float>{});
    case DType::Float64: return f(Tag<double>{});
    case DType::ComplexHalf: return f(Tag<ComplexHalf>{});
    case DType::ComplexFloat: return f(Tag<std::complex<float>>{});
    case DType::ComplexDouble: return f(Tag<std::complex<double>>{});
  }
  fail("dispatch_storage: unknown dtype");
}

// ATen's opmath for storage formats: `t` read into the type its op computes
// in (float16/bfloat16 -> float32, complex32 -> complex64, the narrower
// integers -> int64); the
// tensor itself when it is a compute type already.
inline Tensor to_opmath(const Tensor& t) { return t.defined() ? t.to(opmath_dtype(t.dtype())) : t; }
inline OptionalTensor to_opmath(const OptionalTensor& t) {
  return t ? OptionalTensor(to_opmath(*t)) : std::nullopt;
}

// True when `t` is stored in a format its op does not compute in.
inline bool is_storage_format(const Tensor& t) { return t.defined() && opmath_dtype(t.dtype()) != t.dtype(); }

// `result`, computed in opmath_dtype(dtype), rounded to `dtype` (one rounding
// per primitive, as ATen's kernels round a float16 result once).
inline Tensor rounded_to(Tensor result, DType dtype) {
  if (result.defined() && result.dtype() != dtype && result.dtype() == opmath_dtype(dtype)) return result.to(dtype);
  return result;
}

// ATen's int64 arithmetic wraps around on overflow (two's complement). Signed
// overflow is undefined behaviour in C++, so it is done in uint64_t.
inline std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
inline std::int64_t wrapping_sub(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
inline std::int64_t wrapping_mul(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}
inline std::int64_t wrapping_neg(std::int64_t a) { return wrapping_sub(0, a); }

template <class T>
constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
constexpr bool is_complex_v = std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>;

// One element converted from From to To as torch converts it on x86 (a cast,
// `.to(dtype)`), without undefined behaviour:
// - to float16/bfloat16 through float, as c10::Half(float) rounds (a double
//   is rounded to float first, as torch does);
// - a float to a 32-bit or narrower integer through int32, as cvttss2si does:
//   NaN and values outside int32 give INT32_MIN, then the low bits are kept
//   (torch turns -1.5 into uint8 255 and 1e10 into int32 -2147483648);
// - a float to a 64-bit integer: NaN and values outside int64 give INT64_MIN;
// - complex to real keeps the real part (to bool: either part nonzero);
//   integers wrap to narrower integers;
// - complex32 through complex64, each part rounded as a float16 is.
template <class To, class From>
To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<From, ComplexHalf>) {
    return convert<To>(std::complex<float>(to_float(value.real), to_float(value.imag)));
  } else if constexpr (std::is_same_v<To, ComplexHalf>) {
    const auto wide = convert<std::complex<float>>(value);
    return ComplexHalf{to_half(wide.real()), to_half(wide.imag())};
  } else if constexpr (std::is_same_v<To, bool> && is_complex_v<From>) {
    return value.real() != 0 || value.imag() != 0;
  } else if constexpr (is_reduced_float_v<From>) {
    return convert<To>(to_float(value));
  } else if constexpr (is_complex_v<From>) {
    if constexpr (is_complex_v<To>) return To(static_cast<typename To::value_type>(value.real()),
                                              static_cast<typename To::value_type>(value.imag()));
    else return convert<To>(value.real());
  } else if constexpr (std::is_same_v<To, Half>) {
    return to_half(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return to_bfloat16(static_cast<float>(value));
  } else if constexpr (is_complex_v<To>) {
    return To(convert<typename To::value_type>(value), 0);
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    const double v = static_cast<double>(value);
    if constexpr (sizeof(To) <= 4 && !std::is_same_v<To, std::uint32_t>) {
      constexpr double limit = 2147483648.0;  // 2^31
      const std::int32_t wide = v >= -limit && v < limit ? static_cast<std::int32_t>(v)
                                                         : std::numeric_limits<std::int32_t>::min();
      return static_cast<To>(wide);
    } else {
      constexpr double limit = 9223372036854775808.0;  // 2^63
      if (!(v >= -limit && v < limit)) return static_cast<To>(std::numeric_limits<std::int64_t>::min());
      return static_cast<To>(static_cast<std::int64_t>(v));
    }
  } else {
    return static_cast<To>(value);  // integer to integer (wraps) or to float
  }
}

// A complex Scalar used where a real number is (an alpha of a real op): its
// real part, as a float Scalar. A nonzero imaginary part raises, naming the op
// and the argument, as c10's checked conversion does: it is never dropped.
inline Scalar real_part_of_scalar(const Scalar& value, DType dtype, const char* op, const char* name) {
  check(value.to_complex().imag() == 0, op, ": ", name, " ", value.repr(), " cannot be converted to type ",
        dtype_name(dtype), " without overflow");
  return Scalar(value.to_complex().real());
}

// `value` as an element of type T, as c10's checked Scalar::to<T> converts it
// for a fill value or an alpha: a value that lies outside T's range (NaN too,
// for an integer type) raises, naming the op and the argument, where a plain
// cast would be undefined behaviour. Anything converts to bool.
template <class T>
T scalar_to(const Scalar& value, const char* op, const char* name) {
  if constexpr (std::is_same_v<T, bool>) {
    return value.to_bool();
  } else if constexpr (is_complex_v<T>) {
    return value.to<T>();
  } else if constexpr (std::is_same_v<T, ComplexHalf>) {
    return convert<ComplexHalf>(value.to<std::complex<float>>());
  } else if (value.is_complex()) {
    return scalar_to<T>(real_part_of_scalar(value, dtype_of<T>(), op, name), op, name);
  } else if constexpr (is_reduced_float_v<T>) {
    const T out = convert<T>(value.is_floating_point() ? value.to_double() : static_cast<double>(value.to_int64()));
    check(!std::isfinite(value.to_double()) || std::isfinite(to_float(out)), op, ": ", name, " ", value.repr(),
          " cannot be converted to type ", dtype_name(dtype_of<T>()), " without overflow");
    return out;
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, std::int64_t>) {
    // The narrower integers: the value must lie in T's range.
    const double v = value.is_floating_point() ? value.to_double() : static_cast<double>(value.to_int64());
    // (NaN compares false: it never fits; a negative value is below an unsigned T's minimum, 0.)
    const bool fits = v >= static_cast<double>(std::numeric_limits<T>::min()) &&
                      v <= static_cast<double>(std::numeric_limits<T>::max());
    check(fits, op, ": ", name, " ", value.repr(), " cannot be converted to type ", dtype_name(dtype_of<T>()),
          " without overflow");
    return value.is_floating_point() ? static_cast<T>(v) : static_cast<T>(value.to_int64());
  } else {
    if (!value.is_floating_point()) return static_cast<T>(value.to_int64());
    const double v = value.to_double();
    if constexpr (std::is_same_v<T, std::int64_t>) {
      constexpr double limit = 9223372036854775808.0;  // 2^63, as c10 compares it
      check(v >= -limit && v <= limit, op, ": ", name, " ", value.repr(),
            " cannot be converted to type int64 without overflow");
      // 2^63 passes c10's check; x86's conversion (so torch's) gives INT64_MIN.
      return v == limit ? std::numeric_limits<std::int64_t>::min() : static_cast<std::int64_t>(v);
    } else if constexpr (std::is_same_v<T, float>) {
      check(!std::isfinite(v) || std::abs(v) <= std::numeric_limits<float>::max(), op, ": ", name, " ", value.repr(),
            " cannot be converted to type float32 without overflow");
      return static_cast<float>(v);
    } else {
      return v;
    }
  }
}

// Number of elements spanned by a strided view, from its first element.
std::size_t span_of(const Shape& sizes, const Shape& strides);

// Visits the storage offset (relative to element [0,...,0]) of every element
// of a strided view, in row-major order.
template <class F>
void for_each_offset(const Shape& sizes, const Shape& strides, F&& f) {
  const std::size_t ndim = sizes.size();
  for (std::int64_t s : sizes)
    if (s == 0) return;
  if (ndim == 0) {
    f(std::int64_t{0});
    return;
  }
  std::vector<std::int64_t> index(ndim, 0);
  std::int64_t offset = 0;
  const std::int64_t inner_size = sizes[ndim - 1];
  const std::int64_t inner_stride = strides[ndim - 1];
  while (true) {
    for (std::int64_t i = 0; i < inner_size; ++i) f(offset + i * inner_stride);
    // Advance the odometer over the outer dims.
    std::size_t d = ndim - 1;
    while (true) {
      if (d == 0) return;
      --d;
      ++index[d];
      offset += strides[d];
      if (index[d] < sizes[d]) break;
      offset -= index[d] * strides[d];
      index[d] = 0;
    }
  }
}

// True when a view's elements fill the span of storage it covers: contiguous
// or permuted (transposed) views, but not broadcast (stride 0) or gapped
// (step > 1) ones.
inline bool is_dense(const Tensor& t) {
  return span_of(t.sizes(), t.strides()) == static_cast<std::size_t>(t.numel());
}

// `t` itself when dense, else a contiguous copy: what `adapt` accepts.
Tensor dense(const Tensor& t);

// An xtensor view of a tensor's buffer (no copy), with the tensor's shape and
// strides. It needs a dense view: an xtensor adaptor's buffer must hold
// exactly numel elements ("xbuffer_storage not resizable" otherwise).
template <class T>
auto adapt(const Tensor& t) {
  check(is_dense(t), "adapt: view with sizes ", shape_text(t.sizes()), " and strides ", shape_text(t.strides()),
        " is not dense; make it contiguous first");
  std::vector<std::size_t> shape(t.sizes().begin(), t.sizes().end());
  std::vector<std::ptrdiff_t> strides(t.strides().begin(), t.strides().end());
  return xt::adapt(t.data_ptr<T>(), span_of(t.sizes(), t.strides()), xt::no_ownership(), shape, strides);
}

// out = f(inputs...) elementwise, as a new tensor of dtype dtype_of<Out>()
// and shape `sizes`. Each input must already have the C++ element type named
// in `In...` and be broadcastable to `sizes` (expanded views are fine):
//   map<bool, float, float>(sizes, [](float x, float y) { return x < y; }, a, b)
// Inputs are read in place through their strides (loops.hpp): a broadcast,
// transposed or gapped input is not copied first.
template <class Out, class... In, class F, class... Tensors>
Tensor map(const Shape& sizes, F f, const Tensors&... inputs) {
  static_assert(sizeof...(In) == sizeof...(Tensors), "map: one element type per input");
  Tensor out = empty(sizes, dtype_of<Out>());
  if (out.numel() == 0) return out;
  const std::array<Tensor, sizeof...(In)> views{broadcast_to(inputs, sizes)...};
  elementwise_loop<Out, In...>(out, views, f, std::index_sequence_for<In...>{});
  return with_rounding_noise(out);  // under a RoundingNoiseScope (tensor.hpp), one rounding's noise
}

// c[m,n] = op(a)[m,k] @ op(b)[k,n] with a, b, c row-major and contiguous, op
// a transpose when asked; with `accumulate`, c += the product instead. OpenBLAS
// on one thread for float and double, wrap-around loops for int64 (as ATen).
// Defined in linalg.cpp.
template <class T>
void gemm_contiguous(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                     const T* a, const T* b, T* c, bool accumulate = false);

// Contiguous copy of `t` in `dtype` (no copy when it already is both).
Tensor contiguous_as(const Tensor& t, DType dtype);

// A complex tensor computed part by part: complex(f(real(t)), f(imag(t))),
// for an op that is linear over the reals in `t` (sum, mean, cumsum, gather,
// index_add, ...): the op applied to the real and imaginary parts separately
// is the op on the complex tensor. A real `t` is f(t).
template <class F>
Tensor by_parts(const Tensor& t, F&& f) {
  if (!t.defined() || !is_complex(t.dtype())) return f(t);
  return complex(f(real(t)), f(imag(t)));
}

// Dims to reduce over: an empty list means all; each wrapped and unique.
std::vector<bool> reduction_mask(const IntList& dim, std::int64_t ndim, const char* op);

}  // namespace refgrad::kernel
