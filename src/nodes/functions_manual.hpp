// Helpers shared by several node formulas, under the names PyTorch gives them
// in torch/csrc/autograd/FunctionsManual.cpp. Written with L0 primitives only.
#pragma once

#include "refgrad/nodes.hpp"

namespace refgrad::nodes {

// The gradient of a real input that met complex numbers downstream: its real
// part (a real input's gradient is real). Otherwise `grad` itself.
inline Tensor handle_r_to_c(DType self_scalar_type, const Tensor& grad) {
  return !is_complex(self_scalar_type) && grad.defined() && is_complex(grad.dtype()) ? real(grad) : grad;
}

// t * i, the imaginary unit (a Scalar holds no complex number): i (a + bi) = -b + ai.
Tensor times_i(const Tensor& t);

// grad * factor, without the multiplication when the factor is 1.
Tensor maybe_multiply(const Tensor& grad, const Scalar& factor);

// grad * other.conj(), its real part for a real self (handle_r_to_c).
Tensor mul_tensor_backward(const Tensor& grad, const Tensor& other, DType self_scalar_type);

// d(self @ mat2)/d self = grad @ mat2^H (the conjugate transpose). When self was stored column-major
// (a transposed view), PyTorch computes (mat2 @ grad^T)^T instead, so that the
// gradient comes out with self's layout; refgrad follows it.
Tensor mm_mat1_backward(const Tensor& grad, const Tensor& mat2, const IntList& mat1_sizes,
                        const IntList& mat1_strides, Layout mat1_layout, const Scalar& alpha);
// d(self @ mat2)/d mat2 = self^H @ grad, with the same layout rule for mat2.
Tensor mm_mat2_backward(const Tensor& grad, const Tensor& mat1, const IntList& mat2_sizes,
                        const IntList& mat2_strides, Layout mat2_layout, const Scalar& alpha);

// grad where self > threshold, else 0 (relu's backward uses its result as self).
Tensor threshold_backward(const Tensor& grad, const Tensor& self, const Scalar& threshold);

}  // namespace refgrad::nodes
