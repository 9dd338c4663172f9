// Loss nodes: nll_loss, nll_loss2d, mse_loss, binary_cross_entropy (with and
// without logits), smooth_l1_loss, huber_loss, soft_margin_loss, multi_margin_loss,
// multilabel_margin_loss, ctc_loss.
//
// `reduction` is saved as an int, at::Reduction's value: 0 none, 1 mean, 2 sum.
// l1_loss has no node (it is abs(sub) and mean in autograd), and
// cross_entropy is log_softmax + nll_loss (plus plain arithmetic nodes for
// label smoothing), so these cover torch.nn's common losses.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// at::Reduction's values.
namespace Reduction {
constexpr std::int64_t None = 0, Mean = 1, Sum = 2;
}

void check_reduction(const std::string& node, std::int64_t reduction) {
  check(reduction == Reduction::None || reduction == Reduction::Mean || reduction == Reduction::Sum, node,
        ": reduction must be 0 (none), 1 (mean) or 2 (sum), got ", reduction);
}

// at::native::nll_loss_backward and nll_loss2d_backward in one: self is
// [C], [N, C] or [N, C, H, W], the classes on `class_dim` (0 for [C], else 1),
// target the other dims. Each position receives -weight[target] * grad at its
// target class (grad / total_weight for mean), ignored positions nothing.
// (The ATen kernel loops over positions; here it is a scatter.)
Tensor nll_loss_backward(const std::string& node, const Tensor& grad, const Tensor& self, const Tensor& target,
                         const std::optional<Tensor>& weight, std::int64_t reduction, std::int64_t ignore_index,
                         const Tensor& total_weight) {
  check_reduction(node, reduction);
  check(self.dim() >= 1, node, ": self must have a class dim, got ", shape_text(self.sizes()));
  const std::int64_t class_dim = self.dim() == 1 ? 0 : 1;
  Shape target_sizes = self.sizes();
  target_sizes.erase(target_sizes.begin() + class_dim);
  check(target.dtype() == DType::Int64 && target.sizes() == target_sizes, node, ": expected an int64 target of shape ",
        shape_text(target_sizes), " for self ", shape_text(self.sizes()), ", got ", dtype_name(target.dtype()), " ",
        shape_text(target.sizes()));
  const std::int64_t classes = self.size(class_dim);
  check(!weight || (weight->dim() == 1 && weight->numel() == classes), node,
        ": weight should be defined either for all ", classes, " classes or no classes, got weight of shape ",
        shape_text(weight ? weight->sizes() : Shape{}));
  check(total_weight.numel() == 1, node, ": total_weight must have a single element, got shape ",
        shape_text(total_weight.sizes()));
  // With reduction none and a target with dims, the grad has one value per target; otherwise it is the
  // one value of the loss ([] or [1], as ATen accepts).
  const bool per_target = reduction == Reduction::None && target.dim() > 0;
  if (per_target)
    check(grad.sizes() == target.sizes(), node, ": with reduction none the grad ", shape_text(grad.sizes()),
          " must have the target's shape ", shape_text(target.sizes()));
  else
    check(grad.dim() <= 1 && grad.numel() == 1, node, ": expected a single element grad, got ",
          shape_text(grad.sizes()));
  const Tensor used = ne(target, ignore_index);
  const Tensor in_range = logical_and(ge(target, 0), lt(target, classes));
  const Tensor outside = logical_and(used, logical_not(in_range));
  if (sum(outside).item<std::int64_t>() > 0)
    fail(concat(node, ": target ", masked_select(target, outside).to_vector<std::int64_t>().front(),
                " is out of bounds [0, ", classes, ")"));
  if (classes == 0) return zeros_like(self);  // every target was ignored: nothing to scatter
  const Tensor safe_target = where(used, target, Scalar(0));
  const Tensor scalar_grad = per_target ? grad : reshape(grad, {});
  Tensor value = neg(reduction == Reduction::Mean ? div(scalar_grad, reshape(total_weight, {})) : scalar_grad);
  if (weight) value = mul(index(*weight, {safe_target}), value);
  // where, not a multiplication by the mask: ignored positions stay 0 even when
  // total_weight is 0 (everything ignored) and value is not finite.
  value = to(where(used, broadcast_to(value, target.sizes()), Scalar(0)), self.dtype());
  return scatter(zeros_like(self), class_dim, unsqueeze(safe_target, class_dim), unsqueeze(value, class_dim));
}

// NllLossBackward0 — nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction,
//                                     SymInt ignore_index) -> (Tensor output, Tensor total_weight)
//   self:   nll_loss_backward_symint(grad, self, target, weight, reduction, ignore_index, total_weight)
//   target: non_differentiable
// Only `output` is differentiable: the node takes one grad.
struct NllLossBackward0Saved {
  std::int64_t ignore_index;
  std::int64_t reduction;
  Tensor self;
  Tensor target;
  std::optional<Tensor> weight;
  Tensor total_weight;
};

Grads NllLossBackward0(const Grads& grads, const NllLossBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check(saved.self.dim() <= 2, "NllLossBackward0: self must be [C] or [N, C], got ", shape_text(saved.self.sizes()));
  return Grads{nll_loss_backward("NllLossBackward0", *grads[0], saved.self, saved.target, saved.weight,
                                 saved.reduction, saved.ignore_index, saved.total_weight)};
}

// NllLoss2DBackward0 — nll_loss2d_forward(Tensor self, Tensor target, Tensor? weight, int reduction,
//                                         SymInt ignore_index) -> (Tensor output, Tensor total_weight)
//   self:   nll_loss2d_backward_symint(grad, self, target, weight, reduction, ignore_index, total_weight)
//   target: non_differentiable
// self is [N, C, H, W] (nll_loss views other ranks >= 3 to it).
struct NllLoss2DBackward0Saved {
  std::int64_t ignore_index;
  std::int64_t reduction;
  Tensor self;
  Tensor target;
  std::optional<Tensor> weight;
  Tensor total_weight;
};

