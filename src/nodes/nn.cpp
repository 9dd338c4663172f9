// Backward nodes: the nn group (normalization, convolution, pooling, attention; upsampling is in upsample.cpp).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "define.hpp"
#include "functions_manual.hpp"
#include "pooling_shape.hpp"

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

bool any_true(const Tensor& mask) { return sum(mask).item<std::int64_t>() > 0; }

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
  const char* node = "NativeLayerNormBackward0";
  if (!grads[0]) return Grads(3);
  const Tensor &grad = *grads[0], &input = saved.input;
  const IntList& normalized_shape = saved.normalized_shape;
  // An empty normalized_shape would make the means below reduce over every dim.
  check(!normalized_shape.empty(), node, ": normalized_shape must have at least one size, got []");
  const auto axis = input.dim() - static_cast<std::int64_t>(normalized_shape.size());
  check(axis >= 0 && Shape(input.sizes().begin() + axis, input.sizes().end()) == normalized_shape, node, ": input ",
        shape_text(input.sizes()), " does not end in normalized_shape ", shape_text(normalized_shape));
  check(grad.sizes() == input.sizes(), node, ": grad ", shape_text(grad.sizes()), " does not have input's shape ",
        shape_text(input.sizes()));
  for (const auto& [affine, name] : {std::pair{&saved.weight, "weight"}, std::pair{&saved.bias, "bias"}})
    check(!*affine || (*affine)->sizes() == normalized_shape, node, ": ", name, " ",
          shape_text(*affine ? (*affine)->sizes() : Shape{}), " does not have normalized_shape ",
          shape_text(normalized_shape));
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

// Checks the per-channel statistics the forward normalized with: the batch's (result1, result2) in
// training, the running ones in eval.
void check_batch_norm_statistics(const char* node, const NativeBatchNormBackward0Saved& saved, std::int64_t channels) {
  if (!saved.training)
    check(saved.running_mean && saved.running_var,
          node, ": eval mode needs running_mean and running_var, which were not saved");
  const Tensor& mean = saved.training ? saved.result1 : *saved.running_mean;
  const Tensor& spread = saved.training ? saved.result2 : *saved.running_var;
  check(mean.numel() == channels && spread.numel() == channels, node, ": statistics ", shape_text(mean.sizes()),
        " and ", shape_text(spread.sizes()), " do not match the ", channels, " channels of input ",
        shape_text(saved.input.sizes()));
}

// Every batch norm node's backward; `node` names the one in errors. float16 and bfloat16 are computed
// in float32 and rounded once, as ATen's fused CPU kernel does: rounding each step would leave noise
// where the input grad cancels to nearly 0 (two elements per channel). With x_hat = (input - mean) * invstd,
// per channel (sums over every dim but 1, M elements):
//   input:  weight * invstd * (g - sum(g) / M - x_hat * sum(g * x_hat) / M)   (training)
//           weight * invstd * g                                               (eval)
//   weight: sum(g * x_hat)     bias: sum(g)
// L0's native_batch_norm_backward computes all three in two passes over each channel.
Grads batch_norm_backward(const char* node, const Grads& grads, const NativeBatchNormBackward0Saved& saved,
                          const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor &grad = *grads[0], &input = saved.input;
  if (opmath_dtype(input.dtype()) != input.dtype() || opmath_dtype(grad.dtype()) != grad.dtype()) {
    auto up = [](const Tensor& t) { return to(t, opmath_dtype(t.dtype())); };
    auto up_optional = [&](const std::optional<Tensor>& t) { return t ? std::optional<Tensor>(up(*t)) : std::nullopt; };
    const NativeBatchNormBackward0Saved in_opmath{saved.eps,          up(input),   up_optional(saved.running_mean),
                                                  up_optional(saved.running_var), saved.training,
                                                  up_optional(saved.weight),      up(saved.result1),
                                                  up(saved.result2)};
    Grads out = batch_norm_backward(node, Grads{up(grad)}, in_opmath, need);
    const DType param_dtype = saved.weight ? saved.weight->dtype() : input.dtype();
    for (std::size_t k = 0; k < 3; ++k)
      if (out[k]) out[k] = to(*out[k], k == 0 ? input.dtype() : param_dtype);
    return out;
  }
  check(input.dim() >= 2, node, ": input ", shape_text(input.sizes()), " has no channel dim");
  check(grad.sizes() == input.sizes(), node, ": grad ", shape_text(grad.sizes()), " does not have input's shape ",
        shape_text(input.sizes()));
  const std::int64_t channels = input.size(1);
  check(!saved.weight || saved.weight->numel() == channels, node, ": weight ",
        shape_text(saved.weight ? saved.weight->sizes() : Shape{}), " does not have the ", channels,
        " channels of input ", shape_text(input.sizes()));
  check_batch_norm_statistics(node, saved, channels);
  // One fused L0 pass per channel for the sums, one for the input's grad, as ATen's kernel. Each mode
  // gets only the statistics it reads (eval's result1 and result2 are empty).
  const bool train = saved.training;
  const auto [grad_input, grad_weight, grad_bias] = native_batch_norm_backward(
      grad, input, saved.weight, train ? std::nullopt : saved.running_mean, train ? std::nullopt : saved.running_var,
      train ? OptionalTensor(saved.result1) : std::nullopt, train ? OptionalTensor(saved.result2) : std::nullopt, train,
      saved.eps, {need[0], need[1], need[2]});
  Grads out(3);
  if (need[0]) out[0] = grad_input;
  if (need[1]) out[1] = grad_weight;
  if (need[2]) out[2] = grad_bias;
  return out;
}

Grads NativeBatchNormBackward0(const Grads& grads, const NativeBatchNormBackward0Saved& saved, const Need& need) {
  return batch_norm_backward("NativeBatchNormBackward0", grads, saved, need);
}

// NativeBatchNormLegitBackward0 — _native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias,
//     Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum, float eps)
//   input, weight, bias: grad.defined() ? native_batch_norm_backward(grad, input, weight, running_mean,
//                        running_var, result1, result2, training, eps, grad_input_mask) : std::tuple<...>()
// The same formula and fields as NativeBatchNormBackward0 (the running statistics are always there).
struct NativeBatchNormLegitBackward0Saved {
  double eps;
  Tensor input;
  Tensor running_mean;
  Tensor running_var;
  bool training;
  std::optional<Tensor> weight;
  Tensor result1;
  Tensor result2;
};

Grads NativeBatchNormLegitBackward0(const Grads& grads, const NativeBatchNormLegitBackward0Saved& saved,
                                    const Need& need) {
  const NativeBatchNormBackward0Saved same{saved.eps,      saved.input,  saved.running_mean, saved.running_var,
                                           saved.training, saved.weight, saved.result1,      saved.result2};
  return batch_norm_backward("NativeBatchNormLegitBackward0", grads, same, need);
}

// NativeBatchNormLegitBackward1 — _native_batch_norm_legit.no_stats(Tensor input, Tensor? weight,
//     Tensor? bias, bool training, float momentum, float eps)
//   input, weight, bias: grad.defined() ? native_batch_norm_backward(grad, input, weight, Tensor(), Tensor(),
//                        result1, result2, training, eps, grad_input_mask) : std::tuple<...>()
// No running statistics: NativeBatchNormBackward0's formula with none (eval mode would need them, and
// raises; torch's own forward crashes there).
struct NativeBatchNormLegitBackward1Saved {
  double eps;
  Tensor input;
  bool training;
  std::optional<Tensor> weight;
  Tensor result1;
  Tensor result2;
};

Grads NativeBatchNormLegitBackward1(const Grads& grads, const NativeBatchNormLegitBackward1Saved& saved,
                                    const Need& need) {
  const NativeBatchNormBackward0Saved no_stats{saved.eps,    saved.input,   std::nullopt, std::nullopt, saved.training,
                                               saved.weight, saved.result1, saved.result2};
  return batch_norm_backward("NativeBatchNormLegitBackward1", grads, no_stats, need);
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
  return batch_norm_backward("BatchNormWithUpdateBackward0", grads, training, need);
}

// -------------------------------------------------------------- trilinear ---

