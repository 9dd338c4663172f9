// Activation nodes: relu, threshold(_), gelu, silu, mish, hardtanh (relu6),
// leaky_relu(_), softplus, elu(_) (selu(_)), celu(_), hardsigmoid, hardswish,
// _softmax, _safe_softmax, _log_softmax, native_dropout.
//
// The elementwise backwards follow ATen's CPU kernels (the functions named in
// derivatives.yaml), including their constants and which side of a kink gets
// which branch: torch's autograd.grad runs them with grad mode off, so the
// non-"infinitely differentiable" variants are the ones that run.
#include <algorithm>
#include <cmath>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// 1 - t, exactly (negation is exact, and rounding is symmetric).
Tensor one_minus(const Tensor& t) { return neg(sub(t, Scalar(1))); }

// ---------------------------------------------------------- the helpers ---
// ATen's backward functions, under their names; formulas from the CPU kernels
// (aten/src/ATen/native/cpu/Activation.cpp, SoftMaxKernel.cpp, Dropout.cpp).

// gelu_backward(grad, self, approximate):
//   "none": grad * (Phi(x) + x * phi(x)), Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   "tanh": with u = sqrt(2/pi) (x + 0.044715 x^3):
//           grad * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
Tensor gelu_backward(const Tensor& grad, const Tensor& self, const std::string& approximate) {
  if (approximate == "none") {
    const double kAlpha = M_SQRT1_2, kBeta = M_2_SQRTPI * M_SQRT1_2 * 0.5;
    const Tensor cdf = mul(add(erf(mul(self, kAlpha)), Scalar(1)), 0.5);
    const Tensor pdf = mul(exp(mul(mul(self, self), -0.5)), kBeta);
    return mul(grad, add(cdf, mul(self, pdf)));
  }
  check(approximate == "tanh", "GeluBackward0: approximate argument must be either none or tanh, got '", approximate,
        "'");
  const double kBeta = M_SQRT2 * M_2_SQRTPI * 0.5, kKappa = 0.044715;
  const Tensor x_sq = mul(self, self);
  const Tensor inner = mul(add(self, mul(mul(x_sq, self), kKappa)), kBeta);
  const Tensor tanh_inner = tanh(inner);
  const Tensor left_derivative = mul(add(tanh_inner, Scalar(1)), 0.5);
  const Tensor tanh_derivative = one_minus(mul(tanh_inner, tanh_inner));
  const Tensor inner_derivative = mul(add(mul(x_sq, 3 * kKappa), Scalar(1)), kBeta);
  const Tensor right_derivative = mul(mul(mul(self, 0.5), tanh_derivative), inner_derivative);
  return mul(grad, add(left_derivative, right_derivative));
}

// silu_backward(grad, self) = grad * s * (1 + x (1 - s)), s = sigmoid(x).
Tensor silu_backward(const Tensor& grad, const Tensor& self) {
  const Tensor s = sigmoid(self);
  return mul(mul(grad, s), add(mul(self, one_minus(s)), Scalar(1)));
}

// mish_backward(grad, self) = grad * (t + x s (1 - t^2)), t = tanh(log1p(exp x)), s = sigmoid(x).
Tensor mish_backward(const Tensor& grad, const Tensor& self) {
  const Tensor t = tanh(log1p(exp(self)));
  const Tensor s = sigmoid(self);
  return mul(grad, add(t, mul(mul(self, s), one_minus(mul(t, t)))));
}

// hardtanh_backward: 0 where self <= min_val or self >= max_val (the bounds
// themselves included), else grad.
Tensor hardtanh_backward(const Tensor& grad, const Tensor& self, const Scalar& min_val, const Scalar& max_val) {
  return where(logical_or(le(self, min_val), ge(self, max_val)), Scalar(0), grad);
}

// leaky_relu_backward: grad where self > 0, else grad * negative_slope (so at 0
// the slope applies). From the result (leaky_relu_), the sign of the input is
// only recoverable for a slope >= 0, and ATen refuses the others.
Tensor leaky_relu_backward(const char* node, const Tensor& grad, const Tensor& self_or_result,
                           const Scalar& negative_slope, bool is_result) {
  check(!is_result || negative_slope.to_double() >= 0, node,
        ": in-place leaky_relu backward with a negative slope (", negative_slope.to_double(),
        ") is not supported, as in PyTorch");
  return where(gt(self_or_result, Scalar(0)), grad, mul(grad, negative_slope));
}

// softplus_backward: z = exp(beta x); grad where beta x > threshold (softplus
// is linear there), else grad * z / (z + 1).
Tensor softplus_backward(const Tensor& grad, const Tensor& self, const Scalar& beta, const Scalar& threshold) {
  const Tensor scaled = mul(self, beta);
  const Tensor z = exp(scaled);
  return where(gt(scaled, threshold), grad, div(mul(grad, z), add(z, Scalar(1))));
}

// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result):
//   x <= 0: is_result ? grad * input_scale * (x + alpha * scale)
//                     : grad * input_scale * alpha * scale * exp(x * input_scale)
//   x > 0:  grad * scale
// (so at 0 the negative branch applies).
// From the result (elu_, celu_), ATen refuses a negative alpha.
Tensor elu_backward(const char* node, const Tensor& grad, const Scalar& alpha, const Scalar& scale,
                    const Scalar& input_scale, bool is_result, const Tensor& self_or_result) {
  check(!is_result || alpha.to_double() >= 0, node, ": in-place elu backward with a negative alpha (",
        alpha.to_double(), ") is not supported, as in PyTorch");
  const double negcoef = alpha.to_double() * scale.to_double();
  const Tensor& x = self_or_result;
  const Tensor negative = is_result ? mul(mul(grad, input_scale), add(x, negcoef))
                                    : mul(mul(mul(grad, input_scale), negcoef), exp(mul(x, input_scale)));
  return where(le(x, Scalar(0)), negative, mul(grad, scale));
}

// hardsigmoid_backward: grad / 6 where -3 < x < 3, else 0. ATen multiplies by
// the float constant 1.0f / 6.0f for every dtype, float64 included
// (0.1666666716337204, not 1/6), and so does refgrad.
Tensor hardsigmoid_backward(const Tensor& grad, const Tensor& self) {
  const double one_sixth = static_cast<double>(1.0f / 6.0f);
  return where(logical_and(gt(self, Scalar(-3)), lt(self, Scalar(3))), mul(grad, one_sixth), Scalar(0));
}

// hardswish_backward: 0 where x <= -3, grad * (x / 3 + 0.5) where -3 < x < 3,
// grad where x >= 3.
Tensor hardswish_backward(const Tensor& grad, const Tensor& self) {
  const Tensor middle = mul(grad, add(div(self, Scalar(3)), Scalar(0.5)));
  return where(le(self, Scalar(-3)), Scalar(0), where(lt(self, Scalar(3)), middle, grad));
}

// The softmax dim of a saved `dim` against the result: as ATen's maybe_wrap_dim, a 0-d result takes 0 and -1.
void check_softmax_dim(const char* node, std::int64_t dim, const Tensor& result) {
  const std::int64_t range = std::max<std::int64_t>(result.dim(), 1);
  check(dim >= -range && dim < range, node, ": dim ", dim, " is out of range for result of shape ",
        shape_text(result.sizes()));
}

// _softmax_backward_data(grad, output, dim, input_dtype) = output * (grad - sum(grad * output, dim)).
// The grad comes out in input_dtype (differing from grad's only for
// half_to_float, which only CUDA supports).
Tensor softmax_backward_data(const Tensor& grad, const Tensor& output, std::int64_t dim, DType input_dtype) {
  const Tensor grad_input = mul(output, sub(grad, sum(mul(grad, output), IntList{dim}, true)));
  return to(grad_input, input_dtype);
}

// _log_softmax_backward_data(grad, output, dim, input_dtype) = grad - exp(output) * sum(grad, dim).
Tensor log_softmax_backward_data(const Tensor& grad, const Tensor& output, std::int64_t dim, DType input_dtype) {
  const Tensor grad_input = sub(grad, mul(exp(output), sum(grad, IntList{dim}, true)));
  return to(grad_input, input_dtype);
}

// native_dropout_backward(grad, mask, scale) = grad * mask * scale.
Tensor native_dropout_backward(const Tensor& grad, const Tensor& mask, double scale) {
  return mul(mul(grad, mask), scale);
}

// ------------------------------------------------------------ the nodes ---

// ReluBackward0 — relu(Tensor self)
//   self: threshold_backward(grad, result, 0)
// The grad at 0 is 0: relu's result is 0 there, and threshold_backward passes
// the grad only where result > 0.
struct ReluBackward0Saved {
  Tensor result;
};

Grads ReluBackward0(const Grads& grads, const ReluBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{threshold_backward(*grads[0], saved.result, 0)};
}

// ThresholdBackward0 — threshold(Tensor self, Scalar threshold, Scalar value)
//   self: threshold_backward(grad, self, threshold)
// At self == threshold the output is `value`, and the grad is 0.
struct ThresholdBackward0Saved {
  Tensor self;
  Scalar threshold;
};

Grads ThresholdBackward0(const Grads& grads, const ThresholdBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("ThresholdBackward0", *grads[0], saved.self, "self");
  return Grads{threshold_backward(*grads[0], saved.self, saved.threshold)};
}

// GeluBackward0 — gelu(Tensor self, *, str approximate='none')
//   self: gelu_backward(grad, self, approximate)
struct GeluBackward0Saved {
  std::string approximate;
  Tensor self;
};

Grads GeluBackward0(const Grads& grads, const GeluBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("GeluBackward0", *grads[0], saved.self, "self");
  return Grads{gelu_backward(*grads[0], saved.self, saved.approximate)};
}

