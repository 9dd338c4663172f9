// Solves and factorizations for the backward formulas of the linalg decompositions:
// linalg_solve_triangular, linalg_lu_factor, linalg_lu_solve, lu_unpack, linalg_solve, linalg_svd,
// linalg_pinv, linalg_matrix_exp, and the matrix helpers those formulas are written with (diagonal,
// diag_embed, mH), plus linalg_cross.
//
// These are small, readable reference kernels, not LAPACK: partial-pivot LU
// (Doolittle, as LAPACK's getf2) and forward/back substitution, one matrix at a
// time, computing in the tensor's own dtype (float32, float64, complex64 or
// complex128, as LAPACK does). The leading dims of every operand are batch dims
// and broadcast against each other. Pivots are int32 and 1-based, LAPACK's
// convention and torch's: row i of the matrix was swapped with row pivots[i] - 1,
// in order i = 0, 1, ...
//
// The singular value decomposition is the one place that calls LAPACK (the ?gesdd OpenBLAS carries):
// an SVD is an iterative algorithm, not a few readable loops. linalg_pinv is built on it, as torch's.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <climits>
#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "kernel.hpp"

// LAPACK's divide-and-conquer SVD, column-major (Fortran: every argument by pointer; the trailing
// size_t is the hidden length of the character argument jobz).
extern "C" {
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
             const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info,
             std::size_t jobz_length);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             std::size_t jobz_length);
void cgesdd_(const char* jobz, const int* m, const int* n, std::complex<float>* a, const int* lda, float* s,
             std::complex<float>* u, const int* ldu, std::complex<float>* vt, const int* ldvt,
             std::complex<float>* work, const int* lwork, float* rwork, int* iwork, int* info,
             std::size_t jobz_length);
void zgesdd_(const char* jobz, const int* m, const int* n, std::complex<double>* a, const int* lda, double* s,
             std::complex<double>* u, const int* ldu, std::complex<double>* vt, const int* ldvt,
             std::complex<double>* work, const int* lwork, double* rwork, int* iwork, int* info,
             std::size_t jobz_length);
}