// at::_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim): each input unsqueezed at its expand
// dims (taken in increasing order) to one common rank, the three multiplied (broadcasting) and summed
// over sumdim, which the result drops. nn.functional.bilinear is
// _trilinear(input1, weight, input2, {1, 3}, {0}, {1, 2}, {2, 3}).
Tensor trilinear(const char* node, const Tensor& i1, const Tensor& i2, const Tensor& i3, const IntList& expand1,
                 const IntList& expand2, const IntList& expand3, const IntList& sumdim) {
  const std::int64_t rank = i1.dim() + static_cast<std::int64_t>(expand1.size());
  auto unsqueezed = [&](const Tensor& t, const IntList& expand, const char* name) {
    check(t.dim() + static_cast<std::int64_t>(expand.size()) == rank, node, ": ", name, " ", shape_text(t.sizes()),
          " unsqueezed at ", shape_text(expand), " does not have the rank ", rank, " of the others");
    IntList dims = expand;
    std::sort(dims.begin(), dims.end());
    Tensor out = t;
    for (std::int64_t d : dims) {
      check(d >= 0 && d < rank, node, ": expand dim ", d, " is out of range for rank ", rank);
      out = unsqueeze(out, d);
    }
    return out;
  };
  for (std::int64_t d : sumdim) check(d >= 0 && d < rank, node, ": sumdim ", d, " is out of range for rank ", rank);
  const Tensor product = mul(mul(unsqueezed(i1, expand1, "i1"), unsqueezed(i2, expand2, "i2")),
                             unsqueezed(i3, expand3, "i3"));
  return sum_over(product, sumdim);
}

// TrilinearBackward0 — _trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3,
//                                 int[] sumdim, int unroll_dim=1) -> Tensor
//   i1, i2, i3: _trilinear_backward(grad, wrap_opt_if(i1, grad_input_mask[1] || grad_input_mask[2]),
//               wrap_opt_if(i2, ...), wrap_opt_if(i3, ...), expand1, expand2, expand3, sumdim, grad_input_mask)
// _trilinear_backward (FunctionsManual.cpp) is _trilinear again, with grad in the place of the input
// whose grad it is, sumdim and that input's expand dims trading places:
//   i1: _trilinear(grad, i2, i3, sumdim, expand2, expand3, expand1)
//   i2: _trilinear(i1, grad, i3, expand1, sumdim, expand3, expand2)
//   i3: _trilinear(i1, i2, grad, expand1, expand2, sumdim, expand3)
// Each input is saved only when another one needs its grad. (torch refuses complex _trilinear.)
struct TrilinearBackward0Saved {
  IntList expand1;
  IntList expand2;
  IntList expand3;
  std::optional<Tensor> i1;
  std::optional<Tensor> i2;
  std::optional<Tensor> i3;
  IntList sumdim;
};

Grads TrilinearBackward0(const Grads& grads, const TrilinearBackward0Saved& saved, const Need& need) {
  const char* node = "TrilinearBackward0";
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  Grads out(3);
  if (need[0])
    out[0] = trilinear(node, grad, needed(saved.i2, node, "i1", "i2"), needed(saved.i3, node, "i1", "i3"),
                       saved.sumdim, saved.expand2, saved.expand3, saved.expand1);
  if (need[1])
    out[1] = trilinear(node, needed(saved.i1, node, "i2", "i1"), grad, needed(saved.i3, node, "i2", "i3"),
                       saved.expand1, saved.sumdim, saved.expand3, saved.expand2);
  if (need[2])
    out[2] = trilinear(node, needed(saved.i1, node, "i3", "i1"), needed(saved.i2, node, "i3", "i2"), grad,
                       saved.expand1, saved.expand2, saved.sumdim, saved.expand3);
  return out;
}

// ---------------------------------------------------------- embedding bag ---

// EmbeddingBagBackward0 — _embedding_bag(Tensor weight, Tensor indices, Tensor offsets,
//     bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None,
//     bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)
//   weight: _embedding_bag_backward_symint(grad, indices, offsets, result1, result2, result3,
//           weight.sym_size(0), scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)
//   per_sample_weights: _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, result1,
//                       mode, padding_idx)
// result1 is offset2bag (the bag of each index), result2 bag_size (the indices of each bag that are not
// padding_idx; mean mode's divisor), result3 max mode's maximum_indices ([bags, embedding dim]: the row
// that gave each maximum). mode 0 (sum): each index's row of weight gets its bag's grad, times its
// per-sample weight; mode 1 (mean): divided by the bag's size; mode 2 (max): each maximum's row gets
// the grad of that element (empty bags give nothing). Indices equal to padding_idx (-1: none) get
// nothing. scale_grad_by_freq divides by the number of times the index occurs in indices (ATen's CPU
// kernel divides by the count of another index where counts differ, a bug refgrad does not copy).
// per_sample_weights (sum mode only): dot(grad of the index's bag, the index's row of weight).
// sparse=True asks for a sparse COO gradient, which refgrad does not have. include_last_offset only
// made offset2bag. The forward's fast path (sum mode, float32) saves an empty offset2bag: it is then
// made of offsets, as ATen's make_offset2bag does (a 1 where each bag starts, counted up).
struct EmbeddingBagBackward0Saved {
  Tensor indices;
  std::int64_t mode;
  Tensor offsets;
  std::int64_t padding_idx;
  std::optional<Tensor> per_sample_weights;
  bool scale_grad_by_freq;
  bool sparse;
  std::optional<Tensor> weight;
  std::int64_t weight_sym_argsize_0;
  Tensor result1;
  Tensor result2;
  Tensor result3;
};

// offset2bag from offsets: bag b holds the indices from offsets[b] to the next bag's offset.
Tensor make_offset2bag(const char* node, const Tensor& offsets, std::int64_t num_indices) {
  check(offsets.dim() == 1 && offsets.dtype() == DType::Int64, node, ": offsets must be an int64 vector, got ",
        dtype_name(offsets.dtype()), " ", shape_text(offsets.sizes()));
  check(offsets.numel() > 0 && min(offsets).item<std::int64_t>() >= 0 &&
            max(offsets).item<std::int64_t>() <= num_indices,
        node, ": offsets are not positions in the ", num_indices, " indices");
  Tensor starts = index_add(zeros({num_indices + 1}, DType::Int64), 0, offsets, ones_like(offsets));
  starts = index_add(starts, 0, tensor({0}, DType::Int64), tensor({-1}, DType::Int64));  // bag 0 is bag 0
  return narrow(cumsum(starts, 0), 0, 0, num_indices);
}

