// Backward nodes: the nn group (normalization, convolution, pooling, upsampling, attention).
#include <algorithm>
#include <cmath>
#include <limits>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// ------------------------------------------------------------------ helpers ---

// sum over `dims`, but t itself when there is nothing to reduce (L0's sum
// reads an empty dim list as "every dim").
Tensor sum_over(const Tensor& t, const IntList& dims) { return dims.empty() ? t : sum(t, dims); }

IntList dims_range(std::int64_t from, std::int64_t to) {
  IntList dims;
  for (std::int64_t d = from; d < to; ++d) dims.push_back(d);
  return dims;
}

// Every dim except the channel dim 1 (batch norm's and the bias's reduction).
IntList all_but_channel(std::int64_t ndim) {
  IntList dims = {0};
  for (std::int64_t d = 2; d < ndim; ++d) dims.push_back(d);
  return dims;
}

// [1, C, 1, ...]: a per-channel vector shaped to broadcast against an [N, C, ...] tensor.
Tensor per_channel(const Tensor& v, std::int64_t ndim) {
  Shape shape(static_cast<std::size_t>(ndim), 1);
  shape[1] = -1;
  return reshape(v, shape);
}

// ATen's pooling_output_shape (Pool.h): the output length of one pooled dim.
std::int64_t pooling_output_size(std::int64_t input, std::int64_t kernel, std::int64_t pad, std::int64_t stride,
                                 std::int64_t dilation, bool ceil_mode) {
  const std::int64_t numerator = input + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  std::int64_t out = (numerator >= 0 ? numerator / stride : -((-numerator + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= input + pad) --out;  // the last window must start inside the input
  return out;
}

// ------------------------------------------------------------- layer norm ---

// NativeLayerNormBackward0 — native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight,
//                                              Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)
//   input, weight, bias: grad.defined() ? native_layer_norm_backward_symint(grad, input, normalized_shape,
//                        result1, result2, weight, bias, grad_input_mask) : std::tuple<Tensor, Tensor, Tensor>()
// result1 is the mean and result2 the rstd = 1/sqrt(var + eps) over the normalized dims, shaped
// [outer..., 1, ..., 1]. mean and rstd are not differentiable outputs, so torch's node takes one grad (it
// records no input for them). With x_hat =
// (input - mean) * rstd and dx_hat = grad * weight:
//   input:  rstd * (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat))   (means over the normalized dims)
//   weight: sum(grad * x_hat) over the outer dims;  bias: sum(grad) over the outer dims.
struct NativeLayerNormBackward0Saved {
  std::optional<Tensor> bias;
  Tensor input;
  IntList normalized_shape;
  std::optional<Tensor> weight;
  Tensor result1;
  Tensor result2;
};

Grads NativeLayerNormBackward0(const Grads& grads, const NativeLayerNormBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor &grad = *grads[0], &input = saved.input;
  const auto axis = input.dim() - static_cast<std::int64_t>(saved.normalized_shape.size());
  check(axis >= 0 && Shape(input.sizes().begin() + axis, input.sizes().end()) == saved.normalized_shape,
        "NativeLayerNormBackward0: input ", shape_text(input.sizes()), " does not end in normalized_shape ",
        shape_text(saved.normalized_shape));
  Shape stat_shape = input.sizes();
  std::fill(stat_shape.begin() + axis, stat_shape.end(), 1);
  check(saved.result1.numel() == numel_of(stat_shape) && saved.result2.numel() == numel_of(stat_shape),
        "NativeLayerNormBackward0: mean ", shape_text(saved.result1.sizes()), " and rstd ", shape_text(saved.result2.sizes()),
        " do not fit input ", shape_text(input.sizes()));
  const Tensor mu = reshape(saved.result1, stat_shape), rstd = reshape(saved.result2, stat_shape);
  const IntList inner = dims_range(axis, input.dim()), outer = dims_range(0, axis);
  const Tensor x_hat = mul(sub(input, mu), rstd);
  Grads out(3);
  if (need[0]) {
    const Tensor dx_hat = saved.weight ? mul(grad, *saved.weight) : grad;
    const Tensor centered = sub(dx_hat, mean(dx_hat, inner, true));
    out[0] = mul(rstd, sub(centered, mul(x_hat, mean(mul(dx_hat, x_hat), inner, true))));
  }
  if (need[1]) out[1] = sum_over(mul(grad, x_hat), outer);
  if (need[2]) out[2] = sum_over(grad, outer);
  return out;
}

// -------------------------------------------------------------- batch norm ---

// NativeBatchNormBackward0 — native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean,
//                            Tensor? running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)
//   input, weight, bias: grad.defined() ? native_batch_norm_backward(grad, input, weight, running_mean,
//                        running_var, result1, result2, training, eps, grad_input_mask) : std::tuple<...>()
// On CPU, nn.BatchNorm2d produces this node both in train and in eval mode.
// training: result1 = the batch mean, result2 = the batch invstd (per channel), and the batch
//   statistics depend on the input: input = weight * invstd * (g - mean(g) - x_hat * mean(g * x_hat)).
// eval: result1 and result2 are empty; the statistics are the running ones, constants:
//   input = g * weight / sqrt(running_var + eps).
// weight: sum(g * x_hat), bias: sum(g), over every dim but the channel dim 1.
// The statistics outputs are not differentiable: torch's node takes one grad.
struct NativeBatchNormBackward0Saved {
  double eps;
  Tensor input;
  std::optional<Tensor> running_mean;
  std::optional<Tensor> running_var;
  bool training;
  std::optional<Tensor> weight;
  Tensor result1;
  Tensor result2;
};

// The per-channel mean and invstd the forward normalized with: the batch's
// (result1, result2) in training, the running ones in eval.
std::pair<Tensor, Tensor> batch_norm_statistics(const NativeBatchNormBackward0Saved& saved) {
  const std::int64_t channels = saved.input.size(1);
  Tensor mu, invstd;
  if (saved.training) {
    mu = saved.result1, invstd = saved.result2;
  } else {
    check(saved.running_mean && saved.running_var,
          "NativeBatchNormBackward0: eval mode needs running_mean and running_var, which were not saved");
    mu = *saved.running_mean, invstd = rsqrt(add(*saved.running_var, Scalar(saved.eps)));
  }
  check(mu.numel() == channels && invstd.numel() == channels, "NativeBatchNormBackward0: statistics ",
        shape_text(mu.sizes()), " and ", shape_text(invstd.sizes()), " do not match the ", channels, " channels of input ",
        shape_text(saved.input.sizes()));
  return {per_channel(mu, saved.input.dim()), per_channel(invstd, saved.input.dim())};
}

Grads NativeBatchNormBackward0(const Grads& grads, const NativeBatchNormBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor &grad = *grads[0], &input = saved.input;
  check(input.dim() >= 2, "NativeBatchNormBackward0: input ", shape_text(input.sizes()), " has no channel dim");
  const auto [mu, invstd] = batch_norm_statistics(saved);
  const IntList reduce = all_but_channel(input.dim());
  const Tensor x_hat = mul(sub(input, mu), invstd);
  Grads out(3);
  if (need[0]) {
    const Tensor scale = saved.weight ? mul(invstd, per_channel(*saved.weight, input.dim())) : invstd;
    if (saved.training) {
      const Tensor centered = sub(grad, mean(grad, reduce, true));
      out[0] = mul(scale, sub(centered, mul(x_hat, mean(mul(grad, x_hat), reduce, true))));
    } else {
      out[0] = mul(grad, scale);
    }
  }
  if (need[1]) out[1] = sum(mul(grad, x_hat), reduce);
  if (need[2]) out[2] = sum(grad, reduce);
  return out;
}

// BatchNormWithUpdateBackward0 — _batch_norm_with_update(Tensor input, Tensor? weight, Tensor? bias,
//     Tensor(a!) running_mean, Tensor(b!) running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)
//   input, weight, bias: grad.defined() ? batch_norm_backward(grad, input, weight, running_mean, running_var,
//                        result1, result2, /*update*/true, eps, grad_input_mask, result3) : std::tuple<...>()
// It always normalizes with the batch statistics, so its backward is NativeBatchNormBackward0's in
// training mode; result3 (cuDNN's reserve space) is empty on CPU and not read. Only the first of the
// four outputs is differentiable, so torch's node takes one grad.
struct BatchNormWithUpdateBackward0Saved {
  double eps;
  Tensor input;
  std::optional<Tensor> running_mean;
  std::optional<Tensor> running_var;
  std::optional<Tensor> weight;
  Tensor result1;
  Tensor result2;
  Tensor result3;
};

Grads BatchNormWithUpdateBackward0(const Grads& grads, const BatchNormWithUpdateBackward0Saved& saved,
                                   const Need& need) {
  const NativeBatchNormBackward0Saved training{saved.eps,         saved.input,  saved.running_mean, saved.running_var,
                                               /*training=*/true, saved.weight, saved.result1,      saved.result2};
  return NativeBatchNormBackward0(grads, training, need);
}

// -------------------------------------------------------------- group norm ---

// NativeGroupNormBackward0 — native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C,
//                                              SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)
//   input, weight, bias: GradMode::is_enabled() || grads[1].defined() || grads[2].defined()
//     ? infinitely_differentiable_native_group_norm_backward(grads[0], grads[1], grads[2], ...)
//     : (grads[0].defined() ? native_group_norm_backward_symint(grads[0], input, result1, result2, weight,
//        N, C, HxW, group, grad_input_mask) : std::tuple<Tensor, Tensor, Tensor>())
// result1 = mean, result2 = rstd, both [N, group]. With the input viewed as [N, group, C/group * HxW]:
//   input:  rstd * (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)), dx_hat = grad * weight[c]
//   weight: sum(grad * x_hat) over N and HxW;  bias: sum(grad) over N and HxW.
// Grads of the mean and rstd outputs (grads[1], grads[2]) are not supported yet.
struct NativeGroupNormBackward0Saved {
  std::int64_t C;
  std::int64_t HxW;
  std::int64_t N;
  double eps;
  std::int64_t group;
  Tensor input;
  std::optional<Tensor> weight;
  Tensor result1;
  Tensor result2;
};

Grads NativeGroupNormBackward0(const Grads& grads, const NativeGroupNormBackward0Saved& saved, const Need& need) {
  check(!grads[1] && !grads[2],
        "NativeGroupNormBackward0: gradients of the mean and rstd outputs are not supported yet");
  if (!grads[0]) return Grads(3);
  const Tensor &grad = *grads[0], &input = saved.input;
  const std::int64_t N = saved.N, C = saved.C, HxW = saved.HxW, G = saved.group;
  check(G > 0 && C % G == 0 && input.numel() == N * C * HxW && grad.sizes() == input.sizes() &&
            saved.result1.numel() == N * G && saved.result2.numel() == N * G,
        "NativeGroupNormBackward0: input ", shape_text(input.sizes()), ", grad ", shape_text(grad.sizes()), ", mean ",
        shape_text(saved.result1.sizes()), " and rstd ", shape_text(saved.result2.sizes()), " do not fit N=", N, " C=", C,
        " HxW=", HxW, " group=", G);
  const Tensor mu = reshape(saved.result1, {N, G, 1}), rstd = reshape(saved.result2, {N, G, 1});
  const Tensor x_hat = reshape(mul(sub(reshape(input, {N, G, -1}), mu), rstd), {N, C, HxW});
  const Tensor g = reshape(grad, {N, C, HxW});
  Grads out(3);
  if (need[0]) {
    const Tensor dx_hat = reshape(saved.weight ? mul(g, reshape(*saved.weight, {1, C, 1})) : g, {N, G, -1});
    const Tensor x_hat_g = reshape(x_hat, {N, G, -1});
    const Tensor centered = sub(dx_hat, mean(dx_hat, {2}, true));
    out[0] = reshape(mul(rstd, sub(centered, mul(x_hat_g, mean(mul(dx_hat, x_hat_g), {2}, true)))), input.sizes());
  }
  if (need[1]) out[1] = sum(mul(g, x_hat), {0, 2});
  if (need[2]) out[2] = sum(g, {0, 2});
  return out;
}

// ------------------------------------------------------------- convolution ---

// The grad of a convolution's weight, one group at a time: the weight gradient correlates the input
// with the output grad, which is itself a convolution with batch and channel dims swapped and the
// roles of stride and dilation exchanged; its extra trailing positions are cut to the kernel size.
//   non-transposed: grad_weight[co, ci, k] = sum_{n,o} grad[n, co, o] * input[n, ci, o*stride - pad + k*dil]
//   transposed:     grad_weight[ci, co, k] = sum_{n,i} input[n, ci, i] * grad[n, co, i*stride - pad + k*dil]
Tensor convolution_weight_grad(const Tensor& grad, const Tensor& input, const Tensor& weight, const IntList& stride,
                               const IntList& padding, const IntList& dilation, bool transposed,
                               std::int64_t groups) {
  const std::int64_t in_per_group = input.size(1) / groups, out_per_group = grad.size(1) / groups;
  TensorList per_group;
  for (std::int64_t g = 0; g < groups; ++g) {
    const Tensor input_g = transpose(narrow(input, 1, g * in_per_group, in_per_group), 0, 1);
    const Tensor grad_g = transpose(narrow(grad, 1, g * out_per_group, out_per_group), 0, 1);
    // [C_in/g, C_out/g, K'] when non-transposed, [C_out/g, C_in/g, K'] when transposed.
    Tensor w = transposed ? convolution(grad_g, input_g, std::nullopt, dilation, padding, stride, false,
                                        IntList(stride.size(), 0), 1)
                          : convolution(input_g, grad_g, std::nullopt, dilation, padding, stride, false,
                                        IntList(stride.size(), 0), 1);
    for (std::int64_t d = 2; d < weight.dim(); ++d) w = narrow(w, d, 0, weight.size(d));
    per_group.push_back(transpose(w, 0, 1));
  }
  return groups == 1 ? contiguous(per_group[0]) : cat(per_group, 0);
}

// ConvolutionBackward0 — convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding,
//                        SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor
//   input, weight, bias: grad.defined() ? convolution_backward_symint(grad, input, weight, bias->sym_sizes(),
//                        stride, padding, dilation, transposed, output_padding, groups, grad_input_mask) : tuple()
// input: the adjoint of the forward, a transposed convolution of grad with the same weight (a plain
// convolution when the forward was transposed); output_padding recovers the input's exact size.
// weight: see convolution_weight_grad. bias: sum(grad) over every dim but 1.
// 1-d and 2-d convolutions of batched inputs (the forward functional batches an unbatched input).
struct ConvolutionBackward0Saved {
  std::optional<IntList> bias_sym_sizes_opt;
  IntList dilation;
  std::int64_t groups;
  Tensor input;
  IntList output_padding;
  IntList padding;
  IntList stride;
  bool transposed;
  Tensor weight;
};

// convolution_backward's input grad: the adjoint of the forward convolution.
Tensor convolution_input_grad(const Tensor& grad, const Tensor& input, const Tensor& weight,
                              const ConvolutionBackward0Saved& saved) {
  const std::size_t spatial = static_cast<std::size_t>(input.dim()) - 2;
  if (saved.transposed) {
    Tensor grad_input = convolution(grad, weight, std::nullopt, saved.stride, saved.padding, saved.dilation, false,
                                    IntList(spatial, 0), saved.groups);
    for (std::size_t d = 0; d < spatial; ++d) grad_input = narrow(grad_input, 2 + d, 0, input.size(2 + d));
    return grad_input;
  }
  // The transposed convolution's natural output is (O-1)*s - 2p + d*(k-1) + 1; the rows the forward's
  // floor division dropped come back as output_padding.
  IntList output_padding(spatial);
  for (std::size_t d = 0; d < spatial; ++d) {
    const std::int64_t natural = (grad.size(2 + d) - 1) * saved.stride[d] - 2 * saved.padding[d] +
                                 saved.dilation[d] * (weight.size(2 + d) - 1) + 1;
    output_padding[d] = input.size(2 + d) - natural;
  }
  return convolution(grad, weight, std::nullopt, saved.stride, saved.padding, saved.dilation, true, output_padding,
                     saved.groups);
}

void check_convolution_shapes(const Tensor& grad, const ConvolutionBackward0Saved& saved) {
  const Tensor &input = saved.input, &weight = saved.weight;
  const auto spatial = static_cast<std::size_t>(input.dim()) - 2;
  check(input.dim() == 3 || input.dim() == 4, "ConvolutionBackward0: ", input.dim() - 2,
        "-d convolution (input ", shape_text(input.sizes()), ") is not supported yet; 1-d and 2-d are");
  check(weight.dim() == input.dim() && grad.dim() == input.dim() && saved.stride.size() == spatial &&
            saved.padding.size() == spatial && saved.dilation.size() == spatial &&
            saved.output_padding.size() == spatial && saved.groups > 0 && input.size(1) % saved.groups == 0 &&
            grad.size(1) % saved.groups == 0,
        "ConvolutionBackward0: grad ", shape_text(grad.sizes()), ", input ", shape_text(input.sizes()), " and weight ",
        shape_text(weight.sizes()), " do not fit stride ", shape_text(saved.stride), ", padding ", shape_text(saved.padding),
        ", dilation ", shape_text(saved.dilation), ", groups ", saved.groups);
}

Grads ConvolutionBackward0(const Grads& grads, const ConvolutionBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  check_convolution_shapes(grad, saved);
  Grads out(3);
  if (need[0]) out[0] = convolution_input_grad(grad, saved.input, saved.weight, saved);
  if (need[1])
    out[1] = convolution_weight_grad(grad, saved.input, saved.weight, saved.stride, saved.padding, saved.dilation,
                                     saved.transposed, saved.groups);
  if (need[2]) out[2] = sum(grad, all_but_channel(grad.dim()));
  return out;
}

// ----------------------------------------------------------------- pooling ---

// MaxPool2DWithIndicesBackward0 — max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[],
//                                 int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)
//   self: max_pool2d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, result1)
// result1 holds the indices: for each output, the flat position (h * W + w) of the chosen maximum in its
// H*W plane. The indices decide ties; overlapping windows that chose the same element add up. The
// indices output is not differentiable: torch's node takes one grad.
struct MaxPool2DWithIndicesBackward0Saved {
  bool ceil_mode;
  IntList dilation;
  IntList kernel_size;
  IntList padding;
  Tensor self;
  IntList stride;
  Tensor result1;
};

Grads MaxPool2DWithIndicesBackward0(const Grads& grads, const MaxPool2DWithIndicesBackward0Saved& saved,
                                    const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self, &indices = saved.result1;
  check((self.dim() == 3 || self.dim() == 4) && grad.sizes() == indices.sizes() && grad.dim() == self.dim() &&
            std::equal(self.sizes().begin(), self.sizes().end() - 2, grad.sizes().begin()),
        "MaxPool2DWithIndicesBackward0: grad ", shape_text(grad.sizes()), " and indices ", shape_text(indices.sizes()),
        " do not fit self ", shape_text(self.sizes()));
  check(indices.dtype() == DType::Int64, "MaxPool2DWithIndicesBackward0: indices must be int64, got ",
        dtype_name(indices.dtype()));
  const std::int64_t plane = self.size(-2) * self.size(-1);
  const Tensor flat_grad = reshape(grad, {-1, grad.size(-2) * grad.size(-1)});
  const Tensor flat_indices = reshape(indices, {-1, grad.size(-2) * grad.size(-1)});
  const Tensor zero = zeros({flat_grad.size(0), plane}, grad.dtype());
  return Grads{reshape(scatter_add(zero, 1, flat_indices, flat_grad), self.sizes())};
}

// A pooling backward with windows that depend on the position (clipped at the borders, ceil_mode,
// adaptive sizes) is not a composition of L0 primitives short of building a sparse matrix, so the two
// average-pool backwards below loop over the [planes, H, W] values with this helper: it adds
// grad[p, oh, ow] / divisor into every input position of the window the function gives.
struct Window {
  std::int64_t h0, h1, w0, w1;  // [h0, h1) x [w0, w1), inside the input
  double divisor;
};

template <class WindowOf>
Tensor scatter_windows(const Tensor& grad, const Shape& self_sizes, WindowOf window_of) {
  const std::int64_t H = self_sizes.end()[-2], W = self_sizes.end()[-1];
  const std::int64_t OH = grad.size(-2), OW = grad.size(-1), planes = grad.numel() / std::max<std::int64_t>(OH * OW, 1);
  const std::vector<double> g = grad.to_vector<double>();
  std::vector<double> grad_input(static_cast<std::size_t>(planes * H * W), 0.0);
  for (std::int64_t oh = 0; oh < OH; ++oh) {
    for (std::int64_t ow = 0; ow < OW; ++ow) {
      const Window win = window_of(oh, ow);
      for (std::int64_t p = 0; p < planes; ++p) {
        const double delta = g[static_cast<std::size_t>((p * OH + oh) * OW + ow)] / win.divisor;
        for (std::int64_t ih = win.h0; ih < win.h1; ++ih)
          for (std::int64_t iw = win.w0; iw < win.w1; ++iw)
            grad_input[static_cast<std::size_t>((p * H + ih) * W + iw)] += delta;
      }
    }
  }
  return to(from_vector(grad_input, self_sizes), grad.dtype());
}

// AvgPool2DBackward0 — avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0,
//                      bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor
//   self: avg_pool2d_backward(grad, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
//         divisor_override)
// Each output spreads grad / divisor over its window, as ATen's CPU kernel: the divisor is
// divisor_override, else the window's size counted with padding (but not past it, as ceil_mode's last
// window may go) when count_include_pad, else the window's size inside the input. An empty stride
// means stride = kernel_size.
struct AvgPool2DBackward0Saved {
  bool ceil_mode;
  bool count_include_pad;
  std::optional<std::int64_t> divisor_override;
  IntList kernel_size;
  IntList padding;
  Tensor self;
  IntList stride;
};

// An int[2] argument as two numbers: one number stands for both dims, none for when_empty.
IntList int2(const IntList& v, const IntList& when_empty) {
  if (v.empty()) return when_empty;
  return v.size() == 1 ? IntList{v[0], v[0]} : v;
}

Grads AvgPool2DBackward0(const Grads& grads, const AvgPool2DBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  const IntList kernel = int2(saved.kernel_size, {}), stride = int2(saved.stride, kernel),
                padding = int2(saved.padding, {0, 0});
  check((self.dim() == 3 || self.dim() == 4) && grad.dim() == self.dim() && kernel.size() == 2 &&
            stride.size() == 2 && padding.size() == 2 && stride[0] > 0 && stride[1] > 0 &&
            std::equal(self.sizes().begin(), self.sizes().end() - 2, grad.sizes().begin()) &&
            grad.size(-2) == pooling_output_size(self.size(-2), kernel[0], padding[0], stride[0], 1, saved.ceil_mode) &&
            grad.size(-1) == pooling_output_size(self.size(-1), kernel[1], padding[1], stride[1], 1, saved.ceil_mode),
        "AvgPool2DBackward0: grad ", shape_text(grad.sizes()), " is not the avg_pool2d output of self ", shape_text(self.sizes()),
        " with kernel_size ", shape_text(saved.kernel_size), ", stride ", shape_text(saved.stride), ", padding ",
        shape_text(saved.padding));
  check(!saved.divisor_override || *saved.divisor_override != 0, "AvgPool2DBackward0: divisor_override is 0");
  const std::int64_t H = self.size(-2), W = self.size(-1);
  return Grads{scatter_windows(grad, self.sizes(), [&](std::int64_t oh, std::int64_t ow) {
    std::int64_t h0 = oh * stride[0] - padding[0], w0 = ow * stride[1] - padding[1];
    std::int64_t h1 = std::min(h0 + kernel[0], H + padding[0]), w1 = std::min(w0 + kernel[1], W + padding[1]);
    const std::int64_t padded_size = (h1 - h0) * (w1 - w0);
    h0 = std::max<std::int64_t>(h0, 0), w0 = std::max<std::int64_t>(w0, 0);
    h1 = std::min(h1, H), w1 = std::min(w1, W);
    const std::int64_t divisor = saved.divisor_override ? *saved.divisor_override
                                 : saved.count_include_pad ? padded_size
                                                           : (h1 - h0) * (w1 - w0);
    return Window{h0, h1, w0, w1, static_cast<double>(divisor)};
  })};
}

// AdaptiveAvgPool2DBackward0 — _adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor
//   self: _adaptive_avg_pool2d_backward(grad, self)
// Output (oh, ow) averages rows [floor(oh*H/OH), ceil((oh+1)*H/OH)) and the same for columns; the output
// size is grad's. (An output_size of 1 gives MeanBackward1 instead: the functional calls mean.)
struct AdaptiveAvgPool2DBackward0Saved {
  Tensor self;
};

Grads AdaptiveAvgPool2DBackward0(const Grads& grads, const AdaptiveAvgPool2DBackward0Saved& saved,
                                 const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  check((self.dim() == 3 || self.dim() == 4) && grad.dim() == self.dim() && grad.size(-2) > 0 &&
            grad.size(-1) > 0 && std::equal(self.sizes().begin(), self.sizes().end() - 2, grad.sizes().begin()),
        "AdaptiveAvgPool2DBackward0: grad ", shape_text(grad.sizes()), " does not fit self ", shape_text(self.sizes()));
  const std::int64_t H = self.size(-2), W = self.size(-1), OH = grad.size(-2), OW = grad.size(-1);
  auto start = [](std::int64_t o, std::int64_t in, std::int64_t out) { return (o * in) / out; };
  auto end = [](std::int64_t o, std::int64_t in, std::int64_t out) { return ((o + 1) * in + out - 1) / out; };
  return Grads{scatter_windows(grad, self.sizes(), [&](std::int64_t oh, std::int64_t ow) {
    const std::int64_t h0 = start(oh, H, OH), h1 = end(oh, H, OH), w0 = start(ow, W, OW), w1 = end(ow, W, OW);
    return Window{h0, h1, w0, w1, static_cast<double>((h1 - h0) * (w1 - w0))};
  })};
}

// --------------------------------------------------------------- upsampling ---

// ATen's compute_scales_value (UpSample.h): 1/scale when the forward was given a scale, else in/out.
template <class T>
T compute_scales_value(std::optional<double> scale, std::int64_t input_size, std::int64_t output_size) {
  return scale && *scale > 0 ? static_cast<T>(1.0 / *scale) : static_cast<T>(input_size) / static_cast<T>(output_size);
}

// ATen's nearest_idx: the input index output_index reads, computed in float as ATen does.
std::int64_t nearest_idx(std::int64_t output_index, std::int64_t input_size, std::int64_t output_size,
                         std::optional<double> scales) {
  if (output_size == input_size) return output_index;
  if (output_size == 2 * input_size) return output_index >> 1;
  const float scale = compute_scales_value<float>(scales, input_size, output_size);
  return std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(output_index) * scale)), input_size - 1);
}

