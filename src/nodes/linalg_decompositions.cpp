// Backward nodes of the linear-algebra decompositions and solvers: svd, qr, eigh, eig, cholesky,
// lu (factor, solve, unpack), solve, solve_triangular, triangular_solve, cholesky_solve,
// cholesky_inverse, inv, det, slogdet, pinv, lstsq, matrix_exp, householder_product, ormqr, cross.
//
// The formulas are FunctionsManual.cpp's (svd_backward, linalg_qr_backward, linalg_eig_backward, ...),
// ported under the same names. But for lstsq's, which recomputes a pseudo-inverse (L0's linalg_pinv, an
// SVD) as torch's does, none needs a decomposition of its own: they are matrix products, triangular
// solves, and solves with LU factors the forward saved (L0's linalg_solve_triangular, linalg_lu_solve,
// lu_unpack, linalg_solve). As in torch, every matrix may
// carry leading batch dims, and the formulas conjugate for complex inputs: X^H is mH(X).
//
// A node runs the branch torch's backward runs without create_graph (GradMode off): the LU-based
// solves of linalg_solve_backward, linalg_det_backward and slogdet_backward, not their recomputing
// (create_graph) branches.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

using std::int64_t;

// ------------------------------------------------------------ helpers ---

Tensor mT(const Tensor& t) { return transpose(t, -2, -1); }

// i * x for a real x: the complex number with real part 0 and imaginary part x.
Tensor i_times(const Tensor& x) { return complex(zeros_like(x), x); }

// The rows x cols mask of the main diagonal.
Tensor diagonal_mask(int64_t rows, int64_t cols) {
  return eq(unsqueeze(arange(rows), -1), unsqueeze(arange(cols), 0));
}

// X with its main diagonal replaced by `value` (FunctionsManual's `X.diagonal(0, -2, -1).fill_(value)`).
Tensor fill_diagonal(const Tensor& X, double value) {
  return where(diagonal_mask(X.size(-2), X.size(-1)), Scalar(value), X);
}

// X (square) with its main diagonal replaced by d (`X.diagonal(0, -2, -1).copy_(d)`).
Tensor set_diagonal(const Tensor& X, const Tensor& d) {
  return where(diagonal_mask(X.size(-2), X.size(-1)), diag_embed(d.to(X.dtype())), X);
}

// The matrix E of the eigen- and singular-value formulas: E_jk = x_k - x_j off the diagonal, 1 on it
// (any number would do there: it divides a zero).
Tensor difference_matrix(const Tensor& x) { return fill_diagonal(sub(unsqueeze(x, -2), unsqueeze(x, -1)), 1.0); }

// The real dtype's machine epsilon (at::native::_get_epsilon): float32's for float32 and complex64.
double epsilon_of(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::ComplexFloat ? std::numeric_limits<float>::epsilon()
                                                                 : std::numeric_limits<double>::epsilon();
}

void check_matrix(const char* node, const char* field, const Tensor& t) {
  check(t.dim() >= 2, node, ": ", field, " must be a matrix or a batch of matrices, got shape ", shape_text(t.sizes()));
}

void check_same_shape_as(const char* node, const char* what, const Tensor& t, const char* field, const Tensor& saved) {
  check(t.sizes() == saved.sizes(), node, ": ", what, " has shape ", shape_text(t.sizes()), " but ", field,
        " has shape ", shape_text(saved.sizes()));
}

// Whether a saved LU holds the factorization of A^T rather than of A. torch factors A^T when A is
// contiguous and real (use_A_T in _linalg_solve_ex, _linalg_det and _linalg_slogdet: a row-major A is a
// column-major A^T, which LAPACK takes without a copy) and lets the backward solve with adjoint=!use_A_T.
// A program keeps A's values, not its strides, so the node reads the choice off the values: the one of
// A and A^T that P L U reproduces. (For a symmetric A the two agree and either choice is exact.)
// When neither does, within 1e-3 of A's largest element, the LU is not of this A: the node refuses it
// rather than guess an orientation. (An LU with partial pivoting reproduces its matrix to a few
// epsilons of the dtype it was computed in; a float64 run of a float32 program holds a float32 LU, so
// the bound is float32's rounding with room to spare, far below the O(|A|) of a wrong matrix.)
bool lu_is_of_transpose(const char* node, const Tensor& A, const Tensor& LU, const Tensor& pivots) {
  if (is_complex(A.dtype()) || A.numel() == 0) return false;
  const auto [P, L, U] = lu_unpack(LU, pivots);
  const Tensor PLU = matmul(P, matmul(L, U));
  const double off_A = max(abs(sub(PLU, A))).item<double>();
  const double off_AT = max(abs(sub(PLU, mT(A)))).item<double>();
  const double scale = std::max(1.0, max(abs(A)).item<double>());
  check(std::min(off_A, off_AT) <= 1e-3 * scale, node,
        ": the saved LU and pivots factor neither A nor A^T (max|P L U - A| = ", off_A, ", max|P L U - A^T| = ",
        off_AT, "); they must come from the same forward as A");
  return off_AT < off_A;
}

// Checks the LU and pivots saved with A: square matrices like A's (LU may carry more batch dims, when A
// was broadcast against B), and one pivot per row.
void check_lu(const char* node, const Tensor& A, const Tensor& LU, const Tensor& pivots) {
  check_matrix(node, "A", A);
  check_matrix(node, "LU", LU);
  check(A.size(-1) == A.size(-2) && LU.size(-1) == A.size(-1) && LU.size(-2) == A.size(-2), node, ": LU ",
        shape_text(LU.sizes()), " must hold square matrices of the size of A's ", shape_text(A.sizes()));
  Shape expected(LU.sizes().begin(), LU.sizes().end() - 1);
  check(pivots.sizes() == expected, node, ": pivots ", shape_text(pivots.sizes()), " do not fit LU ",
        shape_text(LU.sizes()), " (expected ", shape_text(expected), ")");
}

// ------------------------------------------------------ FunctionsManual ---

// svd_backward: see LinalgSvdBackward0. U [.., m, k], S [.., k], Vh [.., k, n]; every grad optional.
Tensor svd_backward(const OptionalTensor& gU, const OptionalTensor& gS, const OptionalTensor& gVh, const Tensor& U,
                    const Tensor& S, const Tensor& Vh) {
  if (!gS && !gU && !gVh) return {};
  const int64_t m = U.size(-2), n = Vh.size(-1);
  // svdvals: gA = U diag(gS) Vh
  if (!gU && !gVh)
    return m >= n ? matmul(U, mul(unsqueeze(*gS, -1), Vh)) : matmul(mul(U, unsqueeze(*gS, -2)), Vh);

  const bool complex_input = is_complex(U.dtype());
  const auto skew = [](const Tensor& X) { return sub(X, mH(X)); };
  const Tensor UhgU = gU ? skew(matmul(mH(U), *gU)) : Tensor();
  const Tensor VhgV = gVh ? skew(matmul(Vh, mH(*gVh))) : Tensor();

  // The loss must not depend on the phases of the singular vectors: Im(diag(U^H gU + V^H gV)) = 0.
  if (complex_input) {
    const Tensor imdiag_UhgU = gU ? imag(diagonal(UhgU, 0, -2, -1)) : zeros_like(S);
    const Tensor imdiag_VhgV = gVh ? imag(diagonal(VhgV, 0, -2, -1)) : zeros_like(S);
    check(allclose(imdiag_UhgU, neg(imdiag_VhgV), 1e-2, 1e-2),
          "svd_backward: The singular vectors in the complex case are specified up to multiplication by e^{i phi}. "
          "The specified loss function depends on this phase term, making it ill-defined.");
  }

  // ret = (skew(U^H gU) / E) S + S (skew(V^H gV) / E) + I o gS (+ i Im(diag(U^H gU)) / (2S) if complex)
  const Tensor E = difference_matrix(mul(S, S));
  Tensor ret;
  if (gU && gVh) ret = div(add(mul(UhgU, unsqueeze(S, -2)), mul(unsqueeze(S, -1), VhgV)), E);
  else if (gU) ret = mul(div(UhgU, E), unsqueeze(S, -2));
  else ret = mul(unsqueeze(S, -1), div(VhgV, E));
  if (gS) ret = add(ret, diag_embed(*gS));
  if (complex_input && gU && gVh) ret = add(ret, diag_embed(div(diagonal(UhgU, 0, -2, -1), mul(S, Scalar(2.0)))));

  if (m > n && gU) {  // gA = [U ret + (I_m - U U^H) gU S^{-1}] V^H
    Tensor gA = matmul(U, ret);
    const Tensor gUSinv = div(*gU, unsqueeze(S, -2));
    gA = sub(add(gA, gUSinv), matmul(U, matmul(mH(U), gUSinv)));
    return matmul(gA, Vh);
  }
  if (m < n && gVh) {  // gA = U [ret V^H + S^{-1} gV^H (I_n - V V^H)]
    Tensor gA = matmul(ret, Vh);
    const Tensor SinvgVh = div(*gVh, unsqueeze(S, -1));
    gA = sub(add(gA, SinvgVh), matmul(matmul(SinvgVh, mH(Vh)), Vh));
    return matmul(U, gA);
  }
  return m >= n ? matmul(U, matmul(ret, Vh)) : matmul(matmul(U, ret), Vh);
}

