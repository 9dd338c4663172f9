// Unary nodes: elementwise math (exp, log, sqrt, sin, tanh, sigmoid, erf, abs, ...),
// the ops whose gradient is zero (sign, sgn, floor, ceil, round, trunc), and the
// copies that pass the grad on (clone, alias, _to_copy).
//
// Every formula below is derivatives.yaml's for a real dtype: `.conj()` is the
// identity and PyTorch's complex branches (sgn_backward, _to_copy_backward's
// real-to-complex case) do not apply, since refgrad has no complex dtypes.
#include <limits>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// ------------------------------------------------------- exp, log and kin ---

// ExpBackward0 — exp(Tensor self)
//   self: grad * result.conj()
struct ExpBackward0Saved {
  Tensor result;
};

Grads ExpBackward0(const Grads& grads, const ExpBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("ExpBackward0", *grads[0], saved.result, "result");
  return Grads{mul(*grads[0], conj(saved.result))};
}

// Exp2Backward0 — exp2(Tensor self)
//   self: grad * result.conj() * M_LN2
struct Exp2Backward0Saved {
  Tensor result;
};

Grads Exp2Backward0(const Grads& grads, const Exp2Backward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("Exp2Backward0", *grads[0], saved.result, "result");
  constexpr double ln2 = 0.693147180559945309417;  // cmath's M_LN2
  return Grads{mul(mul(*grads[0], conj(saved.result)), ln2)};
}

// Expm1Backward0 — expm1(Tensor self)
//   self: grad * (result.conj() + 1)
struct Expm1Backward0Saved {
  Tensor result;
};

Grads Expm1Backward0(const Grads& grads, const Expm1Backward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("Expm1Backward0", *grads[0], saved.result, "result");
  return Grads{mul(*grads[0], add(conj(saved.result), 1))};
}

// LogBackward0 — log(Tensor self)
//   self: grad.div(self.conj())
struct LogBackward0Saved {
  Tensor self;
};

Grads LogBackward0(const Grads& grads, const LogBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("LogBackward0", *grads[0], saved.self, "self");
  return Grads{div(*grads[0], conj(saved.self))};
}

// Log2Backward0 — log2(Tensor self)
//   self: grad / (self.conj() * 0.6931471805599453)
struct Log2Backward0Saved {
  Tensor self;
};

Grads Log2Backward0(const Grads& grads, const Log2Backward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("Log2Backward0", *grads[0], saved.self, "self");
  return Grads{div(*grads[0], mul(conj(saved.self), 0.6931471805599453))};
}

// Log10Backward0 — log10(Tensor self)
//   self: grad / (self.conj() * 2.3025850929940456)
struct Log10Backward0Saved {
  Tensor self;
};

Grads Log10Backward0(const Grads& grads, const Log10Backward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("Log10Backward0", *grads[0], saved.self, "self");
  return Grads{div(*grads[0], mul(conj(saved.self), 2.3025850929940456))};
}

// FunctionsManual's log1p_backward for strided tensors: grad / (self + 1).conj().
Tensor log1p_backward(const Tensor& grad, const Tensor& self) { return div(grad, conj(add(self, 1))); }

// Log1PBackward0 (PyTorch capitalizes the P) — log1p(Tensor self)
//   self: log1p_backward(grad, self)
struct Log1PBackward0Saved {
  Tensor self;
};

Grads Log1PBackward0(const Grads& grads, const Log1PBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("Log1PBackward0", *grads[0], saved.self, "self");
  return Grads{log1p_backward(*grads[0], saved.self)};
}

// -------------------------------------------------------- roots, powers ---

// SqrtBackward0 — sqrt(Tensor self)
//   self: grad / (2 * result.conj())
// sqrt(0) = 0 gives an infinite grad, as in PyTorch.
struct SqrtBackward0Saved {
  Tensor result;
};

