// The primitive vocabulary of refgrad: ATen's names and semantics.
//
// Every op broadcasts, wraps negative dims and promotes dtypes the way ATen
// does; every op returns a concrete Tensor (a new buffer, or a view where ATen
// returns a view: reshape when possible, expand, squeeze, unsqueeze, permute,
// transpose, t, narrow, slice, select, as_strided, split, chunk).
// Bad input raises refgrad::Error naming the op, the shapes and the dtypes.
//
// This header is included by the C++17 kernels in src/tensor, so it stays C++17.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "refgrad/tensor.hpp"

namespace refgrad {

using OptionalTensor = std::optional<Tensor>;
using TensorList = std::vector<Tensor>;

// ------------------------------------------------------------------- cast ---

Tensor to(const Tensor& self, DType dtype);  // _to_copy; a copy unless dtype matches

// ------------------------------------------------------------------ unary ---
// Float-valued ops (exp, log, ...) on int64/bool inputs compute in float32, as
// ATen does; neg, abs, sign, relu and square keep the input dtype.

Tensor neg(const Tensor& self);
Tensor abs(const Tensor& self);
Tensor sign(const Tensor& self);
Tensor exp(const Tensor& self);
Tensor log(const Tensor& self);
Tensor log1p(const Tensor& self);
Tensor expm1(const Tensor& self);
Tensor sqrt(const Tensor& self);
Tensor rsqrt(const Tensor& self);
Tensor sin(const Tensor& self);
Tensor cos(const Tensor& self);
Tensor tan(const Tensor& self);
Tensor asin(const Tensor& self);
Tensor acos(const Tensor& self);
Tensor atan(const Tensor& self);
Tensor sinh(const Tensor& self);
Tensor cosh(const Tensor& self);
Tensor asinh(const Tensor& self);
Tensor acosh(const Tensor& self);
Tensor atanh(const Tensor& self);
Tensor tanh(const Tensor& self);
Tensor sigmoid(const Tensor& self);
Tensor relu(const Tensor& self);
Tensor erf(const Tensor& self);
Tensor erfc(const Tensor& self);
Tensor reciprocal(const Tensor& self);
Tensor square(const Tensor& self);

// ---------------------------------------------------------------- complex ---
// complex64 and complex128 values (ATen's names). real, imag, view_as_real and
// view_as_complex are views of the same bytes, as in ATen; conj is a new tensor
// (ATen's is a lazy view, and a backward program never writes through it). On a
// real tensor, real and conj return it unchanged and imag raises, as in torch.

Tensor real(const Tensor& self);
Tensor imag(const Tensor& self);
Tensor conj(const Tensor& self);
Tensor view_as_real(const Tensor& self);     // [..., 2]: real and imaginary parts
Tensor view_as_complex(const Tensor& self);  // float32/float64 [..., 2] -> complex64/complex128 [...]
Tensor complex(const Tensor& real, const Tensor& imag);  // both float32 or both float64
// angle(z) = atan2(imag, real); for a real x: pi where x < 0, else 0 (NaN kept).
Tensor angle(const Tensor& self);
// sgn(z) = z / |z|, 0 at 0; sign() for a real tensor.
Tensor sgn(const Tensor& self);

// -------------------------------------------------------------------- fft ---
// ATen's three discrete Fourier transforms, which every torch.fft function and
// stft/istft call. Each transforms along the dims of `dim` (negative dims
// wrap; none may repeat) with exp(-2*pi*i*j*k/n) when forward, exp(+...)
// otherwise. normalization is ATen's fft_norm_mode: 0 none, 1 times 1/sqrt(n),
// 2 times 1/n, n the number of points of one signal (the product of the sizes
// along `dim`: the input's for c2c and r2c, the output's for c2r). Direct
// DFTs in double precision, rounded once to the output dtype.
//
// complex -> complex, same shape and dtype. An empty `dim` copies.
Tensor _fft_c2c(const Tensor& self, const IntList& dim, std::int64_t normalization, bool forward);
// float32/float64 -> complex64/complex128, always forward. onesided keeps
// X[0 .. n/2] of the last dim listed (n/2 + 1 points: the rest is the complex
// conjugate of those, the spectrum of a real signal being Hermitian).
Tensor _fft_r2c(const Tensor& self, const IntList& dim, std::int64_t normalization, bool onesided);
// complex64/complex128 -> float32/float64, always backward (the inverse of
// r2c up to normalization): the other dims are c2c transforms first, then the
// last dim listed goes from a one-sided spectrum of last_dim_size/2 + 1 points
// (or a full one of last_dim_size, whose upper half is ignored) to a real
// signal of last_dim_size points. The imaginary parts of X[0] (and of X[n/2],
// n even) are ignored, as a real signal's spectrum has none.
Tensor _fft_c2r(const Tensor& self, const IntList& dim, std::int64_t normalization, std::int64_t last_dim_size);

// ----------------------------------------------------------------- binary ---

Tensor broadcast_to(const Tensor& self, const Shape& sizes);  // a view (expand)
Shape broadcast_shapes(const Shape& a, const Shape& b);

Tensor add(const Tensor& self, const Tensor& other, Scalar alpha = 1);
Tensor add(const Tensor& self, Scalar other, Scalar alpha = 1);
Tensor sub(const Tensor& self, const Tensor& other, Scalar alpha = 1);
Tensor sub(const Tensor& self, Scalar other, Scalar alpha = 1);
Tensor mul(const Tensor& self, const Tensor& other);
Tensor mul(const Tensor& self, Scalar other);
// rounding_mode: nullopt (true division), "trunc" or "floor".
Tensor div(const Tensor& self, const Tensor& other,
           const std::optional<std::string>& rounding_mode = std::nullopt);
Tensor div(const Tensor& self, Scalar other, const std::optional<std::string>& rounding_mode = std::nullopt);
Tensor pow(const Tensor& self, const Tensor& exponent);
Tensor pow(const Tensor& self, Scalar exponent);
Tensor pow(Scalar self, const Tensor& exponent);
Tensor maximum(const Tensor& self, const Tensor& other);
Tensor minimum(const Tensor& self, const Tensor& other);
Tensor atan2(const Tensor& self, const Tensor& other);

// Comparisons return bool tensors.
Tensor eq(const Tensor& self, const Tensor& other);
Tensor eq(const Tensor& self, Scalar other);
Tensor ne(const Tensor& self, const Tensor& other);
Tensor ne(const Tensor& self, Scalar other);
Tensor lt(const Tensor& self, const Tensor& other);
Tensor lt(const Tensor& self, Scalar other);
Tensor le(const Tensor& self, const Tensor& other);
Tensor le(const Tensor& self, Scalar other);
Tensor gt(const Tensor& self, const Tensor& other);
Tensor gt(const Tensor& self, Scalar other);
Tensor ge(const Tensor& self, const Tensor& other);
Tensor ge(const Tensor& self, Scalar other);
Tensor logical_and(const Tensor& self, const Tensor& other);
Tensor logical_or(const Tensor& self, const Tensor& other);
Tensor logical_not(const Tensor& self);

Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other);
Tensor where(const Tensor& condition, const Tensor& self, Scalar other);
Tensor where(const Tensor& condition, Scalar self, const Tensor& other);
Tensor clamp(const Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor clamp(const Tensor& self, const OptionalTensor& min, const OptionalTensor& max);
Tensor masked_fill(const Tensor& self, const Tensor& mask, Scalar value);
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value);  // 0-dim value

