// Matrix products: matmul, mm, bmm, addmm, outer, dot.
//
// float32/float64 go through OpenBLAS (cblas_?gemm, cblas_?dot) running on ONE
// thread, so that a result never depends on how many cores the machine has.
// int64 uses plain loops with wrap-around arithmetic (ATen's int64 mm wraps
// too). bool is rejected, as ATen's CPU kernels reject it; only outer, which
// ATen computes as a broadcast multiply, accepts bool.
//
// Every product is reduced to one kernel, `gemm`, on strided matrix views:
// transposed views are handed to BLAS as "transposed" with their leading
// dimension, not copied; only views BLAS cannot describe (broadcast rows with
// stride 0, other odd strides) are first copied to a contiguous buffer.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "kernel.hpp"

namespace refgrad {
namespace {

using std::int64_t;

// --------------------------------------------------------------- BLAS glue ---

// OpenBLAS starts one thread per core by default. With several threads the
// order of the partial sums (and so the rounding) can depend on the thread
// count; one thread makes every result reproducible.
void use_one_blas_thread() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

void blas_gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, float alpha,
               const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, double alpha,
               const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
float blas_dot(int n, const float* x, int incx, const float* y, int incy) {
  return cblas_sdot(n, x, incx, y, incy);
}
double blas_dot(int n, const double* x, int incx, const double* y, int incy) {
  return cblas_ddot(n, x, incx, y, incy);
}

// BLAS takes sizes and strides as int.
int blas_int(int64_t value, const char* op) {
  check(value <= INT_MAX, op, ": size or stride ", value, " is too large for BLAS");
  return static_cast<int>(value);
}

// int64 products wrap around on overflow, as in ATen.
using kernel::wrapping_add;
using kernel::wrapping_mul;

template <class T>
T multiply(T x, T y) {
  if constexpr (std::is_same_v<T, std::int64_t>) return wrapping_mul(x, y);
  else return static_cast<T>(x * y);
}

// addmm's beta and alpha in the result dtype, as c10's checked_convert: a
// float truncates to int64 when it is in range (NaN and inf are not; 2^63
// passes c10's check and becomes INT64_MIN, as on x86), and must not
// overflow float32 (inf and NaN may).
template <class T>
T checked_scalar(const Scalar& value, const char* name) {
  if (value.is_complex())
    return checked_scalar<T>(kernel::real_part_of_scalar(value, dtype_of<T>(), "addmm", name), name);
  if (!value.is_floating_point()) return value.to<T>();  // bool and int Scalars always fit
  const double v = value.to_double();
  if constexpr (std::is_same_v<T, std::int64_t>) {
    check(v >= -0x1p63 && v <= 0x1p63, "addmm: ", name, "=", value.repr(),
          " cannot be converted to type int64 without overflow");
    return v == 0x1p63 ? std::numeric_limits<std::int64_t>::min() : static_cast<std::int64_t>(v);
  } else {
    check(!std::isfinite(v) || std::abs(v) <= std::numeric_limits<T>::max(), "addmm: ", name, "=", value.repr(),
          " cannot be converted to type ", dtype_name(dtype_of<T>()), " without overflow");
    return static_cast<T>(v);
  }
}

// ------------------------------------------------------------ matrix views ---

// A rows x cols matrix whose element (i, j) is data[i * row_stride + j * col_stride].
template <class T>
struct Matrix {
  const T* data;
  int64_t rows, cols, row_stride, col_stride;
};

// How BLAS (row-major interface) can read a strided matrix without a copy.
struct BlasLayout {
  CBLAS_TRANSPOSE trans;
  int64_t ld;  // the leading dimension: distance between stored rows
};

// Row-major storage (unit column stride, rows at least `cols` apart) is read
// as is. Column-major storage, e.g. a transposed view, is row-major storage of
// the transpose: BLAS reads it with CblasTrans. The stride of a size-1 dim
// never matters. Anything else (stride 0 from broadcasting, overlapping or
// doubly strided views) has no BLAS description.
template <class T>
std::optional<BlasLayout> blas_layout(const Matrix<T>& a) {
  const bool unit_cols = a.col_stride == 1 || a.cols == 1;
  const bool unit_rows = a.row_stride == 1 || a.rows == 1;
  if (unit_cols && (a.rows == 1 || a.row_stride >= a.cols))
    return BlasLayout{CblasNoTrans, a.rows == 1 ? std::max<int64_t>(a.cols, 1) : a.row_stride};
  if (unit_rows && (a.cols == 1 || a.col_stride >= a.rows))
    return BlasLayout{CblasTrans, a.cols == 1 ? std::max<int64_t>(a.rows, 1) : a.col_stride};
  return std::nullopt;
}

// A contiguous (row-major) copy of a matrix, kept alive by `buffer`.
template <class T>
Matrix<T> packed_copy(const Matrix<T>& a, std::vector<T>& buffer) {
  buffer.resize(static_cast<std::size_t>(a.rows * a.cols));
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) buffer[i * a.cols + j] = a.data[i * a.row_stride + j * a.col_stride];
  return Matrix<T>{buffer.data(), a.rows, a.cols, a.cols, 1};
}

// How gemm cuts C into blocks of rows or columns: a product of fewer than
// 2^21 multiply-adds (tens of microseconds) stays one block; a larger one is cut
// along its longer side into up to 16 blocks of at least 64 rows or columns.
struct GemmBlocks {
  bool by_rows;
  int64_t size, count;
};

// Multiply-adds worth a chunk of their own (tens of microseconds).
constexpr int64_t kWorkPerBlock = int64_t{1} << 21;

GemmBlocks gemm_blocks(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMinSide = 64, kMaxBlocks = 16;
  const bool by_rows = m >= n;
  const int64_t side = by_rows ? m : n;
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t wanted = static_cast<int64_t>(std::min<double>(kMaxBlocks, work / kWorkPerBlock));
  const int64_t count = std::max<int64_t>(1, std::min(wanted, side / kMinSide));
  const int64_t size = (side + count - 1) / count;
  return GemmBlocks{by_rows, size, (side + size - 1) / size};
}

// C = alpha * (a @ b) + beta * C, with C a contiguous a.rows x b.cols block
// with row stride ldc. As in BLAS: beta == 0 overwrites C (a NaN already in C
// does not survive) and alpha == 0 skips the product (an inf in a or b does
// not turn into NaN).
template <class T>
void gemm(const Matrix<T>& a, const Matrix<T>& b, T alpha, T beta, T* c, int64_t ldc, const char* op) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) {  // the product is all zeros, or not wanted
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T& out = c[i * ldc + j];
        out = beta == T(0) ? T(0) : multiply(beta, out);
      }
    return;
  }

  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    use_one_blas_thread();
    std::vector<T> a_buffer, b_buffer;
    std::optional<BlasLayout> la = blas_layout(a), lb = blas_layout(b);
    const Matrix<T> a_read = la ? a : packed_copy(a, a_buffer);
    const Matrix<T> b_read = lb ? b : packed_copy(b, b_buffer);
    if (!la) la = blas_layout(a_read);
    if (!lb) lb = blas_layout(b_read);
    // Blocks of C's rows (or columns, when it has more of them), one BLAS call each, on the kernels' threads:
    // the blocks depend on the sizes only, so the results do not depend on the thread count.
    const GemmBlocks blocks = gemm_blocks(m, n, k);
    kernel::parallel_for_chunks(blocks.count, [&](int64_t block) {
      const int64_t first = block * blocks.size, last = std::min((block + 1) * blocks.size, blocks.by_rows ? m : n);
      const T* a_block = blocks.by_rows ? a_read.data + first * a_read.row_stride : a_read.data;
      const T* b_block = blocks.by_rows ? b_read.data : b_read.data + first * b_read.col_stride;
      T* c_block = blocks.by_rows ? c + first * ldc : c + first;
      const int64_t rows = blocks.by_rows ? last - first : m, cols = blocks.by_rows ? n : last - first;
      blas_gemm(la->trans, lb->trans, blas_int(rows, op), blas_int(cols, op), blas_int(k, op), alpha, a_block,
                blas_int(la->ld, op), b_block, blas_int(lb->ld, op), beta, c_block, blas_int(ldc, op));
    });
  } else {
    static_assert(std::is_same_v<T, std::int64_t>, "gemm: bool has no matrix product");
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum = wrapping_add(sum, wrapping_mul(a.data[i * a.row_stride + p * a.col_stride],
                                                    b.data[p * b.row_stride + j * b.col_stride]));
        T& out = c[i * ldc + j];
        out = wrapping_add(beta == 0 ? 0 : multiply(beta, out), multiply(alpha, sum));
      }
  }
}