// SiluBackward0 — silu(Tensor self)
//   self: GradMode::is_enabled() ? infinitely_differentiable_silu_backward(grad, self) : silu_backward(grad, self)
// Both compute grad * s * (1 + x (1 - s)); refgrad has no grad mode.
struct SiluBackward0Saved {
  Tensor self;
};

Grads SiluBackward0(const Grads& grads, const SiluBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SiluBackward0", *grads[0], saved.self, "self");
  return Grads{silu_backward(*grads[0], saved.self)};
}

// MishBackward0 — mish(Tensor self)
//   self: GradMode::is_enabled() ? infinitely_differentiable_mish_backward(grad, self) : mish_backward(grad, self)
struct MishBackward0Saved {
  Tensor self;
};

Grads MishBackward0(const Grads& grads, const MishBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("MishBackward0", *grads[0], saved.self, "self");
  return Grads{mish_backward(*grads[0], saved.self)};
}

// hardshrink_backward and softshrink_backward (ATen's CPU kernels): grad where self < -lambd or
// self > lambd, else 0 (a NaN self compares false both ways: 0).
Tensor shrink_backward(const char* node, const Tensor& grad, const Tensor& self, const Scalar& lambd) {
  check_same_shape(node, grad, self, "self");
  return where(gt(abs(self), lambd), grad, Scalar(0));
}

// HardshrinkBackward0 — hardshrink(Tensor self, Scalar lambd=0.5)
//   self: hardshrink_backward(grad, self, lambd)
// Also SoftshrinkBackward0 (softshrink): softshrink_backward has the same mask.
struct ShrinkSaved {
  Scalar lambd;
  Tensor self;
};

Grads HardshrinkBackward0(const Grads& grads, const ShrinkSaved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{shrink_backward("HardshrinkBackward0", *grads[0], saved.self, saved.lambd)};
}

Grads SoftshrinkBackward0(const Grads& grads, const ShrinkSaved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{shrink_backward("SoftshrinkBackward0", *grads[0], saved.self, saved.lambd)};
}

// LogSigmoidBackward0 — log_sigmoid_forward(Tensor self) -> (Tensor output, Tensor buffer)
//   self: log_sigmoid_backward(grad, self, buffer)
// d/dx log(sigmoid(x)) = sigmoid(-x); ATen's CPU kernel computes it as 1 / (1 + e^x) for x < 0 and
// e^-x / (1 + e^-x) otherwise, never overflowing, and ignores the buffer (CUDA's kernels use it).
struct LogSigmoidBackward0Saved {
  Tensor self;
  Tensor buffer;
};

Grads LogSigmoidBackward0(const Grads& grads, const LogSigmoidBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("LogSigmoidBackward0", *grads[0], saved.self, "self");
  const Tensor z = exp(neg(abs(saved.self)));                      // e^-|x|, in (0, 1]
  const Tensor negative = lt(saved.self, Scalar(0));
  const Tensor derivative = where(negative, reciprocal(add(z, 1)),  // x < 0: 1 / (1 + e^x)
                                  div(z, add(z, 1)));               // x >= 0: e^-x / (1 + e^-x)
  return Grads{mul(*grads[0], derivative)};
}

// GluBackward0 — glu(Tensor self, int dim=-1)
//   self: glu_backward(grad, self, dim)
// glu(x) = a * sigmoid(b), a and b x's halves along dim: a's grad is grad * sigmoid(b), b's
// grad * a * sigmoid(b) * (1 - sigmoid(b)).
struct GluBackward0Saved {
  std::int64_t dim;
  Tensor self;
};

Grads GluBackward0(const Grads& grads, const GluBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const std::int64_t dim = wrap_dim(saved.dim, saved.self.dim(), "GluBackward0");
  const std::int64_t half = saved.self.size(dim) / 2;
  check(saved.self.size(dim) % 2 == 0, "GluBackward0: self's size ", saved.self.size(dim), " along dim ", saved.dim,
        " is not even");
  const Tensor a = narrow(saved.self, dim, 0, half), b = narrow(saved.self, dim, half, half);
  Shape expected = saved.self.sizes();
  expected[dim] = half;
  check((*grads[0]).sizes() == expected, "GluBackward0: grad has shape ", shape_text((*grads[0]).sizes()),
        " but glu of self ", shape_text(saved.self.sizes()), " has shape ", shape_text(expected));
  const Tensor& grad = *grads[0];
  const Tensor gate = sigmoid(b);
  const Tensor grad_a = mul(grad, gate);
  const Tensor grad_b = mul(mul(mul(grad, a), gate), add(neg(gate), 1));
  return Grads{cat({grad_a, grad_b}, dim)};
}

// HardtanhBackward0 — hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1)
//   self: hardtanh_backward(grad, self, min_val, max_val)
// Also relu6 (F.relu6 saves the ints 0 and 6, nn.ReLU6 the floats 0.0 and 6.0).
struct HardtanhBackward0Saved {
  Scalar max_val;
  Scalar min_val;
  Tensor self;
};

