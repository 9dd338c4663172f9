// Backward nodes: the pooling group's 3-d and fractional nodes (the 2-d and adaptive ones are in nn.cpp).
#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <vector>

#include "define.hpp"
#include "pooling_shape.hpp"

namespace refgrad::nodes {
namespace {

// ------------------------------------------------------------------ helpers ---

bool any_true(const Tensor& mask) { return sum(mask).item<std::int64_t>() > 0; }

// ATen's 3-d pooling parameters, {depth, height, width} each.
using Triple = std::array<std::int64_t, 3>;
struct Pool3dParams {
  Triple kernel, stride, padding, dilation;
};

// One int[3] pooling parameter: one value stands for all three dims; an empty stride means the kernel
// size. ATen narrows each to an int (safe_downcast), which keeps the output-size arithmetic far from
// overflow.
Triple pool3d_param(const char* node, const char* name, const IntList& values,
                    const std::optional<Triple>& when_empty = std::nullopt) {
  check(values.size() == 1 || values.size() == 3 || (values.empty() && when_empty), node, ": ", name, " must be ",
        when_empty ? "empty, " : "", "a single int or three ints, got ", name, "=", shape_text(values));
  if (values.empty()) return *when_empty;
  for (std::int64_t v : values)
    check(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(), node, ": ", name, "=",
          shape_text(values), " does not fit in an int");
  if (values.size() == 1) return {values[0], values[0], values[0]};
  return {values[0], values[1], values[2]};
}

// Checks the pooling parameters and self as ATen's pool3d_shape_check does (self [C, D, H, W] or
// [N, C, D, H, W] with every dim but N non-empty; kernel, stride and dilation positive;
// 0 <= padding <= kernel / 2; an output of at least 1x1x1; average pooling also wants the input at least
// as large as the kernel), and that grad has the forward output's shape. `op` is the forward, for the
// message; average pooling has no dilation (nullopt: 1).
Pool3dParams check_pool3d(const char* node, const char* op, const Tensor& grad, const Tensor& self,
                          const IntList& kernel_size, const IntList& stride, const IntList& padding,
                          const std::optional<IntList>& dilation, bool ceil_mode) {
  Pool3dParams p;
  p.kernel = pool3d_param(node, "kernel_size", kernel_size);
  p.stride = pool3d_param(node, "stride", stride, p.kernel);
  p.padding = pool3d_param(node, "padding", padding);
  p.dilation = dilation ? pool3d_param(node, "dilation", *dilation) : Triple{1, 1, 1};
  check((self.dim() == 4 || self.dim() == 5) && self.size(-4) != 0 && self.size(-3) != 0 && self.size(-2) != 0 &&
            self.size(-1) != 0,
        node, ": self must be [C, D, H, W] or [N, C, D, H, W] with non-empty C, D, H and W, got ",
        shape_text(self.sizes()));
  for (std::size_t d = 0; d < 3; ++d) {
    check(p.kernel[d] > 0, node, ": kernel_size must be positive, got kernel_size=", shape_text(kernel_size));
    check(p.stride[d] > 0, node, ": stride must be positive, got stride=", shape_text(stride));
    check(p.dilation[d] > 0, node, ": dilation must be positive, got dilation=", shape_text(dilation.value_or(IntList{})));
    check(p.padding[d] >= 0 && p.padding[d] <= p.kernel[d] / 2, node,
          ": padding must be between 0 and half the kernel size, got padding=", shape_text(padding),
          " and kernel_size=", shape_text(kernel_size));
  }
  const Shape spatial(self.sizes().end() - 3, self.sizes().end());
  if (!dilation)  // avg_pool3d's check_input_size
    for (std::size_t d = 0; d < 3; ++d)
      check(spatial[d] >= p.kernel[d], node, ": self ", shape_text(self.sizes()), " is smaller than kernel_size ",
            shape_text(kernel_size), " in its last three dims");
  Shape expected = self.sizes();
  for (std::size_t d = 0; d < 3; ++d)
    expected[expected.size() - 3 + d] = pooling_output_size(node, spatial[d], p.kernel[d], p.padding[d], p.stride[d],
                                                            p.dilation[d], ceil_mode);
  check(expected.end()[-3] >= 1 && expected.end()[-2] >= 1 && expected.end()[-1] >= 1, node, ": the ", op,
        " output of self ", shape_text(self.sizes()), " would be ", shape_text(expected), ", which is too small");
  check(grad.sizes() == expected, node, ": grad ", shape_text(grad.sizes()), " is not the ", op, " output of self ",
        shape_text(self.sizes()), " with kernel_size ", shape_text(kernel_size), ", stride ", shape_text(stride),
        ", padding ", shape_text(padding), dilation ? ", dilation " + str(*dilation) : "");
  return p;
}

// The backward of a max pooling that saved, for each output, the flat position of its maximum in
// self's plane (the last `spatial_dims` dims of self, flattened): each output's grad goes to that
// position, and outputs that chose the same element add up (L0's max_pool_backward). With
// skip_minus_one, an index of -1 drops its grad, as ATen's max_pool kernels skip it; without, it is out
// of range. grad and indices have self's leading dims.
Tensor grad_from_indices(const char* node, const Tensor& grad, const Shape& self_sizes, const Tensor& indices,
                         std::int64_t spatial_dims, bool skip_minus_one) {
  check(indices.sizes() == grad.sizes(), node, ": indices ", shape_text(indices.sizes()),
        " do not have the grad's shape ", shape_text(grad.sizes()));
  check(indices.dtype() == DType::Int64, node, ": indices must be int64, got ", dtype_name(indices.dtype()));
  if (grad.numel() == 0) return zeros(self_sizes, grad.dtype());
  const Shape plane_sizes(self_sizes.end() - spatial_dims, self_sizes.end());
  const std::int64_t plane = numel_of(plane_sizes);  // fits: self is not empty, as grad is not
  const auto fail_on_a_bad_index = [&] {
    const Tensor skipped = skip_minus_one ? eq(indices, Scalar(-1)) : zeros(indices.sizes(), DType::Bool);
    const Tensor outside = logical_and(logical_not(skipped), logical_or(lt(indices, 0), ge(indices, plane)));
    if (any_true(outside))
      fail(concat(node, ": index ", masked_select(indices, outside).to_vector<std::int64_t>().front(),
                  " in result1 is out of range for self's plane ", shape_text(plane_sizes), " of ", plane,
                  " elements"));
  };
  // L0 skips a -1: without skip_minus_one the indices are checked first. With it, L0 checks each index as
  // it adds its grad; its error does not know result1, so the node looks for the bad index again and names it.
  if (!skip_minus_one && !indices_within(indices, 0, plane)) fail_on_a_bad_index();
  try {
    return max_pool_backward(grad, indices, self_sizes, spatial_dims);
  } catch (const Error&) {
    fail_on_a_bad_index();
    throw;
  }
}

// ------------------------------------------------------------- 3-d pooling ---

// AvgPool3DBackward0 — avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0,
//                      bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor
//   self: avg_pool3d_backward(grad, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
//         divisor_override)
// Each output spreads grad / divisor over its window, as ATen's CPU kernel: the divisor is
// divisor_override, else the window's size counted with padding (but not past it, as ceil_mode's last
// window may go) when count_include_pad, else the window's size inside the input. An empty stride
// means stride = kernel_size.
struct AvgPool3DBackward0Saved {
  bool ceil_mode;
  bool count_include_pad;
  std::optional<std::int64_t> divisor_override;
  IntList kernel_size;
  IntList padding;
  Tensor self;
  IntList stride;
};

// One dim of an average-pooling window: [begin, end) inside the input, and its length counted with
// the padding it covers.
struct WindowSpan {
  std::int64_t begin, end, padded_length;
};

Grads AvgPool3DBackward0(const Grads& grads, const AvgPool3DBackward0Saved& saved, const Need& need) {
  const char* node = "AvgPool3DBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  const Pool3dParams p = check_pool3d(node, "avg_pool3d", grad, self, saved.kernel_size, saved.stride, saved.padding,
                                      std::nullopt, saved.ceil_mode);
  check(!saved.divisor_override || *saved.divisor_override != 0, node, ": divisor_override is 0");
  if (grad.numel() == 0) return Grads{zeros(self.sizes(), grad.dtype())};
  // The windows clip at the borders and ceil_mode's last one is short: not a composition of L0
  // primitives short of building a sparse matrix, so this loops over the values, in double, rounding
  // once. The buffers are std::vectors: bounded by the memory limit as tensors are.
  check_fits_memory_limit(grad.sizes(), DType::Float64);
  check_fits_memory_limit(self.sizes(), DType::Float64);
  const Triple in = {self.size(-3), self.size(-2), self.size(-1)};
  const Triple out = {grad.size(-3), grad.size(-2), grad.size(-1)};
  const std::int64_t planes = grad.numel() / (out[0] * out[1] * out[2]);
  auto span = [&](std::int64_t o, std::size_t d) {
    const std::int64_t begin = o * p.stride[d] - p.padding[d];
    const std::int64_t end = std::min(begin + p.kernel[d], in[d] + p.padding[d]);
    return WindowSpan{std::max<std::int64_t>(begin, 0), std::min(end, in[d]), end - begin};
  };
  const std::vector<double> g = grad.to_vector<double>();
  std::vector<double> grad_input(static_cast<std::size_t>(planes * in[0] * in[1] * in[2]), 0.0);
  for (std::int64_t od = 0; od < out[0]; ++od)
    for (std::int64_t oh = 0; oh < out[1]; ++oh)
      for (std::int64_t ow = 0; ow < out[2]; ++ow) {
        const WindowSpan sd = span(od, 0), sh = span(oh, 1), sw = span(ow, 2);
        const std::int64_t divisor =
            saved.divisor_override ? *saved.divisor_override
            : saved.count_include_pad
                ? sd.padded_length * sh.padded_length * sw.padded_length
                : (sd.end - sd.begin) * (sh.end - sh.begin) * (sw.end - sw.begin);
        for (std::int64_t plane = 0; plane < planes; ++plane) {
          const double delta =
              g[static_cast<std::size_t>(((plane * out[0] + od) * out[1] + oh) * out[2] + ow)] / static_cast<double>(divisor);
          for (std::int64_t id = sd.begin; id < sd.end; ++id)
            for (std::int64_t ih = sh.begin; ih < sh.end; ++ih)
              for (std::int64_t iw = sw.begin; iw < sw.end; ++iw)
                grad_input[static_cast<std::size_t>(((plane * in[0] + id) * in[1] + ih) * in[2] + iw)] += delta;
        }
      }
  return Grads{to(from_vector(grad_input, self.sizes()), grad.dtype())};
}

// MaxPool3DWithIndicesBackward0 — max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[],
//                                 int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)
//   self: max_pool3d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, result1)
// result1 holds the indices: for each output, the flat position ((d * H + h) * W + w) of the chosen
// maximum in its D*H*W plane. The indices decide ties; overlapping windows that chose the same element
// add up; an index of -1 drops its grad, as ATen's kernel skips it. The indices output is not
// differentiable: torch's node takes one grad.
struct MaxPool3DWithIndicesBackward0Saved {
  bool ceil_mode;
  IntList dilation;
  IntList kernel_size;
  IntList padding;
  Tensor self;
  IntList stride;
  Tensor result1;
};

Grads MaxPool3DWithIndicesBackward0(const Grads& grads, const MaxPool3DWithIndicesBackward0Saved& saved,
                                    const Need& need) {
  const char* node = "MaxPool3DWithIndicesBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  check_pool3d(node, "max_pool3d", grad, saved.self, saved.kernel_size, saved.stride, saved.padding, saved.dilation,
               saved.ceil_mode);
  return Grads{grad_from_indices(node, grad, saved.self.sizes(), saved.result1, 3, /*skip_minus_one=*/true)};
}

