// Elementwise nodes of two inputs that arithmetic.cpp does not have, and a few of one:
// remainder, fmod, clamp_min/clamp_max with a Tensor bound, copysign, fmax, fmin, ldexp,
// nextafter; frexp, nan_to_num, logit.
//
// Most of these forwards are piecewise: each formula passes the grad where one branch is taken and 0
// elsewhere. Which input wins a tie (fmax(1, 1), clamp_min(x, x)) is whatever derivatives.yaml's
// comparison says, kept here as written (>= or >), since torch's gradient follows it.
#include <cmath>
#include <limits>

#include "define.hpp"

namespace refgrad::nodes {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ATen's isnan: x != x.
Tensor isnan(const Tensor& self) { return ne(self, self); }

// ATen's isfinite for a real tensor: (x == x) and |x| != inf.
Tensor isfinite(const Tensor& self) { return logical_and(eq(self, self), ne(abs(self), Scalar(kInf))); }

// The incoming grad of a broadcasting binary op has the forward output's shape, broadcast(self, other).
void check_binary_shapes(const char* node, const Tensor& grad, const Tensor& self, const char* self_name,
                         const Tensor& other, const char* other_name) {
  check(is_expandable_to(self.sizes(), grad.sizes()) && is_expandable_to(other.sizes(), grad.sizes()) &&
            broadcast_shapes(self.sizes(), other.sizes()) == grad.sizes(),
        node, ": grad has shape ", shape_text(grad.sizes()), " but ", self_name, " ", shape_text(self.sizes()),
        " and ", other_name, " ", shape_text(other.sizes()), " broadcast to another shape");
}

// zeros_like(x) from a saved TypeAndSize (x_info.zeros()): x's sizes, and its dtype (grad's when absent).
Tensor zeros_of(const char* node, const char* field, const TypeAndSize& info, const Tensor& grad) {
  check_sizes(node, field, info.sizes);
  return zeros(info.sizes, info.options.dtype.value_or(grad.dtype()));
}

// ------------------------------------------------------------- remainder, fmod ---

// RemainderBackward0 — remainder.Scalar(Tensor self, Scalar other)
//   self: grad
// FmodBackward0 — fmod.Scalar(Tensor self, Scalar other)
//   self: grad
// (Python's x % 2 is remainder.Scalar. The slope is 1 between the jumps; at a jump torch takes 1 too.)
struct NoSaved {};

Grads PassGradBackward(const Grads& grads, const NoSaved&, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{*grads[0]};
}

// RemainderBackward1 — remainder.Tensor(Tensor self, Tensor other)
//   self:  grad
//   other: -grad * self.div(other, /*rounding_mode=*/"floor")
// FmodBackward1 — fmod.Tensor(Tensor self, Tensor other)
//   self:  grad
//   other: -grad * self.div(other, /*rounding_mode=*/"trunc")
// remainder(a, b) = a - floor(a / b) * b and fmod(a, b) = a - trunc(a / b) * b. torch saves self and
// other only when other's grad may be needed (self's formula reads neither).
// (torch.remainder(2, x), Python's 2 % x, is remainder.Scalar_Tensor, which torch cannot differentiate.)
struct RoundedRemainderSaved {
  std::optional<Tensor> other;
  std::optional<Tensor> self;
};

template <bool floor>
Grads RoundedRemainderBackward(const Grads& grads, const RoundedRemainderSaved& saved, const Need& need) {
  const char* node = floor ? "RemainderBackward1" : "FmodBackward1";
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = grad;
  if (need[1]) {
    const Tensor& self = needed(saved.self, node, "other", "self");
    const Tensor& other = needed(saved.other, node, "other", "other");
    check_binary_shapes(node, grad, self, "self", other, "other");
    out[1] = mul(neg(grad), div(self, other, std::string(floor ? "floor" : "trunc")));
  }
  return out;
}

// ------------------------------------------------------------ clamp_min, clamp_max ---

// ClampMinBackward1 — clamp_min.Tensor(Tensor self, Tensor min)
//   self: where(self >= min, grad, at::scalar_tensor(0., grad.options()))
//   min:  where(self < min, grad, at::scalar_tensor(0., grad.options()))
// ClampMaxBackward1 — clamp_max.Tensor(Tensor self, Tensor max)
//   self: where(self <= max, grad, at::scalar_tensor(0., grad.options()))
//   max:  where(self > max, grad, at::scalar_tensor(0., grad.options()))
// At a tie self takes the grad. Where self or the bound is NaN neither comparison holds for the
// bound, so min/max gets 0, and self gets 0 too.
struct ClampMinBackward1Saved {
  Tensor min;
  Tensor self;
};

Grads ClampMinBackward1(const Grads& grads, const ClampMinBackward1Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check_binary_shapes("ClampMinBackward1", grad, saved.self, "self", saved.min, "min");
  Grads out(2);
  if (need[0]) out[0] = where(ge(saved.self, saved.min), grad, Scalar(0.0));
  if (need[1]) out[1] = where(lt(saved.self, saved.min), grad, Scalar(0.0));
  return out;
}

struct ClampMaxBackward1Saved {
  Tensor max;
  Tensor self;
};

Grads ClampMaxBackward1(const Grads& grads, const ClampMaxBackward1Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check_binary_shapes("ClampMaxBackward1", grad, saved.self, "self", saved.max, "max");
  Grads out(2);
  if (need[0]) out[0] = where(le(saved.self, saved.max), grad, Scalar(0.0));
  if (need[1]) out[1] = where(gt(saved.self, saved.max), grad, Scalar(0.0));
  return out;
}

// ------------------------------------------------------------------- copysign ---

// FunctionsManual's copysign_tensor_self_backward: grad * (result / self), 0 where self == 0.
// result / self is +1 or -1 (the sign copied over self's own); at self == 0 (either sign) it is
// taken as 0.
Tensor copysign_tensor_self_backward(const Tensor& grad, const Tensor& self, const Tensor& result) {
  const Tensor ratio = masked_fill(div(result, self), eq(self, Scalar(0)), Scalar(0));
  return mul(grad, ratio);
}

// CopysignBackward0 — copysign.Tensor(Tensor self, Tensor other)
//   self:  copysign_tensor_self_backward(grad, self, result)
//   other: zeros_like(other)                     (other_info: other's sizes and dtype)
// torch saves self only when self's grad may be needed.
struct CopysignBackward0Saved {
  TypeAndSize other_info;
  std::optional<Tensor> self;
  Tensor result;
};

Grads CopysignBackward0(const Grads& grads, const CopysignBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) {
    const Tensor& self = needed(saved.self, "CopysignBackward0", "self", "self");
    check_same_shape("CopysignBackward0", grad, saved.result, "result");
    out[0] = copysign_tensor_self_backward(grad, self, saved.result);
  }
  if (need[1]) out[1] = zeros_of("CopysignBackward0", "other_info", saved.other_info, grad);
  return out;
}

