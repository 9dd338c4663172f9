// Backward nodes: special functions (torch.special and the ops it aliases): erfinv, the modified Bessel
// functions i0, i0e, i1, i1e, erfcx, ndtri, log_ndtr, entr and xlog1py.
//
// All are elementwise over real dtypes; each derivative is a closed form in the function, its input or
// its saved result (DLMF 7.2, 10.29.3 for I0' = I1 and I1' = I0 - I1/x).
#include <cmath>
#include <limits>

#include "define.hpp"

namespace refgrad::nodes {
namespace {

constexpr double kPi = 3.14159265358979323846264338327950288;

// ErfinvBackward0 — erfinv(Tensor self)
//   self: 0.5 * sqrt(M_PI) * exp(self.erfinv().pow(2)) * grad
// (d/dy erfinv(y) = 1 / erf'(erfinv(y)) = sqrt(pi)/2 e^(erfinv(y)^2).)
struct ErfinvBackward0Saved {
  Tensor self;
};

Grads ErfinvBackward0(const Grads& grads, const ErfinvBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("ErfinvBackward0", *grads[0], saved.self, "self");
  return Grads{mul(mul(exp(pow(erfinv(saved.self), 2)), 0.5 * std::sqrt(kPi)), *grads[0])};
}

// I0Backward0 — i0(Tensor self)
//   self: grad * at::special_i1(self)
struct I0Backward0Saved {
  Tensor self;
};

Grads I0Backward0(const Grads& grads, const I0Backward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("I0Backward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], special_i1(saved.self))};
}

// SpecialI0EBackward0 — special_i0e(Tensor self)
//   self: grad * (at::special_i1e(self) - self.sgn() * result)
// (i0e(x) = e^-|x| I0(x), so i0e' = e^-|x| I1(x) - sgn(x) i0e(x).)
struct SpecialI0EBackward0Saved {
  Tensor self;
  Tensor result;
};

Grads SpecialI0EBackward0(const Grads& grads, const SpecialI0EBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialI0EBackward0", *grads[0], saved.self, "self");
  check_same_shape("SpecialI0EBackward0", *grads[0], saved.result, "result");
  return Grads{mul(*grads[0], sub(special_i1e(saved.self), mul(sgn(saved.self), saved.result)))};
}

// FunctionsManual's i1_backward and i1e_backward replace |x| <= eps (the machine epsilon of self's
// dtype) by eps before dividing by it, and give the limit 1/2 of the derivative at 0 there.
double epsilon_of(DType dtype) {
  return dtype == DType::Float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}

// SpecialI1Backward0 — special_i1(Tensor self)
//   self: i1_backward(grad, self, result)
// i1_backward: grad * (i0(x) - i1(x) / x), and grad * 0.5 where |x| <= eps.
struct SpecialI1Backward0Saved {
  Tensor self;
  Tensor result;
};

Grads SpecialI1Backward0(const Grads& grads, const SpecialI1Backward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialI1Backward0", *grads[0], saved.self, "self");
  check_same_shape("SpecialI1Backward0", *grads[0], saved.result, "result");
  const double eps = epsilon_of(saved.self.dtype());
  const Tensor not_tiny = gt(abs(saved.self), eps);
  const Tensor safe_self = where(not_tiny, saved.self, Scalar(eps));
  const Tensor derivative = sub(i0(safe_self), mul(saved.result, reciprocal(safe_self)));
  return Grads{mul(*grads[0], where(not_tiny, derivative, Scalar(0.5)))};
}

// SpecialI1EBackward0 — special_i1e(Tensor self)
//   self: i1e_backward(grad, self, result)
// i1e_backward: grad * (i0e(x) - i1e(x) (sgn(x) + 1/x)), and grad * 0.5 where |x| <= eps.
struct SpecialI1EBackward0Saved {
  Tensor self;
  Tensor result;
};

Grads SpecialI1EBackward0(const Grads& grads, const SpecialI1EBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialI1EBackward0", *grads[0], saved.self, "self");
  check_same_shape("SpecialI1EBackward0", *grads[0], saved.result, "result");
  const double eps = epsilon_of(saved.self.dtype());
  const Tensor not_tiny = gt(abs(saved.self), eps);
  const Tensor safe_self = where(not_tiny, saved.self, Scalar(eps));
  const Tensor derivative =
      sub(special_i0e(safe_self), mul(saved.result, add(sgn(safe_self), reciprocal(safe_self))));
  return Grads{mul(*grads[0], where(not_tiny, derivative, Scalar(0.5)))};
}

// SpecialErfcxBackward0 — special_erfcx(Tensor self)
//   self: (2.0 * self * result - 2.0 / sqrt(M_PI)) * grad
struct SpecialErfcxBackward0Saved {
  Tensor self;
  Tensor result;
};

Grads SpecialErfcxBackward0(const Grads& grads, const SpecialErfcxBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialErfcxBackward0", *grads[0], saved.self, "self");
  check_same_shape("SpecialErfcxBackward0", *grads[0], saved.result, "result");
  return Grads{mul(sub(mul(mul(saved.self, 2.0), saved.result), 2.0 / std::sqrt(kPi)), *grads[0])};
}

// SpecialNdtriBackward0 — special_ndtri(Tensor self)
//   self: grad * std::sqrt(2 * M_PI) * (result.square() / 2).exp()
// (1 / Phi'(ndtri(p)), Phi' the normal density.)
struct SpecialNdtriBackward0Saved {
  Tensor result;
};

Grads SpecialNdtriBackward0(const Grads& grads, const SpecialNdtriBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialNdtriBackward0", *grads[0], saved.result, "result");
  return Grads{mul(mul(*grads[0], std::sqrt(2 * kPi)), exp(div(square(saved.result), 2.0)))};
}

// SpecialLogNdtrBackward0 — special_log_ndtr(Tensor self)
//   self: grad / std::sqrt(2 * M_PI) * (result + self.pow(2) / 2).neg().exp()
// (Phi'(x) / Phi(x) = e^(-x^2/2) / sqrt(2 pi) / e^result.)
struct SpecialLogNdtrBackward0Saved {
  Tensor self;
  Tensor result;
};

Grads SpecialLogNdtrBackward0(const Grads& grads, const SpecialLogNdtrBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialLogNdtrBackward0", *grads[0], saved.self, "self");
  check_same_shape("SpecialLogNdtrBackward0", *grads[0], saved.result, "result");
  const Tensor exponent = neg(add(saved.result, div(pow(saved.self, 2), 2.0)));
  return Grads{mul(div(*grads[0], std::sqrt(2 * kPi)), exp(exponent))};
}

// SpecialEntrBackward0 — special_entr(Tensor self)
//   self: grad * (-(1 + self.log()))
// (entr(x) = -x log x; at x = 0 the grad is -(1 + -inf) = inf, for x < 0 NaN, as in torch.)
struct SpecialEntrBackward0Saved {
  Tensor self;
};

Grads SpecialEntrBackward0(const Grads& grads, const SpecialEntrBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialEntrBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], neg(add(log(saved.self), 1)))};
}