namespace refgrad {
namespace {

using std::int64_t;

template <class T>
T conj_of(T x) {
  if constexpr (kernel::is_complex_v<T>) return std::conj(x);
  else return x;
}

// LAPACK's pivot size (i?amax): |re| + |im| for complex numbers, |x| for real ones.
template <class T>
double pivot_size(T x) {
  if constexpr (kernel::is_complex_v<T>) return std::abs(x.real()) + std::abs(x.imag());
  else return std::abs(static_cast<double>(x));
}

// ------------------------------------------------------------------ checks ---

void check_matrices(const Tensor& t, const char* op, const char* name) {
  check(t.defined(), op, ": ", name, " is undefined");
  check(t.dim() >= 2, op, ": ", name, " must have at least 2 dimensions (a matrix or a batch of matrices), got shape ",
        shape_text(t.sizes()));
  const DType dtype = t.dtype();
  check(dtype == DType::Float32 || dtype == DType::Float64 || is_complex(dtype), op, ": ", name,
        " must be float32, float64, complex64 or complex128 (as torch.linalg on the CPU), got ", dtype_name(dtype));
}

void check_square(const Tensor& t, const char* op, const char* name) {
  check(t.size(-1) == t.size(-2), op, ": ", name, " must be a batch of square matrices, got shape ",
        shape_text(t.sizes()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  check(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", dtype_name(a.dtype()),
        " and ", dtype_name(b.dtype()));
}

// All dims but the last `matrix_dims`.
Shape batch_of(const Tensor& t, std::size_t matrix_dims = 2) {
  return Shape(t.sizes().begin(), t.sizes().end() - static_cast<std::ptrdiff_t>(matrix_dims));
}

Shape broadcast_batch(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    check(x == y || x == 1 || y == 1, op, ": the batch dims ", shape_text(a), " and ", shape_text(b),
          " do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// `t` expanded to `batch` + its own last `matrix_dims` dims, as a new contiguous tensor.
Tensor batched_copy(const Tensor& t, const Shape& batch, std::size_t matrix_dims = 2) {
  Shape sizes = batch;
  sizes.insert(sizes.end(), t.sizes().end() - static_cast<std::ptrdiff_t>(matrix_dims), t.sizes().end());
  return clone(expand(t, sizes));
}

// zeros of `like`'s shape with ones on the main diagonal of each rows x cols matrix.
Tensor diag_embed_identity_like(const Tensor& like, int64_t rows, int64_t cols);

// Single precision substitutes in double precision and rounds once at the end (the one rounding of a
// primitive's result): a reference should be at least as accurate as the LAPACK solve it stands for.
bool is_single_precision(DType dtype) { return dtype == DType::Float32 || dtype == DType::ComplexFloat; }
DType double_precision(DType dtype) { return dtype == DType::Float32 ? DType::Float64 : DType::ComplexDouble; }

Shape with_matrix(const Shape& batch, int64_t rows, int64_t cols) {
  Shape sizes = batch;
  sizes.push_back(rows);
  sizes.push_back(cols);
  return sizes;
}

// ----------------------------------------------------------------- kernels ---
// Each works on one contiguous row-major matrix.

// b <- a^{-1} b for a triangular n x n (only its `upper` or lower triangle is read;
// with `unit` its diagonal is taken to be ones), b n x k. Forward or back
// substitution; a zero on the diagonal gives inf/NaN, as BLAS's trsm.
template <class T>
void solve_triangular_in_place(const T* a, int64_t n, T* b, int64_t k, bool upper, bool unit) {
  for (int64_t step = 0; step < n; ++step) {
    const int64_t i = upper ? n - 1 - step : step;
    const int64_t from = upper ? i + 1 : 0, to = upper ? n : i;
    for (int64_t col = 0; col < k; ++col) {
      T sum = b[i * k + col];
      for (int64_t j = from; j < to; ++j) sum -= a[i * n + j] * b[j * k + col];
      b[i * k + col] = unit ? sum : sum / a[i * n + i];
    }
  }
}

// a <- its LU factorization with partial pivoting (L unit lower, below the
// diagonal; U on and above it), m x n, as LAPACK's getf2: at step j the row with
// the largest |a[i][j]| (i >= j) is swapped up when `pivot`. A zero pivot leaves
// its column as it is (the matrix is singular; U has a zero on its diagonal).
template <class T>
void lu_factor_in_place(T* a, int64_t m, int64_t n, std::int32_t* pivots, bool pivot) {
  const int64_t k = std::min(m, n);
  for (int64_t j = 0; j < k; ++j) {
    int64_t p = j;
    if (pivot)
      for (int64_t i = j + 1; i < m; ++i)
        if (pivot_size(a[i * n + j]) > pivot_size(a[p * n + j])) p = i;
    pivots[j] = static_cast<std::int32_t>(p + 1);
    if (p != j)
      for (int64_t c = 0; c < n; ++c) std::swap(a[j * n + c], a[p * n + c]);
    const T diagonal = a[j * n + j];
    if (diagonal == T(0)) continue;
    for (int64_t i = j + 1; i < m; ++i) {
      const T l = a[i * n + j] / diagonal;
      a[i * n + j] = l;
      for (int64_t c = j + 1; c < n; ++c) a[i * n + c] -= l * a[j * n + c];
    }
  }
}

// b <- A^{-1} b (or A^{-H} b with `adjoint`) for A = P L U given by its n x n LU
// factorization and pivots (LAPACK's getrs), b n x k.
template <class T>
void lu_solve_in_place(const T* lu, const std::int32_t* pivots, int64_t n, T* b, int64_t k, bool adjoint) {
  const auto swap_rows = [&](int64_t i) {
    const int64_t p = pivots[i] - 1;
    if (p != i)
      for (int64_t c = 0; c < k; ++c) std::swap(b[i * k + c], b[p * k + c]);
  };
  if (!adjoint) {  // A X = B:  L U X = P^T B
    for (int64_t i = 0; i < n; ++i) swap_rows(i);
    solve_triangular_in_place(lu, n, b, k, /*upper=*/false, /*unit=*/true);
    solve_triangular_in_place(lu, n, b, k, /*upper=*/true, /*unit=*/false);
    return;
  }
  // A^H X = B:  U^H L^H (P^T X) = B, U^H lower and L^H unit upper, read off the factors transposed.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t col = 0; col < k; ++col) {
      T sum = b[i * k + col];
      for (int64_t j = 0; j < i; ++j) sum -= conj_of(lu[j * n + i]) * b[j * k + col];
      b[i * k + col] = sum / conj_of(lu[i * n + i]);
    }
  for (int64_t i = n - 1; i >= 0; --i)
    for (int64_t col = 0; col < k; ++col) {
      T sum = b[i * k + col];
      for (int64_t j = i + 1; j < n; ++j) sum -= conj_of(lu[j * n + i]) * b[j * k + col];
      b[i * k + col] = sum;
    }
  for (int64_t i = n - 1; i >= 0; --i) swap_rows(i);  // X = P (P^T X): the swaps undone, last first
}

// ?gesdd for one type: real (no rwork) or complex.
template <class T, class R>
void gesdd(const char* jobz, int m, int n, T* a, R* s, T* u, int ldu, T* vt, int ldvt, int* info) {
  const int lda = std::max(m, 1);
  const int mn = std::min(m, n), mx = std::max(m, n);
  std::vector<int> iwork(static_cast<std::size_t>(8 * std::max(mn, 1)));
  // LAPACK's bound on the real workspace of c/zgesdd (its newer one, 5 mn^2 + 7 mn, included)
  std::vector<R> rwork(static_cast<std::size_t>(std::max<long>(
      1, std::max<long>(5L * mn * mn + 7L * mn, 2L * mx * mn + 2L * mn * mn + mn))));
  T size_query{};
  int lwork = -1;
  const auto call = [&](T* work) {
    if constexpr (std::is_same_v<T, float>)
      sgesdd_(jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork.data(), info, 1);
    else if constexpr (std::is_same_v<T, double>)
      dgesdd_(jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork.data(), info, 1);
    else if constexpr (std::is_same_v<T, std::complex<float>>)
      cgesdd_(jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, rwork.data(), iwork.data(), info, 1);
    else
      zgesdd_(jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, rwork.data(), iwork.data(), info, 1);
  };
  call(&size_query);  // lwork = -1: the optimal workspace size comes back in work[0]
  lwork = std::max(1, static_cast<int>(std::real(size_query)));
  std::vector<T> work(static_cast<std::size_t>(lwork));
  call(work.data());
}

// The pivots as int32 values in [1, n], checked (they index rows).
Tensor checked_pivots(const Tensor& pivots, int64_t rows, const char* op) {
  check(pivots.defined(), op, ": pivots is undefined");
  check(is_integral(pivots.dtype(), false), op, ": pivots must be an integer tensor, got ",
        dtype_name(pivots.dtype()));
  const Tensor as_int32 = pivots.to(DType::Int32).contiguous();
  const std::int32_t* p = as_int32.data_ptr<std::int32_t>();
  for (int64_t i = 0; i < as_int32.numel(); ++i)
    check(p[i] >= 1 && p[i] <= rows, op, ": pivot ", p[i], " is out of range for a matrix with ", rows,
          " rows (pivots are 1-based)");
  return as_int32;
}

Tensor diag_embed_identity_like(const Tensor& like, int64_t rows, int64_t cols) {
  Tensor out = zeros(like.sizes(), like.dtype());
  const int64_t count = rows * cols == 0 ? 0 : out.numel() / (rows * cols);
  kernel::dispatch_floating_or_complex(like.dtype(), "linalg_svd", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t b = 0; b < count; ++b)
      for (int64_t i = 0; i < std::min(rows, cols); ++i) out.data_ptr<T>()[b * rows * cols + i * cols + i] = T(1);
  });
  return out;
}

}  // namespace

// ----------------------------------------------------------------- helpers ---

Tensor mH(const Tensor& self) {
  check(self.defined() && self.dim() >= 2, "mH: expected a tensor of at least 2 dims");
  return conj(transpose(self, -2, -1));
}

Tensor diagonal(const Tensor& self, std::int64_t offset, std::int64_t dim1, std::int64_t dim2) {
  check(self.defined(), "diagonal: tensor is undefined");
  check(self.dim() >= 2, "diagonal: needs a tensor of at least 2 dims, got shape ", shape_text(self.sizes()));
  const int64_t d1 = wrap_dim(dim1, self.dim(), "diagonal"), d2 = wrap_dim(dim2, self.dim(), "diagonal");
  check(d1 != d2, "diagonal: dimensions cannot be identical ", dim1, ", ", dim2);
  const int64_t size1 = self.sizes()[d1], size2 = self.sizes()[d2];
  const int64_t length = offset >= 0 ? std::max<int64_t>(std::min(size1, size2 - offset), 0)
                                     : std::max<int64_t>(std::min(size1 + offset, size2), 0);
  int64_t storage_offset = self.storage_offset();
  if (length > 0) storage_offset += offset >= 0 ? offset * self.strides()[d2] : -offset * self.strides()[d1];
  Shape sizes, strides;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d == d1 || d == d2) continue;
    sizes.push_back(self.sizes()[d]);
    strides.push_back(self.strides()[d]);
  }
  sizes.push_back(length);
  strides.push_back(self.strides()[d1] + self.strides()[d2]);
  return as_strided(self, sizes, strides, storage_offset);
}