// CopysignBackward1 — copysign.Scalar(Tensor self, Scalar other)
//   self: copysign_tensor_self_backward(grad, self, result)
struct CopysignBackward1Saved {
  Tensor self;
  Tensor result;
};

Grads CopysignBackward1(const Grads& grads, const CopysignBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("CopysignBackward1", *grads[0], saved.result, "result");
  return Grads{copysign_tensor_self_backward(*grads[0], saved.self, saved.result)};
}

// ------------------------------------------------------------------ fmax, fmin ---

// FmaxBackward0 — fmax(Tensor self, Tensor other)
//   self:  grad.masked_fill((self >= other).logical_or_(other.isnan()).logical_not_(), 0)
//   other: grad.masked_fill((self >= other).logical_or_(other.isnan()), 0)
// FminBackward0 — fmin(Tensor self, Tensor other)
//   self:  grad.masked_fill((self <= other).logical_or_(other.isnan()).logical_not_(), 0)
//   other: grad.masked_fill((self <= other).logical_or_(other.isnan()), 0)
// fmax/fmin ignore a NaN operand: self takes the grad where it wins, ties included, or where other is
// NaN; other takes it everywhere else (where self is NaN and other is not, say).
struct FmaxFminSaved {
  Tensor other;
  Tensor self;
};