// The last two dims of a tensor, starting at element offset `offset`.
template <class T>
Matrix<T> matrix_at(const Tensor& t, int64_t offset) {
  const int64_t d = t.dim();
  return Matrix<T>{t.data_ptr<T>() + offset, t.sizes()[d - 2], t.sizes()[d - 1], t.strides()[d - 2],
                   t.strides()[d - 1]};
}

// Element offsets of every batch entry (all dims but the last two), row-major.
std::vector<int64_t> batch_offsets(const Tensor& t) {
  const std::size_t batch_dims = t.sizes().size() - 2;
  const Shape sizes(t.sizes().begin(), t.sizes().begin() + batch_dims);
  const Shape strides(t.strides().begin(), t.strides().begin() + batch_dims);
  std::vector<int64_t> offsets;
  kernel::for_each_offset(sizes, strides, [&](int64_t offset) { offsets.push_back(offset); });
  return offsets;
}

// The stride of dims [0, count) of a view read as one flat dim, when they
// collapse into one (each dim's stride is the next one's stride times its
// size; size-1 dims do not count).
std::optional<int64_t> collapsed_stride(const Shape& sizes, const Shape& strides, std::size_t count) {
  std::optional<int64_t> inner_stride;
  int64_t expected = 0;
  for (std::size_t i = count; i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (inner_stride && strides[i] != expected) return std::nullopt;
    if (!inner_stride) inner_stride = strides[i];
    expected = strides[i] * sizes[i];
  }
  return inner_stride.value_or(1);
}