Grads HardtanhBackward0(const Grads& grads, const HardtanhBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("HardtanhBackward0", *grads[0], saved.self, "self");
  return Grads{hardtanh_backward(*grads[0], saved.self, saved.min_val, saved.max_val)};
}

// LeakyReluBackward0 — leaky_relu(Tensor self, Scalar negative_slope=0.01)
//   self: leaky_relu_backward(grad, self, negative_slope, false)
struct LeakyReluBackward0Saved {
  Scalar negative_slope;
  Tensor self;
};

Grads LeakyReluBackward0(const Grads& grads, const LeakyReluBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("LeakyReluBackward0", *grads[0], saved.self, "self");
  return Grads{leaky_relu_backward("LeakyReluBackward0", *grads[0], saved.self, saved.negative_slope, false)};
}

// SoftplusBackward0 — softplus(Tensor self, Scalar beta=1, Scalar threshold=20)
//   self: softplus_backward(grad, self, beta, threshold)
struct SoftplusBackward0Saved {
  Scalar beta;
  Tensor self;
  Scalar threshold;
};

Grads SoftplusBackward0(const Grads& grads, const SoftplusBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SoftplusBackward0", *grads[0], saved.self, "self");
  return Grads{softplus_backward(*grads[0], saved.self, saved.beta, saved.threshold)};
}

// EluBackward0 — elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1)
//   self: elu_backward(grad, alpha, scale, input_scale, /* is_result */ false, self)
// Also selu (alpha 1.6732632423543772, scale 1.0507009873554805).
struct EluBackward0Saved {
  Scalar alpha;
  Scalar input_scale;
  Scalar scale;
  Tensor self;
};

Grads EluBackward0(const Grads& grads, const EluBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("EluBackward0", *grads[0], saved.self, "self");
  return Grads{
      elu_backward("EluBackward0", *grads[0], saved.alpha, saved.scale, saved.input_scale, false, saved.self)};
}

// CeluBackward0 — celu(Tensor self, Scalar alpha=1.0)
//   self: elu_backward(grad, alpha, 1, 1.0/alpha.toFloat(), /* is_result */ false, self)
struct CeluBackward0Saved {
  Scalar alpha;
  Tensor self;
};

Grads CeluBackward0(const Grads& grads, const CeluBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("CeluBackward0", *grads[0], saved.self, "self");
  const Scalar input_scale(1.0 / saved.alpha.to_double());
  return Grads{elu_backward("CeluBackward0", *grads[0], saved.alpha, Scalar(1), input_scale, false, saved.self)};
}

// ThresholdBackward1 — threshold_(Tensor(a!) self, Scalar threshold, Scalar value)
//   self: threshold_backward(grad, self, threshold)
// `self` is a copy of the input taken before it was overwritten.
using ThresholdBackward1Saved = ThresholdBackward0Saved;

Grads ThresholdBackward1(const Grads& grads, const ThresholdBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("ThresholdBackward1", *grads[0], saved.self, "self");
  return Grads{threshold_backward(*grads[0], saved.self, saved.threshold)};
}

// LeakyReluBackward1 — leaky_relu_(Tensor(a!) self, Scalar negative_slope=0.01)
//   self: leaky_relu_backward(grad, result, negative_slope, true)
struct LeakyReluBackward1Saved {
  Scalar negative_slope;
  Tensor result;
};

Grads LeakyReluBackward1(const Grads& grads, const LeakyReluBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("LeakyReluBackward1", *grads[0], saved.result, "result");
  return Grads{leaky_relu_backward("LeakyReluBackward1", *grads[0], saved.result, saved.negative_slope, true)};
}

// EluBackward1 — elu_(Tensor(a!) self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1)
//   self: elu_backward(grad, alpha, scale, input_scale, /* is_result */ true, result)
// Also selu_.
struct EluBackward1Saved {
  Scalar alpha;
  Scalar input_scale;
  Scalar scale;
  Tensor result;
};

Grads EluBackward1(const Grads& grads, const EluBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("EluBackward1", *grads[0], saved.result, "result");
  return Grads{
      elu_backward("EluBackward1", *grads[0], saved.alpha, saved.scale, saved.input_scale, true, saved.result)};
}

// CeluBackward1 — celu_(Tensor(a!) self, Scalar alpha=1.0)
//   self: elu_backward(grad, alpha, 1, 1.0/alpha.toFloat(), /* is_result */ true, result)
struct CeluBackward1Saved {
  Scalar alpha;
  Tensor result;
};

Grads CeluBackward1(const Grads& grads, const CeluBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("CeluBackward1", *grads[0], saved.result, "result");
  const Scalar input_scale(1.0 / saved.alpha.to_double());
  return Grads{elu_backward("CeluBackward1", *grads[0], saved.alpha, Scalar(1), input_scale, true, saved.result)};
}