// linalg_eig_backward (eig and eigh): see LinalgEigBackward0 and LinalgEighBackward0.
Tensor linalg_eig_backward(const OptionalTensor& gL, const OptionalTensor& gV, const Tensor& L, const Tensor& V,
                           bool is_hermitian) {
  if (!gL && !gV) return {};
  // eigvals / eigvalsh: gA = V^{-H} diag(gL) V^H
  if (!gV) {
    if (is_hermitian) return matmul(mul(V, unsqueeze(gL->to(V.dtype()), -2)), mH(V));
    return linalg_solve(mH(V), mul(unsqueeze(*gL, -1), mH(V)));
  }
  Tensor VhgV = matmul(mH(V), *gV);
  const Tensor diag_VhgV = diagonal(VhgV, 0, -2, -1);
  if (is_complex(V.dtype())) {
    // The loss must not depend on the phases of the eigenvectors: Im(diag(V^H gV)) = 0.
    const Tensor imdiag_VhgV = imag(diag_VhgV);
    check(allclose(imdiag_VhgV, zeros_like(imdiag_VhgV), 1e-2, 1e-2), is_hermitian ? "linalg_eigh_backward"
                                                                                  : "linalg_eig_backward",
          ": The eigenvectors in the complex case are specified up to multiplication by e^{i phi}. The specified "
          "loss function depends on this quantity, so it is ill-defined.");
  }
  if (is_hermitian)  // the projection onto the skew-Hermitian matrices (the tangent space of U(n) at I)
    VhgV = mul(sub(VhgV, mH(VhgV)), Scalar(0.5));
  else  // the projection onto the tangent space at V^H V of the matrices with columns of norm 1
    VhgV = sub(VhgV, matmul(mH(V), mul(V, unsqueeze(real(diag_VhgV), -2))));

  Tensor gA = div(VhgV, difference_matrix(conj(L)));
  if (gL) gA = set_diagonal(gA, *gL);
  // conjugated by V^{-H}: V gA V^H when V is unitary
  if (is_hermitian) return matmul(V, matmul(gA, mH(V)));
  return linalg_solve(mH(V), matmul(gA, mH(V)));
}

// linalg_qr_backward: see LinalgQrBackward0.
Tensor linalg_qr_backward(const OptionalTensor& gQ, const OptionalTensor& gR, const Tensor& Q, const Tensor& R,
                          const std::string& mode) {
  const char* node = "LinalgQrBackward0";
  check(mode == "reduced" || mode == "complete" || mode == "r", node, ": qr received unrecognized mode '", mode,
        "' but expected one of 'reduced' (default), 'r', or 'complete'");
  check(mode != "r", node, ": The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please "
        "use linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.");
  const int64_t m = Q.size(-2), n = R.size(-1);
  check(mode == "reduced" || m <= n, node,
        ": The QR decomposition is not differentiable when mode='complete' and nrows > ncols.");
  if (!gQ && !gR) return {};

  Tensor gA;
  if (gQ && gR) gA = sub(matmul(*gR, mH(R)), matmul(mH(Q), *gQ));
  else if (gQ) gA = neg(matmul(mH(Q), *gQ));
  else gA = matmul(*gR, mH(R));

  if (m >= n) {
    // syminvadj(X) = X + X^H with the real part of its diagonal halved
    const auto syminvadj = [](const Tensor& X) {
      const Tensor ret = add(X, mH(X));
      return sub(ret, diag_embed(mul(real(diagonal(ret, 0, -2, -1)), Scalar(0.5))));
    };
    gA = matmul(Q, syminvadj(triu(gA)));
    if (gQ) gA = add(gA, *gQ);
    return linalg_solve_triangular(mH(R), gA, /*upper=*/false, /*left=*/false);
  }
  // trilImInvAdjSkew(X) = tril(X - X^H) with the imaginary part of its diagonal halved
  const auto trilImInvAdjSkew = [](const Tensor& X) {
    const Tensor ret = tril(sub(X, mH(X)));
    if (!is_complex(X.dtype())) return ret;
    return sub(ret, diag_embed(i_times(mul(imag(diagonal(ret, 0, -2, -1)), Scalar(0.5)))));
  };
  gA = matmul(Q, trilImInvAdjSkew(neg(gA)));
  gA = linalg_solve_triangular(mH(narrow(R, -1, 0, m)), gA, /*upper=*/false, /*left=*/false);
  Shape zero_shape = R.sizes();
  zero_shape.back() = n - m;
  gA = cat({gA, zeros(zero_shape, gA.dtype())}, -1);
  if (gR) gA = add(gA, matmul(Q, *gR));
  return gA;
}

// cholesky_backward: see LinalgCholeskyExBackward0.
Tensor cholesky_backward(const Tensor& gL, bool upper, const Tensor& L) {
  const Tensor L_ = upper ? mH(L) : L;
  const Tensor gL_ = upper ? mH(gL) : gL;
  // tril(L^H gL) needs no tril of gL first: L^H triu(gL, 1) is strictly upper triangular.
  Tensor gA = tril(matmul(mH(L_), gL_));
  gA = mul(add(gA, mH(tril(gA, -1))), Scalar(0.5));  // 0.5 (gA + gA^H - diag(gA))
  gA = linalg_solve_triangular(mH(L_), gA, /*upper=*/true, /*left=*/true);
  return linalg_solve_triangular(L_, gA, /*upper=*/false, /*left=*/false);
}

// pinv_backward: see LinalgPinvBackward0.
Tensor pinv_backward(const Tensor& grad, const Tensor& pinvA, const Tensor& A) {
  const int64_t m = A.size(-2), n = A.size(-1);
  const Tensor pinvAh = mH(pinvA);
  const Tensor gradh = mH(grad);
  if (m <= n) {  // the products chosen to make the smallest matrices
    const Tensor K = matmul(gradh, pinvA);
    const Tensor KpinvAh = matmul(K, pinvAh);
    return add(sub(add(neg(mH(matmul(pinvA, K))), KpinvAh), matmul(matmul(A, pinvA), KpinvAh)),
               matmul(matmul(pinvAh, pinvA), sub(gradh, matmul(K, A))));
  }
  const Tensor K = matmul(pinvA, gradh);
  const Tensor pinvAhK = matmul(pinvAh, K);
  return sub(add(add(neg(mH(matmul(K, pinvA))), matmul(matmul(sub(gradh, matmul(A, K)), pinvA), pinvAh)), pinvAhK),
             matmul(matmul(pinvAhK, pinvA), A));
}