Grads EmbeddingBagBackward0(const Grads& grads, const EmbeddingBagBackward0Saved& saved, const Need& need) {
  const char* node = "EmbeddingBagBackward0";
  if (!grads[0]) return Grads(2);
  const Tensor &grad = *grads[0], &indices = saved.indices, &bag_size = saved.result2;
  const Tensor offset2bag = indices.numel() != 0 && saved.result1.numel() == 0
                                ? make_offset2bag(node, saved.offsets, indices.numel())
                                : saved.result1;
  check(saved.mode >= 0 && saved.mode <= 2, node, ": mode ", saved.mode, " is not 0 (sum), 1 (mean) or 2 (max)");
  check(indices.dim() == 1 && indices.dtype() == DType::Int64 && offset2bag.dtype() == DType::Int64 &&
            offset2bag.sizes() == indices.sizes(),
        node, ": indices ", shape_text(indices.sizes()), " and result1 (offset2bag) ", shape_text(offset2bag.sizes()),
        " must be int64 vectors of one length");
  check(grad.dim() == 2 && bag_size.dim() == 1 && bag_size.size(0) == grad.size(0), node, ": grad ",
        shape_text(grad.sizes()), " is not [bags, embedding dim] with result2 (bag_size) ", shape_text(bag_size.sizes()));
  const std::int64_t bags = grad.size(0), dim = grad.size(1), num_weights = saved.weight_sym_argsize_0;
  check(num_weights >= 0, node, ": weight_sym_argsize_0 ", num_weights, " is not a number of embeddings");
  if (indices.numel() > 0) {
    check(min(indices).item<std::int64_t>() >= 0 && max(indices).item<std::int64_t>() < num_weights, node,
          ": indices are out of range for ", num_weights, " embeddings");
    check(min(offset2bag).item<std::int64_t>() >= 0 && max(offset2bag).item<std::int64_t>() < bags, node,
          ": result1 (offset2bag) names a bag out of range for grad ", shape_text(grad.sizes()));
  }
  const bool psw = saved.per_sample_weights.has_value();
  check(!psw || saved.mode == 0, node, ": per_sample_weights are only supported in sum mode (mode 0), got mode ",
        saved.mode);
  check(!psw || saved.per_sample_weights->sizes() == indices.sizes(), node, ": per_sample_weights ",
        shape_text(saved.per_sample_weights ? saved.per_sample_weights->sizes() : Shape{}),
        " do not have indices' shape ", shape_text(indices.sizes()));
  const Tensor not_padding = ne(indices, saved.padding_idx);
  Grads out(2);
  if (need[0]) {
    check(!saved.sparse, node, ": sparse=True (a sparse COO gradient) is not supported yet");
    const Tensor zero = zeros({num_weights, dim}, grad.dtype());
    if (saved.mode == 2) {
      const Tensor& maximum_indices = saved.result3;
      check(maximum_indices.sizes() == grad.sizes() && maximum_indices.dtype() == DType::Int64, node,
            ": result3 (maximum_indices) ", shape_text(maximum_indices.sizes()), " must be int64 of grad's shape ",
            shape_text(grad.sizes()));
      const Tensor nonempty = unsqueeze(gt(bag_size, Scalar(0)), 1);
      const Tensor rows = where(nonempty, maximum_indices, Scalar(0));
      check(rows.numel() == 0 || (min(rows).item<std::int64_t>() >= 0 && max(rows).item<std::int64_t>() < num_weights),
            node, ": result3 (maximum_indices) is out of range for ", num_weights, " embeddings");
      out[0] = scatter_add(zero, 0, rows, where(nonempty, grad, Scalar(0)));
    } else {
      Tensor scale = to(not_padding, grad.dtype());  // per index; 0 drops padding_idx
      if (saved.scale_grad_by_freq) {
        const Tensor counts = index_add(zeros({num_weights}, grad.dtype()), 0, indices, ones_like(scale));
        scale = div(scale, index_select(counts, 0, indices));
      }
      if (saved.mode == 1) {
        const Tensor sizes = to(index_select(bag_size, 0, offset2bag), grad.dtype());
        scale = div(scale, where(eq(sizes, Scalar(0)), Scalar(1), sizes));
      }
      if (psw) scale = mul(scale, *saved.per_sample_weights);
      out[0] = index_add(zero, 0, indices, mul(index_select(grad, 0, offset2bag), unsqueeze(scale, 1)));
    }
  }
  if (need[1]) {
    check(saved.mode == 0, node, ": per_sample_weights' grad exists in sum mode only (mode 0), got mode ",
          saved.mode);
    const Tensor& weight = needed(saved.weight, node, "per_sample_weights", "weight");
    check(weight.dim() == 2 && weight.size(0) == num_weights && weight.size(1) == dim, node, ": weight ",
          shape_text(weight.sizes()), " is not [", num_weights, ", ", dim, "]");
    const Tensor dots = sum(mul(index_select(grad, 0, offset2bag), index_select(weight, 0, indices)), {1});
    out[1] = where(not_padding, dots, Scalar(0));
  }
  return out;
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
//   weight: sum(grad * x_hat) over N and HxW (in ATen's order, below);  bias: sum(grad) over N and HxW.
// The mean and rstd outputs may have grads too (grads[1], grads[2]); torch then takes the infinitely
// differentiable formula, which adds their part to the input's grad only when both are defined (with one
// alone it drops it: torch 2.13's gradcheck of the mean or of the rstd output alone fails, and refgrad
// computes what torch does). Per group of M = C/group * HxW elements, mean = sum(x) / M and
// rstd = (sum((x - mean)^2) / M + eps)^-1/2, so d mean / d x = 1 / M and d rstd / d x = -rstd^3 (x - mean) / M:
//   input += grads[1] / M - grads[2] rstd^3 (x - mean) / M.
// Weight and bias do not reach the statistics, and get no grad without grads[0].
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
  const bool statistics_grads = grads[1] && grads[2];  // one alone is dropped (see above)
  if (!grads[0] && !statistics_grads) return Grads(3);
  const Tensor& input = saved.input;
  // Without the output's grad, zeros stand for it in the shape checks.
  const Tensor grad = grads[0] ? *grads[0] : zeros(input.sizes(), input.dtype());
  const std::int64_t N = saved.N, C = saved.C, HxW = saved.HxW, G = saved.group;
  std::int64_t count = 0, statistics = 0;
  const bool sizes_fit = N >= 0 && C >= 0 && HxW >= 0 && G > 0 && C % G == 0 && !__builtin_mul_overflow(C, HxW, &count) &&
                         !__builtin_mul_overflow(count, N, &count) && !__builtin_mul_overflow(N, G, &statistics);
  check(sizes_fit && input.numel() == count && grad.sizes() == input.sizes() && saved.result1.numel() == statistics &&
            saved.result2.numel() == statistics && (!saved.weight || saved.weight->numel() == C),
        "NativeGroupNormBackward0: input ", shape_text(input.sizes()), ", grad ", shape_text(grad.sizes()), ", mean ",
        shape_text(saved.result1.sizes()), ", rstd ", shape_text(saved.result2.sizes()), " and weight ",
        shape_text(saved.weight ? saved.weight->sizes() : Shape{}), " do not fit N=", N, " C=", C, " HxW=", HxW,
        " group=", G);
  const std::int64_t per_group = C / G * HxW;
  const Tensor mu = reshape(saved.result1, {N, G, 1}), rstd = reshape(saved.result2, {N, G, 1});
  const Tensor g = reshape(grad, {N, C, HxW});
  Grads out(3);
  if (need[0] && grads[0]) {
    const Tensor dx_hat = reshape(saved.weight ? mul(g, reshape(*saved.weight, {1, C, 1})) : g, {N, G, per_group});
    const Tensor x_hat_g = mul(sub(reshape(input, {N, G, per_group}), mu), rstd);
    const Tensor centered = sub(dx_hat, mean(dx_hat, {2}, true));
    out[0] = reshape(mul(rstd, sub(centered, mul(x_hat_g, mean(mul(dx_hat, x_hat_g), {2}, true)))), input.sizes());
  }
  if (need[0] && statistics_grads) {
    for (std::size_t k : {std::size_t{1}, std::size_t{2}})
      check(grads[k]->numel() == statistics, "NativeGroupNormBackward0: the grad of ", k == 1 ? "mean" : "rstd", " ",
            shape_text(grads[k]->sizes()), " does not fit N=", N, " group=", G);
    const double M = static_cast<double>(per_group);
    const Tensor d_mean = div(reshape(*grads[1], {N, G, 1}), M);
    const Tensor centered = sub(reshape(input, {N, G, per_group}), mu);
    const Tensor d_rstd = mul(reshape(*grads[2], {N, G, 1}), div(mul(neg(pow(rstd, 3)), centered), M));
    const Tensor extra = reshape(add(d_mean, d_rstd), input.sizes());
    out[0] = out[0] ? add(*out[0], extra) : extra;
  }
  if (!grads[0]) return out;
  // weight, as ATen's kernel: sum over n of (ds - db * mean) * rstd, with ds = sum(grad * input) and
  // db = sum(grad) over HxW, which keeps the statistics' NaN when HxW is 0 (sum(grad * x_hat) would be 0).
  const Tensor db = sum(g, {2});
  if (need[1]) {
    const auto per_channel_stat = [&](const Tensor& stat) {
      return reshape(broadcast_to(stat, {N, G, C / G}), {N, C});
    };
    const Tensor ds = sum(mul(g, reshape(input, {N, C, HxW})), {2});
    out[1] = sum(mul(sub(ds, mul(db, per_channel_stat(mu))), per_channel_stat(rstd)), {0});
  }
  if (need[2]) out[2] = sum(db, {0});
  return out;
}

// ------------------------------------------------------------- convolution ---

// ConvolutionBackward0 — convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding,
//                        SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor
//   input, weight, bias: grad.defined() ? convolution_backward_symint(grad, input, weight, bias->sym_sizes(),
//                        stride, padding, dilation, transposed, output_padding, groups, grad_input_mask) : tuple()
// input: the adjoint of the forward, a transposed convolution of grad with the same weight (a plain
// convolution when the forward was transposed); output_padding recovers the input's exact size.
// weight: correlates the input with grad (L0's convolution_backward_weight: per image, one matrix
// product of grad with the im2col columns of the input; the roles swap when transposed):
//   non-transposed: grad_weight[co, ci, k] = sum_{n,o} grad[n, co, o] * input[n, ci, o*stride - pad + k*dil]
//   transposed:     grad_weight[ci, co, k] = sum_{n,i} input[n, ci, i] * grad[n, co, i*stride - pad + k*dil]
// bias: sum(grad) over every dim but 1.
// 1-d, 2-d and 3-d convolutions of batched inputs (the forward functional batches an unbatched input).
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