Grads SqrtBackward0(const Grads& grads, const SqrtBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SqrtBackward0", *grads[0], saved.result, "result");
  return Grads{div(*grads[0], mul(conj(saved.result), 2))};
}

// RsqrtBackward0 — rsqrt(Tensor self)
//   self: -0.5 * grad * result.pow(3).conj()
struct RsqrtBackward0Saved {
  Tensor result;
};

Grads RsqrtBackward0(const Grads& grads, const RsqrtBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("RsqrtBackward0", *grads[0], saved.result, "result");
  return Grads{mul(mul(*grads[0], -0.5), conj(pow(saved.result, 3)))};
}

// ReciprocalBackward0 — reciprocal(Tensor self)
//   self: -grad * (result * result).conj()
struct ReciprocalBackward0Saved {
  Tensor result;
};

Grads ReciprocalBackward0(const Grads& grads, const ReciprocalBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("ReciprocalBackward0", *grads[0], saved.result, "result");
  return Grads{mul(neg(*grads[0]), conj(mul(saved.result, saved.result)))};
}

// ---------------------------------------------------------- trigonometry ---

// SinBackward0 — sin(Tensor self)
//   self: grad * self.cos().conj()
struct SinBackward0Saved {
  Tensor self;
};

Grads SinBackward0(const Grads& grads, const SinBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SinBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], conj(cos(saved.self)))};
}

// CosBackward0 — cos(Tensor self)
//   self: grad * -self.sin().conj()
struct CosBackward0Saved {
  Tensor self;
};

