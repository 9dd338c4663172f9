// Elementwise ops: unary math, binary arithmetic, comparisons, logical ops,
// where, clamp and masked_fill.
//
// Every op takes the same three steps as ATen's TensorIterator:
//   1. the compute dtype: result_type over the operands (three tiers, so a
//      Python number or a 0-dim tensor does not widen a tensor with dims), or
//      the default float dtype for float-valued ops on int64/bool inputs;
//   2. the operands converted to it (a Scalar becomes a 0-dim tensor, which
//      broadcasts with stride 0, as ATen's "wrapped numbers" do);
//   3. one kernel::map over the broadcast shape.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>

#include "kernel.hpp"

namespace refgrad {
namespace {

template <class T>
constexpr bool is_bool_v = std::is_same_v<T, bool>;
template <class T>
constexpr bool is_int64_v = std::is_same_v<T, std::int64_t>;
using kernel::is_complex_v;

// ------------------------------------------------------------- helpers ---

void check_defined(const Tensor& t, const char* op) { check(t.defined(), op, ": tensor is undefined"); }

DType dtype_of_operand(const Operand& operand) {
  if (const auto* t = std::get_if<Tensor>(&operand)) return t->dtype();
  return std::get<Scalar>(operand).natural_dtype();
}

// torch.result_type over the operands, after checking the tensors are defined.
DType common_dtype(const char* op, const std::vector<Operand>& operands) {
  for (const Operand& operand : operands)
    if (const auto* t = std::get_if<Tensor>(&operand)) check_defined(*t, op);
  return result_type(operands);
}
DType common_dtype(const char* op, const Operand& a, const Operand& b) {
  for (const Operand* operand : {&a, &b})
    if (const auto* t = std::get_if<Tensor>(operand)) check_defined(*t, op);
  return result_type(a, b);
}

// ATen's promote_integer_to_float: float-valued ops compute int64/bool inputs
// in the default dtype (complex inputs stay complex).
DType float_dtype(DType dtype) { return is_floating_point(dtype) || is_complex(dtype) ? dtype : default_dtype(); }

// broadcast_shapes, with the op's name in front of the error.
Shape broadcast_for(const char* op, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const Error& error) {
    throw Error(concat(op, ": ", error.what()));
  }
}

using kernel::wrapping_add;
using kernel::wrapping_mul;
using kernel::wrapping_neg;
using kernel::wrapping_sub;

// a + b, a - b, a * b and -a for int64 (wrapping) and floating types.
template <class T>
T plus(T a, T b) {
  if constexpr (is_int64_v<T>) return wrapping_add(a, b);
  else return a + b;
}
template <class T>
T minus(T a, T b) {
  if constexpr (is_int64_v<T>) return wrapping_sub(a, b);
  else return a - b;
}
template <class T>
T times(T a, T b) {
  if constexpr (is_int64_v<T>) return wrapping_mul(a, b);
  else return a * b;
}
template <class T>
T negate(T a) {
  if constexpr (is_int64_v<T>) return wrapping_neg(a);
  else return -a;
}

// A Scalar argument of an op (alpha, a clamp bound, a where or fill value),
// converted like c10's checked_convert: it must fit the dtype it is used in.
// +-inf and NaN fit floating dtypes; any value fits bool. c10 compares with
// INT64_MAX rounded to double, so 2^63 passes for int64 and converts as x86
// does, to INT64_MIN.
template <class T>
T checked_scalar(const Scalar& value, const char* op) {
  if constexpr (is_bool_v<T>) {
    return value.to_bool();
  } else if constexpr (is_complex_v<T>) {
    if (value.is_complex()) return value.to<T>();
    // A real Scalar as a complex number: its real part must fit.
    return T(checked_scalar<typename T::value_type>(value, op), 0);
  } else {
    if (value.is_complex())
      return checked_scalar<T>(kernel::real_part_of_scalar(value, dtype_of<T>(), op, "value"), op);
    if (value.is_floating_point()) {
      const double v = value.to_double();
      bool fits = true;
      if constexpr (is_int64_v<T>) fits = v >= -0x1p63 && v <= 0x1p63;  // false for NaN
      else fits = !std::isfinite(v) || std::abs(v) <= std::numeric_limits<T>::max();
      check(fits, op, ": value ", value.repr(), " cannot be converted to type ", dtype_name(dtype_of<T>()),
            " without overflow");
      if constexpr (is_int64_v<T>) {
        if (v == 0x1p63) return std::numeric_limits<std::int64_t>::min();
      }
      return static_cast<T>(v);
    }
    return static_cast<T>(value.to_int64());  // from the integer itself, not through double
  }
}

// A wrapped number: a Scalar operand of a binary op, converted to the compute
// dtype. ATen does not check these: 1e300 added to a float32 tensor is inf.
// Promotion never makes the compute dtype integral for a float Scalar.
template <class T>
T wrapped_scalar(const Scalar& value, const char* op) {
  if constexpr (std::is_floating_point_v<T>) {
    if (value.is_complex()) return checked_scalar<T>(value, op);  // promotion made T complex unless the part is 0
    return value.is_floating_point() ? static_cast<T>(value.to_double()) : static_cast<T>(value.to_int64());
  } else if constexpr (is_complex_v<T>) {
    if (value.is_complex()) return value.to<T>();
    return T(wrapped_scalar<typename T::value_type>(value, op), 0);
  } else {
    return checked_scalar<T>(value, op);
  }
}

Tensor scalar_tensor_of(DType dtype, const char* op, const Scalar& value, bool checked) {
  Tensor out = empty({}, dtype);
  kernel::dispatch_with_complex(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    *out.data_ptr<T>() = checked ? checked_scalar<T>(value, op) : wrapped_scalar<T>(value, op);
  }, op);
  return out;
}