// The spatial parameters, one value per spatial dim.
struct ConvolutionParams {
  IntList stride, padding, dilation, output_padding;
};

// ATen's expand_param_if_needed: a list of one value stands for every spatial dim.
IntList expand_param(const char* name, const IntList& values, std::size_t spatial) {
  if (values.size() == 1) return IntList(spatial, values[0]);
  check(values.size() == spatial, "ConvolutionBackward0: expected ", name,
        " to be a single integer value or a list of ", spatial,
        " values to match the convolution dimensions, but got ", name, "=", shape_text(values));
  return values;
}

// The forward's output length along one spatial dim, as ATen's convolution computes it, with every step
// overflow-checked (the terms come from saved fields). For a transposed convolution the sum before the
// padding is taken off is checked too: the backward's own convolutions add the padding back.
std::int64_t convolution_output_length(std::int64_t input, std::int64_t kernel, const ConvolutionParams& p,
                                       std::size_t d, bool transposed) {
  const char* node = "ConvolutionBackward0";
  const std::int64_t dilated_kernel = add_or_fail(multiply_or_fail(p.dilation[d], kernel - 1, node), 1, node);
  const std::int64_t both_pads = multiply_or_fail(2, p.padding[d], node);
  if (!transposed) {
    const std::int64_t padded = add_or_fail(input, both_pads, node);
    check(padded >= dilated_kernel, node, ": padded input size ", padded, " is smaller than the dilated kernel size ",
          dilated_kernel, " (input ", input, ", padding ", p.padding[d], ", kernel ", kernel, ", dilation ",
          p.dilation[d], ")");
    return (padded - dilated_kernel) / p.stride[d] + 1;
  }
  const std::int64_t spread = add_or_fail(multiply_or_fail(input - 1, p.stride[d], node), dilated_kernel, node);
  const std::int64_t output = add_or_fail(spread, p.output_padding[d], node) - both_pads;
  check(output > 0, node, ": the transposed convolution's output size ", output, " is too small (input ", input,
        ", stride ", p.stride[d], ", padding ", p.padding[d], ", kernel ", kernel, ", dilation ", p.dilation[d],
        ", output_padding ", p.output_padding[d], ")");
  return output;
}

// Checks grad, input, weight and the saved parameters against each other, as ATen's convolution checks
// its arguments, and grad against the forward's output shape; returns the parameters expanded.
ConvolutionParams check_convolution(const Tensor& grad, const ConvolutionBackward0Saved& saved) {
  const char* node = "ConvolutionBackward0";
  const Tensor &input = saved.input, &weight = saved.weight;
  check(input.dim() >= 3, node, ": input ", shape_text(input.sizes()),
        " must be [N, C, L], [N, C, H, W] or [N, C, D, H, W]");
  check(input.dim() <= 5, node, ": ", input.dim() - 2, "-d convolution (input ", shape_text(input.sizes()),
        ") is not supported; 1-d, 2-d and 3-d are");
  check(weight.dim() == input.dim(), node, ": weight ", shape_text(weight.sizes()), " and input ",
        shape_text(input.sizes()), " must have the same number of dims");
  const auto spatial = static_cast<std::size_t>(input.dim() - 2);
  const ConvolutionParams p{expand_param("stride", saved.stride, spatial),
                            expand_param("padding", saved.padding, spatial),
                            expand_param("dilation", saved.dilation, spatial),
                            expand_param("output_padding", saved.output_padding, spatial)};
  const auto all = [](const IntList& values, auto predicate) {
    return std::all_of(values.begin(), values.end(), predicate);
  };
  const auto positive = [](std::int64_t v) { return v > 0; };
  const auto non_negative = [](std::int64_t v) { return v >= 0; };
  check(all(p.stride, positive), node, ": stride must be positive, got stride=", shape_text(saved.stride));
  check(all(p.padding, non_negative), node, ": padding must not be negative, got padding=",
        shape_text(saved.padding));
  check(all(p.dilation, positive), node, ": dilation must be positive, got dilation=", shape_text(saved.dilation));
  check(all(p.output_padding, non_negative), node, ": output_padding must not be negative, got output_padding=",
        shape_text(saved.output_padding));
  for (std::size_t d = 0; d < spatial; ++d) {
    check(saved.transposed || p.output_padding[d] == 0, node,
          ": output_padding is not supported for non-transposed convolutions, got output_padding=",
          shape_text(saved.output_padding));
    check(p.output_padding[d] < p.stride[d] || p.output_padding[d] < p.dilation[d], node,
          ": output_padding must be smaller than either stride or dilation, got output_padding=",
          shape_text(saved.output_padding), ", stride=", shape_text(saved.stride), ", dilation=",
          shape_text(saved.dilation));
  }
  const std::int64_t groups = saved.groups;
  check(groups > 0, node, ": groups must be positive, got ", groups);
  check(weight.size(0) >= groups && weight.size(0) % groups == 0, node, ": weight ", shape_text(weight.sizes()),
        " does not split into groups=", groups, " along dim 0");
  const std::int64_t in_channels = saved.transposed ? weight.size(0) : multiply_or_fail(weight.size(1), groups, node);
  const std::int64_t out_channels = saved.transposed ? multiply_or_fail(weight.size(1), groups, node) : weight.size(0);
  check(input.size(1) == in_channels, node, ": input ", shape_text(input.sizes()), " has ", input.size(1),
        " channels, but weight ", shape_text(weight.sizes()), " with groups=", groups,
        saved.transposed ? " (transposed)" : "", " expects ", in_channels);
  const Shape kernel(weight.sizes().begin() + 2, weight.sizes().end());
  check(all(kernel, positive), node, ": weight ", shape_text(weight.sizes()), " has an empty kernel");
  const bool empty_image = std::any_of(input.sizes().begin() + 2, input.sizes().end(),
                                       [](std::int64_t s) { return s == 0; });
  check(!empty_image || input.size(0) == 0 || in_channels == 0, node,
        ": only zero batch or zero channel inputs are supported, got input ", shape_text(input.sizes()));
  // Without input channels the forward's output has none either (ATen's "Empty" backend).
  Shape expected = {input.size(0), in_channels == 0 ? 0 : out_channels};
  for (std::size_t d = 0; d < spatial; ++d)
    expected.push_back(convolution_output_length(input.size(2 + d), kernel[d], p, d, saved.transposed));
  check(grad.sizes() == expected, node, ": grad ", shape_text(grad.sizes()), " is not the output ",
        shape_text(expected), " of the convolution of input ", shape_text(input.sizes()), " with weight ",
        shape_text(weight.sizes()), ", stride ", shape_text(saved.stride), ", padding ", shape_text(saved.padding),
        ", dilation ", shape_text(saved.dilation), ", output_padding ", shape_text(saved.output_padding),
        ", groups ", groups, saved.transposed ? ", transposed" : "");
  return p;
}

// convolution_backward's input grad: the adjoint of the forward convolution.
Tensor convolution_input_grad(const Tensor& grad, const ConvolutionBackward0Saved& saved, const ConvolutionParams& p) {
  const Tensor &input = saved.input, &weight = saved.weight;
  const std::size_t spatial = static_cast<std::size_t>(input.dim()) - 2;
  if (saved.transposed) {
    Tensor grad_input = convolution(grad, weight, std::nullopt, p.stride, p.padding, p.dilation, false,
                                    IntList(spatial, 0), saved.groups);
    for (std::size_t d = 0; d < spatial; ++d) grad_input = narrow(grad_input, 2 + d, 0, input.size(2 + d));
    return grad_input;
  }
  // The transposed convolution's natural output is (O-1)*s - 2p + d*(k-1) + 1; the rows the forward's
  // floor division dropped come back as output_padding.
  IntList output_padding(spatial);
  for (std::size_t d = 0; d < spatial; ++d) {
    const std::int64_t natural =
        (grad.size(2 + d) - 1) * p.stride[d] - 2 * p.padding[d] + p.dilation[d] * (weight.size(2 + d) - 1) + 1;
    output_padding[d] = input.size(2 + d) - natural;
  }
  return convolution(grad, weight, std::nullopt, p.stride, p.padding, p.dilation, true, output_padding,
                     saved.groups);
}