// at::special_xlog1py(x, y): x * log1p(y), except 0 where x is 0 and y is not NaN.
Tensor xlog1py(const Tensor& x, const Tensor& y) {
  const Tensor y_is_a_number = eq(y, y);
  return masked_fill(mul(x, log1p(y)), logical_and(eq(x, Scalar(0)), y_is_a_number), Scalar(0));
}

Tensor xlog1py(const Tensor& x, Scalar y) {
  const double value = y.to_double();
  if (std::isnan(value)) return mul(x, value);  // NaN everywhere, x = 0 too
  return masked_fill(mul(x, std::log1p(value)), eq(x, Scalar(0)), Scalar(0));
}

// SpecialXlog1PyBackward0 — special_xlog1py(Tensor self, Tensor other)
//   self: at::special_xlog1py(grad,  other).masked_fill((self == 0.) & (other <= -1.), 0.)
//   other: grad * self / (other + 1)
struct SpecialXlog1PyBackward0Saved {
  Tensor other;
  Tensor self;
};

Grads SpecialXlog1PyBackward0(const Grads& grads, const SpecialXlog1PyBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) {
    const Tensor at_the_edge = logical_and(eq(saved.self, Scalar(0.0)), le(saved.other, Scalar(-1.0)));
    out[0] = masked_fill(xlog1py(grad, saved.other), at_the_edge, Scalar(0.0));
  }
  if (need[1]) out[1] = div(mul(grad, saved.self), add(saved.other, 1));
  return out;
}

// SpecialXlog1PyBackward1 — special_xlog1py.self_scalar(Scalar self, Tensor other)
//   other: grad * self / (other + 1)
struct SpecialXlog1PyBackward1Saved {
  Tensor other;
  Scalar self;
};

Grads SpecialXlog1PyBackward1(const Grads& grads, const SpecialXlog1PyBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialXlog1PyBackward1", *grads[0], saved.other, "other");
  return Grads{div(mul(*grads[0], saved.self), add(saved.other, 1))};
}

// SpecialXlog1PyBackward2 — special_xlog1py.other_scalar(Tensor self, Scalar other)
//   self: other.toDouble() > -1.
//           ? at::special_xlog1py(grad,  other)
//           : at::special_xlog1py(grad,  other).masked_fill(self == 0., 0.)
struct SpecialXlog1PyBackward2Saved {
  Scalar other;
  Tensor self;
};

Grads SpecialXlog1PyBackward2(const Grads& grads, const SpecialXlog1PyBackward2Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SpecialXlog1PyBackward2", *grads[0], saved.self, "self");
  const Tensor grad_self = xlog1py(*grads[0], saved.other);
  if (saved.other.to_double() > -1.0) return Grads{grad_self};
  return Grads{masked_fill(grad_self, eq(saved.self, Scalar(0.0)), Scalar(0.0))};
}

