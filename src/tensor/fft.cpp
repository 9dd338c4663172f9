// The discrete Fourier transforms torch.fft is built on: ATen's _fft_c2c,
// _fft_r2c and _fft_c2r. Every torch.fft function (fft, ifft, rfft, irfft,
// hfft, ihfft, their 2-d and n-d forms) and stft/istft reach one of these
// after padding or trimming the signal and choosing the normalization.
//
// The transform along one dim of length n is the DFT
//     X[k] = sum_j x[j] * exp(-2*pi*i * j*k / n)    (forward)
//     x[j] = sum_k X[k] * exp(+2*pi*i * j*k / n)    (backward, unnormalized)
// computed directly, O(n^2) per dim: a reference needs each output to be an
// obvious sum more than it needs speed. The twiddle exp(+-2*pi*i * m / n) is
// taken at the exact integer index m = (j*k) mod n, so its angle is accurate
// for any j and k. A transform over several dims applies the 1-d one dim by
// dim (the DFT is separable). Everything is computed in complex<double> and
// rounded once to the output dtype (complex64/float32 for float32 and
// complex64 inputs), as ATen's pocketfft/MKL kernels compute in the input's
// precision; a double computation differs from theirs only by rounding.
//
// Normalization is ATen's fft_norm_mode (SpectralOpsUtils.h): 0 none, 1 a
// factor 1/sqrt(n), 2 a factor 1/n, where n is the product of the signal
// sizes along `dim`: the input's sizes for c2c and r2c, the output's for c2r
// (ATen's compute_fct). The direction of a transform never picks the factor:
// torch.fft.ifft asks for "by n" itself.
#include <cmath>
#include <complex>
#include <vector>

#include "kernel.hpp"

namespace refgrad {
namespace {

using Complex = std::complex<double>;

// ATen's fft_norm_mode.
enum class FftNorm : std::int64_t { none = 0, by_root_n = 1, by_n = 2 };

FftNorm norm_mode(std::int64_t normalization, const char* op) {
  check(normalization >= 0 && normalization <= 2, op, ": normalization must be 0 (none), 1 (by 1/sqrt(n)) or ",
        "2 (by 1/n), got ", normalization);
  return static_cast<FftNorm>(normalization);
}

// The factor compute_fct gives for a signal of `signal_numel` points.
double norm_factor(FftNorm mode, std::int64_t signal_numel) {
  switch (mode) {
    case FftNorm::none: return 1.0;
    case FftNorm::by_root_n: return 1.0 / std::sqrt(static_cast<double>(signal_numel));
    case FftNorm::by_n: return 1.0 / static_cast<double>(signal_numel);
  }
  return 1.0;
}

// `dim` wrapped against self's rank; a dim named twice, or of size 0, is an
// error (ATen's kernels fail on both). Needs a tensor with at least one dim
// when `dim` is not empty.
IntList wrapped_dims(const Tensor& self, const IntList& dim, const char* op) {
  check(dim.empty() || self.dim() > 0, op, ": cannot transform a 0-dim tensor (dim ", shape_text(dim), ")");
  IntList wrapped;
  std::vector<bool> seen(static_cast<std::size_t>(self.dim()), false);
  for (std::int64_t d : dim) {
    const std::int64_t w = wrap_dim(d, self.dim(), op);
    check(!seen[static_cast<std::size_t>(w)], op, ": dim ", w, " appears more than once in dim ", shape_text(dim));
    seen[static_cast<std::size_t>(w)] = true;
    // torch.fft refuses a signal of no points ("Invalid number of data points (0)"); so do ATen's kernels.
    check(self.sizes()[static_cast<std::size_t>(w)] > 0, op, ": cannot transform dim ", w, " of ",
          shape_text(self.sizes()), ": it has no points");
    wrapped.push_back(w);
  }
  return wrapped;
}

// The product of `sizes` along `dims`: the number of points of one signal.
std::int64_t signal_numel(const Shape& sizes, const IntList& dims) {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= sizes[static_cast<std::size_t>(d)];
  return n;
}

// exp(sign * 2*pi*i * m / n) for m = 0 .. n-1. The angle is taken in
// [-pi, pi] (m - n for the upper half), where cos and sin are most accurate.
std::vector<Complex> twiddles(std::int64_t n, int sign) {
  std::vector<Complex> table(static_cast<std::size_t>(n));
  const double pi = std::acos(-1.0);
  for (std::int64_t m = 0; m < n; ++m) {
    const std::int64_t centered = 2 * m <= n ? m : m - n;
    const double angle = sign * 2.0 * pi * static_cast<double>(centered) / static_cast<double>(n);
    table[static_cast<std::size_t>(m)] = Complex(std::cos(angle), std::sin(angle));
  }
  return table;
}

// The DFT of length n along dim `dim` of a contiguous complex128 tensor:
//     out[..., k, ...] = sum_{j < in_len} x[..., j, ...] * exp(sign * 2*pi*i * j*k / n)
// for k = 0 .. out_len-1. in_len = out_len = n is the ordinary transform; the
// one-sided r2c asks for out_len = n/2 + 1 (the rest follows by symmetry).
Tensor dft_along(const Tensor& x, std::int64_t dim, int sign, std::int64_t n, std::int64_t out_len) {
  const Shape& sizes = x.sizes();
  const std::int64_t in_len = sizes[static_cast<std::size_t>(dim)];
  Shape out_sizes = sizes;
  out_sizes[static_cast<std::size_t>(dim)] = out_len;
  Tensor out = zeros(out_sizes, DType::ComplexDouble);
  if (out.numel() == 0 || in_len == 0) return out;
  // View both as [outer, length, inner] (row-major): dim `dim` in the middle.
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < dim; ++d) outer *= sizes[static_cast<std::size_t>(d)];
  for (std::int64_t d = dim + 1; d < x.dim(); ++d) inner *= sizes[static_cast<std::size_t>(d)];
  const std::vector<Complex> w = twiddles(n, sign);
  const Complex* in = x.data_ptr<Complex>();
  Complex* result = out.data_ptr<Complex>();
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t k = 0; k < out_len; ++k) {
      Complex* row = result + (o * out_len + k) * inner;
      for (std::int64_t j = 0; j < in_len; ++j) {
        const Complex twiddle = w[static_cast<std::size_t>((j * k) % n)];
        const Complex* column = in + (o * in_len + j) * inner;
        for (std::int64_t i = 0; i < inner; ++i) row[i] += column[i] * twiddle;
      }
    }
  }
  return out;
}