// HardsigmoidBackward0 — hardsigmoid(Tensor self)
//   self: hardsigmoid_backward(grad, self)
struct HardsigmoidBackward0Saved {
  Tensor self;
};

Grads HardsigmoidBackward0(const Grads& grads, const HardsigmoidBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("HardsigmoidBackward0", *grads[0], saved.self, "self");
  return Grads{hardsigmoid_backward(*grads[0], saved.self)};
}

// HardswishBackward0 — hardswish(Tensor self)
//   self: hardswish_backward(grad, self)
struct HardswishBackward0Saved {
  Tensor self;
};

Grads HardswishBackward0(const Grads& grads, const HardswishBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("HardswishBackward0", *grads[0], saved.self, "self");
  return Grads{hardswish_backward(*grads[0], saved.self)};
}

// SoftmaxBackward0 — _softmax(Tensor self, int dim, bool half_to_float)
//   self: _softmax_backward_data(grad, result, dim, self.scalar_type())
// SafeSoftmaxBackward0 (_safe_softmax, what scaled_dot_product_attention's
// math path uses on CPU, e.g. with dropout_p > 0) has the same fields and formula.
struct SoftmaxBackward0Saved {
  std::int64_t dim = 0;
  DType self_scalar_type = DType::Float32;
  Tensor result;
};

Grads SoftmaxBackward0(const Grads& grads, const SoftmaxBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SoftmaxBackward0", *grads[0], saved.result, "result");
  check_softmax_dim("SoftmaxBackward0", saved.dim, saved.result);
  return Grads{softmax_backward_data(*grads[0], saved.result, saved.dim, saved.self_scalar_type)};
}

// SafeSoftmaxBackward0 — _safe_softmax(Tensor self, int dim, ScalarType? dtype=None)
//   self: _softmax_backward_data(grad, result, dim, self.scalar_type())
// A row that was all -inf has result 0 and so gets grad 0.
using SafeSoftmaxBackward0Saved = SoftmaxBackward0Saved;

Grads SafeSoftmaxBackward0(const Grads& grads, const SafeSoftmaxBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("SafeSoftmaxBackward0", *grads[0], saved.result, "result");
  check_softmax_dim("SafeSoftmaxBackward0", saved.dim, saved.result);
  return Grads{softmax_backward_data(*grads[0], saved.result, saved.dim, saved.self_scalar_type)};
}

// LogSoftmaxBackward0 — _log_softmax(Tensor self, int dim, bool half_to_float)
//   self: _log_softmax_backward_data(grad, result, dim, self.scalar_type())
struct LogSoftmaxBackward0Saved {
  std::int64_t dim = 0;
  DType self_scalar_type = DType::Float32;
  Tensor result;
};

Grads LogSoftmaxBackward0(const Grads& grads, const LogSoftmaxBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("LogSoftmaxBackward0", *grads[0], saved.result, "result");
  check_softmax_dim("LogSoftmaxBackward0", saved.dim, saved.result);
  return Grads{log_softmax_backward_data(*grads[0], saved.result, saved.dim, saved.self_scalar_type)};
}

// NativeDropoutBackward0 — native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)
//   input: native_dropout_backward(grad, result1, scale),
//          scale = (!train.has_value() || !train.value()) ? 1 : (p == 1 ? 0.0 : 1.0 / (1.0 - p))
// result1 is the bool mask. Note torch's asymmetry: train=None drops in the
// forward but scales by 1 here; the mask is applied either way. Only the
// output (result0) is differentiable: one incoming grad.
struct NativeDropoutBackward0Saved {
  double p = 0;
  std::optional<bool> train;
  Tensor result1;
};

Grads NativeDropoutBackward0(const Grads& grads, const NativeDropoutBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_same_shape("NativeDropoutBackward0", *grads[0], saved.result1, "result1");
  const bool training = saved.train.has_value() && *saved.train;
  const double scale = !training ? 1.0 : (saved.p == 1 ? 0.0 : 1.0 / (1.0 - saved.p));
  return Grads{native_dropout_backward(*grads[0], saved.result1, scale)};
}

// SoftmaxBackwardDataBackward0 — _softmax_backward_data(Tensor grad_output, Tensor output, int dim,
//                                                        ScalarType input_dtype) -> Tensor
//   grad_output: _softmax_backward_data(grad.to(output.dtype()), output, dim, input_dtype)
//   output: softmax_double_backward(grad.to(output.dtype()), grad_output, dim, output).to(output.dtype())
// softmax_double_backward (FunctionsManual.cpp), with g the incoming grad, go grad_output, y output:
//   go * g - sum(y * go, dim) * g - go * sum(y * g, dim)
// Softmax's backward is linear in grad_output, hence its derivative there is the backward itself.
struct SoftmaxBackwardDataBackward0Saved {
  std::int64_t dim = 0;
  Tensor grad_output;
  DType input_dtype = DType::Float32;
  Tensor output;
};