template <bool is_max>
Grads FmaxFminBackward(const Grads& grads, const FmaxFminSaved& saved, const Need& need) {
  const char* node = is_max ? "FmaxBackward0" : "FminBackward0";
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check_binary_shapes(node, grad, saved.self, "self", saved.other, "other");
  const Tensor self_wins = logical_or(is_max ? ge(saved.self, saved.other) : le(saved.self, saved.other),
                                      isnan(saved.other));
  Grads out(2);
  if (need[0]) out[0] = masked_fill(grad, logical_not(self_wins), Scalar(0));
  if (need[1]) out[1] = masked_fill(grad, self_wins, Scalar(0));
  return out;
}

// ---------------------------------------------------------------------- ldexp ---

// LdexpBackward0 — ldexp.Tensor(Tensor self, Tensor other), self * 2^other
//   self:  grad * at::pow(2, other).conj()
//   other: grad * result.conj() * M_LN2
// As written, pow(2, other) is an integer power when other is an integer tensor: 2^-k is then 0 (ATen's
// integer pow), so torch's self grad is 0 wherever an integer `other` is negative. That is torch's
// gradient, and the one computed here. torch saves other only when self's grad may be needed.
struct LdexpBackward0Saved {
  std::optional<Tensor> other;
  Tensor result;
};

Grads LdexpBackward0(const Grads& grads, const LdexpBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check_same_shape("LdexpBackward0", grad, saved.result, "result");
  Grads out(2);
  if (need[0]) {
    const Tensor& other = needed(saved.other, "LdexpBackward0", "self", "other");
    out[0] = mul(grad, conj(pow(Scalar(2), other)));
  }
  constexpr double ln2 = 0.693147180559945309417;  // cmath's M_LN2
  if (need[1]) out[1] = mul(mul(grad, conj(saved.result)), Scalar(ln2));
  return out;
}

// ------------------------------------------------------------------ nextafter ---

// NextafterBackward0 — nextafter(Tensor self, Tensor other)
//   self:  at::where(self != other, grad, 0)
//   other: zeros_like(other)                     (other_info: other's sizes and dtype)
// Where self == other, nextafter returns other itself, so self's grad is 0 there. torch saves other
// and self only when self's grad may be needed.
struct NextafterBackward0Saved {
  std::optional<Tensor> other;
  TypeAndSize other_info;
  std::optional<Tensor> self;
};

Grads NextafterBackward0(const Grads& grads, const NextafterBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) {
    const Tensor& self = needed(saved.self, "NextafterBackward0", "self", "self");
    const Tensor& other = needed(saved.other, "NextafterBackward0", "self", "other");
    check_binary_shapes("NextafterBackward0", grad, self, "self", other, "other");
    out[0] = where(ne(self, other), grad, Scalar(0));
  }
  if (need[1]) out[1] = zeros_of("NextafterBackward0", "other_info", saved.other_info, grad);
  return out;
}

// ---------------------------------------------------------------------- frexp ---

// FrexpBackward0 — frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)
//   self: grad / exponent.exp2()
// self = mantissa * 2^exponent; the int32 exponent output has no grad (one incoming grad, the
// mantissa's). exp2 of an int32 tensor is float32, as in ATen: 2^e overflows to inf for e > 127 and
// underflows to 0 below -149, so torch's grad of a float64 self beyond float32's range is 0 (or inf).
// That is the gradient computed here.
struct FrexpBackward0Saved {
  Tensor exponent;
};

Grads FrexpBackward0(const Grads& grads, const FrexpBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("FrexpBackward0", *grads[0], saved.exponent, "exponent");
  check(is_integral(saved.exponent.dtype(), false),
        "FrexpBackward0: exponent must be an integer tensor (frexp's int32 exponent), got ",
        dtype_name(saved.exponent.dtype()));
  const Tensor exp2 = pow(Scalar(2.0), to(saved.exponent, DType::Float32));  // exact: 2^e for an integer e
  return Grads{div(*grads[0], exp2)};
}

// ----------------------------------------------------------------- nan_to_num ---

// NanToNumBackward0 — nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None)
//   self: grad * at::isfinite(self)
// The replaced NaNs and infinities are constants: their grad is 0 (a NaN or infinite grad there
// still gives NaN, as the product does in torch).
struct NanToNumBackward0Saved {
  Tensor self;
};

