#include "functions_manual.hpp"

namespace refgrad::nodes {

Tensor maybe_multiply(const Tensor& grad, const Scalar& factor) {
  const bool is_one = factor.to_complex() == std::complex<double>(1.0);
  return is_one ? grad : mul(grad, factor);
}

Tensor times_i(const Tensor& t) { return complex(neg(imag(t)), real(t)); }

Tensor mul_tensor_backward(const Tensor& grad, const Tensor& other, DType self_scalar_type) {
  return handle_r_to_c(self_scalar_type, mul(grad, conj(other)));
}

namespace {

// FunctionsManual's test for a matrix stored column-major (a transposed
// contiguous matrix): unit stride down a column, columns exactly a column apart.
bool is_column_major(const IntList& sizes, const IntList& strides) {
  return sizes.size() == 2 && strides.size() == 2 && strides[0] == 1 && strides[1] == sizes[0];
}

}  // namespace

Tensor mm_mat1_backward(const Tensor& grad, const Tensor& mat2, const IntList& mat1_sizes,
                        const IntList& mat1_strides, Layout mat1_layout, const Scalar& alpha) {
  if (mat1_layout == Layout::Strided && is_column_major(mat1_sizes, mat1_strides))
    return maybe_multiply(t(mm(conj(mat2), t(grad))), alpha.conj());
  return maybe_multiply(mm(grad, t(conj(mat2))), alpha.conj());
}

Tensor mm_mat2_backward(const Tensor& grad, const Tensor& mat1, const IntList& mat2_sizes,
                        const IntList& mat2_strides, Layout mat2_layout, const Scalar& alpha) {
  if (mat2_layout == Layout::Strided && is_column_major(mat2_sizes, mat2_strides))
    return maybe_multiply(t(mm(t(grad), conj(mat1))), alpha.conj());
  return maybe_multiply(mm(t(conj(mat1)), grad), alpha.conj());
}

Tensor threshold_backward(const Tensor& grad, const Tensor& self, const Scalar& threshold) {
  return where(le(self, threshold), Scalar(0), grad);
}

}  // namespace refgrad::nodes