Tensor diag_embed(const Tensor& self) {
  check(self.defined() && self.dim() >= 1, "diag_embed: expected a tensor of at least 1 dim");
  const int64_t n = self.size(-1);
  Shape sizes = self.sizes();
  sizes.push_back(n);
  Tensor out = zeros(sizes, self.dtype());
  const Tensor values = self.contiguous();
  const int64_t count = values.numel();
  kernel::dispatch_storage(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = values.data_ptr<T>();
    T* o = out.data_ptr<T>();
    for (int64_t i = 0; i < count; ++i) o[i * n + i % n] = in[i];  // row i % n of matrix i / n
  });
  return out;
}

// ------------------------------------------------------------------ solves ---

Tensor linalg_solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left, bool unitriangular) {
  const char* op = "linalg_solve_triangular";
  check_matrices(A, op, "A");
  check_matrices(B, op, "B");
  check_square(A, op, "A");
  check_same_dtype(A, B, op);
  if (is_single_precision(A.dtype())) {
    const DType wide = double_precision(A.dtype());
    return linalg_solve_triangular(A.to(wide), B.to(wide), upper, left, unitriangular).to(A.dtype());
  }
  if (!left)  // X A = B  <=>  A^T X^T = B^T, and A^T has the other triangle
    return transpose(linalg_solve_triangular(transpose(A, -2, -1), transpose(B, -2, -1), !upper, true, unitriangular),
                     -2, -1);
  const int64_t n = A.size(-1), k = B.size(-1);
  check(B.size(-2) == n, op, ": A ", shape_text(A.sizes()), " and B ", shape_text(B.sizes()),
        " do not fit (B needs as many rows as A)");
  const Shape batch = broadcast_batch(batch_of(A), batch_of(B), op);
  const Tensor a = batched_copy(A, batch);
  Tensor x = batched_copy(B, batch);
  const int64_t count = numel_of(batch);
  kernel::dispatch_floating_or_complex(A.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < count; ++i)
      solve_triangular_in_place(a.data_ptr<T>() + i * n * n, n, x.data_ptr<T>() + i * n * k, k, upper,
                                unitriangular);
  });
  return x;
}

