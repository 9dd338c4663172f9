// Whole-tensor comparisons: allclose and equal.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernel.hpp"

namespace refgrad {

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check(a.defined() && b.defined(), "allclose: tensor is undefined");
  check(a.dtype() == b.dtype(), "allclose: dtype ", dtype_name(a.dtype()), " did not match ", dtype_name(b.dtype()));
  check(rtol >= 0, "allclose: rtol must be greater than or equal to zero, but got ", rtol);
  check(atol >= 0, "allclose: atol must be greater than or equal to zero, but got ", atol);
  Shape sizes;
  try {
    sizes = broadcast_shapes(a.sizes(), b.sizes());
  } catch (const Error& error) {
    throw Error(concat("allclose: ", error.what()));
  }
  // ATen's isclose: equal values are close (infinities included); otherwise
  // |a - b| <= atol + |rtol * b| with a finite |a - b|, computed in the
  // tensors' dtype, or in the default float dtype for int64 and bool.
  const bool zero_tolerance = rtol == 0 && atol == 0;
  // float16/bfloat16 compare in float32, which holds their values exactly.
  const Tensor x = kernel::to_opmath(broadcast_to(a, sizes)).contiguous();
  const Tensor y = kernel::contiguous_as(broadcast_to(b, sizes), x.dtype());
  return kernel::dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using F = std::conditional_t<std::is_floating_point_v<T>, T, float>;
    const F rtol_f = static_cast<F>(rtol), atol_f = static_cast<F>(atol);
    const T* xs = x.data_ptr<T>();
    const T* ys = y.data_ptr<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      if (xs[i] == ys[i]) continue;
      if constexpr (std::is_floating_point_v<T>) {
        if (equal_nan && std::isnan(xs[i]) && std::isnan(ys[i])) continue;
      }
      if (zero_tolerance) return false;
      const F actual_error = std::abs(static_cast<F>(xs[i]) - static_cast<F>(ys[i]));
      const F allowed_error = atol_f + std::abs(rtol_f * static_cast<F>(ys[i]));
      if (!(std::isfinite(actual_error) && actual_error <= allowed_error)) return false;
    }
    return true;
  });
}

bool equal(const Tensor& a, const Tensor& b) {
  check(a.defined() && b.defined(), "equal: tensor is undefined");
  if (a.sizes() != b.sizes()) return false;
  // Same sizes means the same tier, so eq promotes with promote_types.
  const Tensor same = eq(a, b);  // contiguous, new
  const bool* data = same.data_ptr<bool>();
  return std::all_of(data, data + same.numel(), [](bool flag) { return flag; });
}

}  // namespace refgrad
