// Matrix product nodes: mm, addmm, bmm, baddbmm, addbmm, dot, vdot, mv, addmv, addr.
//
// torch.matmul and nn.Linear have no node of their own on CPU: matmul
// dispatches on the ranks to dot, mv, mm or bmm with view/_unsafe_view/
// squeeze/unsqueeze/expand around them, and Linear is addmm (mm without a
// bias), so these nodes together with the shape nodes cover both.
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
    const Tensor& mat2 = needed(saved.mat2, "MmBackward0", "self", "mat2");
    out[0] = mm_mat1_backward(grad, mat2, saved.self_sym_sizes, saved.self_sym_strides, saved.self_layout, 1);
  }
  if (need[1]) {
    const Tensor& self = needed(saved.self, "MmBackward0", "mat2", "self");
    out[1] = mm_mat2_backward(grad, self, saved.mat2_sym_sizes, saved.mat2_sym_strides, saved.mat2_layout, 1);
  }
  return out;
}

// AddmmBackward0 — addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1)
//   self: maybe_multiply(grad, beta.conj())
//   mat1: mm_mat1_backward(grad, mat2, mat1.sym_sizes(), mat1.sym_strides(), mat1.layout(), alpha)
//   mat2: mm_mat2_backward(grad, mat1, mat2.sym_sizes(), mat2.sym_strides(), mat2.layout(), alpha)
// self's grad has the output's shape [n, p]: summing it back to a broadcast
// bias ([p] in nn.Linear) is validate's job, as in PyTorch.
struct AddmmBackward0Saved {
  Scalar alpha;
  Scalar beta;
  std::optional<Tensor> mat1;
  Layout mat1_layout;
  IntList mat1_sym_sizes;
  IntList mat1_sym_strides;
  std::optional<Tensor> mat2;
  Layout mat2_layout;
  IntList mat2_sym_sizes;
  IntList mat2_sym_strides;
};

Grads AddmmBackward0(const Grads& grads, const AddmmBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0]) out[0] = maybe_multiply(grad, saved.beta.conj());
  if (need[1]) {
    const Tensor& mat2 = needed(saved.mat2, "AddmmBackward0", "mat1", "mat2");
    out[1] = mm_mat1_backward(grad, mat2, saved.mat1_sym_sizes, saved.mat1_sym_strides, saved.mat1_layout,
                              saved.alpha);
  }
  if (need[2]) {
    const Tensor& mat1 = needed(saved.mat1, "AddmmBackward0", "mat2", "mat1");
    out[2] = mm_mat2_backward(grad, mat1, saved.mat2_sym_sizes, saved.mat2_sym_strides, saved.mat2_layout,
                              saved.alpha);
  }
  return out;
}

// BmmBackward0 — bmm(Tensor self, Tensor mat2)
//   self: grad.bmm(mat2.transpose(1, 2).conj())
//   mat2: self.transpose(1, 2).conj().bmm(grad)
struct BmmBackward0Saved {
  std::optional<Tensor> mat2;
  std::optional<Tensor> self;
};

Grads BmmBackward0(const Grads& grads, const BmmBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) {
    const Tensor& mat2 = needed(saved.mat2, "BmmBackward0", "self", "mat2");
    out[0] = bmm(grad, conj(transpose(mat2, 1, 2)));
  }
  if (need[1]) {
    const Tensor& self = needed(saved.self, "BmmBackward0", "mat2", "self");
    out[1] = bmm(conj(transpose(self, 1, 2)), grad);
  }
  return out;
}

// BaddbmmBackward0 — baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1)
//   self:   maybe_multiply(grad, beta.conj())
//   batch1: maybe_multiply(grad.bmm(batch2.transpose(1, 2).conj()), alpha.conj())
//   batch2: maybe_multiply(batch1.transpose(1, 2).conj().bmm(grad), alpha.conj())
struct BaddbmmBackward0Saved {
  Scalar alpha;
  std::optional<Tensor> batch1;
  std::optional<Tensor> batch2;
  Scalar beta;
};

Grads BaddbmmBackward0(const Grads& grads, const BaddbmmBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0]) out[0] = maybe_multiply(grad, saved.beta.conj());
  if (need[1]) {
    const Tensor& batch2 = needed(saved.batch2, "BaddbmmBackward0", "batch1", "batch2");
    out[1] = maybe_multiply(bmm(grad, conj(transpose(batch2, 1, 2))), saved.alpha.conj());
  }
  if (need[2]) {
    const Tensor& batch1 = needed(saved.batch1, "BaddbmmBackward0", "batch2", "batch1");
    out[2] = maybe_multiply(bmm(conj(transpose(batch1, 1, 2)), grad), saved.alpha.conj());
  }
  return out;
}

