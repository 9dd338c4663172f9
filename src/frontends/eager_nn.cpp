// The eager tape's neural-network ops (include/refgrad/eager.hpp): each
// computes its result with the L0 ops and records the node PyTorch records.
// L0 has no gelu, layer_norm, dropout or nll_loss forward: the small helpers
// below compose them from L0 ops, the way PyTorch's CPU kernels define them.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "refgrad/eager.hpp"
#include "refgrad/error.hpp"
#include "refgrad/ops.hpp"
#include "tape.hpp"

namespace refgrad::eager {

using tape::record_op;
using tape::Saved;

namespace {

// at::Reduction, as the loss nodes save it.
constexpr std::int64_t kReductionNone = 0;
constexpr std::int64_t kReductionMean = 1;
constexpr std::int64_t kReductionSum = 2;

std::int64_t reduction_enum(const std::string& op, const std::string& reduction) {
  if (reduction == "none") return kReductionNone;
  if (reduction == "mean") return kReductionMean;
  if (reduction == "sum") return kReductionSum;
  fail(op + ": " + reduction + " is not a valid value for reduction (none, mean or sum)");
}

// An optional tensor input as a `Tensor?` field: None when left out.
FieldValue tensor_or_none(const Variable& variable) {
  if (variable.defined()) return variable.data();
  return None{};
}

// A 2-d op's int-or-pair argument ("stride=2" or "stride=(2, 1)") as the pair PyTorch saves.
IntList pair_of(const std::string& op, const std::string& name, const IntList& value) {
  check(value.size() == 1 || value.size() == 2, op, ": ", name, " must have 1 or 2 values, got ", shape_text(value));
  return value.size() == 1 ? IntList{value[0], value[0]} : value;
}

// ------------------------------------------------------------------ gelu ---

// gelu(x) = x * Phi(x), Phi the standard normal CDF; approximate "tanh" uses
// tanh(sqrt(2/pi) * (x + 0.044715 x^3)) for 2 Phi(x) - 1.
Tensor gelu_forward(const Tensor& x, const std::string& approximate) {
  const Tensor half_x = mul(x, 0.5);
  if (approximate == "none") return mul(half_x, add(erf(mul(x, M_SQRT1_2)), 1));
  const double sqrt_2_over_pi = M_SQRT2 * M_2_SQRTPI * 0.5;
  const Tensor inner = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), sqrt_2_over_pi);
  return mul(half_x, add(tanh(inner), 1));
}

// ------------------------------------------------------------ layer norm ---

// The dims layer_norm normalizes over: the input's last normalized_shape.size()
// dims, which must equal normalized_shape.
IntList normalized_dims(const Tensor& input, const IntList& normalized_shape) {
  const auto axis = input.dim() - static_cast<std::int64_t>(normalized_shape.size());
  const bool fits = !normalized_shape.empty() && axis >= 0 &&
                    Shape(input.sizes().begin() + axis, input.sizes().end()) == normalized_shape;
  check(fits, "eager::layer_norm: normalized_shape ", shape_text(normalized_shape),
        " does not match the last dims of input ", shape_text(input.sizes()));
  IntList dims;
  for (auto dim = axis; dim < input.dim(); ++dim) dims.push_back(dim);
  return dims;
}

void check_affine_shape(const std::string& name, const Variable& parameter, const IntList& normalized_shape) {
  if (!parameter.defined()) return;
  check(parameter.data().sizes() == normalized_shape, "eager::layer_norm: ", name, " ",
        shape_text(parameter.data().sizes()), " does not have normalized_shape ", shape_text(normalized_shape));
}

// native_layer_norm's three results: the output, the mean and rstd = 1/sqrt(var + eps)
// (biased variance), both keeping the normalized dims as 1s, in the input's dtype.
struct LayerNormResults {
  Tensor output, mean, rstd;
};

LayerNormResults layer_norm_forward(const Tensor& input, const IntList& dims, const Variable& weight,
                                    const Variable& bias, double eps) {
  LayerNormResults results;
  results.mean = mean(input, dims, /*keepdim=*/true);
  results.rstd = rsqrt(add(var(input, dims, /*correction=*/0, /*keepdim=*/true), eps));
  results.output = mul(sub(input, results.mean), results.rstd);
  if (weight.defined()) results.output = mul(results.output, weight.data());
  if (bias.defined()) results.output = add(results.output, bias.data());
  return results;
}

// --------------------------------------------------------------- nll loss ---