// ---------------------------------------------------------------- special ---
// Computed in double for every floating dtype and rounded once to it (int64 and
// bool inputs give float32); real dtypes only. ATen's values at the poles: digamma(+-0) = -+inf,
// NaN at the negative integers; polygamma(n >= 1, x) is +-inf at x = 0, -1, ...

Tensor lgamma(const Tensor& self);   // log |Gamma(x)|
Tensor digamma(const Tensor& self);
Tensor polygamma(std::int64_t n, const Tensor& self);  // n >= 0; polygamma(0, x) = digamma(x)
// Modified Bessel functions of the first kind: I0(x), e^-|x| I0(x), I1(x), e^-|x| I1(x).
Tensor i0(const Tensor& self);
Tensor special_i0e(const Tensor& self);
Tensor special_i1(const Tensor& self);
Tensor special_i1e(const Tensor& self);
Tensor erfinv(const Tensor& self);            // erf(erfinv(y)) = y; +-inf at +-1, NaN outside [-1, 1]
Tensor special_erfcx(const Tensor& self);     // e^(x^2) erfc(x)
Tensor special_ndtri(const Tensor& self);     // the standard normal quantile; +-inf at 1 and 0, NaN outside [0, 1]
Tensor special_log_ndtr(const Tensor& self);  // log of the standard normal CDF