// An elementwise node of `self` that saves `self` and/or `result` (Functions.h's order).
template <class Saved, Grads (*Function)(const Grads&, const Saved&, const Need&)>
NodeDef unary_node(const char* name, const char* aten_op, const char* formula, std::vector<Field<Saved>> fields) {
  return define_node<Saved, Function>({name, aten_op, {"self"}, 1, {}, formula}, std::move(fields));
}

}  // namespace

void add_special_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(unary_node<ErfinvBackward0Saved, ErfinvBackward0>(
      "ErfinvBackward0", "erfinv", "self: 0.5 * sqrt(M_PI) * exp(self.erfinv().pow(2)) * grad",
      {saved<&ErfinvBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(unary_node<I0Backward0Saved, I0Backward0>(
      "I0Backward0", "i0", "self: grad * at::special_i1(self)",
      {saved<&I0Backward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(unary_node<SpecialI0EBackward0Saved, SpecialI0EBackward0>(
      "SpecialI0EBackward0", "special_i0e", "self: grad * (at::special_i1e(self) - self.sgn() * result)",
      {saved<&SpecialI0EBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&SpecialI0EBackward0Saved::result>("result", FieldKind::Tensor)}));
  registry.push_back(unary_node<SpecialI1Backward0Saved, SpecialI1Backward0>(
      "SpecialI1Backward0", "special_i1", "self: i1_backward(grad, self, result)",
      {saved<&SpecialI1Backward0Saved::self>("self", FieldKind::Tensor),
       saved<&SpecialI1Backward0Saved::result>("result", FieldKind::Tensor)}));
  registry.push_back(unary_node<SpecialI1EBackward0Saved, SpecialI1EBackward0>(
      "SpecialI1EBackward0", "special_i1e", "self: i1e_backward(grad, self, result)",
      {saved<&SpecialI1EBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&SpecialI1EBackward0Saved::result>("result", FieldKind::Tensor)}));
  registry.push_back(unary_node<SpecialErfcxBackward0Saved, SpecialErfcxBackward0>(
      "SpecialErfcxBackward0", "special_erfcx", "self: (2.0 * self * result - 2.0 / sqrt(M_PI)) * grad",
      {saved<&SpecialErfcxBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&SpecialErfcxBackward0Saved::result>("result", FieldKind::Tensor)}));
  registry.push_back(unary_node<SpecialNdtriBackward0Saved, SpecialNdtriBackward0>(
      "SpecialNdtriBackward0", "special_ndtri", "self: grad * std::sqrt(2 * M_PI) * (result.square() / 2).exp()",
      {saved<&SpecialNdtriBackward0Saved::result>("result", FieldKind::Tensor)}));
  registry.push_back(unary_node<SpecialLogNdtrBackward0Saved, SpecialLogNdtrBackward0>(
      "SpecialLogNdtrBackward0", "special_log_ndtr",
      "self: grad / std::sqrt(2 * M_PI) * (result + self.pow(2) / 2).neg().exp()",
      {saved<&SpecialLogNdtrBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&SpecialLogNdtrBackward0Saved::result>("result", FieldKind::Tensor)}));
  registry.push_back(unary_node<SpecialEntrBackward0Saved, SpecialEntrBackward0>(
      "SpecialEntrBackward0", "special_entr", "self: grad * (-(1 + self.log()))",
      {saved<&SpecialEntrBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<SpecialXlog1PyBackward0Saved, SpecialXlog1PyBackward0>(
      {"SpecialXlog1PyBackward0", "special_xlog1py", {"self", "other"}, 1, {},
       "self: at::special_xlog1py(grad,  other).masked_fill((self == 0.) & (other <= -1.), 0.)\n"
       "other: grad * self / (other + 1)"},
      {saved<&SpecialXlog1PyBackward0Saved::other>("other", FieldKind::Tensor),
       saved<&SpecialXlog1PyBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<SpecialXlog1PyBackward1Saved, SpecialXlog1PyBackward1>(
      {"SpecialXlog1PyBackward1", "special_xlog1py.self_scalar", {"other"}, 1, {}, "other: grad * self / (other + 1)"},
      {saved<&SpecialXlog1PyBackward1Saved::other>("other", FieldKind::Tensor),
       saved<&SpecialXlog1PyBackward1Saved::self>("self", FieldKind::Scalar)}));
  registry.push_back(define_node<SpecialXlog1PyBackward2Saved, SpecialXlog1PyBackward2>(
      {"SpecialXlog1PyBackward2", "special_xlog1py.other_scalar", {"self"}, 1, {},
       "self: other.toDouble() > -1.\n"
       "        ? at::special_xlog1py(grad,  other)\n"
       "        : at::special_xlog1py(grad,  other).masked_fill(self == 0., 0.)"},
      {saved<&SpecialXlog1PyBackward2Saved::other>("other", FieldKind::Scalar),
       saved<&SpecialXlog1PyBackward2Saved::self>("self", FieldKind::Tensor)}));
}

}  // namespace refgrad::nodes