std::pair<Tensor, Tensor> linalg_lu_factor(const Tensor& A, bool pivot) {
  const char* op = "linalg_lu_factor";
  check_matrices(A, op, "A");
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(A);
  Tensor lu = A.clone();
  Shape pivot_sizes = batch;
  pivot_sizes.push_back(k);
  Tensor pivots = zeros(pivot_sizes, DType::Int32);
  const int64_t count = numel_of(batch);
  kernel::dispatch_floating_or_complex(A.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < count; ++i)
      lu_factor_in_place(lu.data_ptr<T>() + i * m * n, m, n, pivots.data_ptr<std::int32_t>() + i * k, pivot);
  });
  return {lu, pivots};
}

Tensor linalg_lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left, bool adjoint) {
  const char* op = "linalg_lu_solve";
  check_matrices(LU, op, "LU");
  check_matrices(B, op, "B");
  check_square(LU, op, "LU");
  check_same_dtype(LU, B, op);
  const int64_t n = LU.size(-1);
  check(pivots.defined(), op, ": pivots is undefined");
  check(pivots.sizes() == [&] {
    Shape s = batch_of(LU);
    s.push_back(n);
    return s;
  }(), op, ": pivots ", shape_text(pivots.sizes()), " do not fit LU ", shape_text(LU.sizes()),
        " (expected LU's batch dims and ", n, ")");
  if (is_single_precision(LU.dtype())) {
    const DType wide = double_precision(LU.dtype());
    return linalg_lu_solve(LU.to(wide), pivots, B.to(wide), left, adjoint).to(LU.dtype());
  }
  if (!left)  // X op(A) = B  <=>  op(A)^H X^H = B^H
    return mH(linalg_lu_solve(LU, pivots, mH(B), true, !adjoint));
  const int64_t k = B.size(-1);
  check(B.size(-2) == n, op, ": LU ", shape_text(LU.sizes()), " and B ", shape_text(B.sizes()),
        " do not fit (B needs as many rows as LU)");
  const Shape batch = broadcast_batch(batch_of(LU), batch_of(B), op);
  const Tensor lu = batched_copy(LU, batch);
  const Tensor piv = batched_copy(checked_pivots(pivots, n, op), batch, 1);
  Tensor x = batched_copy(B, batch);
  const int64_t count = numel_of(batch);
  kernel::dispatch_floating_or_complex(LU.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < count; ++i)
      lu_solve_in_place(lu.data_ptr<T>() + i * n * n, piv.data_ptr<std::int32_t>() + i * n, n,
                        x.data_ptr<T>() + i * n * k, k, adjoint);
  });
  return x;
}