Grads NllLoss2DBackward0(const Grads& grads, const NllLoss2DBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check(saved.self.dim() == 4, "NllLoss2DBackward0: self must be [N, C, H, W], got ", shape_text(saved.self.sizes()));
  return Grads{nll_loss_backward("NllLoss2DBackward0", *grads[0], saved.self, saved.target, saved.weight,
                                 saved.reduction, saved.ignore_index, saved.total_weight)};
}

// The factor of the mean reduction: 1 / numel for mean, 1 otherwise.
double reduction_norm(std::int64_t reduction, const Tensor& input) {
  return reduction == Reduction::Mean ? 1.0 / static_cast<double>(input.numel()) : 1.0;
}

// at::native::mse_loss_backward: norm * (input - target) * grad, norm = 2 (2 / numel for mean).
Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target, std::int64_t reduction) {
  return mul(mul(sub(input, target), 2.0 * reduction_norm(reduction, input)), grad);
}

// MseLossBackward0 — mse_loss(Tensor self, Tensor target, int reduction=Mean)
//   self:   mse_loss_backward(grad, self, target, reduction)
//   target: mse_loss_backward(grad, target, self, reduction)
struct MseLossBackward0Saved {
  std::int64_t reduction;
  Tensor self;
  Tensor target;
};

Grads MseLossBackward0(const Grads& grads, const MseLossBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  check_reduction("MseLossBackward0", saved.reduction);
  Grads out(2);
  if (need[0]) out[0] = mse_loss_backward(*grads[0], saved.self, saved.target, saved.reduction);
  if (need[1]) out[1] = mse_loss_backward(*grads[0], saved.target, saved.self, saved.reduction);
  return out;
}

// Multiplies by the optional weight, then divides by numel for mean, as every
// binary_cross_entropy backward formula ends.
Tensor weight_and_reduce(Tensor grad_input, const std::optional<Tensor>& weight, std::int64_t reduction,
                         const Tensor& input) {
  if (weight) grad_input = mul(grad_input, *weight);
  if (reduction == Reduction::Mean) grad_input = div(grad_input, Scalar(input.numel()));
  return grad_input;
}

// BinaryCrossEntropyBackward0 — binary_cross_entropy(Tensor self, Tensor target, Tensor? weight=None,
//                                                    int reduction=Mean)
//   self:   binary_cross_entropy_backward(grad, self, target, weight, reduction)
//   target: binary_cross_entropy_target_backward(grad, self, target, weight, reduction)
// self: grad * (self - target) / max((1 - self) * self, 1e-12) (ATen's EPSILON);
// target: -logit(self) * grad; then * weight, / numel for mean.
struct BinaryCrossEntropyBackward0Saved {
  std::int64_t reduction;
  Tensor self;
  Tensor target;
  std::optional<Tensor> weight;
};

Grads BinaryCrossEntropyBackward0(const Grads& grads, const BinaryCrossEntropyBackward0Saved& saved,
                                  const Need& need) {
  if (!grads[0]) return Grads(2);
  check_reduction("BinaryCrossEntropyBackward0", saved.reduction);
  const Tensor& grad = *grads[0];
  const Tensor& self = saved.self;
  const Tensor one_minus_self = add(neg(self), Scalar(1));
  Grads out(2);
  if (need[0]) {
    const Tensor denominator = clamp(mul(one_minus_self, self), Scalar(1e-12), std::nullopt);
    out[0] = weight_and_reduce(div(mul(grad, sub(self, saved.target)), denominator), saved.weight,
                               saved.reduction, self);
  }
  if (need[1]) {
    const Tensor logit = log(div(self, one_minus_self));
    out[1] = weight_and_reduce(mul(neg(logit), grad), saved.weight, saved.reduction, saved.target);
  }
  return out;
}

// log(sigmoid(x)) without overflow: min(x, 0) - log1p(exp(-|x|)).
Tensor log_sigmoid(const Tensor& x) { return sub(clamp(x, std::nullopt, Scalar(0)), log1p(exp(neg(abs(x))))); }

// BinaryCrossEntropyWithLogitsBackward0 — binary_cross_entropy_with_logits(Tensor self, Tensor target,
//     Tensor? weight=None, Tensor? pos_weight=None, int reduction=Mean)
//   self:   binary_cross_entropy_with_logits_backward(grad, self, target, weight, pos_weight, reduction)
//   target: binary_cross_entropy_with_logits_target_backward(grad, self, target, weight, pos_weight, reduction)
// self:   ((pos_weight * target + 1 - target) * sigmoid(self) - pos_weight * target) * grad
//         (sigmoid(self) - target without pos_weight);
// target: (log_sigmoid(-self) - log_sigmoid(self) * pos_weight) * grad (-self * grad without);
// then * weight, / numel for mean.
struct BinaryCrossEntropyWithLogitsBackward0Saved {
  std::optional<Tensor> pos_weight;
  std::int64_t reduction;
  Tensor self;
  Tensor target;
  std::optional<Tensor> weight;
};