// ------------------------------------------------------------- reductions ---
// An empty `dim` list means every dim, as in ATen's sum.dim_IntList.

Tensor sum(const Tensor& self, std::optional<DType> dtype = std::nullopt);
Tensor sum(const Tensor& self, const IntList& dim, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& self, std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& self, const IntList& dim, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor& self, std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor& self, std::int64_t dim, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);
Tensor amax(const Tensor& self, const IntList& dim = {}, bool keepdim = false);
Tensor amin(const Tensor& self, const IntList& dim = {}, bool keepdim = false);
Tensor max(const Tensor& self);  // over all elements; NaN propagates
Tensor min(const Tensor& self);
// (values, indices); the index of the first extreme value, as ATen on CPU.
std::pair<Tensor, Tensor> max(const Tensor& self, std::int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& self, std::int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& self, std::optional<std::int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& self, std::optional<std::int64_t> dim = std::nullopt, bool keepdim = false);
// var(correction): sum((x - mean)^2) / (N - correction).
Tensor var(const Tensor& self, const IntList& dim = {}, double correction = 1, bool keepdim = false);
// linalg_vector_norm: ord may be inf, -inf, 0 or any p.
Tensor linalg_vector_norm(const Tensor& self, double ord = 2, const IntList& dim = {}, bool keepdim = false,
                          std::optional<DType> dtype = std::nullopt);