// An operand in the compute dtype: a tensor is converted (copied only when its
// dtype differs); a Scalar becomes a 0-dim tensor.
Tensor operand_as(const Operand& operand, DType dtype, const char* op, bool checked = false) {
  if (const auto* t = std::get_if<Tensor>(&operand)) return t->to(dtype);
  return scalar_tensor_of(dtype, op, std::get<Scalar>(operand), checked);
}

// out = f(a, b) elementwise over the broadcast shape; a and b already hold T.
template <class Out, class T, class F>
Tensor binary_kernel(const char* op, const Tensor& a, const Tensor& b, F f) {
  const Shape sizes = broadcast_for(op, a.sizes(), b.sizes());
  // A 0-dim right operand (most often a wrapped Scalar) is a constant: captured
  // by value, it lets the other operand keep map's flat path.
  if (b.dim() == 0 && a.sizes() == sizes) {
    const T value = *b.data_ptr<T>();
    return kernel::map<Out, T>(sizes, [f, value](T x) { return f(x, value); }, a);
  }
  return kernel::map<Out, T, T>(sizes, f, a, b);
}

// ---------------------------------------------------------------- unary ---

// A float-valued unary op; int64 and bool inputs compute in float32. With
// `with_complex`, for the ops ATen also defines on complex numbers (where
// std::exp, std::sin, ... have complex overloads), complex inputs compute too.
template <bool with_complex, class F>
Tensor unary_float(const Tensor& self, const char* op, F f) {
  check_defined(self, op);
  const DType dtype = float_dtype(self.dtype());
  const Tensor input = self.to(opmath_dtype(dtype));
  const auto compute = [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kernel::map<T, T>(input.sizes(), [f](T x) { return static_cast<T>(f(x)); }, input);
  };
  if constexpr (with_complex) {
    return kernel::rounded_to(kernel::dispatch_floating_or_complex(input.dtype(), op, compute), dtype);
  } else {
    return kernel::rounded_to(kernel::dispatch_floating(input.dtype(), op, compute), dtype);
  }
}

// The two kinds, by name.
template <class F>
Tensor unary_real(const Tensor& self, const char* op, F f) { return unary_float<false>(self, op, f); }
template <class F>
Tensor unary_float_or_complex(const Tensor& self, const char* op, F f) { return unary_float<true>(self, op, f); }

// A unary op that keeps the dtype; bool inputs are rejected with `bool_error`.
template <class F>
Tensor unary_same(const Tensor& self, const char* op, const char* bool_error, F f) {
  check_defined(self, op);
  check(self.dtype() != DType::Bool, op, ": ", bool_error);
  const Tensor input = kernel::to_opmath(self);
  return kernel::rounded_to(kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) {
      return Tensor();  // rejected above
    } else {
      return kernel::map<T, T>(input.sizes(), [f](T x) { return static_cast<T>(f(x)); }, input);
    }
  }, op), self.dtype());
}

}  // namespace

Tensor neg(const Tensor& self) {
  if (self.defined() && is_complex(self.dtype())) {
    return kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return kernel::map<T, T>(self.sizes(), [](T x) { return negate(x); }, self);
    }, "neg");
  }
  return unary_same(self, "neg",
                    "negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a "
                    "mask, use the `~` or `logical_not()` operator instead.",
                    [](auto x) { return negate(x); });
}

Tensor abs(const Tensor& self) {
  if (self.defined() && is_complex(self.dtype())) {  // |z|, a real tensor
    return kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_complex_v<T>) {
        return kernel::map<typename T::value_type, T>(self.sizes(), [](T z) { return std::abs(z); }, self);
      } else {
        return Tensor();  // complex only here
      }
    }, "abs");
  }
  return unary_same(self, "abs", "not implemented for bool", [](auto x) {
    using T = decltype(x);
    if constexpr (is_int64_v<T>) return x < 0 ? wrapping_neg(x) : x;  // abs(INT64_MIN) wraps to itself
    else return std::abs(x);
  });
}