Grads ConvolutionBackward0(const Grads& grads, const ConvolutionBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(3);
  const Tensor& grad = *grads[0];
  const ConvolutionParams p = check_convolution(grad, saved);
  // An empty input, weight or grad leaves nothing to correlate: the input and weight grads are zeros
  // (and, without input channels, the bias grad too: ATen's "Empty" backend returns zeros of the bias's size).
  const bool empty = saved.input.numel() == 0 || saved.weight.numel() == 0 || grad.numel() == 0;
  Grads out(3);
  if (need[0]) out[0] = empty ? zeros(saved.input.sizes(), grad.dtype()) : convolution_input_grad(grad, saved, p);
  if (need[1])
    out[1] = empty ? zeros(saved.weight.sizes(), grad.dtype())
                   : convolution_backward_weight(grad, saved.input, saved.weight.sizes(), p.stride, p.padding,
                                                 p.dilation, saved.transposed, saved.groups);
  if (need[2]) {
    const std::int64_t out_channels = saved.transposed ? saved.weight.size(1) * saved.groups : saved.weight.size(0);
    out[2] = grad.size(1) == out_channels ? sum(grad, all_but_channel(grad.dim()))
                                          : zeros(saved.bias_sym_sizes_opt.value_or(IntList{out_channels}), grad.dtype());
  }
  return out;
}

// ----------------------------------------------------------------- pooling ---

// ATen's 2-d pooling parameters, {height, width} each.
struct Pool2dParams {
  std::array<std::int64_t, 2> kernel, stride, padding, dilation;
};

// One int[2] pooling parameter: one value stands for both dims; an empty stride means the kernel size.
// ATen narrows each to an int (safe_downcast), which keeps the output-size arithmetic far from overflow.
std::array<std::int64_t, 2> pool_param(const char* node, const char* name, const IntList& values,
                                       const std::optional<std::array<std::int64_t, 2>>& when_empty = std::nullopt) {
  check(values.size() == 1 || values.size() == 2 || (values.empty() && when_empty), node, ": ", name, " must be ",
        when_empty ? "empty, " : "", "a single int or two ints, got ", name, "=", shape_text(values));
  if (values.empty()) return *when_empty;
  for (std::int64_t v : values)
    check(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(), node, ": ", name, "=",
          shape_text(values), " does not fit in an int");
  return {values.front(), values.back()};
}

// Checks the pooling parameters and self as ATen's pool2d_shape_check does (self [C, H, W] or [N, C, H, W]
// with C, H and W non-empty; kernel, stride and dilation positive; 0 <= padding <= kernel / 2; an output
// of at least 1x1), and that grad has the forward output's shape. `op` is the forward, for the message;
// average pooling has no dilation (nullopt: 1).
Pool2dParams check_pool2d(const char* node, const char* op, const Tensor& grad, const Tensor& self,
                          const IntList& kernel_size, const IntList& stride, const IntList& padding,
                          const std::optional<IntList>& dilation, bool ceil_mode) {
  Pool2dParams p;
  p.kernel = pool_param(node, "kernel_size", kernel_size);
  p.stride = pool_param(node, "stride", stride, p.kernel);
  p.padding = pool_param(node, "padding", padding);
  p.dilation = dilation ? pool_param(node, "dilation", *dilation) : std::array<std::int64_t, 2>{1, 1};
  check((self.dim() == 3 || self.dim() == 4) && self.size(-3) != 0 && self.size(-2) != 0 && self.size(-1) != 0, node,
        ": self must be [C, H, W] or [N, C, H, W] with non-empty C, H and W, got ", shape_text(self.sizes()));
  check(p.kernel[0] > 0 && p.kernel[1] > 0, node, ": kernel_size must be positive, got kernel_size=",
        shape_text(kernel_size));
  check(p.stride[0] > 0 && p.stride[1] > 0, node, ": stride must be positive, got stride=", shape_text(stride));
  if (dilation)
    check(p.dilation[0] > 0 && p.dilation[1] > 0, node, ": dilation must be positive, got dilation=",
          shape_text(*dilation));
  for (std::size_t d = 0; d < 2; ++d)
    check(p.padding[d] >= 0 && p.padding[d] <= p.kernel[d] / 2, node,
          ": padding must be between 0 and half the kernel size, got padding=", shape_text(padding),
          " and kernel_size=", shape_text(kernel_size));
  Shape expected = self.sizes();
  for (std::size_t d = 0; d < 2; ++d)
    expected[expected.size() - 2 + d] = pooling_output_size(node, self.size(-2 + static_cast<std::int64_t>(d)),
                                                            p.kernel[d], p.padding[d], p.stride[d], p.dilation[d],
                                                            ceil_mode);
  check(expected.end()[-2] >= 1 && expected.end()[-1] >= 1, node, ": the ", op, " output of self ",
        shape_text(self.sizes()), " would be ", shape_text(expected), ", which is too small");
  check(grad.sizes() == expected, node, ": grad ", shape_text(grad.sizes()), " is not the ", op, " output of self ",
        shape_text(self.sizes()), " with kernel_size ", shape_text(kernel_size), ", stride ", shape_text(stride),
        ", padding ", shape_text(padding), dilation ? ", dilation " + str(*dilation) : "");
  return p;
}

// MaxPool2DWithIndicesBackward0 — max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[],
//                                 int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)
//   self: max_pool2d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, result1)
// result1 holds the indices: for each output, the flat position (h * W + w) of the chosen maximum in its
// H*W plane. The indices decide ties; overlapping windows that chose the same element add up; an index
// of -1 drops its grad, as ATen's kernel skips it. The indices output is not differentiable: torch's
// node takes one grad.
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
  const char* node = "MaxPool2DWithIndicesBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self, &indices = saved.result1;
  check_pool2d(node, "max_pool2d", grad, self, saved.kernel_size, saved.stride, saved.padding, saved.dilation,
               saved.ceil_mode);
  check(indices.sizes() == grad.sizes(), node, ": indices ", shape_text(indices.sizes()),
        " do not have the grad's shape ", shape_text(grad.sizes()));
  check(indices.dtype() == DType::Int64, node, ": indices must be int64, got ", dtype_name(indices.dtype()));
  if (grad.numel() == 0) return Grads{zeros(self.sizes(), grad.dtype())};
  const std::int64_t plane = self.size(-2) * self.size(-1);  // fits: self is not empty, as grad is not
  // L0 checks each index as it adds its grad (no pass over the indices before); its error does not know
  // result1, so the node looks for the bad index again and names it.
  try {
    return Grads{max_pool_backward(grad, indices, self.sizes(), 2)};
  } catch (const Error&) {
    const Tensor outside = logical_and(ne(indices, Scalar(-1)), logical_or(lt(indices, 0), ge(indices, plane)));
    if (any_true(outside))
      fail(concat(node, ": index ", masked_select(indices, outside).to_vector<std::int64_t>().front(),
                  " in result1 is out of range for self's ", self.size(-2), "x", self.size(-1), " plane"));
    throw;
  }
}

// MaxPool2DWithIndicesBackwardBackward0 — max_pool2d_with_indices_backward(Tensor grad_output, Tensor self,
//     int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor
//   grad_output: max_pool_double_backward(grad, indices, 2)
//   self: zeros_like(self)
// The backward scattered each grad_output to its index, so its derivative in grad_output gathers: for
// each output, grad at the flat position (h * W + w) that indices names in its H*W plane. self only
// chose the indices: its grad is zero (self_info gives its sizes and dtype).
struct MaxPool2DWithIndicesBackwardBackward0Saved {
  Tensor indices;
  TypeAndSize self_info;
};