Tensor norm(const Tensor& self, double p = 2, const IntList& dim = {}, bool keepdim = false);
Tensor cumsum(const Tensor& self, std::int64_t dim, std::optional<DType> dtype = std::nullopt);
// The running product; accumulated in double (complex128) and rounded per element, as ATen's CPU cumprod.
Tensor cumprod(const Tensor& self, std::int64_t dim, std::optional<DType> dtype = std::nullopt);
// log(cumsum(exp(self))) along dim, computed stably (floating and complex dtypes).
Tensor logcumsumexp(const Tensor& self, std::int64_t dim);
Tensor logsumexp(const Tensor& self, const IntList& dim, bool keepdim = false);
Tensor softmax(const Tensor& self, std::int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor log_softmax(const Tensor& self, std::int64_t dim, std::optional<DType> dtype = std::nullopt);

// ------------------------------------------------------------------ shape ---

Tensor reshape(const Tensor& self, const Shape& shape);  // one -1 allowed; a view when possible
Tensor view(const Tensor& self, const Shape& shape);     // must be expressible as a view
Tensor expand(const Tensor& self, const Shape& sizes);   // -1 keeps a size
Tensor sum_to(const Tensor& self, const Shape& shape);   // at::sum_to: undo broadcasting
bool is_expandable_to(const Shape& shape, const Shape& desired);
Tensor squeeze(const Tensor& self);
Tensor squeeze(const Tensor& self, std::int64_t dim);
Tensor squeeze(const Tensor& self, const IntList& dims);
Tensor unsqueeze(const Tensor& self, std::int64_t dim);
Tensor permute(const Tensor& self, const IntList& dims);
Tensor transpose(const Tensor& self, std::int64_t dim0, std::int64_t dim1);
Tensor t(const Tensor& self);  // 0-d, 1-d unchanged; 2-d transposed
Tensor narrow(const Tensor& self, std::int64_t dim, std::int64_t start, std::int64_t length);
Tensor slice(const Tensor& self, std::int64_t dim = 0, std::optional<std::int64_t> start = std::nullopt,
             std::optional<std::int64_t> end = std::nullopt, std::int64_t step = 1);
Tensor select(const Tensor& self, std::int64_t dim, std::int64_t index);
Tensor as_strided(const Tensor& self, const Shape& sizes, const Shape& strides,
                  std::optional<std::int64_t> storage_offset = std::nullopt);
Tensor flip(const Tensor& self, const IntList& dims);
Tensor cat(const TensorList& tensors, std::int64_t dim = 0);
Tensor stack(const TensorList& tensors, std::int64_t dim = 0);
TensorList split(const Tensor& self, std::int64_t split_size, std::int64_t dim = 0);
TensorList split_with_sizes(const Tensor& self, const IntList& split_sizes, std::int64_t dim = 0);
TensorList chunk(const Tensor& self, std::int64_t chunks, std::int64_t dim = 0);
Tensor repeat(const Tensor& self, const IntList& repeats);
// pad lists (left, right) pairs from the last dim backwards; negative pads crop.
Tensor constant_pad_nd(const Tensor& self, const IntList& pad, Scalar value = 0);
Tensor tril(const Tensor& self, std::int64_t diagonal = 0);
Tensor triu(const Tensor& self, std::int64_t diagonal = 0);
Tensor contiguous(const Tensor& self);
Tensor clone(const Tensor& self);

// --------------------------------------------------------------- indexing ---

Tensor index_select(const Tensor& self, std::int64_t dim, const Tensor& index);
Tensor gather(const Tensor& self, std::int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, Scalar value);
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
// reduce is "sum", "prod", "mean", "amax" or "amin"; without include_self, the positions
// that receive values start from the reduction's identity instead of self (the others keep self).
// amax/amin propagate NaN; mean of int64 floors. Real dtypes only, as in ATen.
Tensor scatter_reduce(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self = true);
// index_reduce: source slice k reduced into self[..., index[k], ...]; reduce is "prod", "mean",
// "amax" or "amin" (no "sum": that is index_add); floating dtypes only, as in ATen.
Tensor index_reduce(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source,
                    const std::string& reduce, bool include_self = true);
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha = 1);
// Advanced indexing, as self[indices]: one optional index tensor per leading
// dim (nullopt is a full slice `:`); int64 tensors index, bool tensors mask.
Tensor index(const Tensor& self, const std::vector<OptionalTensor>& indices);
// The out-of-place index_put: self with self[indices] = values (or += values).
Tensor index_put(const Tensor& self, const std::vector<OptionalTensor>& indices, const Tensor& values,
                 bool accumulate = false);
Tensor masked_select(const Tensor& self, const Tensor& mask);
Tensor masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& source);
// padding_idx only matters for the backward: any value is taken, as by aten::embedding.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::int64_t padding_idx = -1);
Tensor one_hot(const Tensor& self, std::int64_t num_classes = -1);

// ----------------------------------------------------------------- linalg ---
// Through OpenBLAS (cblas), with one BLAS thread (deterministic).

Tensor matmul(const Tensor& self, const Tensor& other);  // batch dims broadcast
Tensor mm(const Tensor& self, const Tensor& mat2);
Tensor bmm(const Tensor& self, const Tensor& mat2);
Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, Scalar beta = 1, Scalar alpha = 1);
Tensor outer(const Tensor& self, const Tensor& vec2);
Tensor dot(const Tensor& self, const Tensor& other);

// ------------------------------------------------- linalg: solves and factorizations ---
// Reference kernels (src/tensor/linalg_decompositions.cpp), no LAPACK but for the SVD: partial-pivot LU and
// substitution in the tensor's own dtype, float32, float64, complex64 or complex128 (float16 and
// bfloat16 are refused, as torch.linalg refuses them on the CPU). Leading dims are batch dims and
// broadcast. Pivots are int32 and 1-based (LAPACK's and torch's): row i was swapped with row
// pivots[i] - 1, for i = 0, 1, ... in order, so that P^T A = L U.

