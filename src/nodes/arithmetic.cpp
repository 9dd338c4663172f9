// Arithmetic nodes: add, sub, rsub, mul, div, neg, pow, addcmul, addcdiv,
// maximum, minimum, atan2, where, clamp, masked_fill, lerp.
#include <cmath>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// conj for a Scalar divisor, so that one template serves Tensor and Scalar divisors.
Scalar conj(const Scalar& value) { return value.conj(); }

// FunctionsManual's div_tensor_self_backward: grad / other.conj(), or zeros of
// self's dtype when the division rounds (floor and trunc are piecewise constant).
template <class Other>
Tensor div_tensor_self_backward(const Tensor& grad, const Other& other, DType self_scalar_type,
                                const std::optional<std::string>& rounding_mode = std::nullopt) {
  if (rounding_mode) return zeros_like(grad, self_scalar_type);
  return handle_r_to_c(self_scalar_type, div(grad, conj(other)));
}

// FunctionsManual's div_tensor_other_backward: -grad * ((self / other) / other).conj().
Tensor div_tensor_other_backward(const Tensor& grad, const Tensor& self, const Tensor& other,
                                 const std::optional<std::string>& rounding_mode = std::nullopt) {
  if (rounding_mode) return zeros_like(grad, other.dtype());
  return handle_r_to_c(other.dtype(), mul(neg(grad), conj(div(div(self, other), other))));
}

// FunctionsManual's pow_backward (Scalar exponent): grad * (exponent * self^(exponent - 1)).conj(),
// and zeros of self's dtype for exponent 0 (0 * self^-1 would be NaN at self == 0).
Tensor pow_backward(const Tensor& grad, const Tensor& self, const Scalar& exponent) {
  if (exponent.to_double() == 0.0) return zeros_like(self);
  const double exp = exponent.to_double();
  return handle_r_to_c(self.dtype(), mul(grad, conj(mul(pow(self, Scalar(exp - 1)), Scalar(exp)))));
}

// FunctionsManual's pow_backward_self: grad * (exponent * self^(exponent - 1)).conj(), 0 where exponent == 0.
Tensor pow_backward_self(const Tensor& grad, const Tensor& self, const Tensor& exponent) {
  const Tensor out = where(eq(exponent, Scalar(0.0)), Scalar(0.0),
                           mul(grad, conj(mul(exponent, pow(self, sub(exponent, Scalar(1)))))));
  return handle_r_to_c(self.dtype(), out);
}

// exponent >= 0, for a real exponent; for a complex one, a real exponent >= 0 (imaginary part 0).
Tensor real_and_nonnegative(const Tensor& exponent) {
  if (!is_complex(exponent.dtype())) return ge(exponent, Scalar(0));
  return logical_and(eq(imag(exponent), Scalar(0)), ge(real(exponent), Scalar(0)));
}

// FunctionsManual's pow_backward_exponent (Tensor base): grad * (result * log(self)).conj(), 0 where
// self == 0 and exponent >= 0 (the one-sided derivative there; log(0) would make it -inf or NaN).
Tensor pow_backward_exponent(const Tensor& grad, const Tensor& self, const Tensor& exponent, const Tensor& result) {
  const Tensor cond = logical_and(eq(self, Scalar(0)), real_and_nonnegative(exponent));
  const Tensor self_promoted = to(self, result_type(self, exponent));
  return handle_r_to_c(exponent.dtype(),
                       mul(grad, where(cond, Scalar(0.0), conj(mul(result, log(self_promoted))))));
}

// FunctionsManual's pow_backward_exponent (Scalar base): grad * result * log(base), 0 where
// base == 0 and exponent >= 0. A negative base gives NaN, as log does.
// With a complex exponent the base is a complex number too: log of a negative base is ln|base| + i pi.
Tensor pow_backward_exponent(const Tensor& grad, const Scalar& base, const Tensor& exponent, const Tensor& result) {
  if (is_complex(exponent.dtype())) {
    const DType part = exponent.dtype() == DType::ComplexFloat ? DType::Float32 : DType::Float64;
    const double b = base.to_double();
    const Tensor log_base = complex(scalar_tensor(std::log(std::abs(b)), part), scalar_tensor(b < 0 ? M_PI : 0.0, part));
    const Tensor scaled = conj(mul(result, log_base));
    if (b == 0.0) return mul(grad, where(real_and_nonnegative(exponent), Scalar(0.0), scaled));
    return mul(grad, scaled);
  }
  const Scalar log_base(std::log(base.to_double()));
  if (base.to_double() == 0.0) {
    const Tensor out = mul(grad, where(ge(exponent, Scalar(0)), Scalar(0.0), mul(result, log_base)));
    return handle_r_to_c(exponent.dtype(), out);
  }
  return handle_r_to_c(exponent.dtype(), mul(grad, mul(result, log_base)));
}

// FunctionsManual's masked_fill_backward: the value was written wherever mask is true.
Tensor masked_fill_backward(const Tensor& grad, const Tensor& mask) { return sum(masked_select(grad, mask)); }

// AddBackward0 — add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1)
//   self:  handle_r_to_c(self.scalar_type(), grad)
//   other: handle_r_to_c(other.scalar_type(), maybe_multiply(grad, alpha.conj()))
struct AddBackward0Saved {
  Scalar alpha;
  DType other_scalar_type;
  DType self_scalar_type;
};

Grads AddBackward0(const Grads& grads, const AddBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = handle_r_to_c(saved.self_scalar_type, grad);
  if (need[1]) out[1] = handle_r_to_c(saved.other_scalar_type, maybe_multiply(grad, saved.alpha.conj()));
  return out;
}