// out[i...] = a[i...] @ b[i...] for every batch index. a is [batch..., n, k],
// b is [batch..., k, m] (same batch sizes; broadcast dims have stride 0),
// out is a new contiguous [batch..., n, m].
template <class T>
void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& out, const char* op) {
  if (out.numel() == 0) return;
  const int64_t d = a.dim();
  const int64_t n = a.sizes()[d - 2], k = a.sizes()[d - 1], m = b.sizes()[d - 1];
  T* out_data = out.data_ptr<T>();

  // When b is one matrix shared by every batch entry (all its batch strides 0,
  // e.g. a [B, T, C] activation times a [C, D] weight) and a's batch and row
  // dims collapse into one, the whole product is a single [B*n, k] @ [k, m]
  // gemm, as ATen folds it.
  const bool b_shared = std::all_of(b.strides().begin(), b.strides().end() - 2, [](int64_t s) { return s == 0; });
  const std::optional<int64_t> a_row_stride =
      collapsed_stride(a.sizes(), a.strides(), static_cast<std::size_t>(d - 1));
  if (b_shared && a_row_stride) {
    const Matrix<T> rows{a.data_ptr<T>(), out.numel() / m, k, *a_row_stride, a.strides()[d - 1]};
    gemm<T>(rows, matrix_at<T>(b, 0), T(1), T(0), out_data, m, op);
    return;
  }
  const std::vector<int64_t> a_offsets = batch_offsets(a), b_offsets = batch_offsets(b);
  // Batch entries in chunks of about kWorkPerBlock multiply-adds (a gemm inside a chunk runs its blocks on the
  // chunk's thread): small products are not worth handing to another thread one by one.
  const int64_t entries = static_cast<int64_t>(a_offsets.size());
  const int64_t entry_work = std::max<int64_t>(1, n * m * std::max<int64_t>(k, 1));
  const int64_t entries_per_chunk = std::max<int64_t>(1, kWorkPerBlock / entry_work);
  kernel::parallel_ranges(entries, entries_per_chunk, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      gemm<T>(matrix_at<T>(a, a_offsets[i]), matrix_at<T>(b, b_offsets[i]), T(1), T(0), out_data + i * n * m, m, op);
  });
}

// ------------------------------------------------------------------ checks ---

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  check(a.dtype() == b.dtype(), op, ": expected m1 and m2 to have the same dtype, but got: ", dtype_name(a.dtype()),
        " != ", dtype_name(b.dtype()));
}

// ATen's CPU matrix kernels (addmm, addmv, bmm, dot) exist for numbers only.
void check_not_bool(DType dtype, const char* op) {
  check(dtype != DType::Bool, op, ": not implemented for bool tensors");
}

void check_defined(const Tensor& t, const char* op) { check(t.defined(), op, ": tensor is undefined"); }

[[noreturn]] void fail_shapes(const Tensor& a, const Tensor& b, const char* op) {
  fail(concat(op, ": shapes ", str(a.sizes()), " and ", str(b.sizes()), " cannot be multiplied"));
}