// ------------------------------------------------------ fractional pooling ---

// FractionalMaxPool2DBackward0 — fractional_max_pool2d(Tensor self, int[2] kernel_size, int[2] output_size,
//                                                      Tensor random_samples) -> (Tensor, Tensor)
//   self: fractional_max_pool2d_backward(grad, self, kernel_size, output_size, result1)
// FractionalMaxPool3DBackward0 — fractional_max_pool3d(Tensor self, int[3] kernel_size, int[3] output_size,
//                                                      Tensor random_samples) -> (Tensor, Tensor)
//   self: fractional_max_pool3d_backward(grad, self, kernel_size, output_size, result1)
// The pseudo-random windows were chosen in the forward; result1 holds, for each output, the flat
// position (h * W + w, or (d * H + h) * W + w) of its maximum in self's plane, and each output's grad
// goes there (overlapping windows that chose the same element add up). kernel_size is not used: the
// indices say everything, as in ATen's backward. The indices output is not differentiable: torch's node
// takes one grad.
struct FractionalMaxPoolSaved {
  IntList kernel_size;
  IntList output_size;
  Tensor self;
  Tensor result1;
};

template <std::int64_t spatial_dims>
Grads FractionalMaxPoolBackward(const Grads& grads, const FractionalMaxPoolSaved& saved, const Need& need) {
  const char* node = spatial_dims == 2 ? "FractionalMaxPool2DBackward0" : "FractionalMaxPool3DBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  const auto spatial = static_cast<std::ptrdiff_t>(spatial_dims);
  check(self.dim() == spatial_dims + 1 || self.dim() == spatial_dims + 2, node, ": self must be ",
        spatial_dims == 2 ? "[C, H, W] or [N, C, H, W]" : "[C, D, H, W] or [N, C, D, H, W]", ", got ",
        shape_text(self.sizes()));
  check(static_cast<std::int64_t>(saved.output_size.size()) == spatial_dims, node, ": output_size must have ",
        spatial_dims, " sizes, got output_size=", shape_text(saved.output_size));
  Shape expected(self.sizes().begin(), self.sizes().end() - spatial);
  expected.insert(expected.end(), saved.output_size.begin(), saved.output_size.end());
  check(grad.sizes() == expected, node, ": grad ", shape_text(grad.sizes()), " is not the output of self ",
        shape_text(self.sizes()), " pooled to output_size ", shape_text(saved.output_size));
  return Grads{grad_from_indices(node, grad, self.sizes(), saved.result1, spatial_dims, /*skip_minus_one=*/false)};
}

}  // namespace