struct UpsampleNearest2DBackward0Saved {
  IntList output_size;
  std::optional<double> scales_h;
  std::optional<double> scales_w;
  IntList self_sym_sizes;
};

void check_upsample(const char* node, const Tensor& grad, const IntList& output_size, const IntList& self_sizes) {
  const auto positive = [](std::int64_t size) { return size > 0; };
  check(self_sizes.size() == 4 && output_size.size() == 2 &&
            std::all_of(self_sizes.begin(), self_sizes.end(), positive) &&
            std::all_of(output_size.begin(), output_size.end(), positive) && grad.dim() == 4 &&
            grad.size(0) == self_sizes[0] && grad.size(1) == self_sizes[1] && grad.size(2) == output_size[0] &&
            grad.size(3) == output_size[1],
        node, ": grad ", shape_text(grad.sizes()), " does not fit output_size ", shape_text(output_size), " and self sizes ",
        shape_text(self_sizes));
}

// UpsampleNearest2DBackward0 — upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None,
//                              float? scales_w=None) -> Tensor
//   self: upsample_nearest2d_backward_symint(grad, output_size, self.sym_sizes(), scales_h, scales_w)
// Output (oh, ow) copies input (nearest_idx(oh), nearest_idx(ow)), so the adjoint adds each output's grad
// into that input: index_add over the columns, then over the rows.
Grads UpsampleNearest2DBackward0(const Grads& grads, const UpsampleNearest2DBackward0Saved& saved,
                                 const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  const IntList& in = saved.self_sym_sizes;
  check_upsample("UpsampleNearest2DBackward0", grad, saved.output_size, in);
  std::vector<std::int64_t> rows, cols;
  for (std::int64_t oh = 0; oh < saved.output_size[0]; ++oh)
    rows.push_back(nearest_idx(oh, in[2], saved.output_size[0], saved.scales_h));
  for (std::int64_t ow = 0; ow < saved.output_size[1]; ++ow)
    cols.push_back(nearest_idx(ow, in[3], saved.output_size[1], saved.scales_w));
  const Tensor by_cols = index_add(zeros({in[0], in[1], saved.output_size[0], in[3]}, grad.dtype()), 3,
                                   from_vector(cols, {saved.output_size[1]}), grad);
  return Grads{index_add(zeros(in, grad.dtype()), 2, from_vector(rows, {saved.output_size[0]}), by_cols)};
}