Tensor sign(const Tensor& self) {
  check_defined(self, "sign");
  const Tensor input = kernel::to_opmath(self);
  return kernel::rounded_to(kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) {
      return kernel::map<bool, bool>(input.sizes(), [](bool x) { return x; }, input);
    } else {
      // (0 < x) - (x < 0): 0 for zeros and NaN, as ATen.
      return kernel::map<T, T>(input.sizes(), [](T x) { return static_cast<T>((T(0) < x) - (x < T(0))); }, input);
    }
  }), self.dtype());
}

Tensor relu(const Tensor& self) {
  // x < 0 ? 0 : x keeps NaN and -0.0, as ATen's clamp_min(self, 0).
  return unary_same(self, "relu", "Boolean inputs not supported for relu",
                    [](auto x) { return x < 0 ? decltype(x)(0) : x; });
}

Tensor square(const Tensor& self) {
  check_defined(self, "square");
  // square is pow(self, 2): the int 2 promotes bool to int64.
  const DType dtype = self.dtype() == DType::Bool ? DType::Int64 : self.dtype();
  const Tensor input = self.to(opmath_dtype(dtype));
  return kernel::rounded_to(kernel::dispatch_with_complex(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) {
      return Tensor();  // promoted to int64 above
    } else {
      return kernel::map<T, T>(input.sizes(), [](T x) { return times(x, x); }, input);
    }
  }, "square"), dtype);
}

Tensor exp(const Tensor& self) { return unary_float_or_complex(self, "exp", [](auto x) { return std::exp(x); }); }
Tensor log(const Tensor& self) { return unary_float_or_complex(self, "log", [](auto x) { return std::log(x); }); }
Tensor log1p(const Tensor& self) { return unary_real(self, "log1p", [](auto x) { return std::log1p(x); }); }
Tensor expm1(const Tensor& self) { return unary_real(self, "expm1", [](auto x) { return std::expm1(x); }); }
Tensor sqrt(const Tensor& self) { return unary_float_or_complex(self, "sqrt", [](auto x) { return std::sqrt(x); }); }
Tensor rsqrt(const Tensor& self) {
  return unary_float_or_complex(self, "rsqrt", [](auto x) { return decltype(x)(1) / std::sqrt(x); });
}
Tensor sin(const Tensor& self) { return unary_float_or_complex(self, "sin", [](auto x) { return std::sin(x); }); }
Tensor cos(const Tensor& self) { return unary_float_or_complex(self, "cos", [](auto x) { return std::cos(x); }); }
Tensor tan(const Tensor& self) { return unary_float_or_complex(self, "tan", [](auto x) { return std::tan(x); }); }
Tensor asin(const Tensor& self) { return unary_float_or_complex(self, "asin", [](auto x) { return std::asin(x); }); }
Tensor acos(const Tensor& self) { return unary_float_or_complex(self, "acos", [](auto x) { return std::acos(x); }); }
Tensor atan(const Tensor& self) { return unary_float_or_complex(self, "atan", [](auto x) { return std::atan(x); }); }
Tensor sinh(const Tensor& self) { return unary_float_or_complex(self, "sinh", [](auto x) { return std::sinh(x); }); }
Tensor cosh(const Tensor& self) { return unary_float_or_complex(self, "cosh", [](auto x) { return std::cosh(x); }); }
Tensor asinh(const Tensor& self) { return unary_float_or_complex(self, "asinh", [](auto x) { return std::asinh(x); }); }
Tensor acosh(const Tensor& self) { return unary_float_or_complex(self, "acosh", [](auto x) { return std::acosh(x); }); }
Tensor atanh(const Tensor& self) { return unary_float_or_complex(self, "atanh", [](auto x) { return std::atanh(x); }); }
Tensor tanh(const Tensor& self) { return unary_float_or_complex(self, "tanh", [](auto x) { return std::tanh(x); }); }
Tensor sigmoid(const Tensor& self) {
  // 1 / (1 + e^-x): exp overflows to inf for x << 0, giving 0, not NaN.
  return unary_float_or_complex(self, "sigmoid", [](auto x) { return decltype(x)(1) / (decltype(x)(1) + std::exp(-x)); });
}
Tensor erf(const Tensor& self) { return unary_real(self, "erf", [](auto x) { return std::erf(x); }); }
Tensor erfc(const Tensor& self) { return unary_real(self, "erfc", [](auto x) { return std::erfc(x); }); }
Tensor reciprocal(const Tensor& self) {
  return unary_float_or_complex(self, "reciprocal", [](auto x) { return decltype(x)(1) / x; });
}

// ------------------------------------------------------------- add, sub ---