// DotBackward0 — dot(Tensor self, Tensor tensor)
//   self:   grad * tensor.conj()
//   tensor: grad * self.conj()
struct DotBackward0Saved {
  std::optional<Tensor> self;
  std::optional<Tensor> tensor;
};

Grads DotBackward0(const Grads& grads, const DotBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check(grad.dim() == 0, "DotBackward0: the incoming grad must be 0-d, got ", shape_text(grad.sizes()));
  Grads out(2);
  if (need[0]) {
    const Tensor& tensor = needed(saved.tensor, "DotBackward0", "self", "tensor");
    out[0] = mul(grad, conj(tensor));
  }
  if (need[1]) {
    const Tensor& self = needed(saved.self, "DotBackward0", "tensor", "self");
    out[1] = mul(grad, conj(self));
  }
  return out;
}

// MvBackward0 — mv(Tensor self, Tensor vec)
//   self: grad.ger(vec.conj())
//   vec:  self.conj().t().mv(grad)
struct MvBackward0Saved {
  std::optional<Tensor> self;
  std::optional<Tensor> vec;
};

Grads MvBackward0(const Grads& grads, const MvBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check(grad.dim() == 1, "MvBackward0: the incoming grad must be 1-d, got ", shape_text(grad.sizes()));
  Grads out(2);
  if (need[0]) {
    const Tensor& vec = needed(saved.vec, "MvBackward0", "self", "vec");
    out[0] = outer(grad, conj(vec));
  }
  if (need[1]) {
    const Tensor& self = needed(saved.self, "MvBackward0", "vec", "self");
    check(self.dim() == 2 && self.size(0) == grad.size(0), "MvBackward0: self ", shape_text(self.sizes()),
          " does not match the grad ", shape_text(grad.sizes()));
    out[1] = matmul(t(conj(self)), grad);  // mv
  }
  return out;
}

// VdotBackward0 — vdot(Tensor self, Tensor other): sum(self.conj() * other)
//   self:  grad.conj() * other
//   other: grad * self
struct VdotBackward0Saved {
  std::optional<Tensor> other;
  std::optional<Tensor> self;
};

Grads VdotBackward0(const Grads& grads, const VdotBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = mul(conj(grad), needed(saved.other, "VdotBackward0", "self", "other"));
  if (need[1]) out[1] = mul(grad, needed(saved.self, "VdotBackward0", "other", "self"));
  return out;
}

// AddmvBackward0 — addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1)
//   self: maybe_multiply(grad, beta.conj())
//   mat:  maybe_multiply(grad.ger(vec.conj()), alpha.conj())
//   vec:  maybe_multiply(mat.t().conj().mv(grad), alpha.conj())
struct AddmvBackward0Saved {
  Scalar alpha;
  Scalar beta;
  std::optional<Tensor> mat;
  std::optional<Tensor> vec;
};

Grads AddmvBackward0(const Grads& grads, const AddmvBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0]) out[0] = maybe_multiply(grad, saved.beta.conj());
  if (need[1]) out[1] = maybe_multiply(outer(grad, conj(needed(saved.vec, "AddmvBackward0", "mat", "vec"))), saved.alpha.conj());
  if (need[2]) {
    const Tensor& mat = needed(saved.mat, "AddmvBackward0", "vec", "mat");
    out[2] = maybe_multiply(matmul(conj(t(mat)), grad), saved.alpha.conj());  // mv
  }
  return out;
}

// AddrBackward0 — addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta=1, Scalar alpha=1)
//   self: maybe_multiply(grad, beta.conj())
//   vec1: maybe_multiply(grad.mv(vec2.conj()), alpha.conj())
//   vec2: maybe_multiply(grad.t().mv(vec1.conj()), alpha.conj())
struct AddrBackward0Saved {
  Scalar alpha;
  Scalar beta;
  std::optional<Tensor> vec1;
  std::optional<Tensor> vec2;
};

Grads AddrBackward0(const Grads& grads, const AddrBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0]) out[0] = maybe_multiply(grad, saved.beta.conj());
  if (need[1]) out[1] = maybe_multiply(matmul(grad, conj(needed(saved.vec2, "AddrBackward0", "vec1", "vec2"))), saved.alpha.conj());
  if (need[2]) out[2] = maybe_multiply(matmul(t(grad), conj(needed(saved.vec1, "AddrBackward0", "vec2", "vec1"))), saved.alpha.conj());
  return out;
}