Grads NanToNumBackward0(const Grads& grads, const NanToNumBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("NanToNumBackward0", *grads[0], saved.self, "self");
  return Grads{mul(*grads[0], isfinite(saved.self))};
}

// ---------------------------------------------------------------------- logit ---

// LogitBackward0 — logit(Tensor self, float? eps=None), log(x / (1 - x)) of x clamped to [eps, 1 - eps]
//   self: GradMode::is_enabled() ? infinitely_differentiable_logit_backward(grad, self, eps)
//                                : logit_backward(grad, self, eps)
// A backward program runs without grad mode, so this is ATen's logit_backward kernel, where a negative
// eps counts as none (torch.logit(x, -0.5) is logit(x)):
//   no eps: NaN where x < 0 or x > 1
//   eps:    0 where x < eps or x > 1 - eps (the clamped region; the bounds themselves pass the grad)
//   else:   grad * inf at x == 0 and x == 1 (-0.0 included; NaN for a zero grad), grad / (x * (1 - x))
//           elsewhere (a NaN x gives NaN)
// The bounds are computed in self's dtype, as the kernel computes them (lo = eps, hi = 1 - lo).
struct LogitBackward0Saved {
  std::optional<double> eps;
  Tensor self;
};

Grads LogitBackward0(const Grads& grads, const LogitBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &x = saved.self;
  check_same_shape("LogitBackward0", grad, x, "self");
  const Tensor at_ends = logical_or(eq(x, Scalar(0)), eq(x, Scalar(1)));
  const Tensor inside = where(at_ends, mul(grad, Scalar(kInf)), div(grad, mul(x, add(neg(x), Scalar(1)))));
  if (!saved.eps || *saved.eps < 0) {
    const Tensor outside = logical_or(lt(x, Scalar(0)), gt(x, Scalar(1)));
    return Grads{where(outside, Scalar(kNaN), inside)};
  }
  const Tensor lo = scalar_tensor(Scalar(*saved.eps), x.dtype());
  const Tensor hi = add(neg(lo), Scalar(1));
  return Grads{where(logical_or(lt(x, lo), gt(x, hi)), Scalar(0.0), inside)};
}

}  // namespace

