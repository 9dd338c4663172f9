// Complex numbers: real, imag, view_as_real, view_as_complex, conj, complex,
// angle and sgn.
//
// A complex64 element is two float32 values side by side (real, then
// imaginary), as in C++'s std::complex<float> and torch (complex32: two
// float16 values, complex128: two float64 values). So view_as_real is a
// true view: the same bytes read as float32, with one more dim of size 2, and
// real and imag select from it. The arithmetic on complex tensors lives with
// the real ops (elementwise.cpp, reduction.cpp, linalg.cpp); ops linear over
// the reals compute part by part (kernel::by_parts).
#include <cmath>
#include <complex>
#include <type_traits>

#include "kernel.hpp"

namespace refgrad {
namespace {

// The complex dtype whose parts have dtype `part`: float32 -> complex64.
DType complex_dtype_of(DType part, const char* op) {
  if (part == DType::Float16) return DType::ComplexHalf;
  if (part == DType::Float32) return DType::ComplexFloat;
  if (part == DType::Float64) return DType::ComplexDouble;
  fail(concat(op, ": expected float16, float32 or float64 parts (complex32, complex64 or complex128), got ",
              dtype_name(part)));
}

}  // namespace

Tensor view_as_real(const Tensor& self) {
  check(self.defined(), "view_as_real: tensor is undefined");
  check(is_complex(self.dtype()), "view_as_real: is only supported for complex tensors, got ",
        dtype_name(self.dtype()));
  Shape sizes = self.sizes(), strides;
  for (std::int64_t stride : self.strides()) strides.push_back(2 * stride);
  sizes.push_back(2);
  strides.push_back(1);
  return Tensor(self.storage(), sizes, strides, 2 * self.storage_offset(), to_real_value_type(self.dtype()));
}

Tensor view_as_complex(const Tensor& self) {
  check(self.defined(), "view_as_complex: tensor is undefined");
  const DType dtype = complex_dtype_of(self.dtype(), "view_as_complex");
  // torch's checks, in its words: the last dim holds (real, imaginary) side by side.
  check(self.dim() > 0 && self.sizes().back() == 2, "view_as_complex: Tensor must have a last dimension of size 2, "
        "got shape ", shape_text(self.sizes()));
  check(self.strides().back() == 1, "view_as_complex: Tensor must have a last dimension with stride 1 (strides ",
        shape_text(self.strides()), ")");
  for (std::size_t d = 0; d + 1 < self.strides().size(); ++d)
    check(self.strides()[d] % 2 == 0, "view_as_complex: Tensor must have a stride divisible by 2 for all but last "
          "dimension (strides ", shape_text(self.strides()), ")");
  check(self.storage_offset() % 2 == 0, "view_as_complex: Tensor must have a storage_offset divisible by 2 (offset ",
        self.storage_offset(), ")");
  Shape sizes(self.sizes().begin(), self.sizes().end() - 1), strides;
  for (std::size_t d = 0; d + 1 < self.strides().size(); ++d) strides.push_back(self.strides()[d] / 2);
  return Tensor(self.storage(), sizes, strides, self.storage_offset() / 2, dtype);
}

Tensor real(const Tensor& self) {
  check(self.defined(), "real: tensor is undefined");
  if (!is_complex(self.dtype())) return self;
  return select(view_as_real(self), -1, 0);
}

Tensor imag(const Tensor& self) {
  check(self.defined(), "imag: tensor is undefined");
  check(is_complex(self.dtype()), "imag: imag is not implemented for tensors with non-complex dtypes (got ",
        dtype_name(self.dtype()), ")");
  return select(view_as_real(self), -1, 1);
}

Tensor conj(const Tensor& self) {
  check(self.defined(), "conj: tensor is undefined");
  if (!is_complex(self.dtype())) return self;
  return complex(real(self), neg(imag(self)));
}

Tensor complex(const Tensor& real_part, const Tensor& imag_part) {
  check(real_part.defined() && imag_part.defined(), "complex: tensor is undefined");
  check(real_part.dtype() == imag_part.dtype(), "complex: Expected object of scalar type ",
        dtype_name(real_part.dtype()), " but got scalar type ", dtype_name(imag_part.dtype()),
        " for second argument");
  const DType dtype = complex_dtype_of(real_part.dtype(), "complex");  // raises for other dtypes
  if (dtype == DType::ComplexHalf)  // float16 parts: complex64 holds them exactly, then complex32 does
    return complex(real_part.to(DType::Float32), imag_part.to(DType::Float32)).to(dtype);
  Shape sizes;
  try {
    sizes = broadcast_shapes(real_part.sizes(), imag_part.sizes());
  } catch (const Error& error) {
    throw Error(concat("complex: ", error.what()));
  }
  return kernel::dispatch_floating(real_part.dtype(), "complex", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kernel::map<std::complex<T>, T, T>(sizes, [](T re, T im) { return std::complex<T>(re, im); }, real_part,
                                              imag_part);
  });
}

Tensor angle(const Tensor& self) {
  check(self.defined(), "angle: tensor is undefined");
  if (self.dtype() == DType::ComplexHalf) return angle(kernel::to_opmath(self)).to(DType::Float16);
  if (is_complex(self.dtype())) {
    return kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kernel::is_complex_v<T>) {
        using Part = typename T::value_type;
        return kernel::map<Part, T>(self.sizes(), [](T z) { return std::arg(z); }, self);
      } else {
        return Tensor();  // complex only here
      }
    }, "angle");
  }
  // A real x: pi where x < 0, else 0; NaN stays NaN. Integers give the default float dtype.
  const DType dtype = is_floating_point(self.dtype()) ? self.dtype() : default_dtype();
  const Tensor input = self.to(opmath_dtype(dtype));
  return kernel::rounded_to(kernel::dispatch_floating(input.dtype(), "angle", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kernel::map<T, T>(input.sizes(), [](T x) {
      if (std::isnan(x)) return x;
      return x < 0 ? static_cast<T>(M_PI) : T(0);
    }, input);
  }), dtype);
}

Tensor sgn(const Tensor& self) {
  check(self.defined(), "sgn: tensor is undefined");
  if (!is_complex(self.dtype())) return sign(self);
  if (self.dtype() == DType::ComplexHalf) return kernel::rounded_to(sgn(kernel::to_opmath(self)), self.dtype());
  return kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernel::is_complex_v<T>) {
      // ATen's sgn_impl: z / |z|, and 0 at 0.
      return kernel::map<T, T>(self.sizes(), [](T z) { return z == T(0) ? T(0) : z / std::abs(z); }, self);
    } else {
      return Tensor();  // complex only here
    }
  }, "sgn");
}

}  // namespace refgrad