void add_pooling_nodes(std::vector<NodeDef>& registry) {
  {
    using S = AvgPool3DBackward0Saved;
    registry.push_back(define_node<S, AvgPool3DBackward0>(
        {"AvgPool3DBackward0", "avg_pool3d", {"self"}, 1, {},
         "self: avg_pool3d_backward(grad, self, kernel_size, stride, padding, ceil_mode, count_include_pad, "
         "divisor_override)"},
        {saved<&S::ceil_mode>("ceil_mode", FieldKind::Bool),
         saved<&S::count_include_pad>("count_include_pad", FieldKind::Bool),
         saved<&S::divisor_override>("divisor_override", FieldKind::Int, true),
         saved<&S::kernel_size>("kernel_size", FieldKind::IntList), saved<&S::padding>("padding", FieldKind::IntList),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::stride>("stride", FieldKind::IntList)}));
  }
  {
    using S = MaxPool3DWithIndicesBackward0Saved;
    registry.push_back(define_node<S, MaxPool3DWithIndicesBackward0>(
        {"MaxPool3DWithIndicesBackward0", "max_pool3d_with_indices", {"self"}, 1, {},
         "self: max_pool3d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, "
         "result1)"},
        {saved<&S::ceil_mode>("ceil_mode", FieldKind::Bool), saved<&S::dilation>("dilation", FieldKind::IntList),
         saved<&S::kernel_size>("kernel_size", FieldKind::IntList), saved<&S::padding>("padding", FieldKind::IntList),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::stride>("stride", FieldKind::IntList),
         saved<&S::result1>("result1", FieldKind::Tensor)}));
  }
  using F = FractionalMaxPoolSaved;
  registry.push_back(define_node<F, FractionalMaxPoolBackward<2>>(
      {"FractionalMaxPool2DBackward0", "fractional_max_pool2d", {"self"}, 1, {},
       "self: fractional_max_pool2d_backward(grad, self, kernel_size, output_size, result1)"},
      {saved<&F::kernel_size>("kernel_size", FieldKind::IntList),
       saved<&F::output_size>("output_size", FieldKind::IntList), saved<&F::self>("self", FieldKind::Tensor),
       saved<&F::result1>("result1", FieldKind::Tensor)}));
  registry.push_back(define_node<F, FractionalMaxPoolBackward<3>>(
      {"FractionalMaxPool3DBackward0", "fractional_max_pool3d", {"self"}, 1, {},
       "self: fractional_max_pool3d_backward(grad, self, kernel_size, output_size, result1)"},
      {saved<&F::kernel_size>("kernel_size", FieldKind::IntList),
       saved<&F::output_size>("output_size", FieldKind::IntList), saved<&F::self>("self", FieldKind::Tensor),
       saved<&F::result1>("result1", FieldKind::Tensor)}));
}

}  // namespace refgrad::nodes