// The [output_size, input_size] matrix of 1-d linear interpolation weights, with ATen's
// area_pixel_compute_scale and area_pixel_compute_source_index (UpSample.h).
Tensor linear_interpolation_matrix(std::int64_t input_size, std::int64_t output_size, bool align_corners,
                                   std::optional<double> scales, DType dtype) {
  const double scale = align_corners ? (output_size > 1 ? static_cast<double>(input_size - 1) / (output_size - 1) : 0.0)
                                     : compute_scales_value<double>(scales, input_size, output_size);
  std::vector<double> weights(static_cast<std::size_t>(output_size * input_size), 0.0);
  for (std::int64_t o = 0; o < output_size; ++o) {
    const double source = align_corners ? scale * o : std::max(scale * (o + 0.5) - 0.5, 0.0);
    const std::int64_t i0 = std::min(static_cast<std::int64_t>(source), input_size - 1);
    const std::int64_t i1 = i0 + (i0 < input_size - 1 ? 1 : 0);
    const double lambda1 = std::clamp(source - static_cast<double>(i0), 0.0, 1.0);
    weights[static_cast<std::size_t>(o * input_size + i0)] += 1.0 - lambda1;
    weights[static_cast<std::size_t>(o * input_size + i1)] += lambda1;
  }
  return to(from_vector(weights, {output_size, input_size}), dtype);
}