std::tuple<Tensor, Tensor, Tensor> lu_unpack(const Tensor& LU, const Tensor& pivots, bool unpack_data,
                                             bool unpack_pivots) {
  const char* op = "lu_unpack";
  check_matrices(LU, op, "LU_data");
  const int64_t m = LU.size(-2), n = LU.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(LU);
  const int64_t count = numel_of(batch);
  Tensor P = empty({0}, LU.dtype()), L = empty({0}, LU.dtype()), U = empty({0}, LU.dtype());
  if (unpack_data) {
    const Tensor lu = LU.contiguous();
    L = zeros(with_matrix(batch, m, k), LU.dtype());
    U = zeros(with_matrix(batch, k, n), LU.dtype());
    kernel::dispatch_floating_or_complex(LU.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t b = 0; b < count; ++b) {
        const T* in = lu.data_ptr<T>() + b * m * n;
        T* l = L.data_ptr<T>() + b * m * k;
        T* u = U.data_ptr<T>() + b * k * n;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            if (j < i && j < k) l[i * k + j] = in[i * n + j];
            if (j >= i && i < k) u[i * n + j] = in[i * n + j];
          }
        for (int64_t i = 0; i < k; ++i) l[i * k + i] = T(1);
      }
    });
  }
  if (unpack_pivots) {
    check(pivots.defined(), op, ": pivots is undefined");
    check(pivots.sizes() == [&] {
      Shape s = batch;
      s.push_back(k);
      return s;
    }(), op, ": pivots ", shape_text(pivots.sizes()), " do not fit LU_data ", shape_text(LU.sizes()),
          " (expected its batch dims and min(m, n) = ", k, ")");
    const Tensor piv = checked_pivots(pivots, m, op);
    P = zeros(with_matrix(batch, m, m), LU.dtype());
    kernel::dispatch_floating_or_complex(LU.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<int64_t> permutation(static_cast<std::size_t>(m));
      for (int64_t b = 0; b < count; ++b) {
        // P^T A = L U: row j of P^T A is row permutation[j] of A, so P[permutation[j], j] = 1.
        for (int64_t i = 0; i < m; ++i) permutation[i] = i;
        const std::int32_t* p = piv.data_ptr<std::int32_t>() + b * k;
        for (int64_t i = 0; i < k; ++i) std::swap(permutation[i], permutation[p[i] - 1]);
        T* out = P.data_ptr<T>() + b * m * m;
        for (int64_t j = 0; j < m; ++j) out[permutation[j] * m + j] = T(1);
      }
    });
  }
  return {P, L, U};
}

bool linalg_solve_is_vector_rhs(const Tensor& LU, const Tensor& B) {
  // B is a vector when it is 1-d, or when it has the batch dims of A and one dim more
  // (ATen's rule: NumPy's, made unambiguous for batches).
  const Shape expected(LU.sizes().begin(), LU.sizes().end() - 1);
  return B.dim() == 1 || (B.dim() == LU.dim() - 1 && B.sizes() == expected);
}