// MulBackward0 — mul.Tensor(Tensor self, Tensor other)
//   self:  mul_tensor_backward(grad, other, self.scalar_type())
//   other: mul_tensor_backward(grad, self, other.scalar_type())
// PyTorch saves `other` only when self's grad may be needed, and vice versa.
struct MulBackward0Saved {
  std::optional<Tensor> other;
  DType other_scalar_type;
  std::optional<Tensor> self;
  DType self_scalar_type;
};

Grads MulBackward0(const Grads& grads, const MulBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) {
    const Tensor& other = needed(saved.other, "MulBackward0", "self", "other");
    out[0] = mul_tensor_backward(grad, other, saved.self_scalar_type);
  }
  if (need[1]) {
    const Tensor& self = needed(saved.self, "MulBackward0", "other", "self");
    out[1] = mul_tensor_backward(grad, self, saved.other_scalar_type);
  }
  return out;
}

// The .Scalar overloads (AddBackward1, SubBackward1, MulBackward1, DivBackward1,
// DivBackward3) come from ATen calls such as torch.ops.aten.add.Scalar; Python's
// `x + 2` wraps 2 as a 0-dim tensor and records the .Tensor node (AddBackward0).

// AddBackward1 — add.Scalar(Tensor self, Scalar other, Scalar alpha=1)
//   self: handle_r_to_c(self.scalar_type(), grad)
struct AddBackward1Saved {
  DType self_scalar_type;
};

Grads AddBackward1(const Grads& grads, const AddBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{handle_r_to_c(saved.self_scalar_type, *grads[0])};
}

// SubBackward0 — sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1)
//   self:  handle_r_to_c(self.scalar_type(), grad)
//   other: handle_r_to_c(other.scalar_type(), maybe_multiply(-grad, alpha.conj()))
struct SubBackward0Saved {
  Scalar alpha;
  DType other_scalar_type;
  DType self_scalar_type;
};

Grads SubBackward0(const Grads& grads, const SubBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = handle_r_to_c(saved.self_scalar_type, grad);
  if (need[1]) out[1] = handle_r_to_c(saved.other_scalar_type, maybe_multiply(neg(grad), saved.alpha.conj()));
  return out;
}

// SubBackward1 — sub.Scalar(Tensor self, Scalar other, Scalar alpha=1)
//   self: handle_r_to_c(self.scalar_type(), grad)
struct SubBackward1Saved {
  DType self_scalar_type;
};

Grads SubBackward1(const Grads& grads, const SubBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{handle_r_to_c(saved.self_scalar_type, *grads[0])};
}

// RsubBackward0 — rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1), other - alpha * self
//   self:  handle_r_to_c(self.scalar_type(), maybe_multiply(-grad, alpha.conj()))
//   other: handle_r_to_c(other.scalar_type(), grad)
struct RsubBackward0Saved {
  Scalar alpha;
  DType other_scalar_type;
  DType self_scalar_type;
};

Grads RsubBackward0(const Grads& grads, const RsubBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = handle_r_to_c(saved.self_scalar_type, maybe_multiply(neg(grad), saved.alpha.conj()));
  if (need[1]) out[1] = handle_r_to_c(saved.other_scalar_type, grad);
  return out;
}

// RsubBackward1 — rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1), other - alpha * self
//   self: handle_r_to_c(self.scalar_type(), maybe_multiply(-grad, alpha.conj()))
struct RsubBackward1Saved {
  Scalar alpha;
  DType self_scalar_type;
};

Grads RsubBackward1(const Grads& grads, const RsubBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{handle_r_to_c(saved.self_scalar_type, maybe_multiply(neg(*grads[0]), saved.alpha.conj()))};
}

// MulBackward1 — mul.Scalar(Tensor self, Scalar other)
//   self: mul_tensor_backward(grad, other, self.scalar_type()), that is grad * other.conj()
struct MulBackward1Saved {
  Scalar other;
  DType self_scalar_type;
};

Grads MulBackward1(const Grads& grads, const MulBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{handle_r_to_c(saved.self_scalar_type, mul(*grads[0], saved.other.conj()))};
}

// DivBackward0 — div.Tensor(Tensor self, Tensor other)
//   self:  div_tensor_self_backward(grad, other, self.scalar_type())
//   other: div_tensor_other_backward(grad, self, other)
// PyTorch saves `self` only when other's grad may be needed.
struct DivBackward0Saved {
  std::optional<Tensor> other;
  std::optional<Tensor> self;
  DType self_scalar_type;
};

Grads DivBackward0(const Grads& grads, const DivBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0])
    out[0] = div_tensor_self_backward(grad, needed(saved.other, "DivBackward0", "self", "other"),
                                      saved.self_scalar_type);
  if (need[1]) {
    const Tensor& self = needed(saved.self, "DivBackward0", "other", "self");
    const Tensor& other = needed(saved.other, "DivBackward0", "other", "other");
    out[1] = div_tensor_other_backward(grad, self, other);
  }
  return out;
}

// DivBackward1 — div.Scalar(Tensor self, Scalar other)
//   self: div_tensor_self_backward(grad, other, self.scalar_type())
struct DivBackward1Saved {
  Scalar other;
  DType self_scalar_type;
};

Grads DivBackward1(const Grads& grads, const DivBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{div_tensor_self_backward(*grads[0], saved.other, saved.self_scalar_type)};
}

// DivBackward2 — div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode)
//   self:  div_tensor_self_backward(grad, other, self.scalar_type(), rounding_mode)
//   other: div_tensor_other_backward(grad, self, other, rounding_mode)
// With a rounding mode both grads are zeros (of self's and other's dtypes).
struct DivBackward2Saved {
  std::optional<Tensor> other;
  std::optional<std::string> rounding_mode;
  std::optional<Tensor> self;
  DType self_scalar_type;
};