// UpsampleBilinear2DBackward0 — upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners,
//                               float? scales_h=None, float? scales_w=None) -> Tensor
//   self: upsample_bilinear2d_backward_symint(grad, output_size, self.sym_sizes(), align_corners, scales_h, scales_w)
// Bilinear interpolation is separable: out = A_h @ self @ A_w^T with the 1-d weight matrices A, so its
// adjoint is grad_self = A_h^T @ grad @ A_w.
struct UpsampleBilinear2DBackward0Saved {
  bool align_corners;
  IntList output_size;
  std::optional<double> scales_h;
  std::optional<double> scales_w;
  IntList self_sym_sizes;
};

Grads UpsampleBilinear2DBackward0(const Grads& grads, const UpsampleBilinear2DBackward0Saved& saved,
                                  const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  const IntList& in = saved.self_sym_sizes;
  check_upsample("UpsampleBilinear2DBackward0", grad, saved.output_size, in);
  const Tensor a_h =
      linear_interpolation_matrix(in[2], saved.output_size[0], saved.align_corners, saved.scales_h, grad.dtype());
  const Tensor a_w =
      linear_interpolation_matrix(in[3], saved.output_size[1], saved.align_corners, saved.scales_w, grad.dtype());
  return Grads{matmul(t(a_h), matmul(grad, a_w))};
}

