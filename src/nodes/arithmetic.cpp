// Arithmetic nodes: add, mul.
#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

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
  if (need[1]) out[1] = handle_r_to_c(saved.other_scalar_type, maybe_multiply(grad, saved.alpha));
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
    check(saved.other.has_value(), "MulBackward0: self's grad is needed but `other` was not saved");
    out[0] = mul_tensor_backward(grad, *saved.other, saved.self_scalar_type);
  }
  if (need[1]) {
    check(saved.self.has_value(), "MulBackward0: other's grad is needed but `self` was not saved");
    out[1] = mul_tensor_backward(grad, *saved.self, saved.other_scalar_type);
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
}

}  // namespace refgrad::nodes