// A product of complex matrices (or vectors) from four real ones:
// (Ar + i Ai)(Br + i Bi) = (Ar Br - Ai Bi) + i (Ar Bi + Ai Br), `real_product`
// being the real op (mm, bmm, dot) on contiguous parts. ATen calls BLAS's
// complex gemm instead; the two differ by rounding only.
template <class RealProduct>
Tensor complex_product(const Tensor& a, const Tensor& b, RealProduct real_product) {
  const Tensor ar = real(a).contiguous(), ai = imag(a).contiguous();
  const Tensor br = real(b).contiguous(), bi = imag(b).contiguous();
  return complex(sub(real_product(ar, br), real_product(ai, bi)), add(real_product(ar, bi), real_product(ai, br)));
}

// a @ b for two matrices, or for two stacks of matrices with equal batch
// sizes, into a new contiguous tensor of shape batch + [n, m].
Tensor product(const Tensor& a, const Tensor& b, const char* op) {
  Shape out_sizes(a.sizes().begin(), a.sizes().end() - 1);
  out_sizes.push_back(b.sizes().back());
  if (kernel::is_storage_format(a))  // float16 @ float16 accumulates in float32, rounded once (opmath)
    return kernel::rounded_to(product(kernel::to_opmath(a), kernel::to_opmath(b), op), a.dtype());
  if (is_complex(a.dtype()))
    return complex_product(a, b, [op](const Tensor& x, const Tensor& y) { return product(x, y, op); });
  Tensor out = empty(out_sizes, a.dtype());
  kernel::dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) fail(concat(op, ": not implemented for bool tensors"));
    else batched_gemm<T>(a, b, out, op);
  });
  return with_rounding_noise(out);
}

// The same storage seen with other sizes and strides.
Tensor restrided(const Tensor& t, const Shape& sizes, const Shape& strides) {
  return Tensor(t.storage(), sizes, strides, t.storage_offset(), t.dtype());
}

}  // namespace

// ------------------------------------------------------------------ the ops ---

Tensor dot(const Tensor& self, const Tensor& other) {
  check_defined(self, "dot");
  check_defined(other, "dot");
  check(self.dim() == 1 && other.dim() == 1, "dot: 1D tensors expected, but got ", self.dim(), "D and ",
        other.dim(), "D tensors");
  if (self.numel() != other.numel()) fail_shapes(self, other, "dot");
  check(self.dtype() == other.dtype(), "dot: expected both vectors to have same dtype, but found ",
        dtype_name(self.dtype()), " and ", dtype_name(other.dtype()));
  check_not_bool(self.dtype(), "dot");
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(dot(kernel::to_opmath(self), kernel::to_opmath(other)), self.dtype());
  if (is_complex(self.dtype()))  // no conjugate: that is vdot
    return complex_product(self, other, [](const Tensor& x, const Tensor& y) { return dot(x, y); });

  Tensor out = empty({}, self.dtype());
  const int64_t n = self.numel();
  kernel::dispatch(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      use_one_blas_thread();
      // BLAS wants positive int increments; a broadcast vector (stride 0) is
      // copied. The stride of a one-element vector never matters.
      const auto increment = [](const Tensor& v) { return v.numel() == 1 ? std::int64_t{1} : v.stride(0); };
      const auto blas_ready = [&](const Tensor& v) {
        return increment(v) > 0 && increment(v) <= INT_MAX ? v : v.contiguous();
      };
      const Tensor x = blas_ready(self), y = blas_ready(other);
      *out.data_ptr<T>() = n == 0 ? T(0)
                                  : blas_dot(blas_int(n, "dot"), x.data_ptr<T>(), blas_int(increment(x), "dot"),
                                             y.data_ptr<T>(), blas_int(increment(y), "dot"));
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      const T* x = self.data_ptr<T>();
      const T* y = other.data_ptr<T>();
      T sum = 0;
      for (int64_t i = 0; i < n; ++i) sum = wrapping_add(sum, wrapping_mul(x[i * self.stride(0)], y[i * other.stride(0)]));
      *out.data_ptr<T>() = sum;
    }
  });
  return with_rounding_noise(out);
}

Tensor mm(const Tensor& self, const Tensor& mat2) {
  check_defined(self, "mm");
  check_defined(mat2, "mm");
  check(self.dim() == 2, "mm: self must be a matrix, got ", self.dim(), "-D tensor");
  check(mat2.dim() == 2, "mm: mat2 must be a matrix, got ", mat2.dim(), "-D tensor");
  if (self.size(1) != mat2.size(0)) fail_shapes(self, mat2, "mm");
  check_same_dtype(self, mat2, "mm");
  check_not_bool(self.dtype(), "mm");
  return product(self, mat2, "mm");
}