// ---------------------------------------------------------------- attention ---

// ScaledDotProductFlashAttentionForCpuBackward0 — _scaled_dot_product_flash_attention_for_cpu(Tensor query,
//     Tensor key, Tensor value, float dropout_p=0.0, bool is_causal=False, *, Tensor? attn_mask=None,
//     float? scale=None) -> (Tensor output, Tensor logsumexp)
//   query, key, value: _scaled_dot_product_flash_attention_for_cpu_backward(grad, query, key, value, output,
//                      logsumexp, dropout_p, is_causal, attn_mask, scale)
// What F.scaled_dot_product_attention runs on CPU. The attention P = softmax(q k^T * scale + mask) is
// recomputed (mask: the saved additive attn_mask, and -inf above the diagonal when is_causal, top-left
// aligned); a row masked everywhere has P = 0. With dO = grad:
//   value: P^T dO;  dS = P * (dO v^T - rowsum(P * dO v^T));  query: dS k * scale;  key: dS^T q * scale.
// dropout_p > 0 (random masks) is not supported yet. logsumexp is not a differentiable output: torch's
// node takes one grad.
struct ScaledDotProductFlashAttentionForCpuBackward0Saved {
  std::optional<Tensor> attn_mask;
  double dropout_p;
  bool is_causal;
  Tensor key;
  Tensor query;
  std::optional<double> scale;
  Tensor value;
  Tensor logsumexp;
  Tensor output;
};