Grads DivBackward2(const Grads& grads, const DivBackward2Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0])
    out[0] = div_tensor_self_backward(grad, needed(saved.other, "DivBackward2", "self", "other"),
                                      saved.self_scalar_type, saved.rounding_mode);
  if (need[1]) {
    const Tensor& self = needed(saved.self, "DivBackward2", "other", "self");
    const Tensor& other = needed(saved.other, "DivBackward2", "other", "other");
    out[1] = div_tensor_other_backward(grad, self, other, saved.rounding_mode);
  }
  return out;
}

// DivBackward3 — div.Scalar_mode(Tensor self, Scalar other, *, str? rounding_mode)
//   self: div_tensor_self_backward(grad, other, self.scalar_type(), rounding_mode)
struct DivBackward3Saved {
  Scalar other;
  std::optional<std::string> rounding_mode;
  DType self_scalar_type;
};

Grads DivBackward3(const Grads& grads, const DivBackward3Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{div_tensor_self_backward(*grads[0], saved.other, saved.self_scalar_type, saved.rounding_mode)};
}

// NegBackward0 — neg(Tensor self)
//   self: grad.neg()
struct NegBackward0Saved {};

Grads NegBackward0(const Grads& grads, const NegBackward0Saved& /*saved*/, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{neg(*grads[0])};
}

// PowBackward0 — pow.Tensor_Scalar(Tensor self, Scalar exponent); torch.square too
//   self: pow_backward(grad, self, exponent)
struct PowBackward0Saved {
  Scalar exponent;
  Tensor self;
};

Grads PowBackward0(const Grads& grads, const PowBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{pow_backward(*grads[0], saved.self, saved.exponent)};
}

// PowBackward1 — pow.Tensor_Tensor(Tensor self, Tensor exponent)
//   self:     pow_backward_self(grad, self, exponent)
//   exponent: pow_backward_exponent(grad, self, exponent, result)
struct PowBackward1Saved {
  Tensor exponent;
  Tensor self;
  Tensor result;
};

Grads PowBackward1(const Grads& grads, const PowBackward1Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = pow_backward_self(grad, saved.self, saved.exponent);
  if (need[1]) out[1] = pow_backward_exponent(grad, saved.self, saved.exponent, saved.result);
  return out;
}

// PowBackward2 — pow.Scalar(Scalar self, Tensor exponent)
//   exponent: pow_backward_exponent(grad, self, exponent, result)
struct PowBackward2Saved {
  Tensor exponent;
  Scalar self;
  Tensor result;
};

Grads PowBackward2(const Grads& grads, const PowBackward2Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{pow_backward_exponent(*grads[0], saved.self, saved.exponent, saved.result)};
}

// AddcmulBackward0 — addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1)
//   self:    handle_r_to_c(self.scalar_type(), grad)
//   tensor1: handle_r_to_c(tensor1.scalar_type(), grad * (tensor2 * value).conj())
//   tensor2: handle_r_to_c(tensor2.scalar_type(), grad * (tensor1 * value).conj())
// PyTorch saves tensor1 only when tensor2's grad may be needed, and vice versa.
struct AddcmulBackward0Saved {
  DType self_scalar_type;
  std::optional<Tensor> tensor1;
  DType tensor1_scalar_type;
  std::optional<Tensor> tensor2;
  DType tensor2_scalar_type;
  Scalar value;
};

Grads AddcmulBackward0(const Grads& grads, const AddcmulBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0]) out[0] = handle_r_to_c(saved.self_scalar_type, grad);
  if (need[1]) {
    const Tensor& tensor2 = needed(saved.tensor2, "AddcmulBackward0", "tensor1", "tensor2");
    out[1] = handle_r_to_c(saved.tensor1_scalar_type, mul(grad, conj(mul(tensor2, saved.value))));
  }
  if (need[2]) {
    const Tensor& tensor1 = needed(saved.tensor1, "AddcmulBackward0", "tensor2", "tensor1");
    out[2] = handle_r_to_c(saved.tensor2_scalar_type, mul(grad, conj(mul(tensor1, saved.value))));
  }
  return out;
}

// AddcdivBackward0 — addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1)
//   self:    handle_r_to_c(self.scalar_type(), grad)
//   tensor1: handle_r_to_c(tensor1.scalar_type(), grad * (value / tensor2).conj())
//   tensor2: handle_r_to_c(tensor2.scalar_type(), -grad * (value * tensor1 / (tensor2 * tensor2)).conj())
// PyTorch saves tensor1 only when tensor2's grad may be needed; tensor2 when either's may be.
struct AddcdivBackward0Saved {
  DType self_scalar_type;
  std::optional<Tensor> tensor1;
  DType tensor1_scalar_type;
  std::optional<Tensor> tensor2;
  DType tensor2_scalar_type;
  Scalar value;
};

Grads AddcdivBackward0(const Grads& grads, const AddcdivBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0]) out[0] = handle_r_to_c(saved.self_scalar_type, grad);
  if (need[1]) {
    const Tensor& tensor2 = needed(saved.tensor2, "AddcdivBackward0", "tensor1", "tensor2");
    // value / tensor2: the Scalar becomes a 0-dim tensor of tensor2's dtype, as ATen wraps it.
    const Tensor value_over_tensor2 = div(scalar_tensor(saved.value, tensor2.dtype()), tensor2);
    out[1] = handle_r_to_c(saved.tensor1_scalar_type, mul(grad, conj(value_over_tensor2)));
  }
  if (need[2]) {
    const Tensor& tensor1 = needed(saved.tensor1, "AddcdivBackward0", "tensor2", "tensor1");
    const Tensor& tensor2 = needed(saved.tensor2, "AddcdivBackward0", "tensor2", "tensor2");
    out[2] = handle_r_to_c(saved.tensor2_scalar_type,
                           mul(neg(grad), conj(div(mul(tensor1, saved.value), mul(tensor2, tensor2)))));
  }
  return out;
}