void add_elementwise_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<NoSaved, PassGradBackward>(
      {"RemainderBackward0", "remainder.Scalar", {"self"}, 1, {}, "self: grad"}, {}));
  registry.push_back(define_node<RoundedRemainderSaved, RoundedRemainderBackward<true>>(
      {"RemainderBackward1", "remainder.Tensor", {"self", "other"}, 1, {},
       "self: grad\nother: -grad * self.div(other, /*rounding_mode=*/\"floor\")"},
      {saved<&RoundedRemainderSaved::other>("other", FieldKind::Tensor, true),
       saved<&RoundedRemainderSaved::self>("self", FieldKind::Tensor, true)}));
  registry.push_back(
      define_node<NoSaved, PassGradBackward>({"FmodBackward0", "fmod.Scalar", {"self"}, 1, {}, "self: grad"}, {}));
  registry.push_back(define_node<RoundedRemainderSaved, RoundedRemainderBackward<false>>(
      {"FmodBackward1", "fmod.Tensor", {"self", "other"}, 1, {},
       "self: grad\nother: -grad * self.div(other, /*rounding_mode=*/\"trunc\")"},
      {saved<&RoundedRemainderSaved::other>("other", FieldKind::Tensor, true),
       saved<&RoundedRemainderSaved::self>("self", FieldKind::Tensor, true)}));

  registry.push_back(define_node<ClampMinBackward1Saved, ClampMinBackward1>(
      {"ClampMinBackward1", "clamp_min.Tensor", {"self", "min"}, 1, {},
       "self: where(self >= min, grad, at::scalar_tensor(0., grad.options()))\n"
       "min: where(self < min, grad, at::scalar_tensor(0., grad.options()))"},
      {saved<&ClampMinBackward1Saved::min>("min", FieldKind::Tensor),
       saved<&ClampMinBackward1Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<ClampMaxBackward1Saved, ClampMaxBackward1>(
      {"ClampMaxBackward1", "clamp_max.Tensor", {"self", "max"}, 1, {},
       "self: where(self <= max, grad, at::scalar_tensor(0., grad.options()))\n"
       "max: where(self > max, grad, at::scalar_tensor(0., grad.options()))"},
      {saved<&ClampMaxBackward1Saved::max>("max", FieldKind::Tensor),
       saved<&ClampMaxBackward1Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<CopysignBackward0Saved, CopysignBackward0>(
      {"CopysignBackward0", "copysign.Tensor", {"self", "other"}, 1, {},
       "self: copysign_tensor_self_backward(grad, self, result)\nother: zeros_like(other)"},
      {hidden<&CopysignBackward0Saved::other_info>("other_info", FieldKind::TypeAndSize),
       saved<&CopysignBackward0Saved::self>("self", FieldKind::Tensor, true),
       saved<&CopysignBackward0Saved::result>("result", FieldKind::Tensor)}));
  registry.push_back(define_node<CopysignBackward1Saved, CopysignBackward1>(
      {"CopysignBackward1", "copysign.Scalar", {"self"}, 1, {},
       "self: copysign_tensor_self_backward(grad, self, result)"},
      {saved<&CopysignBackward1Saved::self>("self", FieldKind::Tensor),
       saved<&CopysignBackward1Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<FmaxFminSaved, FmaxFminBackward<true>>(
      {"FmaxBackward0", "fmax", {"self", "other"}, 1, {},
       "self: grad.masked_fill((self >= other).logical_or_(other.isnan()).logical_not_(), 0)\n"
       "other: grad.masked_fill((self >= other).logical_or_(other.isnan()), 0)"},
      {saved<&FmaxFminSaved::other>("other", FieldKind::Tensor), saved<&FmaxFminSaved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<FmaxFminSaved, FmaxFminBackward<false>>(
      {"FminBackward0", "fmin", {"self", "other"}, 1, {},
       "self: grad.masked_fill((self <= other).logical_or_(other.isnan()).logical_not_(), 0)\n"
       "other: grad.masked_fill((self <= other).logical_or_(other.isnan()), 0)"},
      {saved<&FmaxFminSaved::other>("other", FieldKind::Tensor), saved<&FmaxFminSaved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<LdexpBackward0Saved, LdexpBackward0>(
      {"LdexpBackward0", "ldexp.Tensor", {"self", "other"}, 1, {},
       "self: grad * at::pow(2, other).conj()\nother: grad * result.conj() * M_LN2"},
      {saved<&LdexpBackward0Saved::other>("other", FieldKind::Tensor, true),
       saved<&LdexpBackward0Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<NextafterBackward0Saved, NextafterBackward0>(
      {"NextafterBackward0", "nextafter", {"self", "other"}, 1, {},
       "self: at::where(self != other, grad, 0)\nother: zeros_like(other)"},
      {saved<&NextafterBackward0Saved::other>("other", FieldKind::Tensor, true),
       hidden<&NextafterBackward0Saved::other_info>("other_info", FieldKind::TypeAndSize),
       saved<&NextafterBackward0Saved::self>("self", FieldKind::Tensor, true)}));

  registry.push_back(define_node<FrexpBackward0Saved, FrexpBackward0>(
      {"FrexpBackward0", "frexp.Tensor", {"self"}, 1, {}, "self: grad / exponent.exp2()"},
      {saved<&FrexpBackward0Saved::exponent>("exponent", FieldKind::Tensor)}));

  registry.push_back(define_node<NanToNumBackward0Saved, NanToNumBackward0>(
      {"NanToNumBackward0", "nan_to_num", {"self"}, 1, {}, "self: grad * at::isfinite(self)"},
      {saved<&NanToNumBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<LogitBackward0Saved, LogitBackward0>(
      {"LogitBackward0", "logit", {"self"}, 1, {},
       "self: GradMode::is_enabled() ? infinitely_differentiable_logit_backward(grad, self, eps) : "
       "logit_backward(grad, self, eps)"},
      {saved<&LogitBackward0Saved::eps>("eps", FieldKind::Float, true),
       saved<&LogitBackward0Saved::self>("self", FieldKind::Tensor)}));
}

}  // namespace refgrad::nodes