Grads BinaryCrossEntropyWithLogitsBackward0(const Grads& grads, const BinaryCrossEntropyWithLogitsBackward0Saved& saved,
                                            const Need& need) {
  if (!grads[0]) return Grads(2);
  check_reduction("BinaryCrossEntropyWithLogitsBackward0", saved.reduction);
  const Tensor& grad = *grads[0];
  const Tensor& self = saved.self;
  const Tensor& target = saved.target;
  Grads out(2);
  if (need[0]) {
    Tensor grad_input = sub(sigmoid(self), target);
    if (saved.pos_weight) {
      const Tensor t = mul(*saved.pos_weight, target);
      grad_input = sub(mul(sub(add(t, Scalar(1)), target), sigmoid(self)), t);
    }
    out[0] = weight_and_reduce(mul(grad_input, grad), saved.weight, saved.reduction, self);
  }
  if (need[1]) {
    Tensor grad_target = mul(neg(self), grad);
    if (saved.pos_weight)
      grad_target = mul(sub(log_sigmoid(neg(self)), mul(log_sigmoid(self), *saved.pos_weight)), grad);
    out[1] = weight_and_reduce(grad_target, saved.weight, saved.reduction, target);
  }
  return out;
}

// at::native::smooth_l1_loss_backward and huber_loss_backward, with x = input - target:
// x <= -limit: -norm * grad * slope; x >= limit: norm * grad * slope; else norm * grad * x * inner,
// where smooth L1 has limit beta, slope 1, inner 1/beta, and Huber limit delta, slope delta, inner 1.
// Both losses have a continuous first derivative (at |x| == limit both branches
// give the slope), so ATen's closed ends only choose which expression rounds.
Tensor piecewise_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target, std::int64_t reduction,
                               double limit, double slope, double inner) {
  const Tensor x = sub(input, target);
  const Tensor scaled_grad = mul(grad, reduction_norm(reduction, input));
  const Tensor outer_grad = mul(scaled_grad, slope);
  return where(le(x, -limit), neg(outer_grad), where(ge(x, limit), outer_grad, mul(mul(x, scaled_grad), inner)));
}

// SmoothL1LossBackward0 — smooth_l1_loss(Tensor self, Tensor target, int reduction=Mean, float beta=1.0)
//   self:   smooth_l1_loss_backward(grad, self, target, reduction, beta)
//   target: smooth_l1_loss_backward(grad, target, self, reduction, beta)
// (F.smooth_l1_loss with beta == 0 calls l1_loss instead, so beta > 0 here in practice.)
struct SmoothL1LossBackward0Saved {
  double beta;
  std::int64_t reduction;
  Tensor self;
  Tensor target;
};

Grads SmoothL1LossBackward0(const Grads& grads, const SmoothL1LossBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  check_reduction("SmoothL1LossBackward0", saved.reduction);
  check(saved.beta >= 0, "SmoothL1LossBackward0: beta must be >= 0, got ", saved.beta);
  Grads out(2);
  if (need[0])
    out[0] = piecewise_loss_backward(*grads[0], saved.self, saved.target, saved.reduction, saved.beta, 1.0,
                                     1.0 / saved.beta);
  if (need[1])
    out[1] = piecewise_loss_backward(*grads[0], saved.target, saved.self, saved.reduction, saved.beta, 1.0,
                                     1.0 / saved.beta);
  return out;
}

// HuberLossBackward0 — huber_loss(Tensor self, Tensor target, int reduction=Mean, float delta=1.0)
//   self:   huber_loss_backward(grad, self, target, reduction, delta)
//   target: huber_loss_backward(grad, target, self, reduction, delta)
struct HuberLossBackward0Saved {
  double delta;
  std::int64_t reduction;
  Tensor self;
  Tensor target;
};

Grads HuberLossBackward0(const Grads& grads, const HuberLossBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  check_reduction("HuberLossBackward0", saved.reduction);
  check(saved.delta > 0, "HuberLossBackward0: delta must be > 0, got ", saved.delta);
  Grads out(2);
  if (need[0])
    out[0] = piecewise_loss_backward(*grads[0], saved.self, saved.target, saved.reduction, saved.delta,
                                     saved.delta, 1.0);
  if (need[1])
    out[1] = piecewise_loss_backward(*grads[0], saved.target, saved.self, saved.reduction, saved.delta,
                                     saved.delta, 1.0);
  return out;
}


// SoftMarginLossBackward0 — soft_margin_loss(Tensor self, Tensor target, int reduction=Mean)
//   self: soft_margin_loss_backward(grad, self, target, reduction)
// The loss is log(1 + exp(-target * self)); at::native::soft_margin_loss_backward writes its
// derivative as -(target * z) / (1 + z) * norm * grad with z = exp(-target * self), norm = 1 / numel
// for mean (1 otherwise). refgrad keeps that order of operations, so it rounds as torch does.
struct SoftMarginLossBackward0Saved {
  std::int64_t reduction;
  Tensor self;
  Tensor target;
};

Grads SoftMarginLossBackward0(const Grads& grads, const SoftMarginLossBackward0Saved& saved, const Need& need) {
  const char* node = "SoftMarginLossBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_reduction(node, saved.reduction);
  const Tensor &self = saved.self, &target = saved.target, &grad = *grads[0];
  check(is_expandable_to(target.sizes(), self.sizes()), node, ": target ", shape_text(target.sizes()),
        " does not broadcast to self ", shape_text(self.sizes()));
  if (saved.reduction == Reduction::None)
    check(grad.sizes() == self.sizes(), node, ": with reduction none the grad ", shape_text(grad.sizes()),
          " must have self's shape ", shape_text(self.sizes()));
  else
    check(grad.numel() == 1, node, ": expected a single element grad, got ", shape_text(grad.sizes()));
  const Tensor z = exp(mul(neg(target), self));
  const Tensor grad_input = div(neg(mul(target, z)), add(z, Scalar(1)));
  return Grads{mul(mul(grad_input, reduction_norm(saved.reduction, self)), grad)};
}