// The one-sided spectrum X[0 .. n/2] along the last dim of a contiguous
// complex128 tensor, completed to all n points by conjugate symmetry:
// X[k] = conj(X[n - k]) for k > n/2, as the spectrum of a real signal is.
Tensor hermitian_completion(const Tensor& half, std::int64_t dim, std::int64_t n) {
  const Shape& sizes = half.sizes();
  const std::int64_t half_len = sizes[static_cast<std::size_t>(dim)];
  Shape full_sizes = sizes;
  full_sizes[static_cast<std::size_t>(dim)] = n;
  Tensor full = zeros(full_sizes, DType::ComplexDouble);
  if (full.numel() == 0) return full;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < dim; ++d) outer *= sizes[static_cast<std::size_t>(d)];
  for (std::int64_t d = dim + 1; d < half.dim(); ++d) inner *= sizes[static_cast<std::size_t>(d)];
  const Complex* in = half.data_ptr<Complex>();
  Complex* out = full.data_ptr<Complex>();
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t k = 0; k < n; ++k) {
      const bool mirrored = k >= half_len;
      const std::int64_t source = mirrored ? n - k : k;
      for (std::int64_t i = 0; i < inner; ++i) {
        const Complex value = in[(o * half_len + source) * inner + i];
        out[(o * n + k) * inner + i] = mirrored ? std::conj(value) : value;
      }
    }
  }
  return full;
}

// `x` (complex128) times the normalization factor, rounded to `dtype`.
Tensor normalized(const Tensor& x, FftNorm mode, std::int64_t n, DType dtype) {
  const Tensor scaled = mode == FftNorm::none ? x : mul(x, Scalar(norm_factor(mode, n)));
  return scaled.to(dtype);
}

}  // namespace