Tensor mH(const Tensor& self);  // conj(transpose(self, -2, -1)), ATen's Tensor::mH
// A view of the diagonal `offset` of the (dim1, dim2) planes, as the last dim.
Tensor diagonal(const Tensor& self, std::int64_t offset = 0, std::int64_t dim1 = 0, std::int64_t dim2 = 1);
// [..., n] -> [..., n, n] with self on the main diagonal (diag_embed with its default arguments).
Tensor diag_embed(const Tensor& self);
// X with A X = B (left) or X A = B, A triangular: only its upper or lower triangle is read, and with
// unitriangular its diagonal is taken as ones.
Tensor linalg_solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left = true,
                               bool unitriangular = false);
// (LU, pivots): L (unit diagonal, not stored) below the diagonal, U on and above it; A may be m x n.
std::pair<Tensor, Tensor> linalg_lu_factor(const Tensor& A, bool pivot = true);
// X with op(A) X = B (left) or X op(A) = B, A = P L U given by LU and pivots, op(A) = A^H with adjoint.
Tensor linalg_lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left = true,
                       bool adjoint = false);
// (P, L, U) with A = P L U: P m x m, L m x k (unit diagonal), U k x n, k = min(m, n). What is not
// unpacked is an empty tensor, as in ATen.
std::tuple<Tensor, Tensor, Tensor> lu_unpack(const Tensor& LU, const Tensor& pivots, bool unpack_data = true,
                                             bool unpack_pivots = true);
// ATen's rule for linalg_solve's B: a vector when 1-d, or when it has A's batch dims and one dim more.
bool linalg_solve_is_vector_rhs(const Tensor& LU, const Tensor& B);
// X with A X = B (left) or X A = B; B may be a vector (linalg_solve_is_vector_rhs) when left.
Tensor linalg_solve(const Tensor& A, const Tensor& B, bool left = true);
// (U, S, Vh) with A = U diag(S) Vh, S descending (LAPACK's ?gesdd: the one op here that is not a
// readable kernel); U [.., m, k], Vh [.., k, n], k = min(m, n), or square with full_matrices.
std::tuple<Tensor, Tensor, Tensor> linalg_svd(const Tensor& A, bool full_matrices = false);
// The pseudo-inverse V diag(1/S) U^H, singular values up to max(m, n) eps max(S) taken as zero (torch's
// default tolerance).
Tensor linalg_pinv(const Tensor& A);
// exp(A), by scaling and squaring with a [13/13] Pade approximant (float16/bfloat16 in float32).
Tensor linalg_matrix_exp(const Tensor& A);
// The cross product of 3-vectors along dim (the operands broadcast).
Tensor linalg_cross(const Tensor& self, const Tensor& other, std::int64_t dim = -1);

// --------------------------------------------------------------------- nn ---
// Layouts are ATen's: input [N, C, (D,) (H,) W], weight [C_out, C_in/groups, (kD,) (kH,) kW]
// (transposed: [C_in, C_out/groups, ...]). Unbatched inputs are accepted
// where ATen accepts them. An undefined bias is no bias; a bias of another
// dtype is converted to the input's. Pooling parameters must fit in int, as
// in ATen; an upsampling scale whose reciprocal overflows raises.

Tensor convolution(const Tensor& input, const Tensor& weight, const OptionalTensor& bias, const IntList& stride,
                   const IntList& padding, const IntList& dilation, bool transposed,
                   const IntList& output_padding, std::int64_t groups);
Tensor conv1d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias = std::nullopt,
              const IntList& stride = {1}, const IntList& padding = {0}, const IntList& dilation = {1},
              std::int64_t groups = 1);
Tensor conv2d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias = std::nullopt,
              const IntList& stride = {1, 1}, const IntList& padding = {0, 0}, const IntList& dilation = {1, 1},
              std::int64_t groups = 1);