void check_attention_shapes(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v) {
  check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2) &&
            std::equal(q.sizes().begin(), q.sizes().end() - 2, k.sizes().begin()) &&
            std::equal(q.sizes().begin(), q.sizes().end() - 2, v.sizes().begin()) &&
            grad.sizes() == Shape{q.size(0), q.size(1), q.size(2), v.size(3)},
        "ScaledDotProductFlashAttentionForCpuBackward0: query ", shape_text(q.sizes()), ", key ", shape_text(k.sizes()),
        ", value ", shape_text(v.sizes()), " and grad ", shape_text(grad.sizes()),
        " do not fit [B, H, L, E], [B, H, S, E], [B, H, S, Ev], [B, H, L, Ev]");
}

// The forward's attention weights, recomputed: softmax(q k^T * scale + mask),
// with a fully masked row giving 0 rather than NaN, as torch's kernel does.
Tensor attention_probabilities(const Tensor& q, const Tensor& k, double scale, const std::optional<Tensor>& attn_mask,
                               bool is_causal) {
  constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();
  Tensor scores = mul(matmul(q, transpose(k, -2, -1)), Scalar(scale));
  if (attn_mask) {
    // torch passes a boolean mask on as an additive one (0 where attended, -inf elsewhere).
    scores = attn_mask->dtype() == DType::Bool ? masked_fill(scores, logical_not(*attn_mask), kMinusInfinity)
                                               : add(scores, *attn_mask);
  }
  if (is_causal) scores = masked_fill(scores, triu(ones({q.size(2), k.size(2)}, DType::Bool), 1), kMinusInfinity);
  const Tensor fully_masked = eq(amax(scores, {-1}, true), kMinusInfinity);
  return masked_fill(softmax(masked_fill(scores, fully_masked, 0.0), -1), fully_masked, 0.0);
}