// The [frames, classes] view that the margin losses compute on: ATen's shape checks accept self
// [C], [N, C] or a 0-d self (one frame of one class).
Tensor frames_of(const char* node, const Tensor& self) {
  check((self.dim() == 2 && self.size(1) != 0) || (self.dim() == 1 && self.size(0) != 0) || self.dim() == 0, node,
        ": expected self to be a non-empty vector or matrix with optional 0-dim batch size, got ",
        shape_text(self.sizes()));
  return self.dim() == 2 ? self : reshape(self, {1, self.numel()});
}

// Multiplies a margin loss's per-element grad_input [frames, classes] by the incoming grad: one value
// for mean and sum (and for reduction none of a single frame given as a vector), else one per frame.
Tensor times_incoming(const char* node, const Tensor& grad_input, const Tensor& grad, std::int64_t reduction,
                      bool per_frame) {
  if (reduction == Reduction::None && per_frame) {
    check(grad.dim() == 1 && grad.size(0) == grad_input.size(0), node, ": with reduction none the grad ",
          shape_text(grad.sizes()), " must have one value per frame (", grad_input.size(0), ")");
    return mul(grad_input, unsqueeze(grad, 1));
  }
  check(grad.numel() == 1, node, ": expected a single element grad, got ", shape_text(grad.sizes()));
  return mul(grad_input, reshape(grad, {}));
}

// MultiMarginLossBackward0 — multi_margin_loss(Tensor self, Tensor target, Scalar p=1, Scalar margin=1,
//                                              Tensor? weight=None, int reduction=Mean)
//   self:   multi_margin_loss_backward(grad, self, target, p, margin, weight, reduction)
//   target: non_differentiable
// Per frame with target class y, the loss is sum over d != y of w[y] * max(0, z_d)^p / C with
// z_d = margin - x[y] + x[d]. As ATen's CPU kernel: each class d != y with z_d > 0 gets
// h_d = w[y] * (p == 1 ? g : 2 g z_d), g = 1 / C (1 / (N C) for mean), and class y gets -sum_d h_d.
struct MultiMarginLossBackward0Saved {
  Scalar margin;
  Scalar p;
  std::int64_t reduction;
  Tensor self;
  Tensor target;
  std::optional<Tensor> weight;
};

Grads MultiMarginLossBackward0(const Grads& grads, const MultiMarginLossBackward0Saved& saved, const Need& need) {
  const char* node = "MultiMarginLossBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_reduction(node, saved.reduction);
  const double p = saved.p.to_double();
  check(p == 1 || p == 2, node, ": only p == 1 and p == 2 are supported, got p=", p);
  const Tensor x = frames_of(node, saved.self);
  const std::int64_t frames = x.size(0), classes = x.size(1);
  const Tensor& target = saved.target;
  check(target.dtype() == DType::Int64 && target.dim() <= 1 && target.numel() == frames, node,
        ": expected an int64 target of ", frames, " elements (one per frame of self ", shape_text(saved.self.sizes()),
        "), got ", dtype_name(target.dtype()), " ", shape_text(target.sizes()));
  if (x.numel() == 0) return Grads{zeros_like(saved.self)};
  const Tensor outside = logical_or(lt(target, 0), ge(target, classes));
  if (sum(outside).item<std::int64_t>() > 0)
    fail(concat(node, ": target ", masked_select(target, outside).to_vector<std::int64_t>().front(),
                " is out of range for ", classes, " classes"));
  check(!saved.weight || (saved.weight->dim() == 1 && saved.weight->numel() == classes), node,
        ": weight must have one value per class (", classes, "), got shape ",
        shape_text(saved.weight ? saved.weight->sizes() : Shape{}));
  const Tensor y = reshape(target, {frames, 1});
  const Tensor x_y = gather(x, 1, y);
  const Tensor z = add(add(neg(x_y), saved.margin), x);  // (margin - x[y]) + x[d], ATen's order
  const Tensor is_target_class = eq(unsqueeze(arange(Scalar(classes), DType::Int64), 0), y);
  const Tensor active = logical_and(gt(z, 0), logical_not(is_target_class));
  const double g = 1.0 / static_cast<double>(saved.reduction == Reduction::Mean ? frames * classes : classes);
  Tensor h = p == 1 ? full_like(x, g) : mul(z, 2 * g);
  if (saved.weight) h = mul(h, index(*saved.weight, {y}));
  h = where(active, h, Scalar(0));
  const Tensor grad_input = scatter(h, 1, y, neg(sum(h, IntList{1}, true)));
  const bool per_frame = saved.target.dim() > 0;
  return Grads{reshape(times_incoming(node, grad_input, *grads[0], saved.reduction, per_frame),
                       saved.self.sizes())};
}

// MultilabelMarginLossBackward0 — multilabel_margin_loss_forward(Tensor self, Tensor target, int reduction)
//                                     -> (Tensor output, Tensor is_target)
//   self:   multilabel_margin_loss_backward(grad, self, target, reduction, is_target)
//   target: non_differentiable
// Each frame's target row lists its classes up to the first -1; is_target marks them (1) among all
// classes. The loss sums max(0, 1 - x[j] + x[d]) / C over listed targets j and classes d that are not
// targets. As ATen's kernel, each such pair with a positive hinge adds g to class d and -g to class
// j, g = 1 / C (1 / (N C) for mean); a target listed twice counts twice. Only `output` is
// differentiable: the node takes one grad.
struct MultilabelMarginLossBackward0Saved {
  std::int64_t reduction;
  Tensor self;
  Tensor target;
  Tensor is_target;
};