Grads MaxPool2DWithIndicesBackwardBackward0(const Grads& grads, const MaxPool2DWithIndicesBackwardBackward0Saved& saved,
                                            const Need& need) {
  const char* node = "MaxPool2DWithIndicesBackwardBackward0";
  if (!grads[0]) return Grads(2);
  const Tensor &grad = *grads[0], &indices = saved.indices;
  const Shape& self_sizes = saved.self_info.sizes;
  check(grad.sizes() == self_sizes, node, ": grad ", shape_text(grad.sizes()), " does not have self's shape ",
        shape_text(self_sizes));
  Grads out(2);
  if (need[0]) {
    check(grad.dim() >= 2 && indices.dim() == grad.dim(), node, ": indices ", shape_text(indices.sizes()),
          " and self ", shape_text(self_sizes), " are not both [C, H, W] or [N, C, H, W]");
    check(std::equal(indices.sizes().begin(), indices.sizes().end() - 2, grad.sizes().begin()), node, ": indices ",
          shape_text(indices.sizes()), " do not have the leading dims of self ", shape_text(self_sizes));
    check(indices.dtype() == DType::Int64, node, ": indices must be int64, got ", dtype_name(indices.dtype()));
    const std::int64_t plane = grad.size(-2) * grad.size(-1);
    const Tensor outside = logical_or(lt(indices, 0), ge(indices, plane));
    if (any_true(outside))
      fail(concat(node, ": index ", masked_select(indices, outside).to_vector<std::int64_t>().front(),
                  " in indices is out of range for self's ", grad.size(-2), "x", grad.size(-1), " plane"));
    const Shape flat = {-1, plane}, flat_indices = {-1, indices.size(-2) * indices.size(-1)};
    out[0] = reshape(gather(reshape(grad, flat), 1, reshape(indices, flat_indices)), indices.sizes());
  }
  if (need[1]) out[1] = zeros(self_sizes, saved.self_info.options.dtype.value_or(grad.dtype()));
  return out;
}

// A pooling backward with windows that depend on the position (clipped at the borders, ceil_mode,
// adaptive sizes) is not a composition of L0 primitives short of building a sparse matrix, so the two
// average-pool backwards below loop over the [planes, H, W] values with this helper: it adds
// grad[p, oh, ow] / divisor into every input position of the window the function gives. grad is not
// empty and has self's leading dims.
struct Window {
  std::int64_t h0, h1, w0, w1;  // [h0, h1) x [w0, w1), inside the input
  double divisor;
};

template <class WindowOf>
Tensor scatter_windows(const Tensor& grad, const Shape& self_sizes, WindowOf window_of) {
  // The buffers below are std::vectors: bounded by the memory limit as tensors are.
  check_fits_memory_limit(grad.sizes(), DType::Float64);
  check_fits_memory_limit(self_sizes, DType::Float64);
  const std::int64_t H = self_sizes.end()[-2], W = self_sizes.end()[-1];
  const std::int64_t OH = grad.size(-2), OW = grad.size(-1), planes = grad.numel() / (OH * OW);
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

Grads AvgPool2DBackward0(const Grads& grads, const AvgPool2DBackward0Saved& saved, const Need& need) {
  const char* node = "AvgPool2DBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  const Pool2dParams p = check_pool2d(node, "avg_pool2d", grad, self, saved.kernel_size, saved.stride, saved.padding,
                                      std::nullopt, saved.ceil_mode);
  check(!saved.divisor_override || *saved.divisor_override != 0, node, ": divisor_override is 0");
  if (grad.numel() == 0) return Grads{zeros(self.sizes(), grad.dtype())};
  const std::int64_t H = self.size(-2), W = self.size(-1);
  const auto &kernel = p.kernel, &stride = p.stride, &padding = p.padding;
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
  const char* node = "AdaptiveAvgPool2DBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  check((self.dim() == 3 || self.dim() == 4) && grad.dim() == self.dim() && grad.size(-2) > 0 &&
            grad.size(-1) > 0 && std::equal(self.sizes().begin(), self.sizes().end() - 2, grad.sizes().begin()),
        node, ": grad ", shape_text(grad.sizes()), " does not fit self ", shape_text(self.sizes()));
  if (grad.numel() == 0) return Grads{zeros(self.sizes(), grad.dtype())};
  const std::int64_t H = self.size(-2), W = self.size(-1), OH = grad.size(-2), OW = grad.size(-1);
  auto start = [&](std::int64_t o, std::int64_t in, std::int64_t out) { return multiply_or_fail(o, in, node) / out; };
  auto end = [&](std::int64_t o, std::int64_t in, std::int64_t out) {
    return add_or_fail(multiply_or_fail(o + 1, in, node), out - 1, node) / out;
  };
  return Grads{scatter_windows(grad, self.sizes(), [&](std::int64_t oh, std::int64_t ow) {
    const std::int64_t h0 = start(oh, H, OH), h1 = end(oh, H, OH), w0 = start(ow, W, OW), w1 = end(ow, W, OW);
    return Window{h0, h1, w0, w1, static_cast<double>((h1 - h0) * (w1 - w0))};
  })};
}

// AdaptiveMaxPool2DBackward0 — adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)
//   self: adaptive_max_pool2d_backward(grad, self, result1)
// AdaptiveMaxPool3DBackward0 — adaptive_max_pool3d(Tensor self, int[3] output_size) -> (Tensor, Tensor)
//   self: adaptive_max_pool3d_backward(grad, self, result1)
// result1 holds, for each output, the flat position (h * W + w, or (d * H + h) * W + w) of its maximum in
// self's plane (the last 2 or 3 dims); each output's grad goes there (windows that overlap and chose the
// same element add up). The indices output is not differentiable: torch's node takes one grad.
struct AdaptiveMaxPoolSaved {
  Tensor self;
  Tensor result1;
};

template <std::int64_t spatial_dims>
Grads AdaptiveMaxPoolBackward(const Grads& grads, const AdaptiveMaxPoolSaved& saved, const Need& need) {
  const char* node = spatial_dims == 2 ? "AdaptiveMaxPool2DBackward0" : "AdaptiveMaxPool3DBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self, &indices = saved.result1;
  const auto spatial = static_cast<std::ptrdiff_t>(spatial_dims);
  check((self.dim() == spatial_dims + 1 || self.dim() == spatial_dims + 2) && grad.dim() == self.dim() &&
            std::equal(self.sizes().begin(), self.sizes().end() - spatial, grad.sizes().begin()),
        node, ": grad ", shape_text(grad.sizes()), " does not fit self ", shape_text(self.sizes()),
        spatial_dims == 2 ? " ([C, H, W] or [N, C, H, W], pooled over H and W)"
                          : " ([C, D, H, W] or [N, C, D, H, W], pooled over D, H and W)");
  check(indices.sizes() == grad.sizes(), node, ": indices ", shape_text(indices.sizes()),
        " do not have the grad's shape ", shape_text(grad.sizes()));
  check(indices.dtype() == DType::Int64, node, ": indices must be int64, got ", dtype_name(indices.dtype()));
  if (grad.numel() == 0 || self.numel() == 0) return Grads{zeros(self.sizes(), grad.dtype())};
  const std::int64_t plane = numel_of(Shape(self.sizes().end() - spatial, self.sizes().end()));
  if (!indices_within(indices, 0, plane)) {
    const Tensor outside = logical_or(lt(indices, 0), ge(indices, plane));
    fail(concat(node, ": index ", masked_select(indices, outside).to_vector<std::int64_t>().front(),
                " in result1 is out of range for self's plane of ", plane, " elements ",
                shape_text(Shape(self.sizes().end() - spatial, self.sizes().end()))));
  }
  return Grads{max_pool_backward(grad, indices, self.sizes(), spatial_dims)};
}

// MaxUnpool2DBackward0 — max_unpool2d(Tensor self, Tensor indices, SymInt[2] output_size) -> Tensor
//   self: max_pool_double_backward(grad, indices, 2)
// MaxUnpool3DBackward0 — max_unpool3d(Tensor self, Tensor indices, SymInt[3] output_size, int[3] stride,
//                                     int[3] padding) -> Tensor
//   self: max_pool_double_backward(grad, indices, 3)
// max_unpool put self's element i at flat position indices[i] of its plane (the last 2 or 3 dims of
// the output, flattened): the grad of self[i] is the grad at that position, a gather from each plane.
struct MaxUnpoolSaved {
  Tensor indices;
};