namespace {

// ATen's alpha_check: alpha must suit the result dtype.
void check_alpha(const char* op, DType dtype, const Scalar& alpha) {
  check(!alpha.is_boolean() || dtype == DType::Bool, op,
        ": Boolean alpha only supported for Boolean results (the result is ", dtype_name(dtype), ")");
  check(is_floating_point(dtype) || is_complex(dtype) || !alpha.is_floating_point(), op,
        ": for integral input tensors, argument alpha must not be a floating point number (alpha=", alpha.repr(),
        ", result ", dtype_name(dtype), ")");
  check(is_complex(dtype) || !alpha.is_complex(), op,
        ": for non-complex input tensors, argument alpha must not be a complex number (alpha=", alpha.repr(),
        ", result ", dtype_name(dtype), ")");
}

// ATen's sub_check: `-` is not defined on bool.
void check_sub(const Operand& self, const Operand& other) {
  const bool self_bool = dtype_of_operand(self) == DType::Bool;
  const bool other_bool = dtype_of_operand(other) == DType::Bool;
  check(!(self_bool && other_bool),
        "sub: subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
        "`logical_xor()` operator instead.");
  check(!self_bool && !other_bool,
        "sub: subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a "
        "mask, use the `~` or `logical_not()` operator instead.");
}

// self + alpha * other (or self - alpha * other).
Tensor add_or_sub(const char* op, const Operand& self, const Operand& other, const Scalar& alpha, bool subtract) {
  const DType dtype = common_dtype(op, self, other);
  if (subtract) check_sub(self, other);
  check_alpha(op, dtype, alpha);
  const DType compute = opmath_dtype(dtype);
  const Tensor a = operand_as(self, compute, op), b = operand_as(other, compute, op);
  return kernel::rounded_to(kernel::dispatch_with_complex(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) {
      // bool + alpha * bool, stored as bool: nonzero is true.
      const bool k = alpha.to_bool();
      return binary_kernel<bool, bool>(op, a, b, [k](bool x, bool y) { return x || (k && y); });
    } else {
      const bool unit_alpha = alpha.to_complex() == std::complex<double>(1.0);
      if (unit_alpha && !subtract)  // the hot path: a plain sum, flat when contiguous
        return binary_kernel<T, T>(op, a, b, [](T x, T y) { return plus(x, y); });
      if (unit_alpha) return binary_kernel<T, T>(op, a, b, [](T x, T y) { return minus(x, y); });
      // sub is add with -alpha, as in ATen.
      const T k = subtract ? negate(checked_scalar<T>(alpha, op)) : checked_scalar<T>(alpha, op);
      if constexpr (std::is_floating_point_v<T>) {
        // ATen's CPU loop computes self + alpha * other as one fused multiply-add.
        return binary_kernel<T, T>(op, a, b, [k](T x, T y) { return std::fma(k, y, x); });
      } else {
        return binary_kernel<T, T>(op, a, b, [k](T x, T y) { return plus(x, times(k, y)); });
      }
    }
  }, op), dtype);
}

}  // namespace

Tensor add(const Tensor& self, const Tensor& other, Scalar alpha) {
  return add_or_sub("add", self, other, alpha, false);
}
Tensor add(const Tensor& self, Scalar other, Scalar alpha) { return add_or_sub("add", self, other, alpha, false); }
Tensor sub(const Tensor& self, const Tensor& other, Scalar alpha) {
  return add_or_sub("sub", self, other, alpha, true);
}
Tensor sub(const Tensor& self, Scalar other, Scalar alpha) { return add_or_sub("sub", self, other, alpha, true); }

// ------------------------------------------------------------------ mul ---

namespace {

Tensor mul_operands(const Operand& self, const Operand& other) {
  const DType dtype = common_dtype("mul", self, other);
  const DType compute = opmath_dtype(dtype);
  const Tensor a = operand_as(self, compute, "mul"), b = operand_as(other, compute, "mul");
  return kernel::rounded_to(kernel::dispatch_with_complex(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) return binary_kernel<bool, bool>("mul", a, b, [](bool x, bool y) { return x && y; });
    else return binary_kernel<T, T>("mul", a, b, [](T x, T y) { return times(x, y); });
  }, "mul"), dtype);
}

}  // namespace

Tensor mul(const Tensor& self, const Tensor& other) { return mul_operands(self, other); }
Tensor mul(const Tensor& self, Scalar other) { return mul_operands(self, other); }

// ------------------------------------------------------------------ div ---