Grads MultilabelMarginLossBackward0(const Grads& grads, const MultilabelMarginLossBackward0Saved& saved,
                                    const Need& need) {
  const char* node = "MultilabelMarginLossBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  check_reduction(node, saved.reduction);
  const Tensor x = frames_of(node, saved.self);
  const std::int64_t frames = x.size(0), classes = x.size(1);
  const bool vector_target = saved.self.dim() <= 1;
  check(saved.target.dtype() == DType::Int64 && saved.target.numel() == frames * classes &&
            (vector_target ? saved.target.dim() <= 1 : saved.target.sizes() == x.sizes()),
        node, ": expected an int64 target with self's shape ", shape_text(saved.self.sizes()), ", got ",
        dtype_name(saved.target.dtype()), " ", shape_text(saved.target.sizes()));
  check(saved.is_target.sizes() == saved.target.sizes(), node, ": is_target ", shape_text(saved.is_target.sizes()),
        " does not have target's shape ", shape_text(saved.target.sizes()));
  if (x.numel() == 0) return Grads{zeros_like(saved.self)};
  const Tensor target = reshape(saved.target, {frames, classes});
  const Tensor is_target = reshape(saved.is_target, {frames, classes});
  const Tensor outside = logical_or(lt(target, -1), ge(target, classes));
  if (sum(outside).item<std::int64_t>() > 0)
    fail(concat(node, ": target ", masked_select(target, outside).to_vector<std::int64_t>().front(),
                " is out of range for ", classes, " classes (-1 ends the list)"));
  const Tensor bad_mark = logical_and(ne(is_target, 0), ne(is_target, 1));
  check(sum(bad_mark).item<std::int64_t>() == 0, node, ": is_target must hold only 0 and 1");
  // listed[n, j]: slot j comes before the first -1 of row n.
  const Tensor listed = to(cumprod(to(ge(target, 0), DType::Int64), 1), DType::Bool);
  const Tensor j = where(listed, target, Scalar(0));
  const Tensor x_j = gather(x, 1, j);  // [frames, slots]
  // hinge[n, slot, d] = 1 - x[n, j] + x[n, d], for listed slots and non-target classes d.
  const Tensor hinge = add(add(neg(unsqueeze(x_j, 2)), Scalar(1)), unsqueeze(x, 1));
  const Tensor counted = logical_and(logical_and(gt(hinge, 0), unsqueeze(listed, 2)),
                                     unsqueeze(eq(is_target, 0), 1));
  const double g = 1.0 / static_cast<double>(saved.reduction == Reduction::Mean ? frames * classes : classes);
  const Tensor pairs = to(counted, x.dtype());
  const Tensor to_classes = mul(sum(pairs, IntList{1}), g);                // + g per pair, at d
  const Tensor from_targets = mul(sum(pairs, IntList{2}), -g);             // - g per pair, at j
  const Tensor grad_input = scatter_add(to_classes, 1, j, where(listed, from_targets, Scalar(0)));
  return Grads{reshape(times_incoming(node, grad_input, *grads[0], saved.reduction, !vector_target),
                       saved.self.sizes())};
}

// ---------------------------------------------------------------- ctc loss ---

// CtcLossBackward0 — _ctc_loss(Tensor log_probs, Tensor targets, int[] input_lengths, int[] target_lengths,
//                              int blank=0, bool zero_infinity=False) -> (Tensor, Tensor)
// CtcLossBackward1 — _ctc_loss.Tensor(Tensor log_probs, Tensor targets, Tensor input_lengths,
//                                     Tensor target_lengths, int blank=0, bool zero_infinity=False)
//   log_probs: _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, result0, result1,
//              blank, zero_infinity)
// Graves et al. (2006), in log space as ATen's ctc_loss_backward_cpu. For sequence b, of T = input_lengths[b]
// steps and a target l of L = target_lengths[b] labels, the extended target l' is l with blanks around and
// between its labels (S = 2L + 1). result1 is the forward's log_alpha [batch, max T, max S]; the backward
// runs the beta recursion from the end:
//   beta[T-1, S-1] = lp[T-1, blank], beta[T-1, S-2] = lp[T-1, l'(S-2)]
//   beta[t, s] = lp[t, l'(s)] + logsumexp(beta[t+1, s], beta[t+1, s+1], beta[t+1, s+2] if l'(s+2) != l'(s))
// and with nll = result0[b] (the loss, -log p(l | x)) and lp = log_probs[t, b, c]:
//   grad_log_probs[t, b, c] = grad[b] * (exp(lp) - exp(logsumexp_{s: l'(s) = c}(alpha[t, s] + beta[t, s]) + nll - lp))
// for t < T, 0 after. zero_infinity: a sequence whose nll is +inf (its target cannot be aligned) gets 0.
// The exact derivative in log_probs is the second term alone; the first, exp(lp) * grad[b], is ATen's:
// it sums to grad[b] over the classes, so that when log_probs are log_softmax's output (as ctc_loss
// wants them), log_softmax's backward turns both into the same grad of the logits.
// targets are [batch, max L] (padded) or the targets one after the other (1-d). log_alpha is not
// differentiable: the node takes one grad.
struct CtcLossBackward0Saved {
  std::int64_t blank;
  IntList input_lengths;
  Tensor log_probs;
  IntList target_lengths;
  Tensor targets;
  bool zero_infinity;
  Tensor result0;
  Tensor result1;
};

struct CtcLossBackward1Saved {
  std::int64_t blank;
  Tensor input_lengths;
  Tensor log_probs;
  Tensor target_lengths;
  Tensor targets;
  bool zero_infinity;
  Tensor result0;
  Tensor result1;
};

// log(exp(a) + exp(b) + exp(c)) without overflow; -inf when all are -inf.
template <class T>
T log_sum_exp3(T a, T b, T c) {
  const T top = std::max({a, b, c});
  if (top == -std::numeric_limits<T>::infinity()) return top;
  return top + std::log(std::exp(a - top) + std::exp(b - top) + std::exp(c - top));
}