// (N, C) input and (N) int64 targets, each a class in [0, C) or ignore_index.
void check_nll_loss_args(const std::string& op, const Tensor& input, const Tensor& target, std::int64_t ignore_index) {
  check(input.dim() == 2, op, ": expected (N, C) input, got ", shape_text(input.sizes()));
  check(target.dtype() == DType::Int64, op, ": target must be int64, got ", dtype_name(target.dtype()));
  check(target.dim() == 1 && target.size(0) == input.size(0), op, ": expected target of shape [", input.size(0),
        "] for input ", shape_text(input.sizes()), ", got ", shape_text(target.sizes()));
  for (const std::int64_t cls : target.to_vector<std::int64_t>()) {
    check(cls == ignore_index || (cls >= 0 && cls < input.size(1)), op, ": target ", cls,
          " is out of bounds for ", input.size(1), " classes");
  }
}

// nll_loss_forward's two results: the loss and total_weight, the number of
// targets not ignored (a 0-d tensor in the input's dtype; 0 for "none", as PyTorch's
// CPU kernel leaves it).
struct NllLossResults {
  Tensor output, total_weight;
};

NllLossResults nll_loss_forward(const Tensor& input, const Tensor& target, std::int64_t ignore_index,
                                std::int64_t reduction) {
  const Tensor kept = ne(target, ignore_index);
  const Tensor safe_target = where(kept, target, Scalar(std::int64_t{0}));  // an ignored target reads class 0
  const Tensor picked = squeeze(gather(input, 1, unsqueeze(safe_target, 1)), 1);
  const Tensor losses = where(kept, neg(picked), Scalar(0.0));
  if (reduction == kReductionNone) return {losses, zeros({}, input.dtype())};
  const Tensor total_weight = sum(to(kept, input.dtype()));
  if (reduction == kReductionSum) return {sum(losses), total_weight};
  return {div(sum(losses), total_weight), total_weight};
}

}  // namespace

// ------------------------------------------------------------------- ops ---

Variable gelu(const Variable& self, const std::string& approximate) {
  check(approximate == "none" || approximate == "tanh",
        "eager::gelu: approximate argument must be either none or tanh, got '", approximate, "'");
  Saved saved = {{"approximate", approximate}, {"self", self.data()}};
  return record_op("GeluBackward0", gelu_forward(self.data(), approximate), {self}, std::move(saved));
}

Variable layer_norm(const Variable& input, const IntList& normalized_shape, const Variable& weight,
                    const Variable& bias, double eps) {
  const IntList dims = normalized_dims(input.data(), normalized_shape);
  check_affine_shape("weight", weight, normalized_shape);
  check_affine_shape("bias", bias, normalized_shape);
  LayerNormResults results = layer_norm_forward(input.data(), dims, weight, bias, eps);
  Saved saved = {{"bias", tensor_or_none(bias)},
                 {"input", input.data()},
                 {"normalized_shape", normalized_shape},
                 {"weight", tensor_or_none(weight)},
                 {"result1", results.mean},
                 {"result2", results.rstd}};
  // mean and rstd are not differentiable outputs: torch's node has one input, for the output.
  return record_op("NativeLayerNormBackward0", results.output, {input, weight, bias}, std::move(saved));
}

// ATen's _dropout_impl: the input times a 0-d zero for p == 1, else times the
// noise bernoulli(1 - p) / (1 - p); both are a MulBackward0 on the CPU.
Variable dropout(const Variable& input, double p, bool training, Generator& generator) {
  check(p >= 0 && p <= 1, "eager::dropout: dropout probability has to be between 0 and 1, but got ", p);
  const Tensor& x = input.data();
  if (p == 0 || !training || x.numel() == 0) return input;
  if (p == 1) return mul(input, constant(zeros({}, x.dtype())));
  const Tensor noise = refgrad::div(refgrad::bernoulli(x.sizes(), 1 - p, generator, x.dtype()), 1 - p);
  return mul(input, constant(noise));
}

Variable embedding(const Variable& weight, const Tensor& indices, std::int64_t padding_idx) {
  const Tensor& table = weight.data();
  check(table.dim() == 2, "eager::embedding: weight must be 2-d, got ", shape_text(table.sizes()));
  check(indices.dtype() == DType::Int64, "eager::embedding: indices must be int64, got ", dtype_name(indices.dtype()));
  // As at::embedding takes it: -1 for none (F.embedding has already wrapped a negative index).
  check(padding_idx >= -1 && padding_idx < table.size(0), "eager::embedding: padding_idx ", padding_idx,
        " is out of range for weight ", shape_text(table.sizes()));
  Saved saved = {{"indices", indices},
                 {"padding_idx", padding_idx},
                 {"scale_grad_by_freq", false},
                 {"sparse", false},
                 {"weight_sym_argsize_0", table.size(0)}};
  return record_op("EmbeddingBackward0", refgrad::embedding(table, indices, padding_idx), {weight}, std::move(saved));
}