template <std::int64_t spatial_dims>
Grads MaxUnpoolBackward(const Grads& grads, const MaxUnpoolSaved& saved, const Need& need) {
  const char* node = spatial_dims == 2 ? "MaxUnpool2DBackward0" : "MaxUnpool3DBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &indices = saved.indices;
  check(indices.dim() >= spatial_dims, node, ": indices ", shape_text(indices.sizes()), " must have at least ",
        spatial_dims, " dims");
  check(indices.dtype() == DType::Int64, node, ": indices must be int64, got ", dtype_name(indices.dtype()));
  const std::int64_t batch_dims = indices.dim() - spatial_dims;
  check(grad.dim() == indices.dim() &&
            std::equal(indices.sizes().begin(), indices.sizes().begin() + batch_dims, grad.sizes().begin()),
        node, ": grad ", shape_text(grad.sizes()), " does not fit indices ", shape_text(indices.sizes()),
        " (the same leading dims, then the ", spatial_dims, " unpooled dims)");
  if (indices.numel() == 0) return Grads{zeros(indices.sizes(), grad.dtype())};
  Shape size(indices.sizes().begin(), indices.sizes().begin() + batch_dims);
  size.push_back(-1);
  return Grads{reshape(gather(reshape(grad, size), -1, reshape(indices, size)), indices.sizes())};
}

// AdaptiveAvgPool3DBackward0 — _adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor
//   self: _adaptive_avg_pool3d_backward(grad, self)
// As the 2-d one, along D, H and W: output (od, oh, ow) averages the input box
// [floor(od*D/OD), ceil((od+1)*D/OD)) x (the same for H) x (the same for W); grad / (box size) goes
// to each element of the box, in double, rounded once.
struct AdaptiveAvgPool3DBackward0Saved {
  Tensor self;
};

Grads AdaptiveAvgPool3DBackward0(const Grads& grads, const AdaptiveAvgPool3DBackward0Saved& saved,
                                 const Need& need) {
  const char* node = "AdaptiveAvgPool3DBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  check((self.dim() == 4 || self.dim() == 5) && grad.dim() == self.dim() && grad.size(-3) > 0 &&
            grad.size(-2) > 0 && grad.size(-1) > 0 &&
            std::equal(self.sizes().begin(), self.sizes().end() - 3, grad.sizes().begin()),
        node, ": grad ", shape_text(grad.sizes()), " does not fit self ", shape_text(self.sizes()),
        " ([C, D, H, W] or [N, C, D, H, W], pooled over D, H and W)");
  if (grad.numel() == 0 || self.numel() == 0) return Grads{zeros(self.sizes(), grad.dtype())};
  check_fits_memory_limit(grad.sizes(), DType::Float64);
  check_fits_memory_limit(self.sizes(), DType::Float64);
  const std::int64_t in[3] = {self.size(-3), self.size(-2), self.size(-1)};
  const std::int64_t out[3] = {grad.size(-3), grad.size(-2), grad.size(-1)};
  const std::int64_t planes = grad.numel() / (out[0] * out[1] * out[2]);
  auto start = [&](std::int64_t o, int d) { return multiply_or_fail(o, in[d], node) / out[d]; };
  auto end = [&](std::int64_t o, int d) {
    return add_or_fail(multiply_or_fail(o + 1, in[d], node), out[d] - 1, node) / out[d];
  };
  const std::vector<double> g = grad.to_vector<double>();
  std::vector<double> grad_input(static_cast<std::size_t>(planes * in[0] * in[1] * in[2]), 0.0);
  std::size_t k = 0;  // grad's elements in row-major order: plane, od, oh, ow
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t od = 0; od < out[0]; ++od)
      for (std::int64_t oh = 0; oh < out[1]; ++oh)
        for (std::int64_t ow = 0; ow < out[2]; ++ow) {
          const std::int64_t d0 = start(od, 0), d1 = end(od, 0), h0 = start(oh, 1), h1 = end(oh, 1);
          const std::int64_t w0 = start(ow, 2), w1 = end(ow, 2);
          const double delta = g[k++] / static_cast<double>((d1 - d0) * (h1 - h0) * (w1 - w0));
          for (std::int64_t id = d0; id < d1; ++id)
            for (std::int64_t ih = h0; ih < h1; ++ih)
              for (std::int64_t iw = w0; iw < w1; ++iw)
                grad_input[static_cast<std::size_t>(((p * in[0] + id) * in[1] + ih) * in[2] + iw)] += delta;
        }
  return Grads{to(from_vector(grad_input, self.sizes()), grad.dtype())};
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
// Grouped-query attention (enable_gqa=True): key and value have Hkv heads, query Hq = G * Hkv, and torch saves
// the unrepeated key and value (enable_gqa itself is not saved: the kernel reads it off the head counts). Key/value
// head j serves the G consecutive query heads j*G .. j*G+G-1 (repeat_interleave(G, dim=1)), so the formulas run on
// the repeated key and value, and key's and value's grads are summed over each head's group of G.
// dropout_p > 0 never reaches this node on CPU (torch takes the math path, whose nodes refgrad runs) and is refused.
// logsumexp is not a differentiable output: torch's node takes one grad.
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

void check_attention_shapes(const Tensor& grad, const ScaledDotProductFlashAttentionForCpuBackward0Saved& saved) {
  const char* node = "ScaledDotProductFlashAttentionForCpuBackward0";
  const Tensor &q = saved.query, &k = saved.key, &v = saved.value;
  // Hkv (key's and value's heads) divides Hq (query's): each key/value head serves Hq / Hkv query heads.
  check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2) &&
            q.size(0) == k.size(0) && q.size(0) == v.size(0) && k.size(1) == v.size(1) && k.size(1) > 0 &&
            q.size(1) % k.size(1) == 0 && grad.sizes() == Shape{q.size(0), q.size(1), q.size(2), v.size(3)},
        node, ": query ", shape_text(q.sizes()), ", key ", shape_text(k.sizes()), ", value ", shape_text(v.sizes()),
        " and grad ", shape_text(grad.sizes()),
        " do not fit [B, Hq, L, E], [B, Hkv, S, E], [B, Hkv, S, Ev], [B, Hq, L, Ev] with Hkv dividing Hq");
  // The softmax runs over the S key positions (torch's kernel divides by zero without any).
  check(k.size(2) > 0, node, ": key ", shape_text(k.sizes()), " has no positions");
  if (!saved.attn_mask) return;
  const Tensor& mask = *saved.attn_mask;
  const Shape scores = {q.size(0), q.size(1), q.size(2), k.size(2)};
  check((mask.dim() == 2 || mask.dim() == 4) && is_expandable_to(mask.sizes(), scores) &&
            mask.dtype() != DType::Int64,
        node, ": attn_mask ", dtype_name(mask.dtype()), shape_text(mask.sizes()),
        " must be a bool or floating mask of 2 or 4 dims that broadcasts to the scores ", shape_text(scores));
}

// [B, Hkv, S, E] -> [B, Hkv * group, S, E], each head repeated group times in a row:
// key.repeat_interleave(group, dim=1), as the GQA forward pairs key/value heads with query heads.
Tensor repeat_heads(const Tensor& key_or_value, std::int64_t group) {
  if (group == 1) return key_or_value;
  const Shape& sizes = key_or_value.sizes();
  const Tensor repeated = expand(unsqueeze(key_or_value, 2), {sizes[0], sizes[1], group, sizes[2], sizes[3]});
  return reshape(repeated, {sizes[0], sizes[1] * group, sizes[2], sizes[3]});
}

// The reverse of repeat_heads for a gradient: [B, Hkv * group, S, E] -> [B, Hkv, S, E], each key/value head's
// grad the sum of the grads of the group of query heads it served.
Tensor sum_over_head_groups(const Tensor& grad_per_query_head, std::int64_t group) {
  if (group == 1) return grad_per_query_head;
  const Shape& sizes = grad_per_query_head.sizes();
  const Tensor grouped = reshape(grad_per_query_head, {sizes[0], sizes[1] / group, group, sizes[2], sizes[3]});
  return sum(grouped, {2});
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
  check_attention_shapes(grad, saved);
  const double scale = saved.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const std::int64_t group = q.size(1) / k.size(1);  // query heads per key/value head (1 without GQA)
  const Tensor k_per_query_head = repeat_heads(k, group), v_per_query_head = repeat_heads(v, group);
  const Tensor p = attention_probabilities(q, k_per_query_head, scale, saved.attn_mask, saved.is_causal);
  const Tensor dp = matmul(grad, transpose(v_per_query_head, -2, -1));
  const Tensor ds = mul(p, sub(dp, sum(mul(p, dp), {-1}, true)));  // softmax backward
  Grads out(3);
  if (need[0]) out[0] = mul(matmul(ds, k_per_query_head), Scalar(scale));
  if (need[1]) out[1] = sum_over_head_groups(mul(matmul(transpose(ds, -2, -1), q), Scalar(scale)), group);
  if (need[2]) out[2] = sum_over_head_groups(matmul(transpose(p, -2, -1), grad), group);
  return out;
}

}  // namespace