Grads SoftmaxBackwardDataBackward0(const Grads& grads, const SoftmaxBackwardDataBackward0Saved& saved,
                                   const Need& need) {
  const char* node = "SoftmaxBackwardDataBackward0";
  if (!grads[0]) return Grads(2);
  const Tensor &output = saved.output, &grad_output = saved.grad_output;
  check_same_shape(node, *grads[0], output, "output");
  check_same_shape(node, grad_output, output, "output");
  check_softmax_dim(node, saved.dim, output);
  const Tensor grad = to(*grads[0], output.dtype());
  const IntList dim = {saved.dim};
  Grads out(2);
  if (need[0]) out[0] = softmax_backward_data(grad, output, saved.dim, saved.input_dtype);
  if (need[1]) {
    const Tensor double_backward = sub(sub(mul(grad_output, grad), mul(sum(mul(output, grad_output), dim, true), grad)),
                                       mul(grad_output, sum(mul(output, grad), dim, true)));
    out[1] = to(double_backward, output.dtype());
  }
  return out;
}

// NativeDropoutBackwardBackward0 — native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor
//   grad_output: native_dropout_double_backward(grad, grad_output, mask, scale) = grad * mask * scale
//   mask: not_implemented("native_dropout_backward: mask")
// The backward is linear in grad_output. mask is a bool tensor, which never needs a grad.
struct NativeDropoutBackwardBackward0Saved {
  Tensor grad_output;
  Tensor mask;
  double scale = 1;
};

Grads NativeDropoutBackwardBackward0(const Grads& grads, const NativeDropoutBackwardBackward0Saved& saved,
                                     const Need& need) {
  const char* node = "NativeDropoutBackwardBackward0";
  check(!need[1], node, ": the derivative for native_dropout_backward's mask is not implemented (as in torch)");
  if (!grads[0] || !need[0]) return Grads(2);
  check_same_shape(node, *grads[0], saved.mask, "mask");
  return Grads{native_dropout_backward(*grads[0], saved.mask, saved.scale), std::nullopt};
}

// PreluKernelBackward0 — _prelu_kernel(Tensor self, Tensor weight) -> Tensor
//   self, weight: grad.defined() ? _prelu_kernel_backward(grad, self, weight) : std::tuple<Tensor, Tensor>()
// _prelu_kernel is self > 0 ? self : weight * self (weight broadcast to self), so, as ATen's kernel:
//   self: self > 0 ? grad : weight * grad        weight: self > 0 ? 0 : self * grad, summed to weight's shape
// At self == 0 the slope taken is weight's.
struct PreluKernelBackward0Saved {
  Tensor self;
  Tensor weight;
};

Grads PreluKernelBackward0(const Grads& grads, const PreluKernelBackward0Saved& saved, const Need& need) {
  const char* node = "PreluKernelBackward0";
  if (!grads[0]) return Grads(2);
  const Tensor &grad = *grads[0], &self = saved.self, &weight = saved.weight;
  check_same_shape(node, grad, self, "self");
  check(is_expandable_to(weight.sizes(), self.sizes()), node, ": weight ", shape_text(weight.sizes()),
        " does not broadcast to self ", shape_text(self.sizes()));
  const Tensor positive = gt(self, Scalar(0));
  Grads out(2);
  if (need[0]) out[0] = where(positive, grad, mul(weight, grad));
  if (need[1]) out[1] = sum_to(where(positive, Scalar(0), mul(self, grad)), weight.sizes());
  return out;
}

}  // namespace