namespace {

// Python's float floor division (what ATen's div_floor computes): floor(a / b)
// from fmod, so that a == b * q + r holds as closely as rounding allows, and
// the sign of a zero quotient is that of a / b. Division by zero gives a / b.
template <class T>
T div_floor_floating(T a, T b) {
  if (b == 0) return a / b;
  const T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(T(0), a / b);
  T floordiv = std::floor(div);
  if (div - floordiv > T(0.5)) floordiv += 1;  // (a - mod) / b can round just below an integer
  return floordiv;
}

// Integer division truncating toward zero. INT64_MIN / -1 overflows (a
// hardware trap in C++): it wraps to INT64_MIN, as ATen's floor division does.
std::int64_t div_trunc_int(std::int64_t a, std::int64_t b) { return b == -1 ? wrapping_neg(a) : a / b; }

// Python's integer floor division: the truncated quotient, one less when the
// remainder is nonzero and has the other sign than the divisor.
std::int64_t div_floor_int(std::int64_t a, std::int64_t b) {
  if (b == -1) return wrapping_neg(a);
  const std::int64_t quotient = a / b, remainder = a % b;
  return remainder != 0 && (remainder < 0) != (b < 0) ? quotient - 1 : quotient;
}

// Integer division by zero is an error in ATen (Python's ZeroDivisionError).
void check_no_zero_divisor(const Tensor& divisor, const Shape& out_sizes, const std::string& mode) {
  if (numel_of(out_sizes) == 0) return;  // nothing is divided
  const std::int64_t* data = divisor.data_ptr<std::int64_t>();
  bool zero = false;
  kernel::for_each_offset(divisor.sizes(), divisor.strides(), [&](std::int64_t offset) { zero |= data[offset] == 0; });
  check(!zero, "div: ZeroDivisionError: integer division by zero (rounding_mode='", mode, "')");
}

Tensor div_operands(const Operand& self, const Operand& other, const std::optional<std::string>& rounding_mode) {
  check(!rounding_mode || *rounding_mode == "trunc" || *rounding_mode == "floor",
        "div: expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
        rounding_mode.value_or(""), "'");
  const DType promoted = common_dtype("div", self, other);
  check(!rounding_mode || !is_complex(promoted), "div: rounding_mode='", rounding_mode.value_or(""),
        "' is not supported for complex numbers (", dtype_name(promoted), ")");
  if (!rounding_mode) {
    // True division: integer inputs divide in float32.
    const DType dtype = float_dtype(promoted);
    const DType compute = opmath_dtype(dtype);
    const Tensor a = operand_as(self, compute, "div"), b = operand_as(other, compute, "div");
    return kernel::rounded_to(kernel::dispatch_floating_or_complex(compute, "div", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return binary_kernel<T, T>("div", a, b, [](T x, T y) { return x / y; });
    }), dtype);
  }
  const std::string& mode = *rounding_mode;
  check(promoted != DType::Bool, "div: rounding_mode='", mode, "' is not implemented for bool");
  const DType compute = opmath_dtype(promoted);
  const Tensor a = operand_as(self, compute, "div"), b = operand_as(other, compute, "div");
  const bool floor = mode == "floor";
  return kernel::rounded_to(kernel::dispatch(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) {
      return Tensor();  // rejected above
    } else if constexpr (is_int64_v<T>) {
      check_no_zero_divisor(b, broadcast_for("div", a.sizes(), b.sizes()), mode);
      if (floor) return binary_kernel<T, T>("div", a, b, [](T x, T y) { return div_floor_int(x, y); });
      return binary_kernel<T, T>("div", a, b, [](T x, T y) { return div_trunc_int(x, y); });
    } else {
      if (floor) return binary_kernel<T, T>("div", a, b, [](T x, T y) { return div_floor_floating(x, y); });
      return binary_kernel<T, T>("div", a, b, [](T x, T y) { return std::trunc(x / y); });
    }
  }), promoted);
}

}  // namespace

Tensor div(const Tensor& self, const Tensor& other, const std::optional<std::string>& rounding_mode) {
  return div_operands(self, other, rounding_mode);
}
Tensor div(const Tensor& self, Scalar other, const std::optional<std::string>& rounding_mode) {
  return div_operands(self, other, rounding_mode);
}

// ------------------------------------------------------------------ pow ---

namespace {

// base^exponent for int64 by squaring, wrapping on overflow as ATen does. A
// negative exponent truncates 1 / base^|exponent| toward zero: 0, except for
// the bases 1 and -1 (and 0 gives 0, not a division by zero, as in ATen).
std::int64_t int_pow(std::int64_t base, std::int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 == 0 ? 1 : -1;
    return 0;
  }
  std::int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = wrapping_mul(result, base);
    base = wrapping_mul(base, base);
    exponent >>= 1;
  }
  return result;
}

// pow(Tensor, Tensor) in `dtype`, the result type of the original operands.
Tensor pow_tensors(const Tensor& base, const Tensor& exponent, DType dtype) {
  check(dtype != DType::Bool, "pow: not implemented for bool (base ", dtype_name(base.dtype()), ", exponent ",
        dtype_name(exponent.dtype()), ")");
  const Tensor a = base.to(opmath_dtype(dtype)), b = exponent.to(opmath_dtype(dtype));
  return kernel::rounded_to(kernel::dispatch_with_complex(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) return Tensor();  // rejected above
    else if constexpr (is_int64_v<T>) return binary_kernel<T, T>("pow", a, b, [](T x, T y) { return int_pow(x, y); });
    else return binary_kernel<T, T>("pow", a, b, [](T x, T y) { return static_cast<T>(std::pow(x, y)); });
  }, "pow"), dtype);
}