// Declared in pooling_shape.hpp. The parameters fit in an int, so only `input + 2 * pad` can overflow.
std::int64_t pooling_output_size(const char* node, std::int64_t input, std::int64_t kernel, std::int64_t pad,
                                 std::int64_t stride, std::int64_t dilation, bool ceil_mode) {
  const std::int64_t numerator =
      add_or_fail(add_or_fail(input, 2 * pad, node) - dilation * (kernel - 1) - 1, ceil_mode ? stride - 1 : 0, node);
  std::int64_t out = (numerator >= 0 ? numerator / stride : -((-numerator + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= input + pad) --out;  // the last window must start inside the input
  return out;
}

// Declared in pooling_shape.hpp. amin and amax read the indices twice, where finding the bad index for
// the node's error message takes several passes and temporaries.
bool indices_within(const Tensor& indices, std::int64_t lowest, std::int64_t plane) {
  return indices.numel() == 0 ||
         (amin(indices).item<std::int64_t>() >= lowest && amax(indices).item<std::int64_t>() < plane);
}

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
    using S = NativeBatchNormLegitBackward0Saved;
    registry.push_back(define_node<S, NativeBatchNormLegitBackward0>(
        {"NativeBatchNormLegitBackward0", "_native_batch_norm_legit", {"input", "weight", "bias"}, 1, {},
         "input, weight, bias: grad.defined() ? native_batch_norm_backward(grad, input, weight, running_mean, "
         "running_var, result1, result2, training, eps, grad_input_mask) : std::tuple<Tensor, Tensor, Tensor>()"},
        {saved<&S::eps>("eps", FieldKind::Float), saved<&S::input>("input", FieldKind::Tensor),
         saved<&S::running_mean>("running_mean", FieldKind::Tensor),
         saved<&S::running_var>("running_var", FieldKind::Tensor),
         saved<&S::training>("training", FieldKind::Bool), saved<&S::weight>("weight", FieldKind::Tensor, true),
         saved<&S::result1>("result1", FieldKind::Tensor), saved<&S::result2>("result2", FieldKind::Tensor)}));
  }
  {
    using S = NativeBatchNormLegitBackward1Saved;
    registry.push_back(define_node<S, NativeBatchNormLegitBackward1>(
        {"NativeBatchNormLegitBackward1", "_native_batch_norm_legit.no_stats", {"input", "weight", "bias"}, 1, {},
         "input, weight, bias: grad.defined() ? native_batch_norm_backward(grad, input, weight, Tensor(), "
         "Tensor(), result1, result2, training, eps, grad_input_mask) : std::tuple<Tensor, Tensor, Tensor>()"},
        {saved<&S::eps>("eps", FieldKind::Float), saved<&S::input>("input", FieldKind::Tensor),
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
    using S = TrilinearBackward0Saved;
    registry.push_back(define_node<S, TrilinearBackward0>(
        {"TrilinearBackward0", "_trilinear", {"i1", "i2", "i3"}, 1, {},
         "i1, i2, i3: _trilinear_backward(grad, wrap_opt_if(i1, grad_input_mask[1] || grad_input_mask[2]), "
         "wrap_opt_if(i2, grad_input_mask[0] || grad_input_mask[2]), wrap_opt_if(i3, grad_input_mask[0] || "
         "grad_input_mask[1]), expand1, expand2, expand3, sumdim, grad_input_mask)"},
        {saved<&S::expand1>("expand1", FieldKind::IntList), saved<&S::expand2>("expand2", FieldKind::IntList),
         saved<&S::expand3>("expand3", FieldKind::IntList), saved<&S::i1>("i1", FieldKind::Tensor, true),
         saved<&S::i2>("i2", FieldKind::Tensor, true), saved<&S::i3>("i3", FieldKind::Tensor, true),
         saved<&S::sumdim>("sumdim", FieldKind::IntList)}));
  }
  {
    using S = EmbeddingBagBackward0Saved;
    registry.push_back(define_node<S, EmbeddingBagBackward0>(
        {"EmbeddingBagBackward0", "_embedding_bag", {"weight", "per_sample_weights"}, 1, {},
         "weight: _embedding_bag_backward_symint(grad, indices, offsets, result1, result2, result3, "
         "weight.sym_size(0), scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)\n"
         "per_sample_weights: _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, result1, "
         "mode, padding_idx)"},
        {saved<&S::indices>("indices", FieldKind::Tensor), saved<&S::mode>("mode", FieldKind::Int),
         saved<&S::offsets>("offsets", FieldKind::Tensor), saved<&S::padding_idx>("padding_idx", FieldKind::Int),
         saved<&S::per_sample_weights>("per_sample_weights", FieldKind::Tensor, true),
         saved<&S::scale_grad_by_freq>("scale_grad_by_freq", FieldKind::Bool),
         saved<&S::sparse>("sparse", FieldKind::Bool), saved<&S::weight>("weight", FieldKind::Tensor, true),
         saved<&S::weight_sym_argsize_0>("weight_sym_argsize_0", FieldKind::Int),
         saved<&S::result1>("result1", FieldKind::Tensor), saved<&S::result2>("result2", FieldKind::Tensor),
         saved<&S::result3>("result3", FieldKind::Tensor)}));
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
    using S = MaxPool2DWithIndicesBackwardBackward0Saved;
    registry.push_back(define_node<S, MaxPool2DWithIndicesBackwardBackward0>(
        {"MaxPool2DWithIndicesBackwardBackward0", "max_pool2d_with_indices_backward", {"grad_output", "self"}, 1, {},
         "grad_output: max_pool_double_backward(grad, indices, 2)\nself: zeros_like(self)"},
        {saved<&S::indices>("indices", FieldKind::Tensor),
         hidden<&S::self_info>("self_info", FieldKind::TypeAndSize)}));
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
  registry.push_back(define_node<AdaptiveMaxPoolSaved, AdaptiveMaxPoolBackward<2>>(
      {"AdaptiveMaxPool2DBackward0", "adaptive_max_pool2d", {"self"}, 1, {},
       "self: adaptive_max_pool2d_backward(grad, self, result1)"},
      {saved<&AdaptiveMaxPoolSaved::self>("self", FieldKind::Tensor),
       saved<&AdaptiveMaxPoolSaved::result1>("result1", FieldKind::Tensor)}));
  registry.push_back(define_node<AdaptiveMaxPoolSaved, AdaptiveMaxPoolBackward<3>>(
      {"AdaptiveMaxPool3DBackward0", "adaptive_max_pool3d", {"self"}, 1, {},
       "self: adaptive_max_pool3d_backward(grad, self, result1)"},
      {saved<&AdaptiveMaxPoolSaved::self>("self", FieldKind::Tensor),
       saved<&AdaptiveMaxPoolSaved::result1>("result1", FieldKind::Tensor)}));
  {
    using S = AdaptiveAvgPool3DBackward0Saved;
    registry.push_back(define_node<S, AdaptiveAvgPool3DBackward0>(
        {"AdaptiveAvgPool3DBackward0", "_adaptive_avg_pool3d", {"self"}, 1, {},
         "self: _adaptive_avg_pool3d_backward(grad, self)"},
        {saved<&S::self>("self", FieldKind::Tensor)}));
  }
  registry.push_back(define_node<MaxUnpoolSaved, MaxUnpoolBackward<2>>(
      {"MaxUnpool2DBackward0", "max_unpool2d", {"self"}, 1, {}, "self: max_pool_double_backward(grad, indices, 2)"},
      {saved<&MaxUnpoolSaved::indices>("indices", FieldKind::Tensor)}));
  registry.push_back(define_node<MaxUnpoolSaved, MaxUnpoolBackward<3>>(
      {"MaxUnpool3DBackward0", "max_unpool3d", {"self"}, 1, {}, "self: max_pool_double_backward(grad, indices, 3)"},
      {saved<&MaxUnpoolSaved::indices>("indices", FieldKind::Tensor)}));
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