Tensor conv3d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias = std::nullopt,
              const IntList& stride = {1, 1, 1}, const IntList& padding = {0, 0, 0},
              const IntList& dilation = {1, 1, 1}, std::int64_t groups = 1);
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias = std::nullopt,
                        const IntList& stride = {1}, const IntList& padding = {0},
                        const IntList& output_padding = {0}, std::int64_t groups = 1,
                        const IntList& dilation = {1});
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias = std::nullopt,
                        const IntList& stride = {1, 1}, const IntList& padding = {0, 0},
                        const IntList& output_padding = {0, 0}, std::int64_t groups = 1,
                        const IntList& dilation = {1, 1});
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias = std::nullopt,
                        const IntList& stride = {1, 1, 1}, const IntList& padding = {0, 0, 0},
                        const IntList& output_padding = {0, 0, 0}, std::int64_t groups = 1,
                        const IntList& dilation = {1, 1, 1});
// The weight grad of convolution(input, weight, ..., transposed, output_padding, groups) given the grad of
// its output: what ATen's convolution_backward returns for the weight. weight_sizes is the weight's shape.
// Per image and group it is one matrix product, grad_output_g [O/g, L] @ im2col(input_g)^T [L, C/g*k...]
// (transposed: input_g [C/g, L] @ im2col(grad_output_g)^T, the forward's window being on its output),
// summed over the batch; output_padding is implied by grad_output's size. float32, float64 and int64
// (float16/bfloat16 computed in float32).
Tensor convolution_backward_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_sizes,
                                   const IntList& stride, const IntList& padding, const IntList& dilation,
                                   bool transposed, std::int64_t groups);
// ATen's native_batch_norm_backward: (grad_input, grad_weight, grad_bias) of native_batch_norm, each an
// undefined Tensor where output_mask does not ask for it. input [N, C, ...]; weight (none: ones), the
// running statistics and save_mean/save_invstd have C elements. train: save_mean and save_invstd are the
// batch statistics the forward normalized with, which depend on the input; eval: running_mean and
// running_var are constants, invstd = 1 / sqrt(running_var + eps). Per channel, with x_hat = (x - mean) * invstd
// and M = N * (elements per plane):
//   grad_bias = sum(g)   grad_weight = sum(g * x_hat)
//   grad_input = (g - sum(g) / M - x_hat * sum(g * x_hat) / M) * invstd * weight    (train)
//              = g * invstd * weight                                                (eval)
// Sums accumulate in double; float16/bfloat16 are computed in float32 and rounded once.
std::tuple<Tensor, Tensor, Tensor> native_batch_norm_backward(
    const Tensor& grad_out, const Tensor& input, const OptionalTensor& weight, const OptionalTensor& running_mean,
    const OptionalTensor& running_var, const OptionalTensor& save_mean, const OptionalTensor& save_invstd,
    bool train, double eps, const std::array<bool, 3>& output_mask);
// The grad of a max pooling from the indices it returned (max_pool1d/2d/3d_with_indices, adaptive and
// fractional max pooling): zeros of self_sizes, and each output's grad added at the flat position its index
// names in its plane, the last spatial_dims dims of self (outputs that chose the same element add up).
// grad_output and indices have self's leading dims; an index of -1 is skipped, as ATen's max_pool kernels
// skip it, and any other index outside the plane raises.
Tensor max_pool_backward(const Tensor& grad_output, const Tensor& indices, const Shape& self_sizes,
                         std::int64_t spatial_dims);
// (output, indices); indices are flat positions within each H*W plane, as ATen's.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& self, const IntList& kernel_size,
                                                  const IntList& stride = {}, const IntList& padding = {0, 0},
                                                  const IntList& dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& self, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<std::int64_t> divisor_override = std::nullopt);
Tensor adaptive_avg_pool2d(const Tensor& self, const IntList& output_size);
Tensor upsample_nearest2d(const Tensor& self, const IntList& output_size,
                          std::optional<double> scales_h = std::nullopt,
                          std::optional<double> scales_w = std::nullopt);
Tensor upsample_bilinear2d(const Tensor& self, const IntList& output_size, bool align_corners,
                           std::optional<double> scales_h = std::nullopt,
                           std::optional<double> scales_w = std::nullopt);

}  // namespace refgrad
