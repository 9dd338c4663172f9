// Fourier-transform nodes: _fft_c2c, _fft_r2c and _fft_c2r, which every
// torch.fft function (and stft, istft) records.
//
// Each transform is linear, y = F x, with F[k, j] = exp(-+2*pi*i * j*k / n)
// times a real normalization factor. PyTorch's gradient of a real loss with
// respect to a complex input is the adjoint map applied to the incoming grad
// (complex.cpp's conventions): grad_x = F^H grad_y. The adjoint of the DFT
// matrix is its conjugate transpose, which is the DFT of the other direction,
// unnormalized in the same way: so c2c's backward is c2c with !forward and the
// same normalization (the factor is real). r2c and c2r add a real part and a
// one-sided half of the spectrum, whose adjoints are below.
#include "define.hpp"

namespace refgrad::nodes {
namespace {

// A transform's dims, wrapped against the rank of the tensor they index (the
// incoming grad's, which has its forward output's rank); the error names the
// node. r2c and c2r need at least one dim (their last is the one-sided one).
IntList wrap_transform_dims(const char* node, const IntList& dim, const Tensor& grad, bool allow_empty) {
  check(allow_empty || (!dim.empty() && grad.dim() > 0), node, ": dim ", shape_text(dim), " names no dim of grad ",
        shape_text(grad.sizes()));
  IntList wrapped;
  for (std::int64_t d : dim) {
    check(d >= -grad.dim() && d < grad.dim(), node, ": dim ", d, " (of ", shape_text(dim),
          ") is out of range for grad ", shape_text(grad.sizes()));
    wrapped.push_back(d < 0 ? d + grad.dim() : d);
  }
  return wrapped;
}

// FunctionsManual's fft_r2c_backward. The one-sided r2c is
//   1. the real signal taken as complex (imaginary parts 0),
//   2. a c2c forward transform,
//   3. the upper half of the last dim dropped (onesided),
// so its adjoint is, in reverse order,
//   3. the dropped half put back as zeros,
//   2. a c2c transform of the other direction (backward), same normalization,
//   1. the real part (the adjoint of embedding the reals in the complex numbers).
Tensor fft_r2c_backward(const Tensor& grad, const IntList& dim, std::int64_t normalization, bool onesided,
                        std::int64_t last_dim_size) {
  Tensor complex_full_grad = grad;
  const std::int64_t last_dim = dim.back();
  const std::int64_t zero_length = last_dim_size - grad.size(last_dim);
  if (onesided && zero_length > 0) {
    Shape zeros_shape = grad.sizes();
    zeros_shape[static_cast<std::size_t>(last_dim)] = zero_length;
    complex_full_grad = cat({grad, zeros(zeros_shape, grad.dtype())}, last_dim);
  }
  return real(_fft_c2c(complex_full_grad, dim, normalization, /*forward=*/false)).contiguous();
}

// FunctionsManual's fft_c2r_backward. The c2r transform (irfft) is
//   1. the one-sided spectrum completed by conjugate symmetry, X[n-k] = conj(X[k]),
//   2. a c2c backward transform,
//   3. the real part,
// so its adjoint is, in reverse order,
//   3. the real grad taken as complex,
//   2. a c2c forward transform, same normalization: G = the r2c of the grad,
//   1. the adjoint of the completion: X[k] gets G[k], plus conj(G[n-k]) when its
//      mirror n-k is one of the completed entries (n/2 < n-k < n).
// G is Hermitian (the transform of a real signal), conj(G[n-k]) = G[k]: so the
// grad is the one-sided r2c of the grad, doubled at k = 1 .. n - (n/2 + 1), that
// is at every k but 0 and, for an even n, n/2 (each its own mirror).
Tensor fft_c2r_backward(const Tensor& grad, const IntList& dim, std::int64_t normalization) {
  const Tensor gI = _fft_r2c(grad, dim, normalization, /*onesided=*/true);
  const std::int64_t last_dim = dim.back();
  const std::int64_t half_length = gI.size(last_dim);
  const std::int64_t double_length = grad.size(last_dim) - half_length;
  if (double_length <= 0) return gI;
  // 1, 2, ..., 2, 1 (or 1, 2, ..., 2 for an odd n) along the last dim, broadcast over the others.
  std::vector<double> weights(static_cast<std::size_t>(half_length), 1.0);
  for (std::int64_t k = 1; k <= double_length; ++k) weights[static_cast<std::size_t>(k)] = 2.0;
  Shape weight_shape(static_cast<std::size_t>(grad.dim()), 1);
  weight_shape[static_cast<std::size_t>(last_dim)] = half_length;
  const Tensor weight = from_vector(weights, weight_shape).to(grad.dtype());
  return mul(gI, weight);
}

// FftC2CBackward0 — _fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward)
//   self: _fft_c2c_symint(grad, dim, normalization, !forward)
struct FftC2CBackward0Saved {
  IntList dim;
  bool forward = true;
  std::int64_t normalization = 0;
};

Grads FftC2CBackward0(const Grads& grads, const FftC2CBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  check(is_complex(grad.dtype()), "FftC2CBackward0: grad must be complex, got ", dtype_name(grad.dtype()), " ",
        shape_text(grad.sizes()));
  const IntList dim = wrap_transform_dims("FftC2CBackward0", saved.dim, grad, /*allow_empty=*/true);
  return Grads{_fft_c2c(grad, dim, saved.normalization, !saved.forward)};
}

// FftR2CBackward0 — _fft_r2c(Tensor self, int[] dim, int normalization, bool onesided)
//   self: fft_r2c_backward(grad, dim, normalization, onesided, self.sym_size(dim.back()))
struct FftR2CBackward0Saved {
  IntList dim;
  std::int64_t normalization = 0;
  bool onesided = true;
  Tensor self;
};

Grads FftR2CBackward0(const Grads& grads, const FftR2CBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const char* node = "FftR2CBackward0";
  const Tensor& grad = *grads[0];
  const Tensor& self = saved.self;
  check(is_complex(grad.dtype()), node, ": grad must be complex, got ", dtype_name(grad.dtype()), " ",
        shape_text(grad.sizes()));
  const IntList dim = wrap_transform_dims(node, saved.dim, grad, /*allow_empty=*/false);
  // The grad has the forward output's shape: self's, with n/2 + 1 points along the
  // last transformed dim when onesided.
  Shape expected = self.sizes();
  if (grad.dim() == self.dim() && saved.onesided) {
    std::int64_t& last = expected[static_cast<std::size_t>(dim.back())];
    last = last / 2 + 1;
  }
  check(grad.sizes() == expected, node, ": grad has shape ", shape_text(grad.sizes()), " but the ",
        saved.onesided ? "one-sided " : "", "transform of self ", shape_text(self.sizes()), " along dim ",
        shape_text(saved.dim), " has shape ", shape_text(expected));
  return Grads{fft_r2c_backward(grad, dim, saved.normalization, saved.onesided, self.size(dim.back()))};
}

// FftC2RBackward0 — _fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size)
//   self: fft_c2r_backward(grad, dim, normalization)
struct FftC2RBackward0Saved {
  IntList dim;
  std::int64_t normalization = 0;
};

Grads FftC2RBackward0(const Grads& grads, const FftC2RBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const char* node = "FftC2RBackward0";
  const Tensor& grad = *grads[0];
  check(grad.dtype() == DType::Float32 || grad.dtype() == DType::Float64, node,
        ": grad must be float32 or float64 (c2r's output is real), got ", dtype_name(grad.dtype()), " ",
        shape_text(grad.sizes()));
  const IntList dim = wrap_transform_dims(node, saved.dim, grad, /*allow_empty=*/false);
  return Grads{fft_c2r_backward(grad, dim, saved.normalization)};
}

}  // namespace

void add_fft_nodes(std::vector<NodeDef>& registry) {
  // clang-format off
  registry.push_back(define_node<FftC2CBackward0Saved, FftC2CBackward0>(
      {"FftC2CBackward0", "_fft_c2c", {"self"}, 1, {}, "self: _fft_c2c_symint(grad, dim, normalization, !forward)"},
      {saved<&FftC2CBackward0Saved::dim>("dim", FieldKind::Sizes),
       saved<&FftC2CBackward0Saved::forward>("forward", FieldKind::Bool),
       saved<&FftC2CBackward0Saved::normalization>("normalization", FieldKind::Int)}));
  registry.push_back(define_node<FftR2CBackward0Saved, FftR2CBackward0>(
      {"FftR2CBackward0", "_fft_r2c", {"self"}, 1, {},
       "self: fft_r2c_backward(grad, dim, normalization, onesided, self.sym_size(dim.back()))"},
      {saved<&FftR2CBackward0Saved::dim>("dim", FieldKind::IntList),
       saved<&FftR2CBackward0Saved::normalization>("normalization", FieldKind::Int),
       saved<&FftR2CBackward0Saved::onesided>("onesided", FieldKind::Bool),
       saved<&FftR2CBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<FftC2RBackward0Saved, FftC2RBackward0>(
      {"FftC2RBackward0", "_fft_c2r", {"self"}, 1, {}, "self: fft_c2r_backward(grad, dim, normalization)"},
      {saved<&FftC2RBackward0Saved::dim>("dim", FieldKind::IntList),
       saved<&FftC2RBackward0Saved::normalization>("normalization", FieldKind::Int)}));
  // clang-format on
}

}  // namespace refgrad::nodes