// The loops of ctc_loss_backward, in T (float or double) as ATen's ctc_loss_backward_cpu_template.
template <class T>
Tensor ctc_loss_backward_loop(const char* node, const Tensor& grad, const Tensor& log_probs, const Tensor& targets,
                              const IntList& input_lengths, const IntList& target_lengths,
                              const Tensor& neg_log_likelihood, const Tensor& log_alpha, std::int64_t blank,
                              bool zero_infinity) {
  const std::int64_t max_t = log_probs.size(0), batch = log_probs.size(1), classes = log_probs.size(2);
  const std::vector<T> lp = log_probs.to_vector<T>(), alpha = log_alpha.to_vector<T>(),
                            grad_out = grad.to_vector<T>(), nll = neg_log_likelihood.to_vector<T>();
  const std::vector<std::int64_t> target_values = targets.to_vector<std::int64_t>();
  const std::int64_t alpha_s = log_alpha.size(2);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  auto log_prob = [&](std::int64_t t, std::int64_t b, std::int64_t c) {
    return lp[static_cast<std::size_t>((t * batch + b) * classes + c)];
  };
  std::vector<T> result(lp.size(), T(0));
  std::int64_t target_offset = 0;  // where sequence b's labels start in 1-d targets
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t t_len = input_lengths[static_cast<std::size_t>(b)], l_len = target_lengths[static_cast<std::size_t>(b)];
    const std::int64_t first = targets.dim() == 1 ? target_offset : b * targets.size(1);
    target_offset += l_len;
    const std::int64_t s_len = 2 * l_len + 1;
    // l'(s): blank at even s, the target's label (s - 1) / 2 at odd s.
    auto prime = [&](std::int64_t s) {
      if (s % 2 == 0) return blank;
      const std::int64_t label = target_values[static_cast<std::size_t>(first + (s - 1) / 2)];
      check(label >= 0 && label < classes, node, ": target ", label, " of sequence ", b, " is not a class of log_probs ",
            shape_text(log_probs.sizes()));
      return label;
    };
    const T loss = nll[static_cast<std::size_t>(b)];
    if (zero_infinity && loss == std::numeric_limits<T>::infinity()) continue;  // stays 0
    if (t_len == 0) continue;
    std::vector<T> beta(static_cast<std::size_t>(t_len * s_len), neg_inf);
    auto at = [&](std::int64_t t, std::int64_t s) -> T& { return beta[static_cast<std::size_t>(t * s_len + s)]; };
    at(t_len - 1, s_len - 1) = log_prob(t_len - 1, b, blank);
    if (l_len > 0) at(t_len - 1, s_len - 2) = log_prob(t_len - 1, b, prime(s_len - 2));
    for (std::int64_t t = t_len - 2; t >= 0; --t)
      for (std::int64_t s = 0; s < s_len; ++s) {
        const T stay = at(t + 1, s), next = s + 1 < s_len ? at(t + 1, s + 1) : neg_inf;
        const T skip = s + 2 < s_len && prime(s + 2) != prime(s) ? at(t + 1, s + 2) : neg_inf;
        at(t, s) = log_sum_exp3(stay, next, skip) + log_prob(t, b, prime(s));
      }
    for (std::int64_t t = 0; t < t_len; ++t) {
      std::vector<T> alpha_beta(static_cast<std::size_t>(classes), neg_inf);  // logsumexp over l'(s) = c
      for (std::int64_t s = 0; s < s_len; ++s) {
        T& sum_c = alpha_beta[static_cast<std::size_t>(prime(s))];
        sum_c = log_sum_exp3(sum_c, alpha[static_cast<std::size_t>((b * max_t + t) * alpha_s + s)] + at(t, s), neg_inf);
      }
      for (std::int64_t c = 0; c < classes; ++c) {
        const T l = log_prob(t, b, c);
        result[static_cast<std::size_t>((t * batch + b) * classes + c)] =
            (std::exp(l) - std::exp(alpha_beta[static_cast<std::size_t>(c)] + loss - l)) * grad_out[static_cast<std::size_t>(b)];
      }
    }
  }
  return to(from_vector(result, log_probs.sizes()), log_probs.dtype());
}