// pow(Tensor, Scalar) for a floating result. Like ATen, some exponents take
// the dedicated kernel (sqrt for 0.5, ...); they differ from std::pow for
// -0.0 and -inf: pow(-0., 0.5) = 0 but sqrt(-0.) = -0.
template <class T>
Tensor pow_floating_scalar(const Tensor& base, double e) {
  const Shape& sizes = base.sizes();
  if (e == 0.5) return kernel::map<T, T>(sizes, [](T x) { return std::sqrt(x); }, base);
  if (e == -0.5) return kernel::map<T, T>(sizes, [](T x) { return T(1) / std::sqrt(x); }, base);
  if (e == -1.0) return kernel::map<T, T>(sizes, [](T x) { return T(1) / x; }, base);
  if (e == 2.0) return kernel::map<T, T>(sizes, [](T x) { return x * x; }, base);
  if (e == 3.0) return kernel::map<T, T>(sizes, [](T x) { return x * x * x; }, base);
  if (e == -2.0) return kernel::map<T, T>(sizes, [](T x) { return T(1) / (x * x); }, base);
  if constexpr (is_complex_v<T>) {
    // A complex base is raised in its own precision.
    const typename T::value_type exponent = static_cast<typename T::value_type>(e);
    return kernel::map<T, T>(sizes, [exponent](T x) { return std::pow(x, exponent); }, base);
  } else {
    // ATen raises float32 to a double exponent.
    return kernel::map<T, T>(sizes, [e](T x) { return static_cast<T>(std::pow(static_cast<double>(x), e)); }, base);
  }
}

// Scalar::equal in c10: a bool Scalar equals only a bool; a complex one equals a real number when its
// imaginary part is zero.
bool scalar_equals(const Scalar& value, double number) {
  return !value.is_boolean() && value.to_complex() == std::complex<double>(number);
}

}  // namespace

Tensor pow(const Tensor& self, const Tensor& exponent) {
  return pow_tensors(self, exponent, common_dtype("pow", self, exponent));
}

Tensor pow(const Tensor& self, Scalar exponent) {
  const DType dtype = common_dtype("pow", self, exponent);
  check(!(is_integral(self.dtype(), true) && exponent.is_integral() && exponent.to_int64() < 0),
        "pow: Integers to negative integer powers are not allowed (", dtype_name(self.dtype()), " tensor to the power ",
        exponent.repr(), ")");
  // x^0 = 1 (NaN included) and x^1 = x, for every dtype, bool included.
  const bool zero = exponent.is_boolean() ? !exponent.to_bool() : scalar_equals(exponent, 0.0);
  const bool one = exponent.is_boolean() ? exponent.to_bool() : scalar_equals(exponent, 1.0);
  if (zero) return ones(self.sizes(), dtype);
  if (one) return self.to(dtype).clone();
  check(dtype != DType::Bool, "pow: not implemented for bool (base bool, exponent ", exponent.repr(), ")");
  const Tensor base = self.to(opmath_dtype(dtype));
  return kernel::rounded_to(kernel::dispatch_with_complex(base.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) {
      return Tensor();  // rejected above
    } else if constexpr (is_int64_v<T>) {
      const std::int64_t e = exponent.to_int64();  // integral: a float exponent would promote to float
      return kernel::map<T, T>(base.sizes(), [e](T x) { return int_pow(x, e); }, base);
    } else {
      return pow_floating_scalar<T>(base, exponent.to_double());
    }
  }, "pow"), dtype);
}

Tensor pow(Scalar self, const Tensor& exponent) {
  const DType dtype = common_dtype("pow", self, exponent);
  if (scalar_equals(self, 1.0)) return ones(exponent.sizes(), dtype);  // 1^y = 1, even for y = NaN
  return pow_tensors(scalar_tensor_of(opmath_dtype(dtype), "pow", self, false), exponent, dtype);
}

// --------------------------------------------------- maximum, minimum ---

namespace {

// NaN propagates: maximum(NaN, x) = maximum(x, NaN) = NaN.
template <bool is_max>
Tensor extremum(const char* op, const Tensor& self, const Tensor& other) {
  const DType dtype = common_dtype(op, self, other);
  const Tensor a = self.to(opmath_dtype(dtype)), b = other.to(opmath_dtype(dtype));
  return kernel::rounded_to(kernel::dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return binary_kernel<T, T>(op, a, b, [](T x, T y) -> T {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x)) return x;
        if (std::isnan(y)) return y;
      }
      if constexpr (is_max) return std::max(x, y);
      else return std::min(x, y);
    });
  }), dtype);
}

}  // namespace

Tensor maximum(const Tensor& self, const Tensor& other) { return extremum<true>("maximum", self, other); }
Tensor minimum(const Tensor& self, const Tensor& other) { return extremum<false>("minimum", self, other); }

Tensor atan2(const Tensor& self, const Tensor& other) {
  const DType dtype = float_dtype(common_dtype("atan2", self, other));
  const Tensor a = self.to(opmath_dtype(dtype)), b = other.to(opmath_dtype(dtype));
  return kernel::rounded_to(kernel::dispatch_floating(a.dtype(), "atan2", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return binary_kernel<T, T>("atan2", a, b, [](T y, T x) { return std::atan2(y, x); });
  }), dtype);
}