// maximum's and minimum's shared first step: where self == other (a tie), each
// side gets half the grad.
Tensor split_ties(const Tensor& grad, const Tensor& self, const Tensor& other) {
  return where(eq(self, other), div(grad, Scalar(2)), grad);
}

// MaximumBackward0 — maximum(Tensor self, Tensor other)
//   self:  at::where(self == other, grad / 2, grad).masked_fill_(self < other, 0)
//   other: at::where(self == other, grad / 2, grad).masked_fill_(self > other, 0)
// Ties split the grad in half; a NaN on either side passes the whole grad to both.
struct MaximumBackward0Saved {
  Tensor other;
  Tensor self;
};

Grads MaximumBackward0(const Grads& grads, const MaximumBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor split = split_ties(*grads[0], saved.self, saved.other);
  Grads out(2);
  if (need[0]) out[0] = masked_fill(split, lt(saved.self, saved.other), Scalar(0));
  if (need[1]) out[1] = masked_fill(split, gt(saved.self, saved.other), Scalar(0));
  return out;
}

// MinimumBackward0 — minimum(Tensor self, Tensor other)
//   self:  at::where(self == other, grad / 2, grad).masked_fill_(self > other, 0)
//   other: at::where(self == other, grad / 2, grad).masked_fill_(self < other, 0)
struct MinimumBackward0Saved {
  Tensor other;
  Tensor self;
};

Grads MinimumBackward0(const Grads& grads, const MinimumBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor split = split_ties(*grads[0], saved.self, saved.other);
  Grads out(2);
  if (need[0]) out[0] = masked_fill(split, gt(saved.self, saved.other), Scalar(0));
  if (need[1]) out[1] = masked_fill(split, lt(saved.self, saved.other), Scalar(0));
  return out;
}

// Atan2Backward0 — atan2(Tensor self, Tensor other)
//   self, other: atan2_backward(grad, self, other, grad_input_mask)
// atan2_backward: denom = self^2 + other^2, recip = 1 / denom with 0 where denom == 0;
// self: grad * other * recip, other: grad * -self * recip. So the grads are 0 at
// the origin (and wherever denom underflows to 0), not NaN.
struct Atan2Backward0Saved {
  Tensor other;
  Tensor self;
};

Grads Atan2Backward0(const Grads& grads, const Atan2Backward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  const Tensor denom = add(mul(saved.self, saved.self), mul(saved.other, saved.other));
  const Tensor recip = masked_fill(reciprocal(denom), eq(denom, Scalar(0)), Scalar(0));
  Grads out(2);
  if (need[0]) out[0] = mul(mul(grad, saved.other), recip);
  if (need[1]) out[1] = mul(mul(grad, neg(saved.self)), recip);
  return out;
}

// LogaddexpBackward0 — logaddexp(Tensor self, Tensor other)
//   self: grad / (1 + exp(other - self)).conj()
//   other: grad / (1 + exp(self - other)).conj()
struct LogaddexpBackward0Saved {
  Tensor other;
  Tensor self;
};

Grads LogaddexpBackward0(const Grads& grads, const LogaddexpBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = div(grad, conj(add(exp(sub(saved.other, saved.self)), 1)));
  if (need[1]) out[1] = div(grad, conj(add(exp(sub(saved.self, saved.other)), 1)));
  return out;
}

// Logaddexp2Backward0 — logaddexp2(Tensor self, Tensor other)
//   self: grad / (1 + pow(2, other - self))
//   other: grad / (1 + pow(2, self - other))
struct Logaddexp2Backward0Saved {
  Tensor other;
  Tensor self;
};

Grads Logaddexp2Backward0(const Grads& grads, const Logaddexp2Backward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = div(grad, add(pow(Scalar(2), sub(saved.other, saved.self)), 1));
  if (need[1]) out[1] = div(grad, add(pow(Scalar(2), sub(saved.self, saved.other)), 1));
  return out;
}

// HypotBackward0 — hypot(Tensor self, Tensor other)
//   self: grad * self / result
//   other: grad * other / result
struct HypotBackward0Saved {
  Tensor other;
  Tensor self;
  Tensor result;
};

Grads HypotBackward0(const Grads& grads, const HypotBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = div(mul(grad, saved.self), saved.result);
  if (need[1]) out[1] = div(mul(grad, saved.other), saved.result);
  return out;
}

// at::xlogy(x, y): x * log(y), except 0 where x is 0 (and y is not NaN: NaN stays NaN).
Tensor xlogy(const Tensor& x, const Tensor& y) {
  const Tensor y_is_a_number = eq(y, y);
  return masked_fill(mul(x, log(y)), logical_and(eq(x, Scalar(0)), y_is_a_number), Scalar(0));
}

// XlogyBackward0 — xlogy.Tensor(Tensor self, Tensor other)
//   self: at::xlogy(grad, other).masked_fill((self == 0.) & (other <= 0.), 0.)
//   other: grad * self / other
struct XlogyBackward0Saved {
  Tensor other;
  Tensor self;
};

Grads XlogyBackward0(const Grads& grads, const XlogyBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) {
    const Tensor at_the_edge = logical_and(eq(saved.self, Scalar(0)), le(saved.other, Scalar(0)));
    out[0] = masked_fill(xlogy(grad, saved.other), at_the_edge, Scalar(0));
  }
  if (need[1]) out[1] = div(mul(grad, saved.self), saved.other);
  return out;
}