Tensor bmm(const Tensor& self, const Tensor& mat2) {
  check_defined(self, "bmm");
  check_defined(mat2, "bmm");
  check(self.dim() == 3, "bmm: batch1 must be a 3D tensor, got ", self.dim(), "-D tensor");
  check(mat2.dim() == 3, "bmm: batch2 must be a 3D tensor, got ", mat2.dim(), "-D tensor");
  if (self.size(0) != mat2.size(0) || self.size(2) != mat2.size(1)) fail_shapes(self, mat2, "bmm");
  check_same_dtype(self, mat2, "bmm");
  check_not_bool(self.dtype(), "bmm");
  return product(self, mat2, "bmm");
}

Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, Scalar beta, Scalar alpha) {
  check_defined(self, "addmm");
  check_defined(mat1, "addmm");
  check_defined(mat2, "addmm");
  check(mat1.dim() == 2, "addmm: mat1 must be a matrix, got ", mat1.dim(), "-D tensor");
  check(mat2.dim() == 2, "addmm: mat2 must be a matrix, got ", mat2.dim(), "-D tensor");
  if (mat1.size(1) != mat2.size(0)) fail_shapes(mat1, mat2, "addmm");
  const Shape out_sizes{mat1.size(0), mat2.size(1)};
  // self broadcasts to the result, like expand: at most 2 dims, each equal or 1.
  bool broadcastable = self.dim() <= 2;
  for (int64_t i = 0; broadcastable && i < self.dim(); ++i) {
    const int64_t own = self.sizes()[static_cast<std::size_t>(self.dim() - 1 - i)];
    broadcastable = own == 1 || own == out_sizes[static_cast<std::size_t>(1 - i)];
  }
  check(broadcastable, "addmm: self of shape ", shape_text(self.sizes()), " cannot be broadcast to the result shape ",
        shape_text(out_sizes));
  check(mat1.dtype() == mat2.dtype(), "addmm: mat1 and mat2 must have the same dtype, but got ",
        dtype_name(mat1.dtype()), " and ", dtype_name(mat2.dtype()));
  check(self.dtype() == mat2.dtype(), "addmm: self and mat2 must have the same dtype, but got ",
        dtype_name(self.dtype()), " and ", dtype_name(mat2.dtype()));
  check_not_bool(self.dtype(), "addmm");
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(
        addmm(kernel::to_opmath(self), kernel::to_opmath(mat1), kernel::to_opmath(mat2), beta, alpha), self.dtype());
  if (is_complex(self.dtype())) {
    // beta * self + alpha * (mat1 @ mat2), self ignored when beta is 0 (its NaNs too).
    const Tensor scaled_product = mul(mm(mat1, mat2), alpha);
    if (beta.to_complex() == 0.0) return scaled_product;
    return add(mul(broadcast_to(self, out_sizes), beta), scaled_product);
  }

  Tensor out = empty(out_sizes, self.dtype());
  kernel::dispatch(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      T* c = out.data_ptr<T>();
      // beta == 0 means "ignore self": its NaNs must not reach the result.
      const bool use_self = beta.to_complex() != 0.0;
      if (use_self) {
        const Tensor expanded = broadcast_to(self, out_sizes);
        const T* src = expanded.data_ptr<T>();
        T* dst = c;
        kernel::for_each_offset(expanded.sizes(), expanded.strides(), [&](int64_t offset) { *dst++ = src[offset]; });
      }
      const T alpha_value = checked_scalar<T>(alpha, "alpha");
      const T beta_value = use_self ? checked_scalar<T>(beta, "beta") : T(0);
      gemm<T>(matrix_at<T>(mat1, 0), matrix_at<T>(mat2, 0), alpha_value, beta_value, c, out_sizes[1], "addmm");
    }
  });
  return out;
}