// linalg_lu_backward: see LinalgLuBackward0. L [.., m, k], U [.., k, n], P [.., m, m].
Tensor linalg_lu_backward(const OptionalTensor& L_grad, const OptionalTensor& U_grad, const Tensor& P, const Tensor& L,
                          const Tensor& U, bool pivot) {
  if (!L_grad && !U_grad) return {};
  const int64_t m = L.size(-2), n = U.size(-1), k = std::min(m, n);
  const auto plus = [](const Tensor& a, const Tensor& b) { return a.defined() ? add(a, b) : b; };

  if (m == n) {
    // A_grad = P L^{-H} [L^H L_grad o 1_L + U_grad U^H o 1_U] U^{-H}
    Tensor A_grad = L_grad ? tril(matmul(mH(L), *L_grad), -1) : Tensor();
    if (U_grad) A_grad = plus(A_grad, triu(matmul(*U_grad, mH(U))));
    A_grad = linalg_solve_triangular(mH(U), A_grad, /*upper=*/false, /*left=*/false);
    A_grad = linalg_solve_triangular(mH(L), A_grad, /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
    return pivot ? matmul(P, A_grad) : A_grad;
  }
  if (m < n) {
    // Wide: A1_grad = P L^{-H} [U1_grad + (L^H L_grad o 1_L - U_grad U^H o 1_U) U1^{-H}],
    //       A2_grad = P L^{-H} U2_grad
    const auto U1 = [&](const Tensor& t) { return narrow(t, -1, 0, k); };
    const auto U2 = [&](const Tensor& t) { return narrow(t, -1, k, n - k); };
    Tensor A_grad = L_grad ? matmul(mH(L), *L_grad) : Tensor();
    if (U_grad) A_grad = A_grad.defined() ? sub(A_grad, matmul(triu(*U_grad), mH(U)))
                                          : neg(matmul(triu(*U_grad), mH(U)));
    A_grad = linalg_solve_triangular(mH(U1(U)), tril(A_grad, -1), /*upper=*/false, /*left=*/false);
    if (U_grad) A_grad = cat({add(A_grad, triu(U1(*U_grad))), U2(*U_grad)}, -1);
    A_grad = linalg_solve_triangular(mH(L), A_grad, /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
    if (!U_grad) A_grad = cat({A_grad, zeros_like(U2(U))}, -1);
    return pivot ? matmul(P, A_grad) : A_grad;
  }
  // Tall: A1_grad = P [L1_grad + L1^{-H} (U_grad U^H o 1_U - L^H L_grad o 1_L)] U^{-H},
  //       A2_grad = P L2_grad U^{-H}
  const auto L1 = [&](const Tensor& t) { return narrow(t, -2, 0, k); };
  const auto L2 = [&](const Tensor& t) { return narrow(t, -2, k, m - k); };
  Tensor A_grad = U_grad ? matmul(*U_grad, mH(U)) : Tensor();
  if (L_grad) A_grad = A_grad.defined() ? sub(A_grad, matmul(mH(L), tril(*L_grad, -1)))
                                        : neg(matmul(mH(L), tril(*L_grad, -1)));
  A_grad = linalg_solve_triangular(mH(L1(L)), triu(A_grad), /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
  if (L_grad) A_grad = cat({add(A_grad, tril(L1(*L_grad), -1)), L2(*L_grad)}, -2);
  A_grad = linalg_solve_triangular(mH(U), A_grad, /*upper=*/false, /*left=*/false);
  if (!L_grad) A_grad = cat({A_grad, zeros_like(L2(L))}, -2);
  return pivot ? matmul(P, A_grad) : A_grad;
}

// linalg_lu_solve_LU: LU's grad in LinalgLuSolveBackward0.
Tensor linalg_lu_solve_LU(const Tensor& gX, const Tensor& LU, const Tensor& pivots, const Tensor& X, bool left,
                          bool adjoint) {
  const auto [P, L, U] = lu_unpack(LU, pivots, /*unpack_data=*/true, /*unpack_pivots=*/left == adjoint);
  if (left != adjoint) {
    // gR = U^{-H} op_2(-gX) op_2(X)^H;  gU = gR.triu();  gL = (L^{-H} gR U^H).tril(-1)
    const Tensor gR = linalg_solve_triangular(mH(U), neg(matmul(left ? gX : mH(gX), left ? mH(X) : X)),
                                              /*upper=*/false);
    const Tensor gL = tril(linalg_solve_triangular(mH(L), matmul(gR, mH(U)), /*upper=*/true, /*left=*/true,
                                                   /*unitriangular=*/true),
                           -1);
    return add(gL, triu(gR));
  }
  // gR = -P^T op_3(X) op_1(op_2(gX)) P L^{-H};  gL = gR.tril(-1);  gU = (L^H gR U^{-H}).triu()
  Tensor gR = neg(matmul(matmul(matmul(mT(P), left ? X : mH(X)), left ? mH(gX) : gX), P));
  gR = linalg_solve_triangular(mH(L), gR, /*upper=*/true, /*left=*/false, /*unitriangular=*/true);
  const Tensor gU = triu(linalg_solve_triangular(mH(U), matmul(mH(L), gR), /*upper=*/false, /*left=*/false));
  return add(tril(gR, -1), gU);
}

// lu_unpack_backward: see LuUnpackBackward0.
Tensor lu_unpack_backward(const OptionalTensor& L_grad, const OptionalTensor& U_grad, int64_t m, int64_t n) {
  if (!L_grad && !U_grad) return {};
  const int64_t k = std::min(m, n);
  const auto L1 = [&](const Tensor& L) { return m == k ? tril(L, -1) : tril(narrow(L, -2, 0, k), -1); };
  const auto L2 = [&](const Tensor& L) { return narrow(L, -2, k, m - k); };
  const auto U1 = [&](const Tensor& U) { return n == k ? triu(U) : triu(narrow(U, -1, 0, k)); };
  const auto U2 = [&](const Tensor& U) { return narrow(U, -1, k, n - k); };
  if (L_grad && U_grad) {
    if (m == n) return add(tril(*L_grad, -1), triu(*U_grad));
    const Tensor A1_grad = add(L1(*L_grad), U1(*U_grad));
    return m > n ? cat({A1_grad, L2(*L_grad)}, -2) : cat({A1_grad, U2(*U_grad)}, -1);
  }
  if (L_grad) {
    if (m >= n) return tril(*L_grad, -1);
    Shape size = L_grad->sizes();
    size.back() = n - m;
    return cat({tril(*L_grad, -1), zeros(size, L_grad->dtype())}, -1);
  }
  if (n >= m) return triu(*U_grad);
  Shape size = U_grad->sizes();
  size[size.size() - 2] = m - n;
  return cat({triu(*U_grad), zeros(size, U_grad->dtype())}, -2);
}

// cholesky_solve(B, L): A X = B with A = L L^H (or U^H U when upper), by two triangular solves.
Tensor cholesky_solve(const Tensor& B, const Tensor& factor, bool upper) {
  const Tensor L = upper ? mH(factor) : factor;
  return linalg_solve_triangular(mH(L), linalg_solve_triangular(L, B, /*upper=*/false), /*upper=*/true);
}

// householder_product_backward: see LinalgHouseholderProductBackward0. Returns (input_grad, tau_grad).
// With H_i(t) = I - t v_i v_i^H and K_i = H_i_plus Q_grad^H H_i_minus (the reflectors after and before
// the i-th), v_i's grad is -conj(tau_i v_i^H K_i) - tau_i K_i v_i and tau_i's is -conj(v_i^H K_i v_i);
// K_{i+1} = H_{i+1}^{-1} K_i H_i, with H(tau)^{-1} = H(sigma), sigma = tau / (tau ||v||^2 - 1).
// flip_order walks the reflectors last to first (ormqr's second case).
std::pair<Tensor, Tensor> householder_product_backward(const Tensor& grad, const Tensor& result, const Tensor& input_,
                                                       const Tensor& tau, bool flip_order = false) {
  if (input_.numel() == 0 || tau.numel() == 0) return {};
  const int64_t m = input_.size(-2), n = input_.size(-1), k = tau.size(-1);
  // The forward reads the part below the diagonal, with ones on it.
  const Tensor input = fill_diagonal(tril(input_, -1), 1.0);
  const Tensor first_k = narrow(input, -1, 0, k);
  const Tensor norm_squared = sum(mul(first_k, conj(first_k)), {-2});
  const Tensor sigma = div(tau, sub(mul(tau, norm_squared), Scalar(1.0)));
  const auto column = [&](int64_t i) { return narrow(input, -1, i, 1); };  // v_i, [.., m, 1]
  const auto scalar = [](const Tensor& t, int64_t i) { return narrow(t, -1, i, 1); };  // [.., 1]

  // (I - t v v^H) K from the left, K (I - t v v^H) from the right
  const auto apply_reflector = [](const Tensor& v, const Tensor& t, const Tensor& K, bool left) {
    const Tensor tv = mul(unsqueeze(t, -1), v);
    return left ? sub(K, matmul(tv, matmul(mH(v), K))) : sub(K, matmul(matmul(K, tv), mH(v)));
  };
  const auto flip_i = [&](int64_t i) { return flip_order ? k - i - 1 : i; };
  const auto next_i = [&](int64_t i) { return flip_order ? i - 1 : i + 1; };
  const bool apply_left = !flip_order;

  Tensor K = matmul(result, mH(grad));
  K = apply_reflector(column(flip_i(0)), scalar(sigma, flip_i(0)), K, apply_left);
  std::vector<Tensor> input_grads(static_cast<std::size_t>(k)), tau_grads(static_cast<std::size_t>(k));
  for (int64_t step = 0; step < k; ++step) {
    const int64_t i = flip_i(step);
    const Tensor v_full = column(i), t = scalar(tau, i);
    // v_i is zero above row i: only rows i.. take part
    const Tensor v = narrow(v_full, -2, i, m - i);
    const Tensor vHK = matmul(mH(v), narrow(K, -2, i, m - i));  // [.., 1, m]
    const Tensor Kv = matmul(narrow(K, -1, i, m - i), v);       // [.., m, 1]
    const Tensor t_unsqueezed = unsqueeze(t, -1);
    input_grads[i] = sub(squeeze(conj(mul(neg(t_unsqueezed), vHK)), -2), squeeze(mul(t_unsqueezed, Kv), -1));
    tau_grads[i] = squeeze(neg(conj(matmul(narrow(vHK, -1, i, m - i), v))), -1);
    if (i != flip_i(k - 1)) {  // K <- H_{i+1}^{-1} K H_i
      const int64_t i_next = next_i(i);
      K = apply_reflector(column(i_next), scalar(sigma, i_next), K, apply_left);
      K = apply_reflector(v_full, t, K, !apply_left);
    }
  }
  Tensor input_grad = stack(input_grads, -1);
  if (k < n) {  // the columns the forward does not read
    Shape zero_shape = input_grad.sizes();
    zero_shape.back() = n - k;
    input_grad = cat({input_grad, zeros(zero_shape, input_grad.dtype())}, -1);
  }
  return {tril(input_grad, -1), cat(tau_grads, -1)};
}

// The m x m product H_1 ... H_k of the reflectors in (input, tau) (torch.linalg.householder_product taken
// to all m columns), and ormqr: op(Q) other (left) or other op(Q), op(Q) = Q^H when transpose.
Tensor householder_matrix(const Tensor& input, const Tensor& tau) {
  const int64_t m = input.size(-2), k = tau.size(-1);
  const Tensor V = fill_diagonal(tril(input, -1), 1.0);
  Tensor Q = expand(diag_embed(ones({m}, input.dtype())), [&] {
    Shape sizes(input.sizes().begin(), input.sizes().end() - 2);
    sizes.push_back(m);
    sizes.push_back(m);
    return sizes;
  }());
  for (int64_t i = 0; i < k; ++i) {  // Q <- Q H_i = Q - tau_i (Q v_i) v_i^H
    const Tensor v = narrow(V, -1, i, 1);
    Q = sub(Q, matmul(mul(matmul(Q, v), unsqueeze(narrow(tau, -1, i, 1), -1)), mH(v)));
  }
  return Q;
}

Tensor ormqr(const Tensor& input, const Tensor& tau, const Tensor& other, bool left, bool transpose) {
  const Tensor Q = householder_matrix(input, tau);
  const Tensor op_Q = transpose ? mH(Q) : Q;
  return left ? matmul(op_Q, other) : matmul(other, op_Q);
}

// ------------------------------------------------------------------ nodes ---

// LinalgSvdBackward0 — _linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None)
//   A: svd_backward(full_matrices && grad_U.defined() ? grad_U.narrow_symint(-1, 0, S.sym_size(-1)) : grad_U,
//                   grad_S,
//                   full_matrices && grad_Vh.defined() ? grad_Vh.narrow_symint(-2, 0, S.sym_size(-1)) : grad_Vh,
//                   full_matrices ? U.narrow_symint(-1, 0, S.sym_size(-1)) : U,
//                   S,
//                   full_matrices ? Vh.narrow_symint(-2, 0, S.sym_size(-1)) : Vh)
// With k = min(m, n) singular values and E_jk = S_k^2 - S_j^2 (1 on the diagonal), svd_backward is
//   gA = U [(skew(U^H gU) / E) S + S (skew(V^H gV) / E) + I o gS] V^H
//        (+ (I_m - U U^H) gU S^{-1} V^H when m > n, + U S^{-1} gV^H (I_n - V V^H) when m < n),
// and for complex A an i Im(diag(U^H gU)) / (2S) on the diagonal; it assumes distinct singular values.
struct LinalgSvdBackward0Saved {
  bool full_matrices;
  Tensor S;
  int64_t S_sym_argsize_minus_1;
  Tensor U;
  Tensor Vh;
};

Grads LinalgSvdBackward0(const Grads& grads, const LinalgSvdBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgSvdBackward0";
  if (!need[0]) return Grads(1);
  const int64_t k = saved.S_sym_argsize_minus_1;
  check_matrix(node, "U", saved.U);
  check_matrix(node, "Vh", saved.Vh);
  check(saved.S.dim() >= 1 && saved.S.size(-1) == k, node, ": S ", shape_text(saved.S.sizes()),
        " does not have S_sym_argsize_minus_1 = ", k, " values");
  check(saved.U.size(-1) >= k && saved.Vh.size(-2) >= k, node, ": U ", shape_text(saved.U.sizes()), " and Vh ",
        shape_text(saved.Vh.sizes()), " do not hold ", k, " singular vectors");
  const auto first_k = [&](const OptionalTensor& t, int64_t dim) -> OptionalTensor {
    if (!t) return std::nullopt;
    return saved.full_matrices ? narrow(*t, dim, 0, k) : *t;
  };
  const OptionalTensor gU = first_k(grads[0], -1), gVh = first_k(grads[2], -2);
  const Tensor U = saved.full_matrices ? narrow(saved.U, -1, 0, k) : saved.U;
  const Tensor Vh = saved.full_matrices ? narrow(saved.Vh, -2, 0, k) : saved.Vh;
  if (gU) check_same_shape_as(node, "grad_U", *gU, "U", U);
  if (grads[1]) check_same_shape_as(node, "grad_S", *grads[1], "S", saved.S);
  if (gVh) check_same_shape_as(node, "grad_Vh", *gVh, "Vh", Vh);
  const Tensor gA = svd_backward(gU, grads[1], gVh, U, saved.S, Vh);
  return gA.defined() ? Grads{gA} : Grads(1);
}

// LinalgInvExBackward0 — linalg_inv_ex(Tensor A, *, bool check_errors=False)
//   A: -at::matmul(inverse.mH(), at::matmul(grad, inverse.mH()))
struct LinalgInvExBackward0Saved {
  Tensor inverse;
};

Grads LinalgInvExBackward0(const Grads& grads, const LinalgInvExBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape_as("LinalgInvExBackward0", "grad", *grads[0], "inverse", saved.inverse);
  const Tensor inverse_h = mH(saved.inverse);
  return Grads{neg(matmul(inverse_h, matmul(*grads[0], inverse_h)))};
}

// LinalgPinvBackward0 — linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None,
//                                                  bool hermitian=False)
//   self: pinv_backward(grad, result, self)
// pinv_backward, with Ap = pinv(A) (m <= n; the other case is its adjoint, the products reordered):
//   gA = -(Ap K)^H + K Ap^H - A Ap K Ap^H + Ap^H Ap (g^H - K A),  K = g^H Ap
struct LinalgPinvBackward0Saved {
  Tensor self;
  Tensor result;
};

Grads LinalgPinvBackward0(const Grads& grads, const LinalgPinvBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgPinvBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_matrix(node, "self", saved.self);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  check(saved.result.size(-1) == saved.self.size(-2) && saved.result.size(-2) == saved.self.size(-1), node,
        ": result ", shape_text(saved.result.sizes()), " is not the shape of pinv(self) for self ",
        shape_text(saved.self.sizes()));
  return Grads{pinv_backward(*grads[0], saved.result, saved.self)};
}

// LinalgQrBackward0 — linalg_qr(Tensor A, str mode='reduced')
//   A: linalg_qr_backward(grad_Q, grad_R, Q, R, mode)
// linalg_qr_backward, m >= n: gA = [gQ + Q syminvadj(triu(gR R^H - Q^H gQ))] R^{-H}, with
// syminvadj(X) = X + X^H, the real part of its diagonal halved; m < n: gA = Q gR + [Q
// trilImInvAdjSkew(Q^H gQ - gR R^H) R_1^{-H}, 0], R_1 the leading m x m block of R.
struct LinalgQrBackward0Saved {
  std::string mode;
  Tensor Q;
  Tensor R;
};

Grads LinalgQrBackward0(const Grads& grads, const LinalgQrBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgQrBackward0";
  if (!need[0]) return Grads(1);
  check_matrix(node, "Q", saved.Q);
  check_matrix(node, "R", saved.R);
  if (grads[0]) check_same_shape_as(node, "grad_Q", *grads[0], "Q", saved.Q);
  if (grads[1]) check_same_shape_as(node, "grad_R", *grads[1], "R", saved.R);
  const Tensor gA = linalg_qr_backward(grads[0], grads[1], saved.Q, saved.R, saved.mode);
  return gA.defined() ? Grads{gA} : Grads(1);
}

// LinalgLuFactorExBackward0 — linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False)
//   A: lu_factor_ex_backward(grad, LU, pivots, pivot)
// lu_factor_ex_backward: the packed LU's grad is L's (below the diagonal) and U's (on and above it),
//   linalg_lu_backward(grad.narrow(-1, 0, k), grad.narrow(-2, 0, k), P, L, U, pivot) with (P, L, U) =
//   lu_unpack(LU, pivots), k = min(m, n).
struct LinalgLuFactorExBackward0Saved {
  bool pivot;
  Tensor LU;
  Tensor pivots;
};

Grads LinalgLuFactorExBackward0(const Grads& grads, const LinalgLuFactorExBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgLuFactorExBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_matrix(node, "LU", saved.LU);
  check_same_shape_as(node, "grad", *grads[0], "LU", saved.LU);
  const auto [P, L, U] = lu_unpack(saved.LU, saved.pivots, /*unpack_data=*/true, /*unpack_pivots=*/saved.pivot);
  const int64_t k = std::min(saved.LU.size(-2), saved.LU.size(-1));
  const Tensor& grad = *grads[0];
  return Grads{linalg_lu_backward(narrow(grad, -1, 0, k), narrow(grad, -2, 0, k), P, L, U, saved.pivot)};
}

// LinalgLuBackward0 — linalg_lu(Tensor A, *, bool pivot=True)
//   A: linalg_lu_backward(grad_L, grad_U, P, L, U, pivot)
// For square A: gA = P L^{-H} [L^H gL o 1_L + gU U^H o 1_U] U^{-H} (1_L strictly lower, 1_U upper
// triangular masks); a wide or tall A adds the block of U or L beyond the square part.
struct LinalgLuBackward0Saved {
  bool pivot;
  Tensor L;
  Tensor P;
  Tensor U;
};

Grads LinalgLuBackward0(const Grads& grads, const LinalgLuBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgLuBackward0";
  if (!need[0]) return Grads(1);
  check_matrix(node, "L", saved.L);
  check_matrix(node, "U", saved.U);
  if (grads[0]) check_same_shape_as(node, "grad_L", *grads[0], "L", saved.L);
  if (grads[1]) check_same_shape_as(node, "grad_U", *grads[1], "U", saved.U);
  const Tensor gA = linalg_lu_backward(grads[0], grads[1], saved.P, saved.L, saved.U, saved.pivot);
  return gA.defined() ? Grads{gA} : Grads(1);
}

// LinalgSolveExBackward0 — _linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False)
//   A, B: linalg_solve_backward(grad, result, A, LU, pivots, left, grad_input_mask[1])
// linalg_solve_backward, for X = A^{-1} B:  gB = A^{-H} gX (an lu_solve with the saved factors),
// gA = -gB X^H (left) or -X^H gB; a vector B (linalg_solve_is_vector_rhs) is a one-column matrix.
struct LinalgSolveExBackward0Saved {
  Tensor A;
  bool left;
  Tensor LU;
  Tensor pivots;
  Tensor result;
};

Grads LinalgSolveExBackward0(const Grads& grads, const LinalgSolveExBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgSolveExBackward0";
  if (!grads[0] || (!need[0] && !need[1])) return Grads(2);
  check_lu(node, saved.A, saved.LU, saved.pivots);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  const bool vector_case = linalg_solve_is_vector_rhs(saved.LU, saved.result);
  const auto vector_to_matrix = [&](const Tensor& t) { return vector_case ? unsqueeze(t, -1) : t; };
  const bool use_A_T = lu_is_of_transpose(node, saved.A, saved.LU, saved.pivots);
  const Tensor gB = linalg_lu_solve(saved.LU, saved.pivots, vector_to_matrix(*grads[0]), saved.left,
                                    /*adjoint=*/!use_A_T);
  Grads out(2);
  if (need[0]) {
    const Tensor X = vector_to_matrix(saved.result);
    out[0] = neg(saved.left ? matmul(gB, mH(X)) : matmul(mH(X), gB));
  }
  if (need[1]) out[1] = vector_case ? squeeze(gB, -1) : gB;
  return out;
}

// LinalgCholeskyExBackward0 — linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False)
//   self: cholesky_backward(grad, upper, L)
// cholesky_backward, for A = L L^H:  gA = L^{-H} phi(tril(L^H gL)) L^{-1}, phi(X) = (X + X^H - diag(X)) / 2
// (the grad is Hermitian, not triangular).
struct LinalgCholeskyExBackward0Saved {
  bool upper;
  Tensor L;
};

Grads LinalgCholeskyExBackward0(const Grads& grads, const LinalgCholeskyExBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgCholeskyExBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_matrix(node, "L", saved.L);
  check_same_shape_as(node, "grad", *grads[0], "L", saved.L);
  return Grads{cholesky_backward(*grads[0], saved.upper, saved.L)};
}

// CholeskyBackward0 — cholesky(Tensor self, bool upper=False)
//   self: cholesky_backward(grad, upper, result)
struct CholeskyBackward0Saved {
  bool upper;
  Tensor result;
};

Grads CholeskyBackward0(const Grads& grads, const CholeskyBackward0Saved& saved, const Need& need) {
  const char* node = "CholeskyBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_matrix(node, "result", saved.result);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  return Grads{cholesky_backward(*grads[0], saved.upper, saved.result)};
}

// LinalgEighBackward0 — _linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True)
//   A: linalg_eig_backward(grads[0], grads[1], eigenvalues, eigenvectors, /*is_hermitian=*/true)
// linalg_eig_backward, Hermitian: gA = V [skew(V^H gV) / (2 E) + diag(gL)] V^H, E_jk = L_k - L_j (1 on the
// diagonal); it assumes distinct eigenvalues.
struct LinalgEighBackward0Saved {
  Tensor eigenvalues;
  Tensor eigenvectors;
};

Grads LinalgEighBackward0(const Grads& grads, const LinalgEighBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgEighBackward0";
  if (!need[0]) return Grads(1);
  check_matrix(node, "eigenvectors", saved.eigenvectors);
  if (grads[0]) check_same_shape_as(node, "grad_eigenvalues", *grads[0], "eigenvalues", saved.eigenvalues);
  if (grads[1]) check_same_shape_as(node, "grad_eigenvectors", *grads[1], "eigenvectors", saved.eigenvectors);
  const Tensor gA = linalg_eig_backward(grads[0], grads[1], saved.eigenvalues, saved.eigenvectors, true);
  return gA.defined() ? Grads{gA} : Grads(1);
}

// LinalgEigBackward0 — linalg_eig(Tensor self)
//   self: handle_r_to_c(self.scalar_type(), linalg_eig_backward(grads[0], grads[1], eigenvalues, eigenvectors,
//         /*is_hermitian=*/false))
// linalg_eig_backward: gA = V^{-H} [(V^H gV - V^H V Re(diag(V^H gV))) / E* + diag(gL)] V^H,
// E_jk = L_k - L_j (1 on the diagonal); eigenvectors have norm 1. It assumes distinct eigenvalues.
struct LinalgEigBackward0Saved {
  DType self_scalar_type;
  Tensor eigenvalues;
  Tensor eigenvectors;
};

Grads LinalgEigBackward0(const Grads& grads, const LinalgEigBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgEigBackward0";
  if (!need[0]) return Grads(1);
  check_matrix(node, "eigenvectors", saved.eigenvectors);
  check(is_complex(saved.eigenvectors.dtype()), node, ": eigenvectors must be complex (linalg.eig's are), got ",
        dtype_name(saved.eigenvectors.dtype()));
  if (grads[0]) check_same_shape_as(node, "grad_eigenvalues", *grads[0], "eigenvalues", saved.eigenvalues);
  if (grads[1]) check_same_shape_as(node, "grad_eigenvectors", *grads[1], "eigenvectors", saved.eigenvectors);
  const auto as_complex = [&](const OptionalTensor& g) -> OptionalTensor {
    if (!g) return std::nullopt;
    return g->to(saved.eigenvectors.dtype());
  };
  const Tensor gA = linalg_eig_backward(as_complex(grads[0]), as_complex(grads[1]), saved.eigenvalues,
                                        saved.eigenvectors, false);
  return gA.defined() ? Grads{handle_r_to_c(saved.self_scalar_type, gA)} : Grads(1);
}

// LinalgSlogdetBackward0 — _linalg_slogdet(Tensor A)
//   A: slogdet_backward(grad_sign, grad_logabsdet, A, sign, LU, pivots)
// slogdet_backward: gA = (g_logabsdet - i Im(conj(g_sign) sign)) A^{-H} (the sign term only for complex A:
// a real sign is locally constant), A^{-H} by an lu_solve with the saved factors. A must be invertible.
struct LinalgSlogdetBackward0Saved {
  Tensor A;
  Tensor LU;
  Tensor pivots;
  Tensor sign;
};

Grads LinalgSlogdetBackward0(const Grads& grads, const LinalgSlogdetBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgSlogdetBackward0";
  const OptionalTensor& grad_sign = grads[0];
  const OptionalTensor& grad_logabsdet = grads[1];
  if (!need[0] || (!grad_sign && !grad_logabsdet)) return Grads(1);
  check_lu(node, saved.A, saved.LU, saved.pivots);
  const bool complex_input = is_complex(saved.A.dtype());
  if (!complex_input && !grad_logabsdet) return Grads(1);  // a real sign has no gradient
  if (grad_sign) check_same_shape_as(node, "grad_sign", *grad_sign, "sign", saved.sign);
  if (grad_logabsdet) check_same_shape_as(node, "grad_logabsdet", *grad_logabsdet, "sign", saved.sign);

  Tensor g = grad_logabsdet ? *grad_logabsdet : Tensor();
  if (complex_input) {
    if (grad_sign) {
      const Tensor sign_term = i_times(imag(mul(conj(*grad_sign), saved.sign)));
      g = g.defined() ? sub(g, sign_term) : neg(sign_term);
    } else {
      g = g.to(saved.A.dtype());
    }
  }
  const Tensor d = diag_embed(expand(unsqueeze(g, -1), saved.pivots.sizes()));
  const bool use_A_T = lu_is_of_transpose(node, saved.A, saved.LU, saved.pivots);
  return Grads{linalg_lu_solve(saved.LU, saved.pivots, d, /*left=*/true, /*adjoint=*/!use_A_T)};
}

// LinalgDetBackward0 — _linalg_det(Tensor A)
//   A: linalg_det_backward(grad, result, A, LU, pivots)
// linalg_det_backward (without create_graph): gA solves A^H gA = conj(det) grad I, an lu_solve with the
// saved factors; a zero on U's diagonal (a singular A) is first replaced by eps, since det is C^1.
struct LinalgDetBackward0Saved {
  Tensor A;
  Tensor LU;
  Tensor pivots;
  Tensor result;
};

Grads LinalgDetBackward0(const Grads& grads, const LinalgDetBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgDetBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_lu(node, saved.A, saved.LU, saved.pivots);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  if (saved.A.numel() == 0) return Grads{zeros(saved.A.sizes(), saved.LU.dtype())};  // torch's: an empty grad
  const Tensor d_diag = mul(*grads[0], conj(saved.result));
  const Tensor d = diag_embed(expand(unsqueeze(d_diag, -1), saved.pivots.sizes()));
  const Tensor U_diagonal = diagonal(saved.LU, 0, -2, -1);
  const Tensor LU_ = add(saved.LU, diag_embed(mul(eq(U_diagonal, Scalar(0)).to(saved.LU.dtype()),
                                                  Scalar(epsilon_of(saved.LU.dtype())))));
  const bool use_A_T = lu_is_of_transpose(node, saved.A, saved.LU, saved.pivots);
  return Grads{linalg_lu_solve(LU_, saved.pivots, d, /*left=*/true, /*adjoint=*/!use_A_T)};
}

// LinalgLuSolveBackward0 — linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True,
//                                           bool adjoint=False)
//   LU: linalg_lu_solve_LU(grad, LU, pivots, result, left, adjoint)
//   B: at::linalg_lu_solve(LU, pivots, grad, left, !adjoint)
// linalg_lu_solve_LU (left, not adjoint): gR = -U^{-H} gX X^H, gLU = tril(L^{-H} gR U^H, -1) + triu(gR);
// the other three cases are its adjoints.
struct LinalgLuSolveBackward0Saved {
  Tensor LU;
  bool adjoint;
  bool left;
  Tensor pivots;
  Tensor result;
};

Grads LinalgLuSolveBackward0(const Grads& grads, const LinalgLuSolveBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgLuSolveBackward0";
  if (!grads[0] || (!need[0] && !need[1])) return Grads(2);
  check_matrix(node, "LU", saved.LU);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  Grads out(2);
  if (need[0])
    out[0] = linalg_lu_solve_LU(*grads[0], saved.LU, saved.pivots, saved.result, saved.left, saved.adjoint);
  if (need[1]) out[1] = linalg_lu_solve(saved.LU, saved.pivots, *grads[0], saved.left, !saved.adjoint);
  return out;
}

// LuUnpackBackward0 — lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True)
//   LU_data: lu_unpack_backward(grad_L, grad_U, LU_data.sym_size(-2), LU_data.sym_size(-1))
// lu_unpack_backward: L's grad below the diagonal and U's on and above it, back in LU's packed places.
struct LuUnpackBackward0Saved {
  int64_t LU_data_sym_argsize_minus_1;
  int64_t LU_data_sym_argsize_minus_2;
};

Grads LuUnpackBackward0(const Grads& grads, const LuUnpackBackward0Saved& saved, const Need& need) {
  const char* node = "LuUnpackBackward0";
  if (!need[0]) return Grads(1);
  const int64_t m = saved.LU_data_sym_argsize_minus_2, n = saved.LU_data_sym_argsize_minus_1;
  check(m >= 0 && n >= 0, node, ": LU_data's sizes ", m, " x ", n, " are negative");
  const int64_t k = std::min(m, n);
  if (grads[0])
    check(grads[0]->dim() >= 2 && grads[0]->size(-2) == m && grads[0]->size(-1) == k, node, ": grad_L ",
          shape_text(grads[0]->sizes()), " is not L's shape (.., ", m, ", ", k, ")");
  if (grads[1])
    check(grads[1]->dim() >= 2 && grads[1]->size(-2) == k && grads[1]->size(-1) == n, node, ": grad_U ",
          shape_text(grads[1]->sizes()), " is not U's shape (.., ", k, ", ", n, ")");
  const Tensor g = lu_unpack_backward(grads[0], grads[1], m, n);
  return g.defined() ? Grads{g} : Grads(1);
}

// LinalgSolveTriangularBackward0 — linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True,
//                                                          bool unitriangular=False)
//   self, B: linalg_solve_triangular_backward(grad, self, result, upper, left, unitriangular, grad_input_mask)
// linalg_solve_triangular_backward: gB = A^{-H} gX, gA = -gB X^H (left) or -X^H gB, projected onto A's
// triangle (without its diagonal when unitriangular).
struct LinalgSolveTriangularBackward0Saved {
  bool left;
  Tensor self;
  bool unitriangular;
  bool upper;
  Tensor result;
};

Grads LinalgSolveTriangularBackward0(const Grads& grads, const LinalgSolveTriangularBackward0Saved& saved,
                                     const Need& need) {
  const char* node = "LinalgSolveTriangularBackward0";
  if (!grads[0] || (!need[0] && !need[1])) return Grads(2);
  check_matrix(node, "self", saved.self);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  const Tensor G_B = linalg_solve_triangular(mH(saved.self), *grads[0], !saved.upper, saved.left, saved.unitriangular);
  Grads out(2);
  if (need[0]) {
    const Tensor X_H = mH(saved.result);
    const Tensor G_A = neg(saved.left ? matmul(G_B, X_H) : matmul(X_H, G_B));
    const int64_t diagonal_offset = saved.unitriangular ? 1 : 0;
    out[0] = saved.upper ? triu(G_A, diagonal_offset) : tril(G_A, -diagonal_offset);
  }
  if (need[1]) out[1] = G_B;
  return out;
}

// TriangularSolveBackward0 — triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False,
//                                             bool unitriangular=False)
//   self, A: triangular_solve_backward(grad_solution, grad_cloned_coefficient, self, A, solution, upper,
//            transpose, unitriangular, grad_input_mask)
// triangular_solve_backward: for op(A) X = B (op(A) = A^T when `transpose`),
//   gB = op(A)^{-H} gX,  gA = -gB X^H, or -conj(X) gB^T when transposed,
// projected onto A's triangle, plus the grad of cloned_coefficient (a copy of A).
struct TriangularSolveBackward0Saved {
  Tensor A;
  Tensor self;
  bool transpose;
  bool unitriangular;
  bool upper;
  Tensor solution;
};

Grads TriangularSolveBackward0(const Grads& grads, const TriangularSolveBackward0Saved& saved, const Need& need) {
  const char* node = "TriangularSolveBackward0";
  const OptionalTensor& grad_x = grads[0];
  const OptionalTensor& grad_m = grads[1];
  if ((!grad_x && !grad_m) || (!need[0] && !need[1])) return Grads(2);
  check_matrix(node, "A", saved.A);
  Tensor grad_b, grad_a;
  if (grad_x) {
    check_same_shape_as(node, "grad_solution", *grad_x, "solution", saved.solution);
    // grad_x.triangular_solve(A.conj(), upper, !transpose, unitriangular): op'(conj(A)) gB = gX with op' the
    // other transposition, i.e. A^H gB = gX, or conj(A) gB = gX when A was transposed.
    const bool solve_transposed = !saved.transpose;
    const Tensor A_conj = conj(saved.A);
    grad_b = linalg_solve_triangular(solve_transposed ? mT(A_conj) : A_conj, *grad_x,
                                     solve_transposed ? !saved.upper : saved.upper, true, saved.unitriangular);
    if (need[1]) {
      grad_a = saved.transpose ? neg(matmul(conj(saved.solution), mT(grad_b))) : neg(matmul(grad_b, mH(saved.solution)));
      const int64_t offset = saved.unitriangular ? 1 : 0;
      grad_a = saved.upper ? triu(grad_a, offset) : tril(grad_a, -offset);
    }
  }
  if (!grad_a.defined()) grad_a = zeros(saved.A.sizes(), saved.A.dtype());
  if (!grad_b.defined()) grad_b = zeros(saved.self.sizes(), saved.self.dtype());
  if (need[1] && grad_m) {
    check_same_shape_as(node, "grad_cloned_coefficient", *grad_m, "A", saved.A);
    grad_a = add(grad_a, *grad_m);
  }
  Grads out(2);
  if (need[0]) out[0] = grad_b;
  if (need[1]) out[1] = grad_a;
  return out;
}

// CholeskySolveBackward0 — cholesky_solve(Tensor self, Tensor input2, bool upper=False)
//   self, input2: cholesky_solve_backward(grad, self, input2, result, upper, grad_input_mask)
// cholesky_solve_backward, for X = (L L^H)^{-1} B:  gB = (L L^H)^{-1} gX;  with C = gB X^H + X gB^H,
// gL = -C L (or -U C for the upper factor U = L^H).
struct CholeskySolveBackward0Saved {
  Tensor input2;
  Tensor self;
  bool upper;
  Tensor result;
};

Grads CholeskySolveBackward0(const Grads& grads, const CholeskySolveBackward0Saved& saved, const Need& need) {
  const char* node = "CholeskySolveBackward0";
  if (!grads[0] || (!need[0] && !need[1])) return Grads(2);
  check_matrix(node, "input2", saved.input2);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  const Tensor grad_self = cholesky_solve(*grads[0], saved.input2, saved.upper);
  Grads out(2);
  if (need[0]) out[0] = grad_self;
  if (need[1]) {
    Tensor common_term = matmul(grad_self, mH(saved.result));
    common_term = add(common_term, mH(common_term));
    out[1] = neg(saved.upper ? matmul(saved.input2, common_term) : matmul(common_term, saved.input2));
  }
  return out;
}

// CholeskyInverseBackward0 — cholesky_inverse(Tensor self, bool upper=False)
//   self: cholesky_inverse_backward(grad, self, upper, result)
// cholesky_inverse_backward, for X = (L L^H)^{-1}:  C = X (g + g^H) X,  gL = -C L (or -U C when upper).
struct CholeskyInverseBackward0Saved {
  Tensor self;
  bool upper;
  Tensor result;
};

Grads CholeskyInverseBackward0(const Grads& grads, const CholeskyInverseBackward0Saved& saved, const Need& need) {
  const char* node = "CholeskyInverseBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_matrix(node, "self", saved.self);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  Tensor common_term = add(*grads[0], mH(*grads[0]));
  common_term = matmul(saved.result, matmul(common_term, saved.result));
  return Grads{neg(saved.upper ? matmul(saved.self, common_term) : matmul(common_term, saved.self))};
}

// LinalgLstsqBackward0 — linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None)
//   self, b: linalg_lstsq_backward(grads[0], grads[1], self, b, solution, grad_input_mask)
// linalg_lstsq_backward: the solution is X = pinv(A) B, so gA = pinv_backward(gX B^H, pinv(A), A) and
// gB = pinv(A)^H gX; the residuals' grad adds 2 (gL r) X^H to gA and -2 gL r to gB, r = A X - B (Danskin).
// pinv(A) is recomputed from A (linalg_pinv, torch's default tolerance), as torch recomputes it.
struct LinalgLstsqBackward0Saved {
  Tensor b;
  Tensor self;
  Tensor solution;
};

Grads LinalgLstsqBackward0(const Grads& grads, const LinalgLstsqBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgLstsqBackward0";
  const OptionalTensor& gX_ = grads[0];
  const bool has_gL = grads[1] && grads[1]->numel() > 0;  // residuals are empty unless computed
  if ((!gX_ && !has_gL) || (!need[0] && !need[1])) return Grads(2);
  const Tensor& A = saved.self;
  check_matrix(node, "self", A);
  if (gX_) check_same_shape_as(node, "grad_solution", *gX_, "solution", saved.solution);
  const bool vector_case = linalg_solve_is_vector_rhs(A, saved.b);
  const auto vector_to_matrix = [&](const Tensor& t) { return vector_case ? unsqueeze(t, -1) : t; };
  const auto matrix_to_vector = [&](const Tensor& t) { return vector_case ? squeeze(t, -1) : t; };
  const Tensor B = vector_to_matrix(saved.b);

  Tensor A_grad, B_grad;
  if (gX_) {  // from the solution
    const Tensor gX = vector_to_matrix(*gX_);
    const Tensor pinvA = linalg_pinv(A);
    if (need[0]) A_grad = pinv_backward(matmul(gX, mH(B)), pinvA, A);
    if (need[1]) B_grad = matrix_to_vector(matmul(mH(pinvA), gX));
  }
  if (has_gL) {  // from the residuals
    const Tensor X = vector_to_matrix(saved.solution);
    const Tensor r = sub(matmul(A, X), B);
    const Tensor gL = unsqueeze(*grads[1], -2);
    if (need[0]) {
      const Tensor A_grad_L = mul(matmul(mul(gL, r), mH(X)), Scalar(2.0));
      A_grad = A_grad.defined() ? add(A_grad, A_grad_L) : A_grad_L;
    }
    if (need[1]) {
      const Tensor B_grad_L = matrix_to_vector(mul(mul(gL, r), Scalar(-2.0)));
      B_grad = B_grad.defined() ? add(B_grad, B_grad_L) : B_grad_L;
    }
  }
  Grads out(2);
  if (need[0] && A_grad.defined()) out[0] = A_grad;
  if (need[1] && B_grad.defined()) out[1] = B_grad;
  return out;
}

// LinalgMatrixExpBackward0 — linalg_matrix_exp(Tensor self)
//   self: linalg_matrix_exp_differential(self, grad, /*adjoint*/ true)
// linalg_matrix_exp_differential (Mathias 1996): the adjoint of the differential of exp at A applied to
// G is the top-right block of exp([[A^H, G], [0, A^H]]).
struct LinalgMatrixExpBackward0Saved {
  Tensor self;
};

Grads LinalgMatrixExpBackward0(const Grads& grads, const LinalgMatrixExpBackward0Saved& saved, const Need& need) {
  const char* node = "LinalgMatrixExpBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_matrix(node, "self", saved.self);
  check_same_shape_as(node, "grad", *grads[0], "self", saved.self);
  const int64_t n = saved.self.size(-1);
  const Tensor A_h = mH(saved.self).to(grads[0]->dtype());
  const Tensor meta_grad = cat({cat({A_h, *grads[0]}, -1), cat({zeros_like(A_h), A_h}, -1)}, -2);
  return Grads{contiguous(narrow(narrow(linalg_matrix_exp(meta_grad), -2, 0, n), -1, n, n))};
}

// LinalgHouseholderProductBackward0 — linalg_householder_product(Tensor input, Tensor tau)
//   input, tau: householder_product_backward(grad, result, input, tau)
// (see householder_product_backward above; it assumes every reflector is invertible, as those of
// geqrf are)
struct LinalgHouseholderProductBackward0Saved {
  Tensor input;
  Tensor tau;
  Tensor result;
};

Grads LinalgHouseholderProductBackward0(const Grads& grads, const LinalgHouseholderProductBackward0Saved& saved,
                                        const Need& need) {
  const char* node = "LinalgHouseholderProductBackward0";
  if (!grads[0] || (!need[0] && !need[1])) return Grads(2);
  check_matrix(node, "input", saved.input);
  check_same_shape_as(node, "grad", *grads[0], "result", saved.result);
  check(saved.tau.dim() == saved.input.dim() - 1 && saved.tau.size(-1) <= saved.input.size(-1), node, ": tau ",
        shape_text(saved.tau.sizes()), " does not fit input ", shape_text(saved.input.sizes()));
  const auto [input_grad, tau_grad] = householder_product_backward(*grads[0], saved.result, saved.input, saved.tau);
  Grads out(2);
  if (need[0] && input_grad.defined()) out[0] = input_grad;
  if (need[1] && tau_grad.defined()) out[1] = tau_grad;
  return out;
}

// OrmqrBackward0 — ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False)
//   self, input2, input3: ormqr_backward(grad, result, self, input2, input3, left, transpose, grad_input_mask)
// ormqr_backward: other's grad is ormqr(self, tau, grad, left, !transpose); the reflectors' grads are
// householder_product_backward's, fed (grad, result) or (result^H, grad^H) with the order flipped,
// depending on the side Q multiplies from and on transpose.
struct OrmqrBackward0Saved {
  Tensor input2;
  Tensor input3;
  bool left;
  Tensor self;
  bool transpose;
  Tensor result;
};

Grads OrmqrBackward0(const Grads& grads, const OrmqrBackward0Saved& saved, const Need& need) {
  const char* node = "OrmqrBackward0";
  if (!grads[0] || (!need[0] && !need[1] && !need[2])) return Grads(3);
  const Tensor& grad = *grads[0];
  check_matrix(node, "self", saved.self);
  check_same_shape_as(node, "grad", grad, "result", saved.result);
  Grads out(3);
  if (need[2]) out[2] = ormqr(saved.self, saved.input2, grad, saved.left, !saved.transpose);
  if (need[0] || need[1]) {
    const bool forward_order = saved.left != saved.transpose;
    const Tensor hpb_grad = forward_order ? (!saved.transpose ? grad : mH(grad))
                                          : (!saved.transpose ? mH(saved.result) : saved.result);
    const Tensor hpb_result = forward_order ? (!saved.transpose ? saved.result : mH(saved.result))
                                            : (!saved.transpose ? mH(grad) : grad);
    const auto [self_grad, tau_grad] =
        householder_product_backward(hpb_grad, hpb_result, saved.self, saved.input2, /*flip_order=*/!forward_order);
    if (need[0] && self_grad.defined()) out[0] = self_grad;
    if (need[1] && tau_grad.defined()) out[1] = tau_grad;
  }
  return out;
}

// LinalgCrossBackward0 — linalg_cross(Tensor self, Tensor other, *, int dim=-1)
//   self: at::linalg_cross(other.conj(), grad, dim)
//   other: at::linalg_cross(grad, self.conj(), dim)
// (the grads have the broadcast shape; validate sums them back to each input's)
struct LinalgCrossBackward0Saved {
  int64_t dim;
  Tensor other;
  Tensor self;
};

Grads LinalgCrossBackward0(const Grads& grads, const LinalgCrossBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  Grads out(2);
  if (need[0]) out[0] = linalg_cross(conj(saved.other), *grads[0], saved.dim);
  if (need[1]) out[1] = linalg_cross(*grads[0], conj(saved.self), saved.dim);
  return out;
}

}  // namespace

void add_linalg_decomposition_nodes(std::vector<NodeDef>& registry) {
  {
    using S = LinalgSvdBackward0Saved;
    registry.push_back(define_node<S, LinalgSvdBackward0>(
        {"LinalgSvdBackward0", "_linalg_svd", {"A"}, 3, {},
         "A: svd_backward(full_matrices && grad_U.defined() ? grad_U.narrow_symint(-1, 0, S.sym_size(-1)) : grad_U, "
         "grad_S, full_matrices && grad_Vh.defined() ? grad_Vh.narrow_symint(-2, 0, S.sym_size(-1)) : grad_Vh, "
         "full_matrices ? U.narrow_symint(-1, 0, S.sym_size(-1)) : U, S, "
         "full_matrices ? Vh.narrow_symint(-2, 0, S.sym_size(-1)) : Vh)"},
        {saved<&S::full_matrices>("full_matrices", FieldKind::Bool), saved<&S::S>("S", FieldKind::Tensor),
         saved<&S::S_sym_argsize_minus_1>("S_sym_argsize_minus_1", FieldKind::Int),
         saved<&S::U>("U", FieldKind::Tensor), saved<&S::Vh>("Vh", FieldKind::Tensor)}));
  }
  {
    using S = LinalgInvExBackward0Saved;
    registry.push_back(define_node<S, LinalgInvExBackward0>(
        {"LinalgInvExBackward0", "linalg_inv_ex", {"A"}, 1, {},
         "A: -at::matmul(inverse.mH(), at::matmul(grad, inverse.mH()))"},
        {saved<&S::inverse>("inverse", FieldKind::Tensor)}));
  }
  {
    using S = LinalgPinvBackward0Saved;
    registry.push_back(define_node<S, LinalgPinvBackward0>(
        {"LinalgPinvBackward0", "linalg_pinv.atol_rtol_tensor", {"self"}, 1, {},
         "self: pinv_backward(grad, result, self)"},
        {saved<&S::self>("self", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = LinalgQrBackward0Saved;
    registry.push_back(define_node<S, LinalgQrBackward0>(
        {"LinalgQrBackward0", "linalg_qr", {"A"}, 2, {}, "A: linalg_qr_backward(grad_Q, grad_R, Q, R, mode)"},
        {saved<&S::mode>("mode", FieldKind::String), saved<&S::Q>("Q", FieldKind::Tensor),
         saved<&S::R>("R", FieldKind::Tensor)}));
  }
  {
    using S = LinalgLuFactorExBackward0Saved;
    registry.push_back(define_node<S, LinalgLuFactorExBackward0>(
        {"LinalgLuFactorExBackward0", "linalg_lu_factor_ex", {"A"}, 1, {},
         "A: lu_factor_ex_backward(grad, LU, pivots, pivot)"},
        {saved<&S::pivot>("pivot", FieldKind::Bool), saved<&S::LU>("LU", FieldKind::Tensor),
         saved<&S::pivots>("pivots", FieldKind::Tensor)}));
  }
  {
    using S = LinalgLuBackward0Saved;
    registry.push_back(define_node<S, LinalgLuBackward0>(
        {"LinalgLuBackward0", "linalg_lu", {"A"}, 2, {}, "A: linalg_lu_backward(grad_L, grad_U, P, L, U, pivot)"},
        {saved<&S::pivot>("pivot", FieldKind::Bool), saved<&S::L>("L", FieldKind::Tensor),
         saved<&S::P>("P", FieldKind::Tensor), saved<&S::U>("U", FieldKind::Tensor)}));
  }
  {
    using S = LinalgSolveExBackward0Saved;
    registry.push_back(define_node<S, LinalgSolveExBackward0>(
        {"LinalgSolveExBackward0", "_linalg_solve_ex", {"A", "B"}, 1, {},
         "A, B: linalg_solve_backward(grad, result, A, LU, pivots, left, grad_input_mask[1])"},
        {saved<&S::A>("A", FieldKind::Tensor), saved<&S::left>("left", FieldKind::Bool),
         saved<&S::LU>("LU", FieldKind::Tensor), saved<&S::pivots>("pivots", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = LinalgCholeskyExBackward0Saved;
    registry.push_back(define_node<S, LinalgCholeskyExBackward0>(
        {"LinalgCholeskyExBackward0", "linalg_cholesky_ex", {"self"}, 1, {},
         "self: cholesky_backward(grad, upper, L)"},
        {saved<&S::upper>("upper", FieldKind::Bool), saved<&S::L>("L", FieldKind::Tensor)}));
  }
  {
    using S = CholeskyBackward0Saved;
    registry.push_back(define_node<S, CholeskyBackward0>(
        {"CholeskyBackward0", "cholesky", {"self"}, 1, {}, "self: cholesky_backward(grad, upper, result)"},
        {saved<&S::upper>("upper", FieldKind::Bool), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = LinalgEighBackward0Saved;
    registry.push_back(define_node<S, LinalgEighBackward0>(
        {"LinalgEighBackward0", "_linalg_eigh", {"A"}, 2, {},
         "A: linalg_eig_backward(grads[0], grads[1], eigenvalues, eigenvectors, /*is_hermitian=*/true)"},
        {saved<&S::eigenvalues>("eigenvalues", FieldKind::Tensor),
         saved<&S::eigenvectors>("eigenvectors", FieldKind::Tensor)}));
  }
  {
    using S = LinalgEigBackward0Saved;
    registry.push_back(define_node<S, LinalgEigBackward0>(
        {"LinalgEigBackward0", "linalg_eig", {"self"}, 2, {},
         "self: handle_r_to_c(self.scalar_type(), linalg_eig_backward(grads[0], grads[1], eigenvalues, "
         "eigenvectors, /*is_hermitian=*/false))"},
        {hidden<&S::self_scalar_type>("self_scalar_type", FieldKind::DType),
         saved<&S::eigenvalues>("eigenvalues", FieldKind::Tensor),
         saved<&S::eigenvectors>("eigenvectors", FieldKind::Tensor)}));
  }
  {
    using S = LinalgSlogdetBackward0Saved;
    registry.push_back(define_node<S, LinalgSlogdetBackward0>(
        {"LinalgSlogdetBackward0", "_linalg_slogdet", {"A"}, 2, {},
         "A: slogdet_backward(grad_sign, grad_logabsdet, A, sign, LU, pivots)"},
        {saved<&S::A>("A", FieldKind::Tensor), saved<&S::LU>("LU", FieldKind::Tensor),
         saved<&S::pivots>("pivots", FieldKind::Tensor), saved<&S::sign>("sign", FieldKind::Tensor)}));
  }
  {
    using S = LinalgDetBackward0Saved;
    registry.push_back(define_node<S, LinalgDetBackward0>(
        {"LinalgDetBackward0", "_linalg_det", {"A"}, 1, {}, "A: linalg_det_backward(grad, result, A, LU, pivots)"},
        {saved<&S::A>("A", FieldKind::Tensor), saved<&S::LU>("LU", FieldKind::Tensor),
         saved<&S::pivots>("pivots", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = LinalgLuSolveBackward0Saved;
    registry.push_back(define_node<S, LinalgLuSolveBackward0>(
        {"LinalgLuSolveBackward0", "linalg_lu_solve", {"LU", "B"}, 1, {},
         "LU: linalg_lu_solve_LU(grad, LU, pivots, result, left, adjoint)\n"
         "B: at::linalg_lu_solve(LU, pivots, grad, left, !adjoint)"},
        {saved<&S::LU>("LU", FieldKind::Tensor), saved<&S::adjoint>("adjoint", FieldKind::Bool),
         saved<&S::left>("left", FieldKind::Bool), saved<&S::pivots>("pivots", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = LuUnpackBackward0Saved;
    registry.push_back(define_node<S, LuUnpackBackward0>(
        {"LuUnpackBackward0", "lu_unpack", {"LU_data"}, 2, {},
         "LU_data: lu_unpack_backward(grad_L, grad_U, LU_data.sym_size(-2), LU_data.sym_size(-1))"},
        {saved<&S::LU_data_sym_argsize_minus_1>("LU_data_sym_argsize_minus_1", FieldKind::Int),
         saved<&S::LU_data_sym_argsize_minus_2>("LU_data_sym_argsize_minus_2", FieldKind::Int)}));
  }
  {
    using S = LinalgSolveTriangularBackward0Saved;
    registry.push_back(define_node<S, LinalgSolveTriangularBackward0>(
        {"LinalgSolveTriangularBackward0", "linalg_solve_triangular", {"self", "B"}, 1, {},
         "self, B: linalg_solve_triangular_backward(grad, self, result, upper, left, unitriangular, "
         "grad_input_mask)"},
        {saved<&S::left>("left", FieldKind::Bool), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::unitriangular>("unitriangular", FieldKind::Bool), saved<&S::upper>("upper", FieldKind::Bool),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = TriangularSolveBackward0Saved;
    registry.push_back(define_node<S, TriangularSolveBackward0>(
        {"TriangularSolveBackward0", "triangular_solve", {"self", "A"}, 2, {},
         "self, A: triangular_solve_backward(grad_solution, grad_cloned_coefficient, self, A, solution, upper, "
         "transpose, unitriangular, grad_input_mask)"},
        {saved<&S::A>("A", FieldKind::Tensor), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::transpose>("transpose", FieldKind::Bool),
         saved<&S::unitriangular>("unitriangular", FieldKind::Bool), saved<&S::upper>("upper", FieldKind::Bool),
         saved<&S::solution>("solution", FieldKind::Tensor)}));
  }
  {
    using S = CholeskySolveBackward0Saved;
    registry.push_back(define_node<S, CholeskySolveBackward0>(
        {"CholeskySolveBackward0", "cholesky_solve", {"self", "input2"}, 1, {},
         "self, input2: cholesky_solve_backward(grad, self, input2, result, upper, grad_input_mask)"},
        {saved<&S::input2>("input2", FieldKind::Tensor), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::upper>("upper", FieldKind::Bool), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = CholeskyInverseBackward0Saved;
    registry.push_back(define_node<S, CholeskyInverseBackward0>(
        {"CholeskyInverseBackward0", "cholesky_inverse", {"self"}, 1, {},
         "self: cholesky_inverse_backward(grad, self, upper, result)"},
        {saved<&S::self>("self", FieldKind::Tensor), saved<&S::upper>("upper", FieldKind::Bool),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = LinalgLstsqBackward0Saved;
    registry.push_back(define_node<S, LinalgLstsqBackward0>(
        {"LinalgLstsqBackward0", "linalg_lstsq", {"self", "b"}, 2, {},
         "self, b: linalg_lstsq_backward(grads[0], grads[1], self, b, solution, grad_input_mask)"},
        {saved<&S::b>("b", FieldKind::Tensor), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::solution>("solution", FieldKind::Tensor)}));
  }
  {
    using S = LinalgMatrixExpBackward0Saved;
    registry.push_back(define_node<S, LinalgMatrixExpBackward0>(
        {"LinalgMatrixExpBackward0", "linalg_matrix_exp", {"self"}, 1, {},
         "self: linalg_matrix_exp_differential(self, grad, /*adjoint*/ true)"},
        {saved<&S::self>("self", FieldKind::Tensor)}));
  }
  {
    using S = LinalgHouseholderProductBackward0Saved;
    registry.push_back(define_node<S, LinalgHouseholderProductBackward0>(
        {"LinalgHouseholderProductBackward0", "linalg_householder_product", {"input", "tau"}, 1, {},
         "input, tau: householder_product_backward(grad, result, input, tau)"},
        {saved<&S::input>("input", FieldKind::Tensor), saved<&S::tau>("tau", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = OrmqrBackward0Saved;
    registry.push_back(define_node<S, OrmqrBackward0>(
        {"OrmqrBackward0", "ormqr", {"self", "input2", "input3"}, 1, {},
         "self, input2, input3: ormqr_backward(grad, result, self, input2, input3, left, transpose, "
         "grad_input_mask)"},
        {saved<&S::input2>("input2", FieldKind::Tensor), saved<&S::input3>("input3", FieldKind::Tensor),
         saved<&S::left>("left", FieldKind::Bool), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::transpose>("transpose", FieldKind::Bool), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = LinalgCrossBackward0Saved;
    registry.push_back(define_node<S, LinalgCrossBackward0>(
        {"LinalgCrossBackward0", "linalg_cross", {"self", "other"}, 1, {},
         "self: at::linalg_cross(other.conj(), grad, dim)\n"
         "other: at::linalg_cross(grad, self.conj(), dim)"},
        {saved<&S::dim>("dim", FieldKind::Int), saved<&S::other>("other", FieldKind::Tensor),
         saved<&S::self>("self", FieldKind::Tensor)}));
  }
}

}  // namespace refgrad::nodes