Grads CosBackward0(const Grads& grads, const CosBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("CosBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], conj(neg(sin(saved.self))))};
}

// AsinBackward0 — asin(Tensor self)
//   self: grad * (-self * self + 1).rsqrt().conj()
struct AsinBackward0Saved {
  Tensor self;
};

Grads AsinBackward0(const Grads& grads, const AsinBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("AsinBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], conj(rsqrt(add(mul(neg(saved.self), saved.self), 1))))};
}

// AcosBackward0 — acos(Tensor self)
//   self: grad * -((-self * self + 1).rsqrt()).conj()
struct AcosBackward0Saved {
  Tensor self;
};

Grads AcosBackward0(const Grads& grads, const AcosBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("AcosBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], conj(neg(rsqrt(add(mul(neg(saved.self), saved.self), 1)))))};
}

// AtanBackward0 — atan(Tensor self)
//   self: grad / (self * self + 1).conj()
struct AtanBackward0Saved {
  Tensor self;
};

Grads AtanBackward0(const Grads& grads, const AtanBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("AtanBackward0", *grads[0], saved.self, "self");
  return Grads{div(*grads[0], conj(add(mul(saved.self, saved.self), 1)))};
}

// TanBackward0 — tan(Tensor self)
//   self: grad * (1 + result.pow(2)).conj()
struct TanBackward0Saved {
  Tensor result;
};

Grads TanBackward0(const Grads& grads, const TanBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("TanBackward0", *grads[0], saved.result, "result");
  return Grads{mul(*grads[0], conj(add(pow(saved.result, 2), 1)))};
}

// ------------------------------------------------- tanh, sigmoid, erf ---

// ATen's tanh_backward (a kernel, not a FunctionsManual helper): grad * (1 - result²).conj().
Tensor tanh_backward(const Tensor& grad, const Tensor& output) {
  return mul(grad, conj(sub(ones_like(output), mul(output, output))));
}

// ATen's sigmoid_backward: grad * ((1 - result) * result).conj() (for real numbers, in this order).
Tensor sigmoid_backward(const Tensor& grad, const Tensor& output) {
  if (is_complex(output.dtype())) return mul(grad, conj(mul(sub(ones_like(output), output), output)));
  return mul(mul(grad, sub(ones_like(output), output)), output);
}

// TanhBackward0 — tanh(Tensor self)
//   self: tanh_backward(grad, result)
struct TanhBackward0Saved {
  Tensor result;
};

Grads TanhBackward0(const Grads& grads, const TanhBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("TanhBackward0", *grads[0], saved.result, "result");
  return Grads{tanh_backward(*grads[0], saved.result)};
}

// SigmoidBackward0 — sigmoid(Tensor self)
//   self: sigmoid_backward(grad, result)
struct SigmoidBackward0Saved {
  Tensor result;
};

Grads SigmoidBackward0(const Grads& grads, const SigmoidBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SigmoidBackward0", *grads[0], saved.result, "result");
  return Grads{sigmoid_backward(*grads[0], saved.result)};
}

// ErfBackward0 — erf(Tensor self)
//   self: 2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad
struct ErfBackward0Saved {
  Tensor self;
};

Grads ErfBackward0(const Grads& grads, const ErfBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("ErfBackward0", *grads[0], saved.self, "self");
  constexpr double two_over_sqrt_pi = 1.12837916709551257390;  // 2 / sqrt(M_PI), cmath's M_2_SQRTPI
  return Grads{mul(mul(exp(neg(pow(saved.self, 2))), two_over_sqrt_pi), *grads[0])};
}

// ------------------------------------------------------- gamma functions ---

// DigammaBackward0 — digamma(Tensor self)
//   self: grad * polygamma(1, self)
struct DigammaBackward0Saved {
  Tensor self;
};

Grads DigammaBackward0(const Grads& grads, const DigammaBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("DigammaBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], polygamma(1, saved.self))};
}

// LgammaBackward0 — lgamma(Tensor self)
//   self: grad * digamma(self)
struct LgammaBackward0Saved {
  Tensor self;
};

Grads LgammaBackward0(const Grads& grads, const LgammaBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("LgammaBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], digamma(saved.self))};
}

// PolygammaBackward0 — polygamma(int n, Tensor self)
//   self: grad * polygamma(n + 1, self)
// (polygamma_(self, n), the in-place form, records the same node.)
struct PolygammaBackward0Saved {
  std::int64_t n;
  Tensor self;
};

Grads PolygammaBackward0(const Grads& grads, const PolygammaBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("PolygammaBackward0", *grads[0], saved.self, "self");
  check(saved.n >= 0 && saved.n < std::numeric_limits<std::int64_t>::max(), "PolygammaBackward0: n ", saved.n,
        " is not an order polygamma has");
  return Grads{mul(*grads[0], polygamma(saved.n + 1, saved.self))};
}

// MvlgammaBackward0 — mvlgamma(Tensor self, int p)
//   self: mvlgamma_backward(grad, self, p)
// The multivariate log-gamma function is
//   mvlgamma(x, p) = p (p - 1) / 4 log(pi) + sum_{j=0}^{p-1} lgamma(x - j / 2),
// so its derivative is sum_j digamma(x - j / 2). FunctionsManual's mvlgamma_backward builds
// the p shifts as arange(-p/2 + 0.5, 0.5, 0.5) in self's dtype (-(p-1)/2, ..., -1/2, 0), adds
// them to self along a new last dim and sums the digammas over it.
struct MvlgammaBackward0Saved {
  std::int64_t p;
  Tensor self;
};

Grads MvlgammaBackward0(const Grads& grads, const MvlgammaBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("MvlgammaBackward0", *grads[0], saved.self, "self");
  check(saved.p >= 1, "MvlgammaBackward0: p must be at least 1, got ", saved.p);
  const double p = static_cast<double>(saved.p);
  // (The shifts are multiples of 1/2, exact in every floating dtype: made in the opmath dtype, then stored.)
  const DType dtype = saved.self.dtype();
  const Tensor shifts = arange(-p / 2 + 0.5, 0.5, 0.5, opmath_dtype(dtype)).to(dtype);
  const Tensor args = add(shifts, unsqueeze(saved.self, -1));
  return Grads{mul(*grads[0], sum(digamma(args), IntList{-1}))};
}

// ------------------------------------------------------- abs, sign, sgn ---

// AbsBackward0 — abs(Tensor self)
//   self: grad * self.sgn()
// sgn(0) = 0, so abs has grad 0 at 0 (and at -0.0).
struct AbsBackward0Saved {
  Tensor self;
};

Grads AbsBackward0(const Grads& grads, const AbsBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("AbsBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], sgn(saved.self))};
}

// FunctionsManual's sgn_backward: for a complex x,
//   ((gx - (sgn * sgn) * gx.conj()) / (2 |x|)), 0 where x == 0;
// for a real x zeros of sgn's (the result's) sizes and dtype (PyTorch's _efficientzerotensor).
Tensor sgn_backward(const Tensor& x, const Tensor& gx, const Tensor& sgn) {
  if (!is_complex(x.dtype())) return zeros_like(sgn);
  const Tensor magnitude = abs(x);
  const Tensor out = div(sub(gx, mul(mul(sgn, sgn), conj(gx))), mul(magnitude, 2.0));
  return masked_fill(out, eq(magnitude, Scalar(0.0)), Scalar(0.0));
}

// SgnBackward0 — sgn(Tensor self)
//   self: sgn_backward(self, grad, result)
struct SgnBackward0Saved {
  Tensor self;
  Tensor result;
};

Grads SgnBackward0(const Grads& grads, const SgnBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SgnBackward0", *grads[0], saved.result, "result");
  return Grads{sgn_backward(saved.self, *grads[0], saved.result)};
}

// SignBackward0, FloorBackward0, CeilBackward0, RoundBackward0 (round),
// RoundBackward1 (round.decimals), TruncBackward0 — piecewise constant ops:
//   self: zeros_like(grad)
// They save nothing.
// ---------------------------------------------------------- hyperbolic ---

// SinhBackward0 — sinh(Tensor self)
//   self: grad * self.cosh().conj()
struct SinhBackward0Saved {
  Tensor self;
};

Grads SinhBackward0(const Grads& grads, const SinhBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SinhBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], conj(cosh(saved.self)))};
}

// CoshBackward0 — cosh(Tensor self)
//   self: grad * self.sinh().conj()
struct CoshBackward0Saved {
  Tensor self;
};

Grads CoshBackward0(const Grads& grads, const CoshBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("CoshBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], conj(sinh(saved.self)))};
}

// AsinhBackward0 — asinh(Tensor self)
//   self: grad * (self.pow(2) + 1).rsqrt().conj()
struct AsinhBackward0Saved {
  Tensor self;
};

Grads AsinhBackward0(const Grads& grads, const AsinhBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("AsinhBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], conj(rsqrt(add(mul(saved.self, saved.self), 1))))};
}

// AcoshBackward0 — acosh(Tensor self)
//   self: self.is_complex() ? grad * ((self + 1).rsqrt() * (self - 1).rsqrt()).conj()
//                           : grad * (self * self - 1).rsqrt()
struct AcoshBackward0Saved {
  Tensor self;
};

Grads AcoshBackward0(const Grads& grads, const AcoshBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("AcoshBackward0", *grads[0], saved.self, "self");
  const Tensor& self = saved.self;
  // sqrt(x*y) = sqrt(x)*sqrt(y) holds for positive reals only: complex numbers take two rsqrts.
  if (is_complex(self.dtype())) return Grads{mul(*grads[0], conj(mul(rsqrt(add(self, 1)), rsqrt(sub(self, 1)))))};
  return Grads{mul(*grads[0], rsqrt(sub(mul(self, self), 1)))};
}

// AtanhBackward0 — atanh(Tensor self)
//   self: grad * 1 / (1 - self.pow(2)).conj()
struct AtanhBackward0Saved {
  Tensor self;
};

Grads AtanhBackward0(const Grads& grads, const AtanhBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("AtanhBackward0", *grads[0], saved.self, "self");
  return Grads{div(*grads[0], conj(add(neg(mul(saved.self, saved.self)), 1)))};
}

// ErfcBackward0 — erfc(Tensor self)
//   self: -2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad
struct ErfcBackward0Saved {
  Tensor self;
};

Grads ErfcBackward0(const Grads& grads, const ErfcBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("ErfcBackward0", *grads[0], saved.self, "self");
  constexpr double minus_two_over_sqrt_pi = -1.12837916709551257390;  // -2 / sqrt(M_PI)
  return Grads{mul(mul(exp(neg(mul(saved.self, saved.self))), minus_two_over_sqrt_pi), *grads[0])};
}

// SincBackward0 — sinc(Tensor self)
//   self: sinc_backward(grad, self)
// sinc_backward: grad * (pi x cos(pi x) - sin(pi x)) / (pi x²), and 0 where pi x² is 0 (sinc is flat there).
struct SincBackward0Saved {
  Tensor self;
};

Grads SincBackward0(const Grads& grads, const SincBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SincBackward0", *grads[0], saved.self, "self");
  constexpr double pi = 3.14159265358979323846;  // cmath's M_PI
  const Tensor self_pi = mul(saved.self, pi);
  const Tensor self_squared_pi = mul(mul(saved.self, saved.self), pi);
  const Tensor numerator = sub(mul(self_pi, cos(self_pi)), sin(self_pi));
  // For complex self, the derivative's conjugate, as derivatives.yaml's holomorphic formulas take it.
  const Tensor out = is_complex(saved.self.dtype()) ? mul(*grads[0], conj(div(numerator, self_squared_pi)))
                                                    : div(mul(*grads[0], numerator), self_squared_pi);
  return Grads{masked_fill(out, eq(self_squared_pi, Scalar(0)), Scalar(0))};
}

struct NothingSaved {};

Grads zeros_like_grad(const Grads& grads, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{zeros_like(*grads[0])};
}

Grads SignBackward0(const Grads& grads, const NothingSaved&, const Need& need) { return zeros_like_grad(grads, need); }
Grads FloorBackward0(const Grads& grads, const NothingSaved&, const Need& need) { return zeros_like_grad(grads, need); }
Grads CeilBackward0(const Grads& grads, const NothingSaved&, const Need& need) { return zeros_like_grad(grads, need); }
Grads RoundBackward0(const Grads& grads, const NothingSaved&, const Need& need) { return zeros_like_grad(grads, need); }
Grads RoundBackward1(const Grads& grads, const NothingSaved&, const Need& need) { return zeros_like_grad(grads, need); }
Grads TruncBackward0(const Grads& grads, const NothingSaved&, const Need& need) { return zeros_like_grad(grads, need); }

// ------------------------------------------------------------------ copies ---

// CloneBackward0 — clone(Tensor self, *, MemoryFormat? memory_format=None)
//   self: grad
// AliasBackward0 — alias(Tensor(a) self)
//   self: grad
// The very same grad is passed on, as in PyTorch.
// Deg2RadBackward0 — deg2rad(Tensor self)
//   self: deg2rad_backward(grad), FunctionsManual's grad * M_PI_180
Grads Deg2RadBackward0(const Grads& grads, const NothingSaved&, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{mul(*grads[0], 0.017453292519943295769236907684886127134428718885417)};
}

// Rad2DegBackward0 — rad2deg(Tensor self)
//   self: rad2deg_backward(grad), FunctionsManual's grad * M_180_PI
Grads Rad2DegBackward0(const Grads& grads, const NothingSaved&, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{mul(*grads[0], 57.295779513082320876798154814105170332405472466564)};
}

// FracBackward0 — frac(Tensor self)
//   self: grad      (frac(x) = x - trunc(x): slope 1 between the integers)
Grads FracBackward0(const Grads& grads, const NothingSaved&, const Need& need) {
  if (!need[0]) return Grads(1);
  return Grads{grads[0]};
}

Grads CloneBackward0(const Grads& grads, const NothingSaved&, const Need& need) {
  if (!need[0]) return Grads(1);
  return Grads{grads[0]};
}

Grads AliasBackward0(const Grads& grads, const NothingSaved&, const Need& need) {
  if (!need[0]) return Grads(1);
  return Grads{grads[0]};
}

// FunctionsManual's _to_copy_backward for a real self: grad.to(self_options),
// which casts the grad back to self's dtype (no copy when it already has it).
// The device is metadata here (refgrad computes on the CPU); a layout other
// than strided cannot be produced.
Tensor _to_copy_backward(const Tensor& grad, const TensorOptions& self_options) {
  check(!self_options.layout || *self_options.layout == Layout::Strided,
        "ToCopyBackward0: self_options has layout ", layout_name(self_options.layout.value_or(Layout::Strided)),
        ", refgrad supports torch.strided only");
  return self_options.dtype ? grad.to(*self_options.dtype) : grad;
}

// ToCopyBackward0 — _to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None,
//                            Device? device=None, bool? pin_memory=None, bool non_blocking=False,
//                            MemoryFormat? memory_format=None)
//   self: _to_copy_backward(grad, self.options())
struct ToCopyBackward0Saved {
  TensorOptions self_options;
};

Grads ToCopyBackward0(const Grads& grads, const ToCopyBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{_to_copy_backward(*grads[0], saved.self_options)};
}

// One node that saves a single tensor, `self` or `result`.
template <class Saved, Grads (*Function)(const Grads&, const Saved&, const Need&), Tensor Saved::*Member>
NodeDef one_tensor_node(const char* name, const char* aten_op, const char* field, const char* formula) {
  return define_node<Saved, Function>({name, aten_op, {"self"}, 1, {}, formula},
                                      {saved<Member>(field, FieldKind::Tensor)});
}

// One node that saves nothing.
template <Grads (*Function)(const Grads&, const NothingSaved&, const Need&)>
NodeDef nothing_saved_node(const char* name, const char* aten_op, const char* formula) {
  return define_node<NothingSaved, Function>({name, aten_op, {"self"}, 1, {}, formula}, {});
}

}  // namespace

void add_unary_nodes(std::vector<NodeDef>& registry) {
  // clang-format off
  registry.push_back(one_tensor_node<ExpBackward0Saved, ExpBackward0, &ExpBackward0Saved::result>(
      "ExpBackward0", "exp", "result", "self: grad * result.conj()"));
  registry.push_back(one_tensor_node<Exp2Backward0Saved, Exp2Backward0, &Exp2Backward0Saved::result>(
      "Exp2Backward0", "exp2", "result", "self: grad * result.conj() * M_LN2"));
  registry.push_back(one_tensor_node<Expm1Backward0Saved, Expm1Backward0, &Expm1Backward0Saved::result>(
      "Expm1Backward0", "expm1", "result", "self: grad * (result.conj() + 1)"));
  registry.push_back(one_tensor_node<LogBackward0Saved, LogBackward0, &LogBackward0Saved::self>(
      "LogBackward0", "log", "self", "self: grad.div(self.conj())"));
  registry.push_back(one_tensor_node<Log2Backward0Saved, Log2Backward0, &Log2Backward0Saved::self>(
      "Log2Backward0", "log2", "self", "self: grad / (self.conj() * 0.6931471805599453)"));
  registry.push_back(one_tensor_node<Log10Backward0Saved, Log10Backward0, &Log10Backward0Saved::self>(
      "Log10Backward0", "log10", "self", "self: grad / (self.conj() * 2.3025850929940456)"));
  registry.push_back(one_tensor_node<Log1PBackward0Saved, Log1PBackward0, &Log1PBackward0Saved::self>(
      "Log1PBackward0", "log1p", "self", "self: log1p_backward(grad, self)"));
  registry.push_back(one_tensor_node<SqrtBackward0Saved, SqrtBackward0, &SqrtBackward0Saved::result>(
      "SqrtBackward0", "sqrt", "result", "self: grad / (2 * result.conj())"));
  registry.push_back(one_tensor_node<RsqrtBackward0Saved, RsqrtBackward0, &RsqrtBackward0Saved::result>(
      "RsqrtBackward0", "rsqrt", "result", "self: -0.5 * grad * result.pow(3).conj()"));
  registry.push_back(one_tensor_node<ReciprocalBackward0Saved, ReciprocalBackward0, &ReciprocalBackward0Saved::result>(
      "ReciprocalBackward0", "reciprocal", "result", "self: -grad * (result * result).conj()"));
  registry.push_back(one_tensor_node<SinBackward0Saved, SinBackward0, &SinBackward0Saved::self>(
      "SinBackward0", "sin", "self", "self: grad * self.cos().conj()"));
  registry.push_back(one_tensor_node<CosBackward0Saved, CosBackward0, &CosBackward0Saved::self>(
      "CosBackward0", "cos", "self", "self: grad * -self.sin().conj()"));
  registry.push_back(one_tensor_node<AsinBackward0Saved, AsinBackward0, &AsinBackward0Saved::self>(
      "AsinBackward0", "asin", "self", "self: grad * (-self * self + 1).rsqrt().conj()"));
  registry.push_back(one_tensor_node<AcosBackward0Saved, AcosBackward0, &AcosBackward0Saved::self>(
      "AcosBackward0", "acos", "self", "self: grad * -((-self * self + 1).rsqrt()).conj()"));
  registry.push_back(one_tensor_node<AtanBackward0Saved, AtanBackward0, &AtanBackward0Saved::self>(
      "AtanBackward0", "atan", "self", "self: grad / (self * self + 1).conj()"));
  registry.push_back(one_tensor_node<SinhBackward0Saved, SinhBackward0, &SinhBackward0Saved::self>(
      "SinhBackward0", "sinh", "self", "self: grad * self.cosh().conj()"));
  registry.push_back(one_tensor_node<CoshBackward0Saved, CoshBackward0, &CoshBackward0Saved::self>(
      "CoshBackward0", "cosh", "self", "self: grad * self.sinh().conj()"));
  registry.push_back(one_tensor_node<AsinhBackward0Saved, AsinhBackward0, &AsinhBackward0Saved::self>(
      "AsinhBackward0", "asinh", "self", "self: grad * (self.pow(2) + 1).rsqrt().conj()"));
  registry.push_back(one_tensor_node<AcoshBackward0Saved, AcoshBackward0, &AcoshBackward0Saved::self>(
      "AcoshBackward0", "acosh", "self",
      "self: self.is_complex() ? grad * ((self + 1).rsqrt() * (self - 1).rsqrt()).conj() : grad * (self * self - 1).rsqrt()"));
  registry.push_back(one_tensor_node<AtanhBackward0Saved, AtanhBackward0, &AtanhBackward0Saved::self>(
      "AtanhBackward0", "atanh", "self", "self: grad * 1 / (1 - self.pow(2)).conj()"));
  registry.push_back(one_tensor_node<ErfcBackward0Saved, ErfcBackward0, &ErfcBackward0Saved::self>(
      "ErfcBackward0", "erfc", "self", "self: -2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad"));
  registry.push_back(one_tensor_node<TanBackward0Saved, TanBackward0, &TanBackward0Saved::result>(
      "TanBackward0", "tan", "result", "self: grad * (1 + result.pow(2)).conj()"));
  registry.push_back(one_tensor_node<TanhBackward0Saved, TanhBackward0, &TanhBackward0Saved::result>(
      "TanhBackward0", "tanh", "result", "self: tanh_backward(grad, result)"));
  registry.push_back(one_tensor_node<SigmoidBackward0Saved, SigmoidBackward0, &SigmoidBackward0Saved::result>(
      "SigmoidBackward0", "sigmoid", "result", "self: sigmoid_backward(grad, result)"));
  registry.push_back(one_tensor_node<ErfBackward0Saved, ErfBackward0, &ErfBackward0Saved::self>(
      "ErfBackward0", "erf", "self", "self: 2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad"));
  registry.push_back(one_tensor_node<DigammaBackward0Saved, DigammaBackward0, &DigammaBackward0Saved::self>(
      "DigammaBackward0", "digamma", "self", "self: grad * polygamma(1, self)"));
  registry.push_back(one_tensor_node<LgammaBackward0Saved, LgammaBackward0, &LgammaBackward0Saved::self>(
      "LgammaBackward0", "lgamma", "self", "self: grad * digamma(self)"));
  registry.push_back(define_node<PolygammaBackward0Saved, PolygammaBackward0>(
      {"PolygammaBackward0", "polygamma", {"self"}, 1, {}, "self: grad * polygamma(n + 1, self)"},
      {saved<&PolygammaBackward0Saved::n>("n", FieldKind::Int),
       saved<&PolygammaBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<MvlgammaBackward0Saved, MvlgammaBackward0>(
      {"MvlgammaBackward0", "mvlgamma", {"self"}, 1, {}, "self: mvlgamma_backward(grad, self, p)"},
      {saved<&MvlgammaBackward0Saved::p>("p", FieldKind::Int),
       saved<&MvlgammaBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(one_tensor_node<AbsBackward0Saved, AbsBackward0, &AbsBackward0Saved::self>(
      "AbsBackward0", "abs", "self", "self: grad * self.sgn()"));

  registry.push_back(define_node<SgnBackward0Saved, SgnBackward0>(
      {"SgnBackward0", "sgn", {"self"}, 1, {}, "self: sgn_backward(self, grad, result)"},
      {saved<&SgnBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&SgnBackward0Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(nothing_saved_node<SignBackward0>("SignBackward0", "sign", "self: zeros_like(grad)"));
  registry.push_back(nothing_saved_node<FloorBackward0>("FloorBackward0", "floor", "self: zeros_like(grad)"));
  registry.push_back(nothing_saved_node<CeilBackward0>("CeilBackward0", "ceil", "self: zeros_like(grad)"));
  registry.push_back(nothing_saved_node<RoundBackward0>("RoundBackward0", "round", "self: zeros_like(grad)"));
  registry.push_back(nothing_saved_node<RoundBackward1>("RoundBackward1", "round.decimals", "self: zeros_like(grad)"));
  registry.push_back(nothing_saved_node<TruncBackward0>("TruncBackward0", "trunc", "self: zeros_like(grad)"));
  registry.push_back(nothing_saved_node<CloneBackward0>("CloneBackward0", "clone", "self: grad"));
  registry.push_back(nothing_saved_node<FracBackward0>("FracBackward0", "frac", "self: grad"));
  registry.push_back(nothing_saved_node<Deg2RadBackward0>("Deg2RadBackward0", "deg2rad", "self: deg2rad_backward(grad)"));
  registry.push_back(nothing_saved_node<Rad2DegBackward0>("Rad2DegBackward0", "rad2deg", "self: rad2deg_backward(grad)"));
  registry.push_back(one_tensor_node<SincBackward0Saved, SincBackward0, &SincBackward0Saved::self>(
      "SincBackward0", "sinc", "self", "self: sinc_backward(grad, self)"));
  registry.push_back(nothing_saved_node<AliasBackward0>("AliasBackward0", "alias", "self: grad"));

  registry.push_back(define_node<ToCopyBackward0Saved, ToCopyBackward0>(
      {"ToCopyBackward0", "_to_copy", {"self"}, 1, {}, "self: _to_copy_backward(grad, self.options())"},
      {hidden<&ToCopyBackward0Saved::self_options>("self_options", FieldKind::TensorOptions)}));
  // clang-format on
}

}  // namespace refgrad::nodes