Tensor linalg_solve(const Tensor& A, const Tensor& B, bool left) {
  const char* op = "linalg_solve";
  check_matrices(A, op, "A");
  check_square(A, op, "A");
  check(B.defined(), op, ": B is undefined");
  const bool vector_case = linalg_solve_is_vector_rhs(A, B);
  check(left || !vector_case, op, ": B must be a matrix (not a vector) when left=False");
  const Tensor rhs = vector_case ? unsqueeze(B, -1) : B;
  const auto [lu, pivots] = linalg_lu_factor(A, true);
  const Tensor x = linalg_lu_solve(lu, pivots, rhs, left, false);
  return vector_case ? squeeze(x, -1) : x;
}

// ------------------------------------------------------------------- svd ---

std::tuple<Tensor, Tensor, Tensor> linalg_svd(const Tensor& A, bool full_matrices) {
  const char* op = "linalg_svd";
  check_matrices(A, op, "A");
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  check(m <= INT32_MAX / 8 && n <= INT32_MAX / 8, op, ": matrix ", shape_text(A.sizes()), " is too large for LAPACK");
  const int64_t u_cols = full_matrices ? m : k, vh_rows = full_matrices ? n : k;
  const Shape batch = batch_of(A);
  const int64_t count = numel_of(batch);
  const DType real_dtype = A.dtype() == DType::ComplexFloat ? DType::Float32
                           : A.dtype() == DType::ComplexDouble ? DType::Float64 : A.dtype();
  // LAPACK reads and writes column-major matrices: the row-major transpose of each.
  const Tensor a_t = clone(transpose(A, -2, -1));  // [.., n, m] row-major = A column-major
  Tensor U_t = zeros(with_matrix(batch, u_cols, m), A.dtype());   // U column-major
  Tensor S = zeros([&] { Shape s = batch; s.push_back(k); return s; }(), real_dtype);
  Tensor Vh_t = zeros(with_matrix(batch, n, vh_rows), A.dtype());  // Vh column-major
  if (m == 0 || n == 0) {  // no singular values; U and Vh are identities where they exist
    return {transpose(diag_embed_identity_like(U_t, m, u_cols), -2, -1), S,
            transpose(diag_embed_identity_like(Vh_t, vh_rows, n), -2, -1)};
  }
  static const bool one_thread = [] {  // the same results for any core count, as the products' BLAS
    openblas_set_num_threads(1);
    return true;
  }();
  (void)one_thread;
  kernel::dispatch_floating_or_complex(A.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = decltype(std::abs(T{}));
    for (int64_t b = 0; b < count; ++b) {
      int info = 0;
      gesdd(full_matrices ? "A" : "S", static_cast<int>(m), static_cast<int>(n), a_t.data_ptr<T>() + b * m * n,
            S.data_ptr<R>() + b * k, U_t.data_ptr<T>() + b * m * u_cols, static_cast<int>(m),
            Vh_t.data_ptr<T>() + b * vh_rows * n, static_cast<int>(vh_rows), &info);
      check(info == 0, op, ": LAPACK's ?gesdd failed (info = ", info, ")",
            info > 0 ? ": the SVD did not converge (a NaN or inf in the input?)" : "");
    }
  });
  return {transpose(U_t, -2, -1).contiguous(), S, transpose(Vh_t, -2, -1).contiguous()};
}

Tensor linalg_pinv(const Tensor& A) {
  check_matrices(A, "linalg_pinv", "A");
  const int64_t m = A.size(-2), n = A.size(-1);
  Shape pinv_sizes = batch_of(A);
  pinv_sizes.push_back(n);
  pinv_sizes.push_back(m);
  if (A.numel() == 0) return zeros(pinv_sizes, A.dtype());
  const auto [U, S, Vh] = linalg_svd(A, false);
  // torch's default tolerance: singular values up to max(m, n) eps sigma_max count as zero.
  const double eps = S.dtype() == DType::Float32 ? std::numeric_limits<float>::epsilon()
                                                 : std::numeric_limits<double>::epsilon();
  const Tensor tolerance = mul(amax(S, {-1}, true), Scalar(eps * static_cast<double>(std::max(m, n))));
  const Tensor kept = gt(S, tolerance);
  const Tensor S_pseudoinverse = where(kept, reciprocal(where(kept, S, Scalar(1.0))), Scalar(0.0));
  return matmul(mul(mH(Vh), unsqueeze(S_pseudoinverse.to(A.dtype()), -2)), mH(U));
}

// ------------------------------------------------------------ matrix_exp ---