// AddbmmBackward0 — addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1)
//   self:   maybe_multiply(grad, beta.conj())
//   batch1: maybe_multiply(grad.unsqueeze(0).expand_symint({ batch1.sym_size(0), batch1.sym_size(1),
//           batch2.sym_size(2) }).bmm(batch2.transpose(1, 2).conj()), alpha.conj())
//   batch2: maybe_multiply(batch1.transpose(1, 2).conj().bmm(grad.unsqueeze(0).expand_symint({ batch1.sym_size(0),
//           batch1.sym_size(1), batch2.sym_size(2) })), alpha.conj())
// (the sum over the batch makes every batch's grad the same grad)
struct AddbmmBackward0Saved {
  Scalar alpha;
  std::optional<Tensor> batch1;
  std::int64_t batch1_sym_argsize_0;
  std::int64_t batch1_sym_argsize_1;
  std::optional<Tensor> batch2;
  std::int64_t batch2_sym_argsize_2;
  Scalar beta;
};

Grads AddbmmBackward0(const Grads& grads, const AddbmmBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0]) out[0] = maybe_multiply(grad, saved.beta.conj());
  if (!need[1] && !need[2]) return out;
  const IntList batch_sizes{saved.batch1_sym_argsize_0, saved.batch1_sym_argsize_1, saved.batch2_sym_argsize_2};
  check_sizes("AddbmmBackward0", "batch1_sym_argsize_0, batch1_sym_argsize_1, batch2_sym_argsize_2", batch_sizes);
  check(grad.sizes() == Shape{batch_sizes[1], batch_sizes[2]}, "AddbmmBackward0: grad has shape ",
        shape_text(grad.sizes()), " but the batches make ", shape_text({batch_sizes[1], batch_sizes[2]}));
  const Tensor grad_per_batch = expand(unsqueeze(grad, 0), batch_sizes);
  if (need[1]) {
    const Tensor& batch2 = needed(saved.batch2, "AddbmmBackward0", "batch1", "batch2");
    out[1] = maybe_multiply(bmm(grad_per_batch, conj(transpose(batch2, 1, 2))), saved.alpha.conj());
  }
  if (need[2]) {
    const Tensor& batch1 = needed(saved.batch1, "AddbmmBackward0", "batch2", "batch1");
    out[2] = maybe_multiply(bmm(conj(transpose(batch1, 1, 2)), grad_per_batch), saved.alpha.conj());
  }
  return out;
}

}  // namespace

