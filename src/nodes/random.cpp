// Backward nodes: random sampling (normal, bernoulli) and rrelu, whose slope for negative inputs is
// drawn at random in training.
//
// A sample of normal or bernoulli is treated as a constant: derivatives.yaml gives every tensor
// input a zero gradient, of that input's shape (saved as mean_sym_sizes, std_sym_sizes, p_info) or of
// the grad's (the in-place forms, whose self has the output's shape). rrelu saves the slopes it drew
// (`noise`), so its backward is exact.
#include <vector>

#include "define.hpp"

namespace refgrad::nodes {
namespace {

// zeros of a saved size list, in the grad's dtype (at::zeros_symint(sizes, grad.options())).
Tensor zeros_of_sizes(const char* node, const char* field, const IntList& sizes, const Tensor& grad) {
  check_sizes(node, field, sizes);
  return zeros(sizes, grad.dtype());
}

// NormalBackward0 — normal_(Tensor(a!) self, float mean=0, float std=1, *, Generator? generator=None)
//   self: zeros_like(grad)
// BernoulliBackward0 — bernoulli(Tensor self, *, Generator? generator=None)
//   self: zeros_like(grad)
// BernoulliBackward2 — bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None)
//   self: zeros_like(grad)
// torch saves nothing for them.
struct NothingSaved {};

Grads ZerosLikeGrad(const Grads& grads, const NothingSaved&, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{zeros_like(*grads[0])};
}

// NormalBackward1 — normal.Tensor_float(Tensor mean, float std=1, *, Generator? generator=None)
//   mean: at::zeros_symint(mean.sym_sizes(), grad.options())
struct NormalBackward1Saved {
  IntList mean_sym_sizes;
};

Grads NormalBackward1(const Grads& grads, const NormalBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{zeros_of_sizes("NormalBackward1", "mean_sym_sizes", saved.mean_sym_sizes, *grads[0])};
}

// NormalBackward2 — normal.float_Tensor(float mean, Tensor std, *, Generator? generator=None)
//   std: at::zeros_symint(std.sym_sizes(), grad.options())
struct NormalBackward2Saved {
  IntList std_sym_sizes;
};

Grads NormalBackward2(const Grads& grads, const NormalBackward2Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{zeros_of_sizes("NormalBackward2", "std_sym_sizes", saved.std_sym_sizes, *grads[0])};
}

// NormalBackward3 — normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None)
//   mean: at::zeros_symint(mean.sym_sizes(), grad.options())
//   std: at::zeros_symint(std.sym_sizes(), grad.options())
struct NormalBackward3Saved {
  IntList mean_sym_sizes;
  IntList std_sym_sizes;
};

Grads NormalBackward3(const Grads& grads, const NormalBackward3Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  Grads out(2);
  if (need[0]) out[0] = zeros_of_sizes("NormalBackward3", "mean_sym_sizes", saved.mean_sym_sizes, *grads[0]);
  if (need[1]) out[1] = zeros_of_sizes("NormalBackward3", "std_sym_sizes", saved.std_sym_sizes, *grads[0]);
  return out;
}

// BernoulliBackward1 — bernoulli_.Tensor(Tensor(a!) self, Tensor p, *, Generator? generator=None)
//   self: zeros_like(grad)
//   p: zeros_like(p)
// zeros_like(p) is p_info.zeros(): p's sizes and dtype (p may be a broadcast smaller tensor).
struct BernoulliBackward1Saved {
  TypeAndSize p_info;
};

Grads BernoulliBackward1(const Grads& grads, const BernoulliBackward1Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = zeros_like(grad);
  if (need[1]) {
    check_sizes("BernoulliBackward1", "p_info", saved.p_info.sizes);
    out[1] = zeros(saved.p_info.sizes, saved.p_info.options.dtype.value_or(grad.dtype()));
  }
  return out;
}

// rrelu_with_noise_backward(grad_output, self_or_result, noise, lower, upper, training, is_result):
// in training the forward multiplied each element by its noise (1 where self > 0, the drawn slope
// elsewhere), so the grad is grad * noise (even for lower == upper, where the noise is that slope,
// rounded to self's dtype). In eval the forward was leaky_relu with the mean slope (lower + upper) / 2, and so is the backward:
// leaky_relu_backward(grad, self_or_result, (lower + upper) / 2, is_result), grad where
// self_or_result > 0, else grad * slope. From the result (the in-place form) the input's sign is only
// known for a slope >= 0, and ATen refuses the others.
Tensor rrelu_with_noise_backward(const char* node, const Tensor& grad, const Tensor& self_or_result,
                                 const Tensor& noise, const Scalar& lower, const Scalar& upper, bool training,
                                 bool is_result) {
  check_same_shape(node, grad, self_or_result, is_result ? "result" : "self");
  if (training) {
    check_same_shape(node, grad, noise, "noise");
    return mul(grad, noise);
  }
  const double negative_slope = (lower.to_double() + upper.to_double()) / 2;
  check(!is_result || negative_slope >= 0, node, ": in-place rrelu backward with a negative slope (",
        negative_slope, ") is not supported, as in PyTorch's leaky_relu_backward");
  return where(gt(self_or_result, Scalar(0)), grad, mul(grad, Scalar(negative_slope)));
}

// RreluWithNoiseBackward0 — rrelu_with_noise(Tensor self, Tensor(b!) noise, Scalar lower=0.125,
//                             Scalar upper=0.3333333333333333, bool training=False, Generator? generator=None)
//   self: rrelu_with_noise_backward(grad, self, noise, lower, upper, training, false)
struct RreluWithNoiseBackward0Saved {
  Scalar lower;
  Tensor noise;
  Tensor self;
  bool training;
  Scalar upper;
};

Grads RreluWithNoiseBackward0(const Grads& grads, const RreluWithNoiseBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{rrelu_with_noise_backward("RreluWithNoiseBackward0", *grads[0], saved.self, saved.noise, saved.lower,
                                         saved.upper, saved.training, false)};
}

// RreluWithNoiseBackward1 — rrelu_with_noise_(Tensor(a!) self, Tensor(b!) noise, Scalar lower=0.125,
//                             Scalar upper=0.3333333333333333, bool training=False, Generator? generator=None)
//   self: rrelu_with_noise_backward(grad, result, noise, lower, upper, training, true)
struct RreluWithNoiseBackward1Saved {
  Scalar lower;
  Tensor noise;
  bool training;
  Scalar upper;
  Tensor result;
};

Grads RreluWithNoiseBackward1(const Grads& grads, const RreluWithNoiseBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{rrelu_with_noise_backward("RreluWithNoiseBackward1", *grads[0], saved.result, saved.noise,
                                         saved.lower, saved.upper, saved.training, true)};
}

}  // namespace

void add_random_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<NothingSaved, ZerosLikeGrad>(
      {"NormalBackward0", "normal_", {"self"}, 1, {}, "self: zeros_like(grad)"}, {}));
  registry.push_back(define_node<NormalBackward1Saved, NormalBackward1>(
      {"NormalBackward1", "normal.Tensor_float", {"mean"}, 1, {},
       "mean: at::zeros_symint(mean.sym_sizes(), grad.options())"},
      {saved<&NormalBackward1Saved::mean_sym_sizes>("mean_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<NormalBackward2Saved, NormalBackward2>(
      {"NormalBackward2", "normal.float_Tensor", {"std"}, 1, {},
       "std: at::zeros_symint(std.sym_sizes(), grad.options())"},
      {saved<&NormalBackward2Saved::std_sym_sizes>("std_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<NormalBackward3Saved, NormalBackward3>(
      {"NormalBackward3", "normal.Tensor_Tensor", {"mean", "std"}, 1, {},
       "mean: at::zeros_symint(mean.sym_sizes(), grad.options())\n"
       "std: at::zeros_symint(std.sym_sizes(), grad.options())"},
      {saved<&NormalBackward3Saved::mean_sym_sizes>("mean_sym_sizes", FieldKind::Sizes),
       saved<&NormalBackward3Saved::std_sym_sizes>("std_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<NothingSaved, ZerosLikeGrad>(
      {"BernoulliBackward0", "bernoulli", {"self"}, 1, {}, "self: zeros_like(grad)"}, {}));
  registry.push_back(define_node<BernoulliBackward1Saved, BernoulliBackward1>(
      {"BernoulliBackward1", "bernoulli_.Tensor", {"self", "p"}, 1, {}, "self: zeros_like(grad)\np: zeros_like(p)"},
      {hidden<&BernoulliBackward1Saved::p_info>("p_info", FieldKind::TypeAndSize)}));
  registry.push_back(define_node<NothingSaved, ZerosLikeGrad>(
      {"BernoulliBackward2", "bernoulli_.float", {"self"}, 1, {}, "self: zeros_like(grad)"}, {}));
  registry.push_back(define_node<RreluWithNoiseBackward0Saved, RreluWithNoiseBackward0>(
      {"RreluWithNoiseBackward0", "rrelu_with_noise", {"self"}, 1, {},
       "self: rrelu_with_noise_backward(grad, self, noise, lower, upper, training, false)"},
      {saved<&RreluWithNoiseBackward0Saved::lower>("lower", FieldKind::Scalar),
       saved<&RreluWithNoiseBackward0Saved::noise>("noise", FieldKind::Tensor),
       saved<&RreluWithNoiseBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&RreluWithNoiseBackward0Saved::training>("training", FieldKind::Bool),
       saved<&RreluWithNoiseBackward0Saved::upper>("upper", FieldKind::Scalar)}));
  registry.push_back(define_node<RreluWithNoiseBackward1Saved, RreluWithNoiseBackward1>(
      {"RreluWithNoiseBackward1", "rrelu_with_noise_", {"self"}, 1, {},
       "self: rrelu_with_noise_backward(grad, result, noise, lower, upper, training, true)"},
      {saved<&RreluWithNoiseBackward1Saved::lower>("lower", FieldKind::Scalar),
       saved<&RreluWithNoiseBackward1Saved::noise>("noise", FieldKind::Tensor),
       saved<&RreluWithNoiseBackward1Saved::training>("training", FieldKind::Bool),
       saved<&RreluWithNoiseBackward1Saved::upper>("upper", FieldKind::Scalar),
       saved<&RreluWithNoiseBackward1Saved::result>("result", FieldKind::Tensor)}));
}

}  // namespace refgrad::nodes