// ---------------------------------------------------------- comparisons ---

namespace {

// A comparison computes in the promoted dtype and returns bool. Complex
// numbers have no order: only eq and ne (`equality`) take them.
template <bool equality = false, class Compare>
Tensor compare(const char* op, const Operand& self, const Operand& other, Compare compare_values) {
  const DType compute = opmath_dtype(common_dtype(op, self, other));
  check(equality || !is_complex(compute), op, ": not supported for complex numbers (", dtype_name(compute),
        "): they have no order");
  const Tensor a = operand_as(self, compute, op), b = operand_as(other, compute, op);
  return kernel::dispatch_with_complex(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_complex_v<T> && !equality) return Tensor();  // rejected above
    else return binary_kernel<bool, T>(op, a, b, [compare_values](T x, T y) { return compare_values(x, y); });
  }, op);
}

}  // namespace

Tensor eq(const Tensor& self, const Tensor& other) { return compare<true>("eq", self, other, std::equal_to<>()); }
Tensor eq(const Tensor& self, Scalar other) { return compare<true>("eq", self, other, std::equal_to<>()); }
Tensor ne(const Tensor& self, const Tensor& other) { return compare<true>("ne", self, other, std::not_equal_to<>()); }
Tensor ne(const Tensor& self, Scalar other) { return compare<true>("ne", self, other, std::not_equal_to<>()); }
Tensor lt(const Tensor& self, const Tensor& other) { return compare("lt", self, other, std::less<>()); }
Tensor lt(const Tensor& self, Scalar other) { return compare("lt", self, other, std::less<>()); }
Tensor le(const Tensor& self, const Tensor& other) { return compare("le", self, other, std::less_equal<>()); }
Tensor le(const Tensor& self, Scalar other) { return compare("le", self, other, std::less_equal<>()); }
Tensor gt(const Tensor& self, const Tensor& other) { return compare("gt", self, other, std::greater<>()); }
Tensor gt(const Tensor& self, Scalar other) { return compare("gt", self, other, std::greater<>()); }
Tensor ge(const Tensor& self, const Tensor& other) { return compare("ge", self, other, std::greater_equal<>()); }
Tensor ge(const Tensor& self, Scalar other) { return compare("ge", self, other, std::greater_equal<>()); }

// Logical ops read any dtype as bool (nonzero, NaN included, is true).
Tensor logical_and(const Tensor& self, const Tensor& other) {
  check_defined(self, "logical_and");
  check_defined(other, "logical_and");
  return binary_kernel<bool, bool>("logical_and", self.to(DType::Bool), other.to(DType::Bool),
                                   [](bool x, bool y) { return x && y; });
}

Tensor logical_or(const Tensor& self, const Tensor& other) {
  check_defined(self, "logical_or");
  check_defined(other, "logical_or");
  return binary_kernel<bool, bool>("logical_or", self.to(DType::Bool), other.to(DType::Bool),
                                   [](bool x, bool y) { return x || y; });
}

Tensor logical_not(const Tensor& self) {
  check_defined(self, "logical_not");
  const Tensor input = self.to(DType::Bool);
  return kernel::map<bool, bool>(input.sizes(), [](bool x) { return !x; }, input);
}

// ---------------------------------------------------------------- where ---

namespace {

Tensor where_operands(const Tensor& condition, const Operand& self, const Operand& other) {
  check_defined(condition, "where");
  check(condition.dtype() == DType::Bool,
        "where: expected condition to be a boolean tensor, but got a tensor with dtype ",
        dtype_name(condition.dtype()));
  const DType dtype = common_dtype("where", self, other);
  // A Scalar branch must fit the result dtype, as in ATen.
  const DType compute = opmath_dtype(dtype);
  const Tensor a = operand_as(self, compute, "where", true), b = operand_as(other, compute, "where", true);
  const Shape sizes = broadcast_for("where", condition.sizes(), broadcast_for("where", a.sizes(), b.sizes()));
  // (xtensor cannot mix a bool input with complex ones in one expression: complex picks part by part.)
  if (is_complex(compute)) return complex(where(condition, real(a), real(b)), where(condition, imag(a), imag(b)));
  return kernel::rounded_to(kernel::dispatch(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Chosen by indexing, not by a branch: a branch on a random mask (a ReLU's) is mispredicted half the time.
    return kernel::map<T, bool, T, T>(sizes, [](bool c, T x, T y) {
      const T choice[2] = {y, x};
      return choice[c];
    }, condition, a, b);
  }, "where"), dtype);
}

}  // namespace

Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other) {
  return where_operands(condition, self, other);
}
Tensor where(const Tensor& condition, const Tensor& self, Scalar other) {
  return where_operands(condition, self, other);
}
Tensor where(const Tensor& condition, Scalar self, const Tensor& other) {
  return where_operands(condition, self, other);
}

// ---------------------------------------------------------------- clamp ---