Variable nll_loss(const Variable& input, const Tensor& target, std::int64_t ignore_index,
                  const std::string& reduction) {
  const std::int64_t reduction_code = reduction_enum("eager::nll_loss", reduction);
  check_nll_loss_args("eager::nll_loss", input.data(), target, ignore_index);
  NllLossResults results = nll_loss_forward(input.data(), target, ignore_index, reduction_code);
  Saved saved = {{"ignore_index", ignore_index},
                 {"reduction", reduction_code},
                 {"self", input.data()},
                 {"target", target},
                 {"weight", None{}},
                 {"total_weight", results.total_weight}};
  return record_op("NllLossBackward0", results.output, {input}, std::move(saved));
}

Variable cross_entropy(const Variable& input, const Tensor& target, std::int64_t ignore_index,
                       const std::string& reduction) {
  // Checked here too, so that a bad input is reported as cross_entropy's, not log_softmax's.
  reduction_enum("eager::cross_entropy", reduction);
  check_nll_loss_args("eager::cross_entropy", input.data(), target, ignore_index);
  return nll_loss(log_softmax(input, 1), target, ignore_index, reduction);
}

Variable mse_loss(const Variable& self, const Variable& target) {
  const Tensor result = refgrad::mean(refgrad::square(refgrad::sub(self.data(), target.data())));
  Saved saved = {{"reduction", kReductionMean}, {"self", self.data()}, {"target", target.data()}};
  return record_op("MseLossBackward0", result, {self, target}, std::move(saved));
}

Variable conv2d(const Variable& input, const Variable& weight, const Variable& bias, const IntList& stride,
                const IntList& padding, const IntList& dilation, std::int64_t groups) {
  const std::string op = "eager::conv2d";
  check(input.data().dim() == 4, op, ": expected 4-d (N, C, H, W) input, got ", shape_text(input.data().sizes()));
  check(weight.data().dim() == 4, op, ": expected 4-d (C_out, C_in / groups, kH, kW) weight, got ",
        shape_text(weight.data().sizes()));
  const IntList stride2 = pair_of(op, "stride", stride), padding2 = pair_of(op, "padding", padding),
                dilation2 = pair_of(op, "dilation", dilation), output_padding = {0, 0};
  const OptionalTensor bias_data = bias.defined() ? OptionalTensor(bias.data()) : std::nullopt;
  Tensor result = convolution(input.data(), weight.data(), bias_data, stride2, padding2, dilation2,
                              /*transposed=*/false, output_padding, groups);
  // F.conv2d without a bias passes convolution an undefined tensor, whose sizes PyTorch saves as [0].
  const IntList bias_sizes = bias.defined() ? IntList(bias.data().sizes()) : IntList{0};
  Saved saved = {{"bias_sym_sizes_opt", bias_sizes},
                 {"dilation", dilation2},
                 {"groups", groups},
                 {"input", input.data()},
                 {"output_padding", output_padding},
                 {"padding", padding2},
                 {"stride", stride2},
                 {"transposed", false},
                 {"weight", weight.data()}};
  return record_op("ConvolutionBackward0", std::move(result), {input, weight, bias}, std::move(saved));
}

Variable max_pool2d(const Variable& input, const IntList& kernel_size, const IntList& stride,
                    const IntList& padding) {
  const std::string op = "eager::max_pool2d";
  const Tensor& x = input.data();
  check(x.dim() == 3 || x.dim() == 4, op, ": expected 3-d or 4-d input, got ", shape_text(x.sizes()));
  const IntList kernel2 = pair_of(op, "kernel_size", kernel_size), padding2 = pair_of(op, "padding", padding);
  // PyTorch saves an omitted stride as the empty list it was given.
  const IntList stride2 = stride.empty() ? IntList{} : pair_of(op, "stride", stride), dilation = {1, 1};
  auto [output, indices] = max_pool2d_with_indices(x, kernel2, stride2, padding2, dilation);
  Saved saved = {{"ceil_mode", false}, {"dilation", dilation}, {"kernel_size", kernel2}, {"padding", padding2},
                 {"self", x},          {"stride", stride2},     {"result1", indices}};
  // The indices are not differentiable: torch's node has one input, for the output.
  return record_op("MaxPool2DWithIndicesBackward0", output, {input}, std::move(saved));
}

}  // namespace refgrad::eager
