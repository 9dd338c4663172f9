// Complex-number nodes: conj, conj_physical, _neg_view, view_as_real,
// view_as_complex, angle, complex and polar.
//
// PyTorch's gradient of a real-valued loss L with respect to a complex input
// z = x + iy is dL/dx + i dL/dy (the conjugate Wirtinger derivative, times 2).
// So a node whose forward is holomorphic, f(z), multiplies the incoming grad by
// f'(z).conj() (derivatives.yaml's ".conj()"s), and one that is linear over the
// reals (view_as_real, real, imag) is its adjoint map. torch.real and torch.imag
// record no node of their own: they are view_as_real followed by select
// (ViewAsRealBackward0 under SelectBackward0).
#include <cmath>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

struct NothingSaved {};

// ConjBackward0 — _conj(Tensor(a) self) -> Tensor(a)
//   self: grad.conj()
// ConjPhysicalBackward0 — _conj_physical(Tensor self)
//   self: grad.conj_physical()
Grads ConjBackward0(const Grads& grads, const NothingSaved& /*saved*/, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{conj(*grads[0])};
}

// NegViewBackward0 — _neg_view(Tensor(a) self) -> Tensor(a)
//   self: grad.neg()
// (conj of a conjugated view: torch keeps a "negative" bit instead of negating.)
Grads NegViewBackward0(const Grads& grads, const NothingSaved& /*saved*/, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{neg(*grads[0])};
}

// ViewAsRealBackward0 — view_as_real(Tensor(a) self) -> Tensor(a)
//   self: at::view_as_complex(grad.contiguous())    # gx0 + 1j * gx1
Grads ViewAsRealBackward0(const Grads& grads, const NothingSaved& /*saved*/, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  check(is_floating_point(grad.dtype()) && grad.dim() > 0 && grad.sizes().back() == 2,
        "ViewAsRealBackward0: grad must be a float32 or float64 tensor whose last dim has size 2 (the real and "
        "imaginary parts), got ", dtype_name(grad.dtype()), " ", shape_text(grad.sizes()));
  return Grads{view_as_complex(grad.contiguous())};
}

// ViewAsComplexBackward0 — view_as_complex(Tensor(a) self) -> Tensor(a)
//   self: at::view_as_real(grad.contiguous().resolve_conj())    # [gx, gy]
Grads ViewAsComplexBackward0(const Grads& grads, const NothingSaved& /*saved*/, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  check(is_complex(grad.dtype()), "ViewAsComplexBackward0: grad must be complex, got ", dtype_name(grad.dtype()));
  return Grads{view_as_real(grad.contiguous())};
}

// FunctionsManual's angle_backward: for a complex self,
//   where(self == 0, 0, grad * self / |self|^2 * i);
// angle is piecewise constant on the reals: zeros there.
Tensor angle_backward(const Tensor& grad, const Tensor& self) {
  if (!is_complex(self.dtype())) return zeros_like(self);
  const Tensor scaled = times_i(div(mul(grad, self), pow(abs(self), 2)));
  return where(eq(self, Scalar(0.0)), zeros({}, self.dtype()), scaled);
}

// AngleBackward0 — angle(Tensor self)
//   self: angle_backward(grad, self)
struct AngleBackward0Saved {
  Tensor self;
};

Grads AngleBackward0(const Grads& grads, const AngleBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("AngleBackward0", *grads[0], saved.self, "self");
  return Grads{angle_backward(*grads[0], saved.self)};
}

// ComplexBackward0 — complex(Tensor real, Tensor imag)
//   real: at::real(grad)
//   imag: at::imag(grad)
// (PyTorch saves each input when the other's grad may be needed, for forward-mode AD; the backward reads neither.)
struct ComplexBackward0Saved {
  std::optional<Tensor> imag;  // None when the other input's grad is not needed
  std::optional<Tensor> real;
};

Grads ComplexBackward0(const Grads& grads, const ComplexBackward0Saved& /*saved*/, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check(is_complex(grad.dtype()), "ComplexBackward0: grad must be complex, got ", dtype_name(grad.dtype()));
  Grads out(2);
  if (need[0]) out[0] = real(grad).contiguous();
  if (need[1]) out[1] = imag(grad).contiguous();
  return out;
}

// FunctionsManual's polar_backward, with result = abs * e^(i angle):
//   abs:   real(grad.conj() * result.sgn())
//   angle: real(grad.conj() * result * i)
// PolarBackward0 — polar(Tensor abs, Tensor angle)
//   abs, angle: polar_backward(grad, result)
struct PolarBackward0Saved {
  Tensor result;
};

Grads PolarBackward0(const Grads& grads, const PolarBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  check_same_shape("PolarBackward0", *grads[0], saved.result, "result");
  const Tensor grad_conj = conj(*grads[0]);
  Grads out(2);
  if (need[0]) out[0] = real(mul(grad_conj, sgn(saved.result))).contiguous();
  if (need[1]) out[1] = real(mul(grad_conj, times_i(saved.result))).contiguous();
  return out;
}

}  // namespace

void add_complex_nodes(std::vector<NodeDef>& registry) {
  // clang-format off
  registry.push_back(define_node<NothingSaved, ConjBackward0>(
      {"ConjBackward0", "_conj", {"self"}, 1, {}, "self: grad.conj()"}, {}));
  registry.push_back(define_node<NothingSaved, ConjBackward0>(
      {"ConjPhysicalBackward0", "_conj_physical", {"self"}, 1, {}, "self: grad.conj_physical()"}, {}));
  registry.push_back(define_node<NothingSaved, NegViewBackward0>(
      {"NegViewBackward0", "_neg_view", {"self"}, 1, {}, "self: grad.neg()"}, {}));
  registry.push_back(define_node<NothingSaved, ViewAsRealBackward0>(
      {"ViewAsRealBackward0", "view_as_real", {"self"}, 1, {}, "self: at::view_as_complex(grad.contiguous())"}, {}));
  registry.push_back(define_node<NothingSaved, ViewAsComplexBackward0>(
      {"ViewAsComplexBackward0", "view_as_complex", {"self"}, 1, {},
       "self: at::view_as_real(grad.contiguous().resolve_conj())"}, {}));
  registry.push_back(define_node<AngleBackward0Saved, AngleBackward0>(
      {"AngleBackward0", "angle", {"self"}, 1, {}, "self: angle_backward(grad, self)"},
      {saved<&AngleBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<ComplexBackward0Saved, ComplexBackward0>(
      {"ComplexBackward0", "complex", {"real", "imag"}, 1, {}, "real: at::real(grad)\nimag: at::imag(grad)"},
      {saved<&ComplexBackward0Saved::imag>("imag", FieldKind::Tensor, true),
       saved<&ComplexBackward0Saved::real>("real", FieldKind::Tensor, true)}));
  registry.push_back(define_node<PolarBackward0Saved, PolarBackward0>(
      {"PolarBackward0", "polar", {"abs", "angle"}, 1, {}, "abs, angle: polar_backward(grad, result)"},
      {saved<&PolarBackward0Saved::result>("result", FieldKind::Tensor)}));
  // clang-format on
}

}  // namespace refgrad::nodes