// WhereBackward0 — where.self(Tensor condition, Tensor self, Tensor other)
//   condition: non_differentiable
//   self:  where(condition, grad, 0)
//   other: where(condition, 0, grad)
struct WhereBackward0Saved {
  Tensor condition;
};

Grads WhereBackward0(const Grads& grads, const WhereBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = where(saved.condition, grad, Scalar(0));
  if (need[1]) out[1] = where(saved.condition, Scalar(0), grad);
  return out;
}

// ClampBackward1 — clamp(Tensor self, Scalar? min=None, Scalar? max=None)
//   self: clamp_backward(grad, self, min, max)
// clamp_backward: grad where min <= self <= max, else 0; at a bound the grad passes
// (the subgradient 1), NaN inputs get 0.
struct ClampBackward1Saved {
  std::optional<Scalar> max;
  std::optional<Scalar> min;
  Tensor self;
};

Grads ClampBackward1(const Grads& grads, const ClampBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  if (saved.min && saved.max)
    return Grads{where(logical_and(ge(saved.self, *saved.min), le(saved.self, *saved.max)), grad, Scalar(0.0))};
  if (saved.min) return Grads{where(ge(saved.self, *saved.min), grad, Scalar(0.0))};
  if (saved.max) return Grads{where(le(saved.self, *saved.max), grad, Scalar(0.0))};
  return Grads{grad};
}

// ClampBackward0 — clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None)
//   self:     clamp_backward(grad, self, min, max)
//   min, max: clamp_backward_min_max(grad, self, min, max, grad_input_mask)
// self gets the grad where min <= self <= max; min where self < min < max; max where
// self > max or max < min (clamp returns max when min > max).
struct ClampBackward0Saved {
  std::optional<Tensor> max;
  std::optional<Tensor> min;
  Tensor self;
};

Grads ClampBackward0(const Grads& grads, const ClampBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  const Tensor& self = saved.self;
  Grads out(3);
  if (need[0]) {
    std::optional<Tensor> pass;  // where self lies within the bounds
    if (saved.min) pass = ge(self, *saved.min);
    if (saved.max) pass = pass ? logical_and(*pass, le(self, *saved.max)) : le(self, *saved.max);
    out[0] = pass ? where(*pass, grad, Scalar(0.0)) : grad;
  }
  if (need[1]) {
    const Tensor& min = needed(saved.min, "ClampBackward0", "min", "min");
    const Tensor below = lt(self, min);
    out[1] = where(saved.max ? logical_and(below, lt(min, *saved.max)) : below, grad, Scalar(0.0));
  }
  if (need[2]) {
    const Tensor& max = needed(saved.max, "ClampBackward0", "max", "max");
    const Tensor above = gt(self, max);
    out[2] = where(saved.min ? logical_or(above, lt(max, *saved.min)) : above, grad, Scalar(0.0));
  }
  return out;
}

// ClampMinBackward0 — clamp_min(Tensor self, Scalar min)
//   self: where(self >= min, grad, at::scalar_tensor(0., grad.options()))
struct ClampMinBackward0Saved {
  Scalar min;
  Tensor self;
};

Grads ClampMinBackward0(const Grads& grads, const ClampMinBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{where(ge(saved.self, saved.min), *grads[0], Scalar(0.0))};
}

// ClampMaxBackward0 — clamp_max(Tensor self, Scalar max)
//   self: where(self <= max, grad, at::scalar_tensor(0., grad.options()))
struct ClampMaxBackward0Saved {
  Scalar max;
  Tensor self;
};

Grads ClampMaxBackward0(const Grads& grads, const ClampMaxBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{where(le(saved.self, saved.max), *grads[0], Scalar(0.0))};
}

// MaskedFillBackward0 — masked_fill.Scalar(Tensor self, Tensor mask, Scalar value)
//   self: grad.masked_fill(mask, 0)
//   mask: non_differentiable
struct MaskedFillBackward0Saved {
  Tensor mask;
};

Grads MaskedFillBackward0(const Grads& grads, const MaskedFillBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{masked_fill(*grads[0], saved.mask, Scalar(0))};
}

// MaskedFillBackward1 — masked_fill.Tensor(Tensor self, Tensor mask, Tensor value)
//   self:  grad.masked_fill(mask, 0)
//   value: masked_fill_backward(grad, mask)      (the sum of grad where mask; 0-dim)
//   mask:  non_differentiable
struct MaskedFillBackward1Saved {
  Tensor mask;
};

Grads MaskedFillBackward1(const Grads& grads, const MaskedFillBackward1Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  Grads out(2);
  if (need[0]) out[0] = masked_fill(*grads[0], saved.mask, Scalar(0));
  if (need[1]) out[1] = masked_fill_backward(*grads[0], saved.mask);
  return out;
}

// LerpBackward0 — lerp.Scalar(Tensor self, Tensor end, Scalar weight)
//   self: weight.isComplex() ? grad * (1 - weight.conj().toComplexDouble()) : grad * (1 - weight.toDouble())
//   end:  grad * weight.conj()
struct LerpBackward0Saved {
  Scalar weight;
};

Grads LerpBackward0(const Grads& grads, const LerpBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  const Scalar one_minus_weight_conj = saved.weight.is_complex()
                                           ? Scalar(1.0 - saved.weight.conj().to_complex())
                                           : Scalar(1 - saved.weight.to_double());
  if (need[0]) out[0] = mul(grad, one_minus_weight_conj);
  if (need[1]) out[1] = mul(grad, saved.weight.conj());
  return out;
}