Tensor ctc_loss_backward(const char* node, const Tensor& grad, const Tensor& log_probs, const Tensor& targets,
                         const IntList& input_lengths, const IntList& target_lengths, const Tensor& neg_log_likelihood,
                         const Tensor& log_alpha, std::int64_t blank, bool zero_infinity) {
  check(log_probs.dim() == 3, node, ": log_probs ", shape_text(log_probs.sizes()), " is not [T, batch, classes]");
  check(log_probs.dtype() == DType::Float32 || log_probs.dtype() == DType::Float64, node,
        ": log_probs must be float32 or float64 (as ATen's CPU ctc_loss), got ", dtype_name(log_probs.dtype()));
  const std::int64_t max_t = log_probs.size(0), batch = log_probs.size(1), classes = log_probs.size(2);
  check(grad.sizes() == Shape{batch} && neg_log_likelihood.sizes() == Shape{batch}, node, ": grad ",
        shape_text(grad.sizes()), " and result0 ", shape_text(neg_log_likelihood.sizes()),
        " must be [batch] for log_probs ", shape_text(log_probs.sizes()));
  check(static_cast<std::int64_t>(input_lengths.size()) == batch &&
            static_cast<std::int64_t>(target_lengths.size()) == batch,
        node, ": input_lengths ", shape_text(input_lengths), " and target_lengths ", shape_text(target_lengths),
        " must have one length per sequence of log_probs ", shape_text(log_probs.sizes()));
  check(blank >= 0 && blank < classes, node, ": blank ", blank, " is not a class of log_probs ",
        shape_text(log_probs.sizes()));
  check(targets.dtype() == DType::Int64 || targets.dtype() == DType::Int32, node, ": targets must be integers, got ",
        dtype_name(targets.dtype()));
  check(targets.dim() == 1 || (targets.dim() == 2 && targets.size(0) == batch), node, ": targets ",
        shape_text(targets.sizes()), " are neither 1-d nor [batch, max target length]");
  std::int64_t max_l = 0, total_l = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t t_len = input_lengths[static_cast<std::size_t>(b)], l_len = target_lengths[static_cast<std::size_t>(b)];
    check(t_len >= 0 && t_len <= max_t, node, ": input_lengths[", b, "] = ", t_len, " is not in [0, ", max_t, "]");
    check(l_len >= 0 && (targets.dim() == 1 || l_len <= targets.size(1)), node, ": target_lengths[", b, "] = ", l_len,
          " does not fit targets ", shape_text(targets.sizes()));
    max_l = std::max(max_l, l_len);
    total_l += l_len;
  }
  check(targets.dim() == 2 || total_l <= targets.size(0), node, ": target_lengths ", shape_text(target_lengths),
        " add up to more than the ", targets.size(0), " targets");
  check(log_alpha.dim() == 3 && log_alpha.size(0) == batch && log_alpha.size(1) == max_t &&
            log_alpha.size(2) >= 2 * max_l + 1,
        node, ": result1 (log_alpha) ", shape_text(log_alpha.sizes()), " is not [", batch, ", ", max_t, ", ",
        2 * max_l + 1, "]");
  // In log_probs' own dtype (float or double), as ATen's kernel: float32 grads round as torch's do.
  if (log_probs.dtype() == DType::Float32)
    return ctc_loss_backward_loop<float>(node, grad, log_probs, targets, input_lengths, target_lengths,
                                         neg_log_likelihood, log_alpha, blank, zero_infinity);
  return ctc_loss_backward_loop<double>(node, grad, log_probs, targets, input_lengths, target_lengths,
                                        neg_log_likelihood, log_alpha, blank, zero_infinity);
}

Grads CtcLossBackward0(const Grads& grads, const CtcLossBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{ctc_loss_backward("CtcLossBackward0", *grads[0], saved.log_probs, saved.targets, saved.input_lengths,
                                 saved.target_lengths, saved.result0, saved.result1, saved.blank,
                                 saved.zero_infinity)};
}

// The lengths as int lists: int64 (or int32) vectors.
IntList lengths_of(const char* node, const char* field, const Tensor& lengths) {
  check(lengths.dim() == 1 && (lengths.dtype() == DType::Int64 || lengths.dtype() == DType::Int32), node, ": ",
        field, " must be a 1-d integer tensor, got ", dtype_name(lengths.dtype()), " ", shape_text(lengths.sizes()));
  const std::vector<std::int64_t> values = lengths.to_vector<std::int64_t>();
  return IntList(values.begin(), values.end());
}

Grads CtcLossBackward1(const Grads& grads, const CtcLossBackward1Saved& saved, const Need& need) {
  const char* node = "CtcLossBackward1";
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{ctc_loss_backward(node, *grads[0], saved.log_probs, saved.targets,
                                 lengths_of(node, "input_lengths", saved.input_lengths),
                                 lengths_of(node, "target_lengths", saved.target_lengths), saved.result0,
                                 saved.result1, saved.blank, saved.zero_infinity)};
}

}  // namespace

