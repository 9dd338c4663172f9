// Backward nodes: reflection and replication padding (constant padding is ConstantPadNdBackward0, in
// shape.cpp).
//
// Both forwards copy: each output position along a padded dim reads one input position, so the backward
// adds each output's grad into the input position it read. The map is a product of one map per padded
// dim, so the backward is one index_add per padded dim, last dim first.
#include <string>
#include <vector>

#include "define.hpp"

namespace refgrad::nodes {
namespace {

enum class PadMode { Reflect, Replicate };

// For one padded dim of length `input`, padded by `before` and `after` (negative: cropped), the input
// position each output position reads:
//   reflect:   i = o - before, mirrored at both ends without repeating the edge: i -> |i|, then
//              i -> (input - 1) - |(input - 1) - i|  (one reflection is enough: |pad| < input)
//   replicate: i = clamp(o - before, 0, input - 1)
Tensor source_positions(PadMode mode, std::int64_t input, std::int64_t before, std::int64_t output) {
  std::vector<std::int64_t> positions(static_cast<std::size_t>(output));
  const std::int64_t last = input - 1;
  for (std::int64_t o = 0; o < output; ++o) {
    std::int64_t i = o - before;
    if (mode == PadMode::Reflect) {
      i = i < 0 ? -i : i;
      i = last - (last - i < 0 ? i - last : last - i);
    } else {
      i = i < 0 ? 0 : (i > last ? last : i);
    }
    positions[static_cast<std::size_t>(o)] = i;
  }
  return from_vector(positions, {output});
}

// ReflectionPad{1,2,3}DBackward0 — reflection_pad{1,2,3}d(Tensor self, SymInt[2*n] padding) -> Tensor
//   self: reflection_pad{1,2,3}d_backward_symint(grad, self, padding)
// ReplicationPad{1,2,3}DBackward0 — replication_pad{1,2,3}d(Tensor self, SymInt[2*n] padding) -> Tensor
//   self: replication_pad{1,2,3}d_backward_symint(grad, self, padding)
// padding lists (before, after) pairs from the last dim backwards, as F.pad: [left, right, top, bottom,
// front, back]. self is [C, ...] or [N, C, ...] with n spatial dims. ATen checks that the non-batch dims
// are non-empty, that reflection pads are smaller than their dim (so one reflection reaches every
// output), and that every padded length is at least 1; replication pads may be negative (a crop).
struct PadSaved {
  IntList padding;
  Tensor self;
};

template <PadMode mode, std::int64_t spatial_dims>
const char* pad_node_name() {
  if constexpr (mode == PadMode::Reflect)
    return spatial_dims == 1 ? "ReflectionPad1DBackward0"
           : spatial_dims == 2 ? "ReflectionPad2DBackward0"
                               : "ReflectionPad3DBackward0";
  else
    return spatial_dims == 1 ? "ReplicationPad1DBackward0"
           : spatial_dims == 2 ? "ReplicationPad2DBackward0"
                               : "ReplicationPad3DBackward0";
}

template <PadMode mode, std::int64_t spatial_dims>
Grads PadBackward(const Grads& grads, const PadSaved& saved, const Need& need) {
  const char* node = pad_node_name<mode, spatial_dims>();
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  const IntList& padding = saved.padding;
  check(static_cast<std::int64_t>(padding.size()) == 2 * spatial_dims, node, ": padding must have ",
        2 * spatial_dims, " entries, got padding=", shape_text(padding));
  bool non_batch_dims_nonempty = self.dim() == spatial_dims + 1 || self.dim() == spatial_dims + 2;
  for (std::int64_t d = self.dim() - spatial_dims - 1; non_batch_dims_nonempty && d < self.dim(); ++d)
    non_batch_dims_nonempty = self.size(d) != 0;
  check(non_batch_dims_nonempty, node, ": self must have ", spatial_dims + 1, " or ", spatial_dims + 2,
        " dims (an optional batch, channels, ", spatial_dims, " padded) with non-empty non-batch dims, got ",
        shape_text(self.sizes()));
  // Shapes: padded dim k (0 = the last) has input length self.size(-1 - k) and pads padding[2k], padding[2k+1].
  Shape expected = self.sizes();
  for (std::int64_t k = 0; k < spatial_dims; ++k) {
    const std::int64_t dim = self.dim() - 1 - k, input = self.size(dim);
    const std::int64_t before = padding[2 * k], after = padding[2 * k + 1];
    if (mode == PadMode::Reflect)
      check(before < input && after < input, node, ": padding (", before, ", ", after, ") of dim ", dim,
            " must be less than its size in self ", shape_text(self.sizes()));
    expected[dim] = add_or_fail(add_or_fail(input, before, node), after, node);
    check(expected[dim] >= 1, node, ": padding ", shape_text(padding), " leaves dim ", dim, " of self ",
          shape_text(self.sizes()), " with ", expected[dim], " elements");
  }
  check(grad.sizes() == expected, node, ": grad ", shape_text(grad.sizes()), " is not the padded shape ",
        shape_text(expected), " of self ", shape_text(self.sizes()), " with padding ", shape_text(padding));
  // float16/bfloat16 add up in float32 and round once at the end.
  Tensor grad_input = to(grad, opmath_dtype(grad.dtype()));
  for (std::int64_t k = 0; k < spatial_dims; ++k) {
    const std::int64_t dim = self.dim() - 1 - k, input = self.size(dim);
    Shape folded = grad_input.sizes();
    folded[dim] = input;
    grad_input = index_add(zeros(folded, grad_input.dtype()), dim,
                           source_positions(mode, input, padding[2 * k], expected[dim]), grad_input);
  }
  return Grads{to(grad_input, grad.dtype())};
}

template <PadMode mode, std::int64_t spatial_dims>
NodeDef define_pad_node(const char* forward) {
  const std::string name = pad_node_name<mode, spatial_dims>();
  return define_node<PadSaved, PadBackward<mode, spatial_dims>>(
      {name, forward, {"self"}, 1, {}, std::string("self: ") + forward + "_backward_symint(grad, self, padding)"},
      {saved<&PadSaved::padding>("padding", FieldKind::IntList), saved<&PadSaved::self>("self", FieldKind::Tensor)});
}

}  // namespace

void add_padding_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_pad_node<PadMode::Reflect, 1>("reflection_pad1d"));
  registry.push_back(define_pad_node<PadMode::Reflect, 2>("reflection_pad2d"));
  registry.push_back(define_pad_node<PadMode::Reflect, 3>("reflection_pad3d"));
  registry.push_back(define_pad_node<PadMode::Replicate, 1>("replication_pad1d"));
  registry.push_back(define_pad_node<PadMode::Replicate, 2>("replication_pad2d"));
  registry.push_back(define_pad_node<PadMode::Replicate, 3>("replication_pad3d"));
}

}  // namespace refgrad::nodes