namespace {

// min(max(x, lo), hi): max is applied last, so lo > hi gives hi, as in torch.
// NaN in x or in either bound gives NaN.
template <class T>
T clamp_value(T x, T lo, T hi) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x) || std::isnan(lo) || std::isnan(hi)) return std::numeric_limits<T>::quiet_NaN();
  }
  return std::min(std::max(x, lo), hi);
}

// The bounds standing in for an absent min or max: they clamp nothing.
template <class T>
T no_lower_bound() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <class T>
T no_upper_bound() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}

const char* const kClampNeedsABound = "clamp: At least one of 'min' or 'max' must not be None";

}  // namespace

Tensor clamp(const Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max) {
  check(min || max, kClampNeedsABound);
  std::vector<Operand> operands{self};
  if (min) operands.emplace_back(*min);
  if (max) operands.emplace_back(*max);
  const DType dtype = common_dtype("clamp", operands);
  check(dtype != DType::Bool, "clamp: not implemented for bool with Scalar bounds");
  const Tensor input = self.to(opmath_dtype(dtype));
  return kernel::rounded_to(kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_bool_v<T>) {
      return Tensor();  // rejected above
    } else {
      const T lo = min ? checked_scalar<T>(*min, "clamp") : no_lower_bound<T>();
      const T hi = max ? checked_scalar<T>(*max, "clamp") : no_upper_bound<T>();
      return kernel::map<T, T>(input.sizes(), [lo, hi](T x) { return clamp_value(x, lo, hi); }, input);
    }
  }), dtype);
}

Tensor clamp(const Tensor& self, const OptionalTensor& min, const OptionalTensor& max) {
  // An undefined tensor counts as absent, as an undefined optional Tensor in ATen.
  const bool has_min = min && min->defined(), has_max = max && max->defined();
  check(has_min || has_max, kClampNeedsABound);
  std::vector<Operand> operands{self};
  if (has_min) operands.emplace_back(*min);
  if (has_max) operands.emplace_back(*max);
  const DType dtype = common_dtype("clamp", operands);
  // ATen's clamp_min and clamp_max take bool, its two-sided clamp does not.
  check(dtype != DType::Bool || !(has_min && has_max),
        "clamp: not implemented for bool with both min and max tensors");
  const DType compute = opmath_dtype(dtype);
  const Tensor input = self.to(compute);
  const Tensor lo = has_min ? min->to(compute) : Tensor(), hi = has_max ? max->to(compute) : Tensor();
  Shape sizes = input.sizes();
  if (has_min) sizes = broadcast_for("clamp", sizes, lo.sizes());
  if (has_max) sizes = broadcast_for("clamp", sizes, hi.sizes());
  return kernel::rounded_to(kernel::dispatch(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (has_min && has_max)
      return kernel::map<T, T, T, T>(sizes, [](T x, T l, T h) { return clamp_value(x, l, h); }, input, lo, hi);
    if (has_min)
      return kernel::map<T, T, T>(sizes, [](T x, T l) { return clamp_value(x, l, no_upper_bound<T>()); }, input, lo);
    return kernel::map<T, T, T>(sizes, [](T x, T h) { return clamp_value(x, no_lower_bound<T>(), h); }, input, hi);
  }), dtype);
}

// ---------------------------------------------------------- masked_fill ---

Tensor masked_fill(const Tensor& self, const Tensor& mask, Scalar value) {
  check_defined(self, "masked_fill");
  check_defined(mask, "masked_fill");
  check(mask.dtype() == DType::Bool, "masked_fill: only supports boolean masks, but got mask with dtype ",
        dtype_name(mask.dtype()));
  // The out-of-place masked_fill broadcasts self and mask together (ATen
  // expands both before filling a copy); the dtype is self's.
  const Shape sizes = broadcast_for("masked_fill", self.sizes(), mask.sizes());
  const Tensor input = kernel::to_opmath(self);
  if (is_complex(input.dtype())) {  // a real value (checked by the real part's fill): the imaginary parts get 0
    return complex(masked_fill(real(input), mask, value), masked_fill(imag(input), mask, Scalar(0.0)));
  }
  return kernel::rounded_to(kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T fill = checked_scalar<T>(value, "masked_fill");
    return kernel::map<T, T, bool>(sizes, [fill](T x, bool m) { return m ? fill : x; }, input, mask);
  }, "masked_fill"), self.dtype());
}

Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value) {
  check_defined(value, "masked_fill");
  check(value.dim() == 0, "masked_fill: only supports a 0-dimensional value tensor, but got tensor with ",
        value.dim(), " dimension(s)");
  // The value as the Scalar of its own kind, so that no precision is lost.
  const Tensor opmath_value = kernel::to_opmath(value);
  const Scalar scalar = kernel::dispatch(opmath_value.dtype(), [&](auto tag) -> Scalar {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) return static_cast<double>(opmath_value.item<T>());
    else return opmath_value.item<T>();
  });
  return masked_fill(self, mask, scalar);
}

}  // namespace refgrad