void add_linalg_nodes(std::vector<NodeDef>& registry) {
  {
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
  {
    using S = AddmmBackward0Saved;
    registry.push_back(define_node<S, AddmmBackward0>(
        {"AddmmBackward0", "addmm", {"self", "mat1", "mat2"}, 1, {},
         "self: maybe_multiply(grad, beta.conj())\n"
         "mat1: mm_mat1_backward(grad, mat2, mat1.sym_sizes(), mat1.sym_strides(), mat1.layout(), alpha)\n"
         "mat2: mm_mat2_backward(grad, mat1, mat2.sym_sizes(), mat2.sym_strides(), mat2.layout(), alpha)"},
        {saved<&S::alpha>("alpha", FieldKind::Scalar), saved<&S::beta>("beta", FieldKind::Scalar),
         saved<&S::mat1>("mat1", FieldKind::Tensor, true), hidden<&S::mat1_layout>("mat1_layout", FieldKind::Layout),
         saved<&S::mat1_sym_sizes>("mat1_sym_sizes", FieldKind::Sizes),
         saved<&S::mat1_sym_strides>("mat1_sym_strides", FieldKind::Sizes),
         saved<&S::mat2>("mat2", FieldKind::Tensor, true), hidden<&S::mat2_layout>("mat2_layout", FieldKind::Layout),
         saved<&S::mat2_sym_sizes>("mat2_sym_sizes", FieldKind::Sizes),
         saved<&S::mat2_sym_strides>("mat2_sym_strides", FieldKind::Sizes)}));
  }
  {
    using S = BmmBackward0Saved;
    registry.push_back(define_node<S, BmmBackward0>(
        {"BmmBackward0", "bmm", {"self", "mat2"}, 1, {},
         "self: grad.bmm(mat2.transpose(1, 2).conj())\n"
         "mat2: self.transpose(1, 2).conj().bmm(grad)"},
        {saved<&S::mat2>("mat2", FieldKind::Tensor, true), saved<&S::self>("self", FieldKind::Tensor, true)}));
  }
  {
    using S = BaddbmmBackward0Saved;
    registry.push_back(define_node<S, BaddbmmBackward0>(
        {"BaddbmmBackward0", "baddbmm", {"self", "batch1", "batch2"}, 1, {},
         "self: maybe_multiply(grad, beta.conj())\n"
         "batch1: maybe_multiply(grad.bmm(batch2.transpose(1, 2).conj()), alpha.conj())\n"
         "batch2: maybe_multiply(batch1.transpose(1, 2).conj().bmm(grad), alpha.conj())"},
        {saved<&S::alpha>("alpha", FieldKind::Scalar), saved<&S::batch1>("batch1", FieldKind::Tensor, true),
         saved<&S::batch2>("batch2", FieldKind::Tensor, true), saved<&S::beta>("beta", FieldKind::Scalar)}));
  }
  {
    using S = DotBackward0Saved;
    registry.push_back(define_node<S, DotBackward0>(
        {"DotBackward0", "dot", {"self", "tensor"}, 1, {},
         "self: grad * tensor.conj()\n"
         "tensor: grad * self.conj()"},
        {saved<&S::self>("self", FieldKind::Tensor, true), saved<&S::tensor>("tensor", FieldKind::Tensor, true)}));
  }
  {
    using S = VdotBackward0Saved;
    registry.push_back(define_node<S, VdotBackward0>(
        {"VdotBackward0", "vdot", {"self", "other"}, 1, {}, "self: grad.conj() * other\nother: grad * self"},
        {saved<&S::other>("other", FieldKind::Tensor, true), saved<&S::self>("self", FieldKind::Tensor, true)}));
  }
  {
    using S = AddmvBackward0Saved;
    registry.push_back(define_node<S, AddmvBackward0>(
        {"AddmvBackward0", "addmv", {"self", "mat", "vec"}, 1, {},
         "self: maybe_multiply(grad, beta.conj())\n"
         "mat: maybe_multiply(grad.ger(vec.conj()), alpha.conj())\n"
         "vec: maybe_multiply(mat.t().conj().mv(grad), alpha.conj())"},
        {saved<&S::alpha>("alpha", FieldKind::Scalar), saved<&S::beta>("beta", FieldKind::Scalar),
         saved<&S::mat>("mat", FieldKind::Tensor, true), saved<&S::vec>("vec", FieldKind::Tensor, true)}));
  }
  {
    using S = AddrBackward0Saved;
    registry.push_back(define_node<S, AddrBackward0>(
        {"AddrBackward0", "addr", {"self", "vec1", "vec2"}, 1, {},
         "self: maybe_multiply(grad, beta.conj())\n"
         "vec1: maybe_multiply(grad.mv(vec2.conj()), alpha.conj())\n"
         "vec2: maybe_multiply(grad.t().mv(vec1.conj()), alpha.conj())"},
        {saved<&S::alpha>("alpha", FieldKind::Scalar), saved<&S::beta>("beta", FieldKind::Scalar),
         saved<&S::vec1>("vec1", FieldKind::Tensor, true), saved<&S::vec2>("vec2", FieldKind::Tensor, true)}));
  }
  {
    using S = AddbmmBackward0Saved;
    registry.push_back(define_node<S, AddbmmBackward0>(
        {"AddbmmBackward0", "addbmm", {"self", "batch1", "batch2"}, 1, {},
         "self: maybe_multiply(grad, beta.conj())\n"
         "batch1: maybe_multiply(grad.unsqueeze(0).expand_symint({ batch1.sym_size(0), batch1.sym_size(1), "
         "batch2.sym_size(2) }).bmm(batch2.transpose(1, 2).conj()), alpha.conj())\n"
         "batch2: maybe_multiply(batch1.transpose(1, 2).conj().bmm(grad.unsqueeze(0).expand_symint({ "
         "batch1.sym_size(0), batch1.sym_size(1), batch2.sym_size(2) })), alpha.conj())"},
        {saved<&S::alpha>("alpha", FieldKind::Scalar), saved<&S::batch1>("batch1", FieldKind::Tensor, true),
         saved<&S::batch1_sym_argsize_0>("batch1_sym_argsize_0", FieldKind::Int),
         saved<&S::batch1_sym_argsize_1>("batch1_sym_argsize_1", FieldKind::Int),
         saved<&S::batch2>("batch2", FieldKind::Tensor, true),
         saved<&S::batch2_sym_argsize_2>("batch2_sym_argsize_2", FieldKind::Int),
         saved<&S::beta>("beta", FieldKind::Scalar)}));
  }
  {
    using S = MvBackward0Saved;
    registry.push_back(define_node<S, MvBackward0>(
        {"MvBackward0", "mv", {"self", "vec"}, 1, {},
         "self: grad.ger(vec.conj())\n"
         "vec: self.conj().t().mv(grad)"},
        {saved<&S::self>("self", FieldKind::Tensor, true), saved<&S::vec>("vec", FieldKind::Tensor, true)}));
  }
}

}  // namespace refgrad::nodes