Tensor _fft_c2c(const Tensor& self, const IntList& dim, std::int64_t normalization, bool forward) {
  const char* op = "_fft_c2c";
  check(self.defined(), op, ": tensor is undefined");
  check(is_complex(self.dtype()), op, ": expected a complex64 or complex128 tensor, got ", dtype_name(self.dtype()));
  const FftNorm mode = norm_mode(normalization, op);
  const IntList dims = wrapped_dims(self, dim, op);
  Tensor x = self.to(DType::ComplexDouble).contiguous();
  for (std::int64_t d : dims) {
    const std::int64_t n = self.sizes()[static_cast<std::size_t>(d)];
    x = dft_along(x, d, forward ? -1 : +1, n, n);
  }
  return normalized(x, mode, signal_numel(self.sizes(), dims), self.dtype());
}

Tensor _fft_r2c(const Tensor& self, const IntList& dim, std::int64_t normalization, bool onesided) {
  const char* op = "_fft_r2c";
  check(self.defined(), op, ": tensor is undefined");
  check(self.dtype() == DType::Float32 || self.dtype() == DType::Float64, op,
        ": expected a float32 or float64 tensor, got ", dtype_name(self.dtype()),
        " (torch's CPU transforms take no other dtype)");
  const FftNorm mode = norm_mode(normalization, op);
  check(!dim.empty(), op, ": dim must name at least one dim");
  const IntList dims = wrapped_dims(self, dim, op);
  // The last dim listed is the one-sided one: transform it first, keeping only
  // X[0 .. n/2] when onesided; the other dims are full transforms of that.
  Tensor x = self.to(DType::ComplexDouble).contiguous();
  const std::int64_t last = dims.back();
  const std::int64_t n_last = self.sizes()[static_cast<std::size_t>(last)];
  x = dft_along(x, last, -1, n_last, onesided ? n_last / 2 + 1 : n_last);
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    const std::int64_t n = self.sizes()[static_cast<std::size_t>(dims[i])];
    x = dft_along(x, dims[i], -1, n, n);
  }
  const DType out_dtype = self.dtype() == DType::Float32 ? DType::ComplexFloat : DType::ComplexDouble;
  return normalized(x, mode, signal_numel(self.sizes(), dims), out_dtype);
}

Tensor _fft_c2r(const Tensor& self, const IntList& dim, std::int64_t normalization, std::int64_t last_dim_size) {
  const char* op = "_fft_c2r";
  check(self.defined(), op, ": tensor is undefined");
  check(is_complex(self.dtype()), op, ": expected a complex64 or complex128 tensor, got ", dtype_name(self.dtype()));
  const FftNorm mode = norm_mode(normalization, op);
  check(!dim.empty(), op, ": dim must name at least one dim");
  const IntList dims = wrapped_dims(self, dim, op);
  const std::int64_t last = dims.back();
  check(last_dim_size >= 1, op, ": last_dim_size must be at least 1, got ", last_dim_size);
  // ATen's kernels take the one-sided spectrum, or a full one whose upper half they ignore.
  const std::int64_t half_len = last_dim_size / 2 + 1;
  const std::int64_t in_len = self.sizes()[static_cast<std::size_t>(last)];
  check(in_len == half_len || in_len == last_dim_size, op, ": a real signal of ", last_dim_size,
        " points along dim ", last, " has a one-sided spectrum of ", half_len, " points (or a full one of ",
        last_dim_size, "), but self ", shape_text(self.sizes()), " has ", in_len);
  // As ATen's CPU kernels: the other dims are inverse c2c transforms first,
  // then the last dim goes from its one-sided spectrum to a real signal.
  // Completed by conjugate symmetry, that spectrum's inverse DFT is real up to
  // the imaginary parts of X[0] (and of X[n/2] for an even n), which a real
  // signal's spectrum cannot have and the real part drops.
  Tensor x = self.to(DType::ComplexDouble).contiguous();
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    const std::int64_t n = self.sizes()[static_cast<std::size_t>(dims[i])];
    x = dft_along(x, dims[i], +1, n, n);
  }
  x = narrow(x, last, 0, half_len).contiguous();
  x = dft_along(hermitian_completion(x, last, last_dim_size), last, +1, last_dim_size, last_dim_size);
  Shape out_sizes = self.sizes();
  out_sizes[static_cast<std::size_t>(last)] = last_dim_size;
  const DType out_dtype = self.dtype() == DType::ComplexFloat ? DType::Float32 : DType::Float64;
  return normalized(real(x), mode, signal_numel(out_sizes, dims), out_dtype).contiguous();
}

}  // namespace refgrad