// LerpBackward1 — lerp.Tensor(Tensor self, Tensor end, Tensor weight)
//   self:   grad * (1 - weight).conj()
//   end:    grad * weight.conj()
//   weight: grad * (end - self).conj()
// PyTorch saves weight only when self's or end's grad may be needed, self and end
// only when weight's may be.
struct LerpBackward1Saved {
  std::optional<Tensor> end;
  std::optional<Tensor> self;
  std::optional<Tensor> weight;
};

Grads LerpBackward1(const Grads& grads, const LerpBackward1Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0]) {
    const Tensor& weight = needed(saved.weight, "LerpBackward1", "self", "weight");
    out[0] = mul(grad, conj(add(neg(weight), Scalar(1))));  // 1 - weight, exactly
  }
  if (need[1]) out[1] = mul(grad, conj(needed(saved.weight, "LerpBackward1", "end", "weight")));
  if (need[2]) {
    const Tensor& end = needed(saved.end, "LerpBackward1", "weight", "end");
    out[2] = mul(grad, conj(sub(end, needed(saved.self, "LerpBackward1", "weight", "self"))));
  }
  return out;
}

}  // namespace

void add_arithmetic_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<AddBackward0Saved, AddBackward0>(
      {"AddBackward0", "add.Tensor", {"self", "other"}, 1, {},
       "self: handle_r_to_c(self.scalar_type(), grad)\n"
       "other: handle_r_to_c(other.scalar_type(), maybe_multiply(grad, alpha.conj()))"},
      {saved<&AddBackward0Saved::alpha>("alpha", FieldKind::Scalar),
       hidden<&AddBackward0Saved::other_scalar_type>("other_scalar_type", FieldKind::DType),
       hidden<&AddBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<MulBackward0Saved, MulBackward0>(
      {"MulBackward0", "mul.Tensor", {"self", "other"}, 1, {},
       "self: mul_tensor_backward(grad, other, self.scalar_type())\n"
       "other: mul_tensor_backward(grad, self, other.scalar_type())"},
      {saved<&MulBackward0Saved::other>("other", FieldKind::Tensor, true),
       hidden<&MulBackward0Saved::other_scalar_type>("other_scalar_type", FieldKind::DType),
       saved<&MulBackward0Saved::self>("self", FieldKind::Tensor, true),
       hidden<&MulBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<AddBackward1Saved, AddBackward1>(
      {"AddBackward1", "add.Scalar", {"self"}, 1, {}, "self: handle_r_to_c(self.scalar_type(), grad)"},
      {hidden<&AddBackward1Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<SubBackward0Saved, SubBackward0>(
      {"SubBackward0", "sub.Tensor", {"self", "other"}, 1, {},
       "self: handle_r_to_c(self.scalar_type(), grad)\n"
       "other: handle_r_to_c(other.scalar_type(), maybe_multiply(-grad, alpha.conj()))"},
      {saved<&SubBackward0Saved::alpha>("alpha", FieldKind::Scalar),
       hidden<&SubBackward0Saved::other_scalar_type>("other_scalar_type", FieldKind::DType),
       hidden<&SubBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<SubBackward1Saved, SubBackward1>(
      {"SubBackward1", "sub.Scalar", {"self"}, 1, {}, "self: handle_r_to_c(self.scalar_type(), grad)"},
      {hidden<&SubBackward1Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<RsubBackward0Saved, RsubBackward0>(
      {"RsubBackward0", "rsub.Tensor", {"self", "other"}, 1, {},
       "self: handle_r_to_c(self.scalar_type(), maybe_multiply(-grad, alpha.conj()))\n"
       "other: handle_r_to_c(other.scalar_type(), grad)"},
      {saved<&RsubBackward0Saved::alpha>("alpha", FieldKind::Scalar),
       hidden<&RsubBackward0Saved::other_scalar_type>("other_scalar_type", FieldKind::DType),
       hidden<&RsubBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<RsubBackward1Saved, RsubBackward1>(
      {"RsubBackward1", "rsub.Scalar", {"self"}, 1, {},
       "self: handle_r_to_c(self.scalar_type(), maybe_multiply(-grad, alpha.conj()))"},
      {saved<&RsubBackward1Saved::alpha>("alpha", FieldKind::Scalar),
       hidden<&RsubBackward1Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<MulBackward1Saved, MulBackward1>(
      {"MulBackward1", "mul.Scalar", {"self"}, 1, {}, "self: mul_tensor_backward(grad, other, self.scalar_type())"},
      {saved<&MulBackward1Saved::other>("other", FieldKind::Scalar),
       hidden<&MulBackward1Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<DivBackward0Saved, DivBackward0>(
      {"DivBackward0", "div.Tensor", {"self", "other"}, 1, {},
       "self: div_tensor_self_backward(grad, other, self.scalar_type())\n"
       "other: div_tensor_other_backward(grad, self, other)"},
      {saved<&DivBackward0Saved::other>("other", FieldKind::Tensor, true),
       saved<&DivBackward0Saved::self>("self", FieldKind::Tensor, true),
       hidden<&DivBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<DivBackward1Saved, DivBackward1>(
      {"DivBackward1", "div.Scalar", {"self"}, 1, {},
       "self: div_tensor_self_backward(grad, other, self.scalar_type())"},
      {saved<&DivBackward1Saved::other>("other", FieldKind::Scalar),
       hidden<&DivBackward1Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<DivBackward2Saved, DivBackward2>(
      {"DivBackward2", "div.Tensor_mode", {"self", "other"}, 1, {},
       "self: div_tensor_self_backward(grad, other, self.scalar_type(), rounding_mode)\n"
       "other: div_tensor_other_backward(grad, self, other, rounding_mode)"},
      {saved<&DivBackward2Saved::other>("other", FieldKind::Tensor, true),
       saved<&DivBackward2Saved::rounding_mode>("rounding_mode", FieldKind::String, true),
       saved<&DivBackward2Saved::self>("self", FieldKind::Tensor, true),
       hidden<&DivBackward2Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(define_node<DivBackward3Saved, DivBackward3>(
      {"DivBackward3", "div.Scalar_mode", {"self"}, 1, {},
       "self: div_tensor_self_backward(grad, other, self.scalar_type(), rounding_mode)"},
      {saved<&DivBackward3Saved::other>("other", FieldKind::Scalar),
       saved<&DivBackward3Saved::rounding_mode>("rounding_mode", FieldKind::String, true),
       hidden<&DivBackward3Saved::self_scalar_type>("self_scalar_type", FieldKind::DType)}));

  registry.push_back(
      define_node<NegBackward0Saved, NegBackward0>({"NegBackward0", "neg", {"self"}, 1, {}, "self: grad.neg()"}, {}));

  registry.push_back(define_node<PowBackward0Saved, PowBackward0>(
      {"PowBackward0", "pow.Tensor_Scalar", {"self"}, 1, {}, "self: pow_backward(grad, self, exponent)"},
      {saved<&PowBackward0Saved::exponent>("exponent", FieldKind::Scalar),
       saved<&PowBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<PowBackward1Saved, PowBackward1>(
      {"PowBackward1", "pow.Tensor_Tensor", {"self", "exponent"}, 1, {},
       "self: pow_backward_self(grad, self, exponent)\n"
       "exponent: pow_backward_exponent(grad, self, exponent, result)"},
      {saved<&PowBackward1Saved::exponent>("exponent", FieldKind::Tensor),
       saved<&PowBackward1Saved::self>("self", FieldKind::Tensor),
       saved<&PowBackward1Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<PowBackward2Saved, PowBackward2>(
      {"PowBackward2", "pow.Scalar", {"exponent"}, 1, {},
       "exponent: pow_backward_exponent(grad, self, exponent, result)"},
      {saved<&PowBackward2Saved::exponent>("exponent", FieldKind::Tensor),
       saved<&PowBackward2Saved::self>("self", FieldKind::Scalar),
       saved<&PowBackward2Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<AddcmulBackward0Saved, AddcmulBackward0>(
      {"AddcmulBackward0", "addcmul", {"self", "tensor1", "tensor2"}, 1, {},
       "self: handle_r_to_c(self.scalar_type(), grad)\n"
       "tensor1: handle_r_to_c(tensor1.scalar_type(), grad * (tensor2 * value).conj())\n"
       "tensor2: handle_r_to_c(tensor2.scalar_type(), grad * (tensor1 * value).conj())"},
      {hidden<&AddcmulBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType),
       saved<&AddcmulBackward0Saved::tensor1>("tensor1", FieldKind::Tensor, true),
       hidden<&AddcmulBackward0Saved::tensor1_scalar_type>("tensor1_scalar_type", FieldKind::DType),
       saved<&AddcmulBackward0Saved::tensor2>("tensor2", FieldKind::Tensor, true),
       hidden<&AddcmulBackward0Saved::tensor2_scalar_type>("tensor2_scalar_type", FieldKind::DType),
       saved<&AddcmulBackward0Saved::value>("value", FieldKind::Scalar)}));

  registry.push_back(define_node<AddcdivBackward0Saved, AddcdivBackward0>(
      {"AddcdivBackward0", "addcdiv", {"self", "tensor1", "tensor2"}, 1, {},
       "self: handle_r_to_c(self.scalar_type(), grad)\n"
       "tensor1: handle_r_to_c(tensor1.scalar_type(), grad * (value / tensor2).conj())\n"
       "tensor2: handle_r_to_c(tensor2.scalar_type(), -grad * (value * tensor1 / (tensor2 * tensor2)).conj())"},
      {hidden<&AddcdivBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType),
       saved<&AddcdivBackward0Saved::tensor1>("tensor1", FieldKind::Tensor, true),
       hidden<&AddcdivBackward0Saved::tensor1_scalar_type>("tensor1_scalar_type", FieldKind::DType),
       saved<&AddcdivBackward0Saved::tensor2>("tensor2", FieldKind::Tensor, true),
       hidden<&AddcdivBackward0Saved::tensor2_scalar_type>("tensor2_scalar_type", FieldKind::DType),
       saved<&AddcdivBackward0Saved::value>("value", FieldKind::Scalar)}));

  registry.push_back(define_node<MaximumBackward0Saved, MaximumBackward0>(
      {"MaximumBackward0", "maximum", {"self", "other"}, 1, {},
       "self: at::where(self == other, grad / 2, grad).masked_fill_(self < other, 0)\n"
       "other: at::where(self == other, grad / 2, grad).masked_fill_(self > other, 0)"},
      {saved<&MaximumBackward0Saved::other>("other", FieldKind::Tensor),
       saved<&MaximumBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<MinimumBackward0Saved, MinimumBackward0>(
      {"MinimumBackward0", "minimum", {"self", "other"}, 1, {},
       "self: at::where(self == other, grad / 2, grad).masked_fill_(self > other, 0)\n"
       "other: at::where(self == other, grad / 2, grad).masked_fill_(self < other, 0)"},
      {saved<&MinimumBackward0Saved::other>("other", FieldKind::Tensor),
       saved<&MinimumBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<Atan2Backward0Saved, Atan2Backward0>(
      {"Atan2Backward0", "atan2", {"self", "other"}, 1, {},
       "self, other: atan2_backward(grad, self, other, grad_input_mask)"},
      {saved<&Atan2Backward0Saved::other>("other", FieldKind::Tensor),
       saved<&Atan2Backward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<LogaddexpBackward0Saved, LogaddexpBackward0>(
      {"LogaddexpBackward0", "logaddexp", {"self", "other"}, 1, {},
       "self: grad / (1 + exp(other - self)).conj()\nother: grad / (1 + exp(self - other)).conj()"},
      {saved<&LogaddexpBackward0Saved::other>("other", FieldKind::Tensor),
       saved<&LogaddexpBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<Logaddexp2Backward0Saved, Logaddexp2Backward0>(
      {"Logaddexp2Backward0", "logaddexp2", {"self", "other"}, 1, {},
       "self: grad / (1 + pow(2, other - self))\nother: grad / (1 + pow(2, self - other))"},
      {saved<&Logaddexp2Backward0Saved::other>("other", FieldKind::Tensor),
       saved<&Logaddexp2Backward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<HypotBackward0Saved, HypotBackward0>(
      {"HypotBackward0", "hypot", {"self", "other"}, 1, {}, "self: grad * self / result\nother: grad * other / result"},
      {saved<&HypotBackward0Saved::other>("other", FieldKind::Tensor),
       saved<&HypotBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&HypotBackward0Saved::result>("result", FieldKind::Tensor)}));
  registry.push_back(define_node<XlogyBackward0Saved, XlogyBackward0>(
      {"XlogyBackward0", "xlogy.Tensor", {"self", "other"}, 1, {},
       "self: at::xlogy(grad, other).masked_fill((self == 0.) & (other <= 0.), 0.)\nother: grad * self / other"},
      {saved<&XlogyBackward0Saved::other>("other", FieldKind::Tensor),
       saved<&XlogyBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<WhereBackward0Saved, WhereBackward0>(
      {"WhereBackward0", "where.self", {"self", "other"}, 1, {},
       "condition: non_differentiable\n"
       "self: where(condition, grad, 0)\n"
       "other: where(condition, 0, grad)"},
      {saved<&WhereBackward0Saved::condition>("condition", FieldKind::Tensor)}));

  registry.push_back(define_node<ClampBackward1Saved, ClampBackward1>(
      {"ClampBackward1", "clamp", {"self"}, 1, {}, "self: clamp_backward(grad, self, min, max)"},
      {saved<&ClampBackward1Saved::max>("max", FieldKind::Scalar, true),
       saved<&ClampBackward1Saved::min>("min", FieldKind::Scalar, true),
       saved<&ClampBackward1Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<ClampBackward0Saved, ClampBackward0>(
      {"ClampBackward0", "clamp.Tensor", {"self", "min", "max"}, 1, {},
       "self: clamp_backward(grad, self, min, max)\n"
       "min, max: clamp_backward_min_max(grad, self, min, max, grad_input_mask)"},
      {saved<&ClampBackward0Saved::max>("max", FieldKind::Tensor, true),
       saved<&ClampBackward0Saved::min>("min", FieldKind::Tensor, true),
       saved<&ClampBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<ClampMinBackward0Saved, ClampMinBackward0>(
      {"ClampMinBackward0", "clamp_min", {"self"}, 1, {},
       "self: where(self >= min, grad, at::scalar_tensor(0., grad.options()))"},
      {saved<&ClampMinBackward0Saved::min>("min", FieldKind::Scalar),
       saved<&ClampMinBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<ClampMaxBackward0Saved, ClampMaxBackward0>(
      {"ClampMaxBackward0", "clamp_max", {"self"}, 1, {},
       "self: where(self <= max, grad, at::scalar_tensor(0., grad.options()))"},
      {saved<&ClampMaxBackward0Saved::max>("max", FieldKind::Scalar),
       saved<&ClampMaxBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<MaskedFillBackward0Saved, MaskedFillBackward0>(
      {"MaskedFillBackward0", "masked_fill.Scalar", {"self"}, 1, {},
       "self: grad.masked_fill(mask, 0)\n"
       "mask: non_differentiable"},
      {saved<&MaskedFillBackward0Saved::mask>("mask", FieldKind::Tensor)}));

  registry.push_back(define_node<MaskedFillBackward1Saved, MaskedFillBackward1>(
      {"MaskedFillBackward1", "masked_fill.Tensor", {"self", "value"}, 1, {},
       "self: grad.masked_fill(mask, 0)\n"
       "value: masked_fill_backward(grad, mask)\n"
       "mask: non_differentiable"},
      {saved<&MaskedFillBackward1Saved::mask>("mask", FieldKind::Tensor)}));

  registry.push_back(define_node<LerpBackward0Saved, LerpBackward0>(
      {"LerpBackward0", "lerp.Scalar", {"self", "end"}, 1, {},
       "self: grad * (1 - weight.toDouble())\n"
       "end: grad * weight.conj()"},
      {saved<&LerpBackward0Saved::weight>("weight", FieldKind::Scalar)}));

  registry.push_back(define_node<LerpBackward1Saved, LerpBackward1>(
      {"LerpBackward1", "lerp.Tensor", {"self", "end", "weight"}, 1, {},
       "self: grad * (1 - weight).conj()\n"
       "end: grad * weight.conj()\n"
       "weight: grad * (end - self).conj()"},
      {saved<&LerpBackward1Saved::end>("end", FieldKind::Tensor, true),
       saved<&LerpBackward1Saved::self>("self", FieldKind::Tensor, true),
       saved<&LerpBackward1Saved::weight>("weight", FieldKind::Tensor, true)}));
}

}  // namespace refgrad::nodes
