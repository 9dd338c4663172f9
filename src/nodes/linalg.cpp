// Matrix product nodes: mm.
#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// MmBackward0 — mm(Tensor self, Tensor mat2)
//   self: mm_mat1_backward(grad, mat2, self.sym_sizes(), self.sym_strides(), self.layout(), 1)
//   mat2: mm_mat2_backward(grad, self, mat2.sym_sizes(), mat2.sym_strides(), mat2.layout(), 1)
// A tensor is saved only when the other input's grad may be needed; the
// strides of an input that needs no grad are saved empty.
struct MmBackward0Saved {
  std::optional<Tensor> mat2;
  Layout mat2_layout;
  IntList mat2_sym_sizes;
  IntList mat2_sym_strides;
  std::optional<Tensor> self;
  Layout self_layout;
  IntList self_sym_sizes;
  IntList self_sym_strides;
};

Grads MmBackward0(const Grads& grads, const MmBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) {
    check(saved.mat2.has_value(), "MmBackward0: self's grad is needed but `mat2` was not saved");
    out[0] = mm_mat1_backward(grad, *saved.mat2, saved.self_sym_sizes, saved.self_sym_strides, saved.self_layout, 1);
  }
  if (need[1]) {
    check(saved.self.has_value(), "MmBackward0: mat2's grad is needed but `self` was not saved");
    out[1] = mm_mat2_backward(grad, *saved.self, saved.mat2_sym_sizes, saved.mat2_sym_strides, saved.mat2_layout, 1);
  }
  return out;
}

}  // namespace

void add_linalg_nodes(std::vector<NodeDef>& registry) {
  using S = MmBackward0Saved;
  registry.push_back(define_node<S, MmBackward0>(
      {"MmBackward0", "mm", {"self", "mat2"}, 1, {},
       "self: mm_mat1_backward(grad, mat2, self.sym_sizes(), self.sym_strides(), self.layout(), 1)\n"
       "mat2: mm_mat2_backward(grad, self, mat2.sym_sizes(), mat2.sym_strides(), mat2.layout(), 1)"},
      {saved<&S::mat2>("mat2", FieldKind::Tensor, true), hidden<&S::mat2_layout>("mat2_layout", FieldKind::Layout),
       saved<&S::mat2_sym_sizes>("mat2_sym_sizes", FieldKind::Sizes),
       saved<&S::mat2_sym_strides>("mat2_sym_strides", FieldKind::Sizes),
       saved<&S::self>("self", FieldKind::Tensor, true), hidden<&S::self_layout>("self_layout", FieldKind::Layout),
       saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&S::self_sym_strides>("self_sym_strides", FieldKind::Sizes)}));
}

}  // namespace refgrad::nodes