void add_activation_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<ReluBackward0Saved, ReluBackward0>(
      {"ReluBackward0", "relu", {"self"}, 1, {}, "self: threshold_backward(grad, result, 0)"},
      {saved<&ReluBackward0Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<ThresholdBackward0Saved, ThresholdBackward0>(
      {"ThresholdBackward0", "threshold", {"self"}, 1, {}, "self: threshold_backward(grad, self, threshold)"},
      {saved<&ThresholdBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&ThresholdBackward0Saved::threshold>("threshold", FieldKind::Scalar)}));

  registry.push_back(define_node<GeluBackward0Saved, GeluBackward0>(
      {"GeluBackward0", "gelu", {"self"}, 1, {}, "self: gelu_backward(grad, self, approximate)"},
      {saved<&GeluBackward0Saved::approximate>("approximate", FieldKind::String),
       saved<&GeluBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<SiluBackward0Saved, SiluBackward0>(
      {"SiluBackward0", "silu", {"self"}, 1, {},
       "self: GradMode::is_enabled() ? infinitely_differentiable_silu_backward(grad, self) : "
       "silu_backward(grad, self)"},
      {saved<&SiluBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<MishBackward0Saved, MishBackward0>(
      {"MishBackward0", "mish", {"self"}, 1, {},
       "self: GradMode::is_enabled() ? infinitely_differentiable_mish_backward(grad, self) : "
       "mish_backward(grad, self)"},
      {saved<&MishBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<HardtanhBackward0Saved, HardtanhBackward0>(
      {"HardtanhBackward0", "hardtanh", {"self"}, 1, {}, "self: hardtanh_backward(grad, self, min_val, max_val)"},
      {saved<&HardtanhBackward0Saved::max_val>("max_val", FieldKind::Scalar),
       saved<&HardtanhBackward0Saved::min_val>("min_val", FieldKind::Scalar),
       saved<&HardtanhBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<LeakyReluBackward0Saved, LeakyReluBackward0>(
      {"LeakyReluBackward0", "leaky_relu", {"self"}, 1, {},
       "self: leaky_relu_backward(grad, self, negative_slope, false)"},
      {saved<&LeakyReluBackward0Saved::negative_slope>("negative_slope", FieldKind::Scalar),
       saved<&LeakyReluBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<SoftplusBackward0Saved, SoftplusBackward0>(
      {"SoftplusBackward0", "softplus", {"self"}, 1, {}, "self: softplus_backward(grad, self, beta, threshold)"},
      {saved<&SoftplusBackward0Saved::beta>("beta", FieldKind::Scalar),
       saved<&SoftplusBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&SoftplusBackward0Saved::threshold>("threshold", FieldKind::Scalar)}));

  registry.push_back(define_node<EluBackward0Saved, EluBackward0>(
      {"EluBackward0", "elu", {"self"}, 1, {},
       "self: elu_backward(grad, alpha, scale, input_scale, /* is_result */ false, self)"},
      {saved<&EluBackward0Saved::alpha>("alpha", FieldKind::Scalar),
       saved<&EluBackward0Saved::input_scale>("input_scale", FieldKind::Scalar),
       saved<&EluBackward0Saved::scale>("scale", FieldKind::Scalar),
       saved<&EluBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<CeluBackward0Saved, CeluBackward0>(
      {"CeluBackward0", "celu", {"self"}, 1, {},
       "self: elu_backward(grad, alpha, 1, 1.0/alpha.toFloat(), /* is_result */ false, self)"},
      {saved<&CeluBackward0Saved::alpha>("alpha", FieldKind::Scalar),
       saved<&CeluBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<ThresholdBackward1Saved, ThresholdBackward1>(
      {"ThresholdBackward1", "threshold_", {"self"}, 1, {}, "self: threshold_backward(grad, self, threshold)"},
      {saved<&ThresholdBackward1Saved::self>("self", FieldKind::Tensor),
       saved<&ThresholdBackward1Saved::threshold>("threshold", FieldKind::Scalar)}));

  registry.push_back(define_node<LeakyReluBackward1Saved, LeakyReluBackward1>(
      {"LeakyReluBackward1", "leaky_relu_", {"self"}, 1, {},
       "self: leaky_relu_backward(grad, result, negative_slope, true)"},
      {saved<&LeakyReluBackward1Saved::negative_slope>("negative_slope", FieldKind::Scalar),
       saved<&LeakyReluBackward1Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<EluBackward1Saved, EluBackward1>(
      {"EluBackward1", "elu_", {"self"}, 1, {},
       "self: elu_backward(grad, alpha, scale, input_scale, /* is_result */ true, result)"},
      {saved<&EluBackward1Saved::alpha>("alpha", FieldKind::Scalar),
       saved<&EluBackward1Saved::input_scale>("input_scale", FieldKind::Scalar),
       saved<&EluBackward1Saved::scale>("scale", FieldKind::Scalar),
       saved<&EluBackward1Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<CeluBackward1Saved, CeluBackward1>(
      {"CeluBackward1", "celu_", {"self"}, 1, {},
       "self: elu_backward(grad, alpha, 1, 1.0/alpha.toFloat(), /* is_result */ true, result)"},
      {saved<&CeluBackward1Saved::alpha>("alpha", FieldKind::Scalar),
       saved<&CeluBackward1Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<ShrinkSaved, HardshrinkBackward0>(
      {"HardshrinkBackward0", "hardshrink", {"self"}, 1, {}, "self: hardshrink_backward(grad, self, lambd)"},
      {saved<&ShrinkSaved::lambd>("lambd", FieldKind::Scalar), saved<&ShrinkSaved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<ShrinkSaved, SoftshrinkBackward0>(
      {"SoftshrinkBackward0", "softshrink", {"self"}, 1, {}, "self: softshrink_backward(grad, self, lambd)"},
      {saved<&ShrinkSaved::lambd>("lambd", FieldKind::Scalar), saved<&ShrinkSaved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<LogSigmoidBackward0Saved, LogSigmoidBackward0>(
      {"LogSigmoidBackward0", "log_sigmoid_forward", {"self"}, 1, {}, "self: log_sigmoid_backward(grad, self, buffer)"},
      {saved<&LogSigmoidBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&LogSigmoidBackward0Saved::buffer>("buffer", FieldKind::Tensor)}));
  registry.push_back(define_node<GluBackward0Saved, GluBackward0>(
      {"GluBackward0", "glu", {"self"}, 1, {}, "self: glu_backward(grad, self, dim)"},
      {saved<&GluBackward0Saved::dim>("dim", FieldKind::Int), saved<&GluBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<HardsigmoidBackward0Saved, HardsigmoidBackward0>(
      {"HardsigmoidBackward0", "hardsigmoid", {"self"}, 1, {}, "self: hardsigmoid_backward(grad, self)"},
      {saved<&HardsigmoidBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<HardswishBackward0Saved, HardswishBackward0>(
      {"HardswishBackward0", "hardswish", {"self"}, 1, {}, "self: hardswish_backward(grad, self)"},
      {saved<&HardswishBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<SoftmaxBackward0Saved, SoftmaxBackward0>(
      {"SoftmaxBackward0", "_softmax", {"self"}, 1, {},
       "self: _softmax_backward_data(grad, result, dim, self.scalar_type())"},
      {saved<&SoftmaxBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&SoftmaxBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType),
       saved<&SoftmaxBackward0Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<SafeSoftmaxBackward0Saved, SafeSoftmaxBackward0>(
      {"SafeSoftmaxBackward0", "_safe_softmax", {"self"}, 1, {},
       "self: _softmax_backward_data(grad, result, dim, self.scalar_type())"},
      {saved<&SafeSoftmaxBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&SafeSoftmaxBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType),
       saved<&SafeSoftmaxBackward0Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<LogSoftmaxBackward0Saved, LogSoftmaxBackward0>(
      {"LogSoftmaxBackward0", "_log_softmax", {"self"}, 1, {},
       "self: _log_softmax_backward_data(grad, result, dim, self.scalar_type())"},
      {saved<&LogSoftmaxBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&LogSoftmaxBackward0Saved::self_scalar_type>("self_scalar_type", FieldKind::DType),
       saved<&LogSoftmaxBackward0Saved::result>("result", FieldKind::Tensor)}));

  registry.push_back(define_node<NativeDropoutBackward0Saved, NativeDropoutBackward0>(
      {"NativeDropoutBackward0", "native_dropout", {"input"}, 1, {},
       "input: native_dropout_backward(grad, result1, (!train.has_value() || !train.value() ? 1 : "
       "(p == 1 ? 0.0 : 1.0 / (1.0 - p))))"},
      {saved<&NativeDropoutBackward0Saved::p>("p", FieldKind::Float),
       hidden<&NativeDropoutBackward0Saved::train>("train", FieldKind::Bool, true),
       saved<&NativeDropoutBackward0Saved::result1>("result1", FieldKind::Tensor)}));

  registry.push_back(define_node<SoftmaxBackwardDataBackward0Saved, SoftmaxBackwardDataBackward0>(
      {"SoftmaxBackwardDataBackward0", "_softmax_backward_data", {"grad_output", "output"}, 1, {},
       "grad_output: _softmax_backward_data(grad.to(output.dtype()), output, dim, input_dtype)\n"
       "output: softmax_double_backward(grad.to(output.dtype()), grad_output, dim, output).to(output.dtype())"},
      {saved<&SoftmaxBackwardDataBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&SoftmaxBackwardDataBackward0Saved::grad_output>("grad_output", FieldKind::Tensor),
       hidden<&SoftmaxBackwardDataBackward0Saved::input_dtype>("input_dtype", FieldKind::DType),
       saved<&SoftmaxBackwardDataBackward0Saved::output>("output", FieldKind::Tensor)}));

  registry.push_back(define_node<NativeDropoutBackwardBackward0Saved, NativeDropoutBackwardBackward0>(
      {"NativeDropoutBackwardBackward0", "native_dropout_backward", {"grad_output", "mask"}, 1, {},
       "grad_output: native_dropout_double_backward(grad, grad_output, mask, scale)\n"
       "mask: not_implemented(\"native_dropout_backward: mask\")"},
      {saved<&NativeDropoutBackwardBackward0Saved::grad_output>("grad_output", FieldKind::Tensor),
       saved<&NativeDropoutBackwardBackward0Saved::mask>("mask", FieldKind::Tensor),
       saved<&NativeDropoutBackwardBackward0Saved::scale>("scale", FieldKind::Float)}));

  registry.push_back(define_node<PreluKernelBackward0Saved, PreluKernelBackward0>(
      {"PreluKernelBackward0", "_prelu_kernel", {"self", "weight"}, 1, {},
       "self, weight: grad.defined() ? _prelu_kernel_backward(grad, self, weight) : std::tuple<Tensor, Tensor>()"},
      {saved<&PreluKernelBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&PreluKernelBackward0Saved::weight>("weight", FieldKind::Tensor)}));
}

}  // namespace refgrad::nodes