void add_loss_nodes(std::vector<NodeDef>& registry) {
  const std::string nll_formula =
      "self: nll_loss_backward_symint(grad, self, target, weight, reduction, ignore_index, total_weight)\n"
      "target: non_differentiable";
  {
    using S = NllLossBackward0Saved;
    registry.push_back(define_node<S, NllLossBackward0>(
        {"NllLossBackward0", "nll_loss_forward", {"self"}, 1, {}, nll_formula},
        {saved<&S::ignore_index>("ignore_index", FieldKind::Int), saved<&S::reduction>("reduction", FieldKind::Int),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::target>("target", FieldKind::Tensor),
         saved<&S::weight>("weight", FieldKind::Tensor, true),
         saved<&S::total_weight>("total_weight", FieldKind::Tensor)}));
  }
  {
    using S = NllLoss2DBackward0Saved;
    registry.push_back(define_node<S, NllLoss2DBackward0>(
        {"NllLoss2DBackward0", "nll_loss2d_forward", {"self"}, 1, {},
         "self: nll_loss2d_backward_symint(grad, self, target, weight, reduction, ignore_index, total_weight)\n"
         "target: non_differentiable"},
        {saved<&S::ignore_index>("ignore_index", FieldKind::Int), saved<&S::reduction>("reduction", FieldKind::Int),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::target>("target", FieldKind::Tensor),
         saved<&S::weight>("weight", FieldKind::Tensor, true),
         saved<&S::total_weight>("total_weight", FieldKind::Tensor)}));
  }
  {
    using S = MseLossBackward0Saved;
    registry.push_back(define_node<S, MseLossBackward0>(
        {"MseLossBackward0", "mse_loss", {"self", "target"}, 1, {},
         "self: mse_loss_backward(grad, self, target, reduction)\n"
         "target: mse_loss_backward(grad, target, self, reduction)"},
        {saved<&S::reduction>("reduction", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::target>("target", FieldKind::Tensor)}));
  }
  {
    using S = BinaryCrossEntropyBackward0Saved;
    registry.push_back(define_node<S, BinaryCrossEntropyBackward0>(
        {"BinaryCrossEntropyBackward0", "binary_cross_entropy", {"self", "target"}, 1, {},
         "self: binary_cross_entropy_backward(grad, self, target, weight, reduction)\n"
         "target: binary_cross_entropy_target_backward(grad, self, target, weight, reduction)"},
        {saved<&S::reduction>("reduction", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::target>("target", FieldKind::Tensor), saved<&S::weight>("weight", FieldKind::Tensor, true)}));
  }
  {
    using S = BinaryCrossEntropyWithLogitsBackward0Saved;
    registry.push_back(define_node<S, BinaryCrossEntropyWithLogitsBackward0>(
        {"BinaryCrossEntropyWithLogitsBackward0", "binary_cross_entropy_with_logits", {"self", "target"}, 1, {},
         "self: binary_cross_entropy_with_logits_backward(grad, self, target, weight, pos_weight, reduction)\n"
         "target: binary_cross_entropy_with_logits_target_backward(grad, self, target, weight, pos_weight, "
         "reduction)"},
        {saved<&S::pos_weight>("pos_weight", FieldKind::Tensor, true),
         saved<&S::reduction>("reduction", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::target>("target", FieldKind::Tensor), saved<&S::weight>("weight", FieldKind::Tensor, true)}));
  }
  {
    using S = SmoothL1LossBackward0Saved;
    registry.push_back(define_node<S, SmoothL1LossBackward0>(
        {"SmoothL1LossBackward0", "smooth_l1_loss", {"self", "target"}, 1, {},
         "self: smooth_l1_loss_backward(grad, self, target, reduction, beta)\n"
         "target: smooth_l1_loss_backward(grad, target, self, reduction, beta)"},
        {saved<&S::beta>("beta", FieldKind::Float), saved<&S::reduction>("reduction", FieldKind::Int),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::target>("target", FieldKind::Tensor)}));
  }
  {
    using S = HuberLossBackward0Saved;
    registry.push_back(define_node<S, HuberLossBackward0>(
        {"HuberLossBackward0", "huber_loss", {"self", "target"}, 1, {},
         "self: huber_loss_backward(grad, self, target, reduction, delta)\n"
         "target: huber_loss_backward(grad, target, self, reduction, delta)"},
        {saved<&S::delta>("delta", FieldKind::Float), saved<&S::reduction>("reduction", FieldKind::Int),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::target>("target", FieldKind::Tensor)}));
  }
  {
    using S = SoftMarginLossBackward0Saved;
    registry.push_back(define_node<S, SoftMarginLossBackward0>(
        {"SoftMarginLossBackward0", "soft_margin_loss", {"self"}, 1, {},
         "self: soft_margin_loss_backward(grad, self, target, reduction)"},
        {saved<&S::reduction>("reduction", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::target>("target", FieldKind::Tensor)}));
  }
  {
    using S = MultiMarginLossBackward0Saved;
    registry.push_back(define_node<S, MultiMarginLossBackward0>(
        {"MultiMarginLossBackward0", "multi_margin_loss", {"self"}, 1, {},
         "self: multi_margin_loss_backward(grad, self, target, p, margin, weight, reduction)\n"
         "target: non_differentiable"},
        {saved<&S::margin>("margin", FieldKind::Scalar), saved<&S::p>("p", FieldKind::Scalar),
         saved<&S::reduction>("reduction", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::target>("target", FieldKind::Tensor), saved<&S::weight>("weight", FieldKind::Tensor, true)}));
  }
  {
    using S = MultilabelMarginLossBackward0Saved;
    registry.push_back(define_node<S, MultilabelMarginLossBackward0>(
        {"MultilabelMarginLossBackward0", "multilabel_margin_loss_forward", {"self"}, 1, {},
         "self: multilabel_margin_loss_backward(grad, self, target, reduction, is_target)\n"
         "target: non_differentiable"},
        {saved<&S::reduction>("reduction", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::target>("target", FieldKind::Tensor), saved<&S::is_target>("is_target", FieldKind::Tensor)}));
  }
  {
    using S = CtcLossBackward0Saved;
    registry.push_back(define_node<S, CtcLossBackward0>(
        {"CtcLossBackward0", "_ctc_loss", {"log_probs"}, 1, {},
         "log_probs: _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, result0, result1, "
         "blank, zero_infinity)"},
        {saved<&S::blank>("blank", FieldKind::Int), saved<&S::input_lengths>("input_lengths", FieldKind::IntList),
         saved<&S::log_probs>("log_probs", FieldKind::Tensor),
         saved<&S::target_lengths>("target_lengths", FieldKind::IntList),
         saved<&S::targets>("targets", FieldKind::Tensor), saved<&S::zero_infinity>("zero_infinity", FieldKind::Bool),
         saved<&S::result0>("result0", FieldKind::Tensor), saved<&S::result1>("result1", FieldKind::Tensor)}));
  }
  {
    using S = CtcLossBackward1Saved;
    registry.push_back(define_node<S, CtcLossBackward1>(
        {"CtcLossBackward1", "_ctc_loss.Tensor", {"log_probs"}, 1, {},
         "log_probs: _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, result0, result1, "
         "blank, zero_infinity)"},
        {saved<&S::blank>("blank", FieldKind::Int), saved<&S::input_lengths>("input_lengths", FieldKind::Tensor),
         saved<&S::log_probs>("log_probs", FieldKind::Tensor),
         saved<&S::target_lengths>("target_lengths", FieldKind::Tensor),
         saved<&S::targets>("targets", FieldKind::Tensor), saved<&S::zero_infinity>("zero_infinity", FieldKind::Bool),
         saved<&S::result0>("result0", FieldKind::Tensor), saved<&S::result1>("result1", FieldKind::Tensor)}));
  }
}

}  // namespace refgrad::nodes