Grads ScaledDotProductFlashAttentionForCpuBackward0(const Grads& grads,
                                                    const ScaledDotProductFlashAttentionForCpuBackward0Saved& saved,
                                                    const Need& need) {
  if (!grads[0]) return Grads(3);
  check(saved.dropout_p == 0.0, "ScaledDotProductFlashAttentionForCpuBackward0: dropout_p ", saved.dropout_p,
        " is not supported yet (only 0)");
  const Tensor &grad = *grads[0], &q = saved.query, &k = saved.key, &v = saved.value;
  check_attention_shapes(grad, q, k, v);
  const double scale = saved.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const Tensor p = attention_probabilities(q, k, scale, saved.attn_mask, saved.is_causal);
  const Tensor dp = matmul(grad, transpose(v, -2, -1));
  const Tensor ds = mul(p, sub(dp, sum(mul(p, dp), {-1}, true)));  // softmax backward
  Grads out(3);
  if (need[0]) out[0] = mul(matmul(ds, k), Scalar(scale));
  if (need[1]) out[1] = mul(matmul(transpose(ds, -2, -1), q), Scalar(scale));
  if (need[2]) out[2] = matmul(transpose(p, -2, -1), grad);
  return out;
}

}  // namespace

void add_nn_nodes(std::vector<NodeDef>& registry) {
  {
    using S = NativeLayerNormBackward0Saved;
    registry.push_back(define_node<S, NativeLayerNormBackward0>(
        {"NativeLayerNormBackward0", "native_layer_norm", {"input", "weight", "bias"}, 1, {},
         "input, weight, bias: grad.defined() ? native_layer_norm_backward_symint(grad, input, normalized_shape, "
         "result1, result2, weight, bias, grad_input_mask) : std::tuple<Tensor, Tensor, Tensor>()"},
        {saved<&S::bias>("bias", FieldKind::Tensor, true), saved<&S::input>("input", FieldKind::Tensor),
         saved<&S::normalized_shape>("normalized_shape", FieldKind::Sizes),
         saved<&S::weight>("weight", FieldKind::Tensor, true), saved<&S::result1>("result1", FieldKind::Tensor),
         saved<&S::result2>("result2", FieldKind::Tensor)}));
  }
  {
    using S = NativeBatchNormBackward0Saved;
    registry.push_back(define_node<S, NativeBatchNormBackward0>(
        {"NativeBatchNormBackward0", "native_batch_norm", {"input", "weight", "bias"}, 1, {},
         "input, weight, bias: grad.defined() ? native_batch_norm_backward(grad, input, weight, running_mean, "
         "running_var, result1, result2, training, eps, grad_input_mask) : std::tuple<Tensor, Tensor, Tensor>()"},
        {saved<&S::eps>("eps", FieldKind::Float), saved<&S::input>("input", FieldKind::Tensor),
         saved<&S::running_mean>("running_mean", FieldKind::Tensor, true),
         saved<&S::running_var>("running_var", FieldKind::Tensor, true),
         saved<&S::training>("training", FieldKind::Bool), saved<&S::weight>("weight", FieldKind::Tensor, true),
         saved<&S::result1>("result1", FieldKind::Tensor), saved<&S::result2>("result2", FieldKind::Tensor)}));
  }
  {
    using S = BatchNormWithUpdateBackward0Saved;
    registry.push_back(define_node<S, BatchNormWithUpdateBackward0>(
        {"BatchNormWithUpdateBackward0", "_batch_norm_with_update", {"input", "weight", "bias"}, 1, {},
         "input, weight, bias: grad.defined() ? batch_norm_backward(grad, input, weight, running_mean, "
         "running_var, result1, result2, /*update*/true, eps, grad_input_mask, retain_variables ? "
         "result3.clone() : result3) : std::tuple<Tensor, Tensor, Tensor>()"},
        {saved<&S::eps>("eps", FieldKind::Float), saved<&S::input>("input", FieldKind::Tensor),
         saved<&S::running_mean>("running_mean", FieldKind::Tensor, true),
         saved<&S::running_var>("running_var", FieldKind::Tensor, true),
         saved<&S::weight>("weight", FieldKind::Tensor, true), saved<&S::result1>("result1", FieldKind::Tensor),
         saved<&S::result2>("result2", FieldKind::Tensor), saved<&S::result3>("result3", FieldKind::Tensor)}));
  }
  {
    using S = NativeGroupNormBackward0Saved;
    registry.push_back(define_node<S, NativeGroupNormBackward0>(
        {"NativeGroupNormBackward0", "native_group_norm", {"input", "weight", "bias"}, 3, {},
         "input, weight, bias: GradMode::is_enabled() || grads[1].defined() || grads[2].defined() ? "
         "infinitely_differentiable_native_group_norm_backward(grads[0], grads[1], grads[2], input, result1, "
         "result2, weight, N, C, HxW, group, eps, grad_input_mask) : (grads[0].defined() ? "
         "native_group_norm_backward_symint(grads[0], input, result1, result2, weight, N, C, HxW, group, "
         "grad_input_mask) : std::tuple<Tensor, Tensor, Tensor>())"},
        {saved<&S::C>("C", FieldKind::Int), saved<&S::HxW>("HxW", FieldKind::Int), saved<&S::N>("N", FieldKind::Int),
         saved<&S::eps>("eps", FieldKind::Float), saved<&S::group>("group", FieldKind::Int),
         saved<&S::input>("input", FieldKind::Tensor), saved<&S::weight>("weight", FieldKind::Tensor, true),
         saved<&S::result1>("result1", FieldKind::Tensor), saved<&S::result2>("result2", FieldKind::Tensor)}));
  }
  {
    using S = ConvolutionBackward0Saved;
    registry.push_back(define_node<S, ConvolutionBackward0>(
        {"ConvolutionBackward0", "convolution", {"input", "weight", "bias"}, 1, {},
         "input, weight, bias: grad.defined() ? convolution_backward_symint(grad, input, weight, bias->sym_sizes(), "
         "stride, padding, dilation, transposed, output_padding, groups, grad_input_mask) : "
         "std::tuple<Tensor, Tensor, Tensor>()"},
        {saved<&S::bias_sym_sizes_opt>("bias_sym_sizes_opt", FieldKind::Sizes, true),
         saved<&S::dilation>("dilation", FieldKind::Sizes), saved<&S::groups>("groups", FieldKind::Int),
         saved<&S::input>("input", FieldKind::Tensor), saved<&S::output_padding>("output_padding", FieldKind::Sizes),
         saved<&S::padding>("padding", FieldKind::Sizes), saved<&S::stride>("stride", FieldKind::Sizes),
         saved<&S::transposed>("transposed", FieldKind::Bool), saved<&S::weight>("weight", FieldKind::Tensor)}));
  }
  {
    using S = MaxPool2DWithIndicesBackward0Saved;
    registry.push_back(define_node<S, MaxPool2DWithIndicesBackward0>(
        {"MaxPool2DWithIndicesBackward0", "max_pool2d_with_indices", {"self"}, 1, {},
         "self: max_pool2d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, "
         "result1)"},
        {saved<&S::ceil_mode>("ceil_mode", FieldKind::Bool), saved<&S::dilation>("dilation", FieldKind::IntList),
         saved<&S::kernel_size>("kernel_size", FieldKind::IntList), saved<&S::padding>("padding", FieldKind::IntList),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::stride>("stride", FieldKind::IntList),
         saved<&S::result1>("result1", FieldKind::Tensor)}));
  }
  {
    using S = AvgPool2DBackward0Saved;
    registry.push_back(define_node<S, AvgPool2DBackward0>(
        {"AvgPool2DBackward0", "avg_pool2d", {"self"}, 1, {},
         "self: avg_pool2d_backward(grad, self, kernel_size, stride, padding, ceil_mode, count_include_pad, "
         "divisor_override)"},
        {saved<&S::ceil_mode>("ceil_mode", FieldKind::Bool),
         saved<&S::count_include_pad>("count_include_pad", FieldKind::Bool),
         saved<&S::divisor_override>("divisor_override", FieldKind::Int, true),
         saved<&S::kernel_size>("kernel_size", FieldKind::IntList), saved<&S::padding>("padding", FieldKind::IntList),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::stride>("stride", FieldKind::IntList)}));
  }
  {
    using S = AdaptiveAvgPool2DBackward0Saved;
    registry.push_back(define_node<S, AdaptiveAvgPool2DBackward0>(
        {"AdaptiveAvgPool2DBackward0", "_adaptive_avg_pool2d", {"self"}, 1, {},
         "self: _adaptive_avg_pool2d_backward(grad, self)"},
        {saved<&S::self>("self", FieldKind::Tensor)}));
  }
  {
    using S = UpsampleNearest2DBackward0Saved;
    registry.push_back(define_node<S, UpsampleNearest2DBackward0>(
        {"UpsampleNearest2DBackward0", "upsample_nearest2d", {"self"}, 1, {},
         "self: upsample_nearest2d_backward_symint(grad, output_size, self.sym_sizes(), scales_h, scales_w)"},
        {saved<&S::output_size>("output_size", FieldKind::Sizes),
         saved<&S::scales_h>("scales_h", FieldKind::Float, true),
         saved<&S::scales_w>("scales_w", FieldKind::Float, true),
         saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  }
  {
    using S = UpsampleBilinear2DBackward0Saved;
    registry.push_back(define_node<S, UpsampleBilinear2DBackward0>(
        {"UpsampleBilinear2DBackward0", "upsample_bilinear2d", {"self"}, 1, {},
         "self: upsample_bilinear2d_backward_symint(grad, output_size, self.sym_sizes(), align_corners, scales_h, "
         "scales_w)"},
        {saved<&S::align_corners>("align_corners", FieldKind::Bool),
         saved<&S::output_size>("output_size", FieldKind::Sizes),
         saved<&S::scales_h>("scales_h", FieldKind::Float, true),
         saved<&S::scales_w>("scales_w", FieldKind::Float, true),
         saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  }
  {
    using S = ScaledDotProductFlashAttentionForCpuBackward0Saved;
    registry.push_back(define_node<S, ScaledDotProductFlashAttentionForCpuBackward0>(
        {"ScaledDotProductFlashAttentionForCpuBackward0", "_scaled_dot_product_flash_attention_for_cpu",
         {"query", "key", "value"}, 1, {},
         "query, key, value: _scaled_dot_product_flash_attention_for_cpu_backward(grad, query, key, value, output, "
         "logsumexp, dropout_p, is_causal, attn_mask, scale)"},
        {saved<&S::attn_mask>("attn_mask", FieldKind::Tensor, true),
         saved<&S::dropout_p>("dropout_p", FieldKind::Float),
         saved<&S::is_causal>("is_causal", FieldKind::Bool), saved<&S::key>("key", FieldKind::Tensor),
         saved<&S::query>("query", FieldKind::Tensor), saved<&S::scale>("scale", FieldKind::Float, true),
         saved<&S::value>("value", FieldKind::Tensor), saved<&S::logsumexp>("logsumexp", FieldKind::Tensor),
         saved<&S::output>("output", FieldKind::Tensor)}));
  }
}

}  // namespace refgrad::nodes