Tensor outer(const Tensor& self, const Tensor& vec2) {
  check_defined(self, "outer");
  check_defined(vec2, "outer");
  check(self.dim() == 1, "outer: Expected 1-D argument self, but got ", self.dim(), "-D");
  check(vec2.dim() == 1, "outer: Expected 1-D argument vec2, but got ", vec2.dim(), "-D");
  // ATen's outer is self[:, None] * vec2: a broadcast multiply, so dtypes promote.
  const DType dtype = promote_types(self.dtype(), vec2.dtype());
  if (is_complex(dtype)) return mul(unsqueeze(self, 1), vec2);
  const Tensor x = kernel::contiguous_as(self, opmath_dtype(dtype)), y = kernel::contiguous_as(vec2, opmath_dtype(dtype));
  const int64_t n = x.numel(), m = y.numel();
  Tensor out = empty({n, m}, opmath_dtype(dtype));
  kernel::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = x.data_ptr<T>();
    const T* b = y.data_ptr<T>();
    T* c = out.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        if constexpr (std::is_same_v<T, bool>) c[i * m + j] = a[i] && b[j];
        else c[i * m + j] = multiply(a[i], b[j]);
      }
  });
  return kernel::rounded_to(out, dtype);
}

// torch.matmul: a vector on the left is a row [1, k], on the right a column
// [k, 1], and that dim is dropped from the result; 1-D @ 1-D is dot. All dims
// before the last two are batch dims and broadcast against each other.
Tensor matmul(const Tensor& self, const Tensor& other) {
  check_defined(self, "matmul");
  check_defined(other, "matmul");
  const int64_t da = self.dim(), db = other.dim();
  check(da >= 1 && db >= 1, "matmul: both arguments need to be at least 1D, but they are ", da, "D and ",
        db, "D");
  const int64_t k = self.size(-1);
  if (other.size(db == 1 ? 0 : -2) != k) fail_shapes(self, other, "matmul");
  // The batch dims must broadcast.
  const std::size_t batch_a = static_cast<std::size_t>(std::max<int64_t>(da - 2, 0));
  const std::size_t batch_b = static_cast<std::size_t>(std::max<int64_t>(db - 2, 0));
  const std::size_t batch = std::max(batch_a, batch_b);
  Shape batch_sizes(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    const int64_t size_a = i < batch - batch_a ? 1 : self.sizes()[i - (batch - batch_a)];
    const int64_t size_b = i < batch - batch_b ? 1 : other.sizes()[i - (batch - batch_b)];
    if (size_a != size_b && size_a != 1 && size_b != 1) fail_shapes(self, other, "matmul");
    batch_sizes[i] = size_a == 1 ? size_b : size_a;
  }
  check_same_dtype(self, other, "matmul");
  check_not_bool(self.dtype(), "matmul");
  if (da == 1 && db == 1) return dot(self, other);

  // Both operands as [batch..., rows, cols] views of their own storage.
  auto as_batched_matrices = [&](const Tensor& t, bool is_left) {
    Shape sizes = t.sizes(), strides = t.strides();
    if (t.dim() == 1) {  // [k] -> [1, k] on the left, [k, 1] on the right
      const std::size_t at = is_left ? 0 : 1;
      sizes.insert(sizes.begin() + at, 1);
      strides.insert(strides.begin() + at, is_left ? k * t.stride(0) : 1);
    }
    return expand(restrided(t, sizes, strides), [&] {
      Shape full = batch_sizes;
      full.insert(full.end(), sizes.end() - 2, sizes.end());
      return full;
    }());
  };
  const Tensor a = as_batched_matrices(self, true), b = as_batched_matrices(other, false);
  const Tensor out = product(a, b, "matmul");

  Shape result_sizes = batch_sizes;
  if (da > 1) result_sizes.push_back(a.sizes()[a.sizes().size() - 2]);
  if (db > 1) result_sizes.push_back(b.sizes().back());
  return restrided(out, result_sizes, contiguous_strides(result_sizes));
}

namespace kernel {

template <class T>
void gemm_contiguous(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                     const T* a, const T* b, T* c, bool accumulate) {
  // A stored transposed is a column-major view: unit row stride.
  const Matrix<T> a_view{a, m, k, transpose_a ? 1 : k, transpose_a ? m : 1};
  const Matrix<T> b_view{b, k, n, transpose_b ? 1 : n, transpose_b ? k : 1};
  gemm<T>(a_view, b_view, T(1), accumulate ? T(1) : T(0), c, n, "gemm");
}

template void gemm_contiguous<float>(bool, bool, std::int64_t, std::int64_t, std::int64_t, const float*,
                                     const float*, float*, bool);
template void gemm_contiguous<double>(bool, bool, std::int64_t, std::int64_t, std::int64_t, const double*,
                                      const double*, double*, bool);
template void gemm_contiguous<std::int64_t>(bool, bool, std::int64_t, std::int64_t, std::int64_t,
                                            const std::int64_t*, const std::int64_t*, std::int64_t*, bool);

}  // namespace kernel
}  // namespace refgrad