namespace {

// exp(A) of one n x n matrix by scaling and squaring with the [13/13] Pade approximant (Higham 2005,
// "The scaling and squaring method for the matrix exponential revisited"): A is divided by 2^s until its
// 1-norm is at most theta_13, the approximant r(A) = (V - U)^{-1} (V + U) is formed, and squared s times.
Tensor matrix_exp_one(const Tensor& A) {
  static const double b[] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                             1187353796428800.0,  129060195264000.0,   10559470521600.0,
                             670442572800.0,      33522128640.0,       1323241920.0,
                             40840800.0,          960960.0,            16380.0,
                             182.0,               1.0};
  const double theta_13 = 5.371920351148152;
  const int64_t n = A.size(-1);
  const double norm_1 = max(sum(abs(A), {0})).to(DType::Float64).item<double>();  // the largest column sum
  int squarings = 0;
  if (std::isfinite(norm_1) && norm_1 > theta_13)
    squarings = static_cast<int>(std::ceil(std::log2(norm_1 / theta_13)));
  const Tensor X = mul(A, Scalar(std::ldexp(1.0, -squarings)));
  const Tensor I = diag_embed(ones({n}, A.dtype()));
  const Tensor X2 = matmul(X, X), X4 = matmul(X2, X2), X6 = matmul(X4, X2);
  const auto combination = [&](double c6, double c4, double c2, double c0) {
    Tensor out = add(add(mul(X6, Scalar(c6)), mul(X4, Scalar(c4))), mul(X2, Scalar(c2)));
    return c0 == 0 ? out : add(out, mul(I, Scalar(c0)));
  };
  const Tensor U = matmul(X, add(matmul(X6, combination(b[13], b[11], b[9], 0)), combination(b[7], b[5], b[3], b[1])));
  const Tensor V = add(matmul(X6, combination(b[12], b[10], b[8], 0)), combination(b[6], b[4], b[2], b[0]));
  Tensor R = linalg_solve(sub(V, U), add(V, U));
  for (int i = 0; i < squarings; ++i) R = matmul(R, R);
  return R;
}

}  // namespace

Tensor linalg_matrix_exp(const Tensor& A) {
  const char* op = "linalg_matrix_exp";
  check(A.defined() && A.dim() >= 2 && A.size(-1) == A.size(-2), op,
        ": expected a square matrix or a batch of them, got shape ", A.defined() ? str(A.sizes()) : "(undefined)");
  if (kernel::is_storage_format(A))  // float16/bfloat16: computed in float32, rounded once
    return kernel::rounded_to(linalg_matrix_exp(kernel::to_opmath(A)), A.dtype());
  check_matrices(A, op, "A");
  const int64_t n = A.size(-1);
  if (A.numel() == 0) return A.clone();
  const Tensor matrices = reshape(A, {-1, n, n});
  TensorList results;
  for (int64_t i = 0; i < matrices.size(0); ++i) results.push_back(matrix_exp_one(select(matrices, 0, i)));
  return reshape(stack(results, 0), A.sizes());
}

// --------------------------------------------------------------- cross ---

Tensor linalg_cross(const Tensor& self, const Tensor& other, std::int64_t dim) {
  const char* op = "linalg_cross";
  check(self.defined() && other.defined(), op, ": an operand is undefined");
  check(self.dim() == other.dim(), op, ": inputs must have the same number of dimensions, got ", self.dim(),
        " and ", other.dim());
  check(self.dim() >= 1, op, ": inputs must have at least one dimension (of length 3), got 0-d tensors");
  const Shape sizes = broadcast_shapes(self.sizes(), other.sizes());
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(sizes.size()), op);
  check(self.sizes()[d] == 3 && other.sizes()[d] == 3, op, ": inputs dimension ", dim, " must have length 3, got ",
        self.sizes()[d], " and ", other.sizes()[d]);
  // Each product and the difference round to the dtype, as ATen's kernel does with c10::Half and
  // c10::BFloat16 arithmetic (which rounds every operation's result).
  const DType dtype = promote_types(self.dtype(), other.dtype());
  const Tensor a = broadcast_to(self.to(dtype), sizes), b = broadcast_to(other.to(dtype), sizes);
  const auto component = [&](int64_t i, int64_t j) {  // a_i b_j - a_j b_i
    return sub(mul(select(a, d, i), select(b, d, j)), mul(select(a, d, j), select(b, d, i)));
  };
  return stack({component(1, 2), component(2, 0), component(0, 1)}, d);
}

}  // namespace refgrad
