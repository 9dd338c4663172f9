// Backward nodes: grid sampling (F.grid_sample), 2-d and 3-d.
//
// grid_sampler_{2,3}d(input [N, C, (D,) H, W], grid [N, (D_out,) H_out, W_out, S]) reads, for each
// output position, input at the point grid[n, ..., :] (x, y(, z) in [-1, 1], x along W) by
// interpolation. Each output is a weighted sum of "taps", input elements at integer positions:
//   out[n, c, p] = sum over taps t of  w_t(grid[n, p]) * input[n, c, position_t]
// with a tap outside the input (zeros padding) reading 0. So, with the tap positions held fixed,
//   grad_input[n, c, position_t] += w_t * grad[n, c, p]
//   grad_grid[n, p, k]            = sum over c, t of grad[n, c, p] * input[n, c, position_t] * d w_t / d grid_k
// which is what ATen's grid_sampler_{2,3}d_backward kernels compute (aten/src/ATen/native/GridSampler.h:
// grid_sampler_compute_source_index_set_grad, reflect_coordinates_set_grad, clip_coordinates_set_grad,
// get_cubic_coefficients_grad). The weights are products of one weight per spatial dim, so each dim is
// handled on its own (its source coordinate and its taps) and the taps are combined at the end.
#include <string>
#include <vector>

#include "define.hpp"

namespace refgrad::nodes {
namespace {

enum Interpolation : std::int64_t { Bilinear = 0, Nearest = 1, Bicubic = 2 };
enum Padding : std::int64_t { Zeros = 0, Border = 1, Reflection = 2 };

// A coordinate along one dim and its derivative with respect to the coordinate it was computed from.
struct WithGrad {
  Tensor value;
  Tensor grad;
};

// Where grid coordinate c in [-1, 1] falls in a dim of `size` elements:
//   align_corners: -1 and 1 are the centers of the first and last element:  (c + 1) / 2 * (size - 1)
//   otherwise:     -1 and 1 are the outer edges of the first and last:      ((c + 1) * size - 1) / 2
WithGrad unnormalize(const Tensor& coordinate, std::int64_t size, bool align_corners) {
  const double scale = align_corners ? (size - 1) / 2.0 : size / 2.0;
  const Tensor value = align_corners ? mul(add(coordinate, Scalar(1)), Scalar(scale))
                                     : div(sub(mul(add(coordinate, Scalar(1)), Scalar(size)), Scalar(1)), Scalar(2));
  return {value, full_like(coordinate, Scalar(scale))};
}

// clip_coordinates_set_grad: clamped to [0, size - 1]; the derivative is 0 at and beyond the ends.
WithGrad clip_coordinates(const WithGrad& in, std::int64_t size) {
  const double last = static_cast<double>(size - 1);
  const Tensor inside = logical_and(gt(in.value, Scalar(0)), lt(in.value, Scalar(last)));
  return {clamp(in.value, Scalar(0.0), Scalar(last)), where(inside, in.grad, Scalar(0.0))};
}

// reflect_coordinates_set_grad: `in` mirrored into [twice_low / 2, twice_high / 2] at both ends, as
// many times as it takes. After k mirrorings (flips) the derivative's sign is (-1)^k.
WithGrad reflect_coordinates(const WithGrad& in, std::int64_t twice_low, std::int64_t twice_high) {
  if (twice_low == twice_high) return {zeros_like(in.value), zeros_like(in.grad)};
  const double low = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  const Tensor shifted = sub(in.value, Scalar(low));
  const Tensor sign = where(lt(shifted, Scalar(0)), Scalar(-1.0), ones_like(shifted));
  const Tensor distance = abs(shifted);
  const Tensor flips = div(div(distance, Scalar(span)), Scalar(1), "floor");
  const Tensor extra = sub(distance, mul(flips, Scalar(span)));  // fmod(distance, span)
  const Tensor even = eq(sub(flips, mul(div(flips, Scalar(2), "floor"), Scalar(2))), Scalar(0));
  return {where(even, add(extra, Scalar(low)), add(neg(extra), Scalar(span + low))),
          mul(in.grad, where(even, sign, neg(sign)))};
}

// The padding mode applied to a coordinate (ATen's compute_coordinates, with its derivative):
// zeros leaves it (taps outside read 0), border clamps it, reflection mirrors it at the edges (the
// centers of the end elements with align_corners, their outer edges without) and then clamps it.
WithGrad apply_padding(const WithGrad& in, std::int64_t size, std::int64_t padding_mode, bool align_corners) {
  if (padding_mode == Border) return clip_coordinates(in, size);
  if (padding_mode == Reflection) {
    const WithGrad reflected = align_corners ? reflect_coordinates(in, 0, 2 * (size - 1))
                                             : reflect_coordinates(in, -1, 2 * size - 1);
    return clip_coordinates(reflected, size);
  }
  return in;
}

// One tap along one dim: the integer position it reads (as a float tensor) and its weight with the
// weight's derivative with respect to the source coordinate.
struct Tap {
  Tensor position;
  Tensor weight;
  Tensor weight_grad;
};

Tensor floor_of(const Tensor& t) { return div(t, Scalar(1), "floor"); }

// std::nearbyint: to the nearest integer, halves to the even one.
Tensor round_half_to_even(const Tensor& t) {
  const Tensor below = floor_of(t);
  const Tensor fraction = sub(t, below);
  const Tensor below_is_odd = ne(sub(below, mul(floor_of(div(below, Scalar(2))), Scalar(2))), Scalar(0));
  const Tensor up = logical_or(gt(fraction, Scalar(0.5)), logical_and(eq(fraction, Scalar(0.5)), below_is_odd));
  return where(up, add(below, Scalar(1)), below);
}

// a3 x^3 + a2 x^2 + a1 x + a0, by Horner's rule.
Tensor cubic(const Tensor& x, double a3, double a2, double a1, double a0) {
  return add(mul(add(mul(add(mul(x, Scalar(a3)), Scalar(a2)), x), Scalar(a1)), x), Scalar(a0));
}

// The taps of one dim for a source coordinate `source` (after padding, except for bicubic):
//   nearest:  the nearest element, weight 1
//   bilinear: floor(s) and floor(s) + 1, weights 1 - t and t, where t = s - floor(s)
//   bicubic:  floor(s) - 1 ... floor(s) + 2, weights the cubic convolution kernel (A = -0.75) at
//             distances t + 1, t, 1 - t, 2 - t (UpSample.h's get_cubic_upsample_coefficients):
//               |x| <= 1:     ((A + 2) |x| - (A + 3)) x^2 + 1
//               1 < |x| < 2:  ((A |x| - 5A) |x| + 8A) |x| - 4A
//             each tap's position padded on its own (get_value_bounded).
std::vector<Tap> taps_of(const Tensor& source, std::int64_t interpolation_mode, std::int64_t size,
                         std::int64_t padding_mode, bool align_corners) {
  if (interpolation_mode == Nearest) return {{round_half_to_even(source), ones_like(source), zeros_like(source)}};
  const Tensor below = floor_of(source);
  const Tensor t = sub(source, below);
  if (interpolation_mode == Bilinear)
    return {{below, add(neg(t), Scalar(1)), full_like(t, Scalar(-1.0))}, {add(below, Scalar(1)), t, ones_like(t)}};
  const double A = -0.75;
  auto near = [&](const Tensor& x) { return cubic(x, A + 2, -(A + 3), 0, 1); };
  auto far = [&](const Tensor& x) { return cubic(x, A, -5 * A, 8 * A, -4 * A); };
  auto near_grad = [&](const Tensor& x) { return cubic(x, 0, 3 * (A + 2), -2 * (A + 3), 0); };
  auto far_grad = [&](const Tensor& x) { return cubic(x, 0, 3 * A, -10 * A, 8 * A); };
  const Tensor t_plus_1 = add(t, Scalar(1)), one_minus_t = add(neg(t), Scalar(1)), two_minus_t = add(neg(t), Scalar(2));
  const Tensor weights[4] = {far(t_plus_1), near(t), near(one_minus_t), far(two_minus_t)};
  const Tensor weight_grads[4] = {far_grad(t_plus_1), near_grad(t), neg(near_grad(one_minus_t)),
                                  neg(far_grad(two_minus_t))};
  std::vector<Tap> taps;
  for (int i = 0; i < 4; ++i) {
    const Tensor position = add(below, Scalar(static_cast<double>(i - 1)));
    const Tensor padded = apply_padding({position, zeros_like(position)}, size, padding_mode, align_corners).value;
    taps.push_back({padded, weights[i], weight_grads[i]});
  }
  return taps;
}

// GridSampler2DBackward0 — grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode,
//                                           bool align_corners)
//   input, grid: grad.defined() ? grid_sampler_2d_backward(grad, input, grid, interpolation_mode, padding_mode,
//                                 align_corners, grad_input_mask) : std::tuple<Tensor, Tensor>()
// GridSampler3DBackward0 — grid_sampler_3d(...), the same with grid_sampler_3d_backward (no bicubic).
// interpolation_mode: 0 bilinear, 1 nearest, 2 bicubic; padding_mode: 0 zeros, 1 border, 2 reflection.
// Nearest's grid grad is zero (its output is piecewise constant in grid).
struct GridSamplerSaved {
  bool align_corners;
  Tensor grid;
  Tensor input;
  std::int64_t interpolation_mode;
  std::int64_t padding_mode;
};

template <std::int64_t spatial_dims>
Grads GridSamplerBackward(const Grads& grads, const GridSamplerSaved& saved, const Need& need) {
  const char* node = spatial_dims == 2 ? "GridSampler2DBackward0" : "GridSampler3DBackward0";
  if (!grads[0]) return Grads(2);
  const Tensor &grad = *grads[0], &input = saved.input, &grid = saved.grid;
  const std::int64_t mode = saved.interpolation_mode, padding_mode = saved.padding_mode;
  check(mode == Bilinear || mode == Nearest || (mode == Bicubic && spatial_dims == 2), node,
        ": interpolation_mode ", mode, " is not one of 0 (bilinear), 1 (nearest)", spatial_dims == 2 ? ", 2 (bicubic)" : "");
  check(padding_mode == Zeros || padding_mode == Border || padding_mode == Reflection, node, ": padding_mode ",
        padding_mode, " is not one of 0 (zeros), 1 (border), 2 (reflection)");
  check(input.dim() == spatial_dims + 2 && grid.dim() == spatial_dims + 2 && grid.size(-1) == spatial_dims &&
            grid.size(0) == input.size(0),
        node, ": expected input [N, C, ", spatial_dims == 2 ? "H, W" : "D, H, W", "] and grid [N, ",
        spatial_dims == 2 ? "H_out, W_out, 2" : "D_out, H_out, W_out, 3", "], got input ", shape_text(input.sizes()),
        " and grid ", shape_text(grid.sizes()));
  Shape in_sizes(input.sizes().begin() + 2, input.sizes().end());
  Shape out_sizes(grid.sizes().begin() + 1, grid.sizes().end() - 1);
  for (std::int64_t size : in_sizes)
    check(size > 0, node, ": input ", shape_text(input.sizes()), " has an empty spatial dim");
  Shape expected = {input.size(0), input.size(1)};
  expected.insert(expected.end(), out_sizes.begin(), out_sizes.end());
  check(grad.sizes() == expected, node, ": grad ", shape_text(grad.sizes()), " is not the output shape ",
        shape_text(expected), " of input ", shape_text(input.sizes()), " and grid ", shape_text(grid.sizes()));
  check(input.dtype() == grid.dtype(), node, ": input (", dtype_name(input.dtype()), ") and grid (",
        dtype_name(grid.dtype()), ") must have one dtype");
  Grads out(2);
  if (!need[0] && !need[1]) return out;

  // float16/bfloat16 compute in float32 and round once, as ATen's kernel does.
  const DType dtype = input.dtype(), opmath = opmath_dtype(dtype);
  const std::int64_t N = input.size(0), C = input.size(1);
  const std::int64_t in_numel = numel_of(in_sizes), out_numel = numel_of(out_sizes);
  const Tensor input_flat = reshape(to(input, opmath), {N, C, in_numel});
  const Tensor grad_flat = reshape(to(grad, opmath), {N, C, out_numel});
  const Tensor grid_flat = reshape(to(grid, opmath), {N, out_numel, spatial_dims});

  // Per spatial dim j of the input (0 the outermost; grid component spatial_dims - 1 - j): the
  // derivative of the source coordinate with respect to the grid's, and the taps.
  std::vector<Tensor> source_grad(spatial_dims);
  std::vector<std::vector<Tap>> taps(spatial_dims);
  for (std::int64_t j = 0; j < spatial_dims; ++j) {
    const std::int64_t size = in_sizes[static_cast<std::size_t>(j)];
    const Tensor coordinate = select(grid_flat, 2, spatial_dims - 1 - j);  // [N, out_numel]
    WithGrad source = unnormalize(coordinate, size, saved.align_corners);
    if (mode != Bicubic) source = apply_padding(source, size, padding_mode, saved.align_corners);
    source_grad[static_cast<std::size_t>(j)] = source.grad;
    taps[static_cast<std::size_t>(j)] = taps_of(source.value, mode, size, padding_mode, saved.align_corners);
  }

  Tensor grad_input = zeros({N, C, in_numel}, opmath);
  std::vector<Tensor> grad_source(spatial_dims, zeros({N, out_numel}, opmath));
  // Every combination of one tap per dim, counted like digits.
  const std::size_t taps_per_dim = taps[0].size();
  std::vector<std::size_t> choice(spatial_dims, 0);
  for (bool more = true; more;) {
    Tensor inside = ones({N, out_numel}, DType::Bool), flat_position = zeros({N, out_numel}, opmath);
    Tensor weight = ones({N, out_numel}, opmath);
    for (std::int64_t j = 0; j < spatial_dims; ++j) {
      const Tap& tap = taps[static_cast<std::size_t>(j)][choice[static_cast<std::size_t>(j)]];
      const double size = static_cast<double>(in_sizes[static_cast<std::size_t>(j)]);
      inside = logical_and(inside, logical_and(ge(tap.position, Scalar(0)), le(tap.position, Scalar(size - 1))));
      flat_position = add(mul(flat_position, Scalar(size)), tap.position);
      weight = mul(weight, tap.weight);
    }
    // A tap outside the input reads 0 and receives nothing (its weight may be NaN for an infinite grid).
    const Tensor index = expand(unsqueeze(to(where(inside, flat_position, Scalar(0.0)), DType::Int64), 1),
                                {N, C, out_numel});
    if (need[0]) {
      const Tensor contribution = mul(grad_flat, unsqueeze(where(inside, weight, Scalar(0.0)), 1));
      grad_input = scatter_add(grad_input, 2, contiguous(index), contribution);
    }
    if (need[1] && mode != Nearest) {
      const Tensor value = where(unsqueeze(inside, 1), gather(input_flat, 2, contiguous(index)), Scalar(0.0));
      const Tensor grad_times_value = sum(mul(grad_flat, value), {1});  // [N, out_numel]
      for (std::int64_t j = 0; j < spatial_dims; ++j) {
        Tensor weight_grad = grad_times_value;  // d weight / d source_j: the other dims' weights held
        for (std::int64_t e = 0; e < spatial_dims; ++e) {
          const Tap& tap = taps[static_cast<std::size_t>(e)][choice[static_cast<std::size_t>(e)]];
          weight_grad = mul(weight_grad, e == j ? tap.weight_grad : tap.weight);
        }
        grad_source[static_cast<std::size_t>(j)] =
            add(grad_source[static_cast<std::size_t>(j)], where(inside, weight_grad, Scalar(0.0)));
      }
    }
    more = false;
    for (std::int64_t j = spatial_dims - 1; j >= 0 && !more; --j) {
      auto& digit = choice[static_cast<std::size_t>(j)];
      if (++digit < taps_per_dim) more = true;
      else digit = 0;
    }
  }
  if (need[0]) out[0] = to(reshape(grad_input, input.sizes()), dtype);
  if (need[1]) {
    if (mode == Nearest) {
      out[1] = zeros_like(grid);
    } else {
      TensorList components;  // grid component k is input dim spatial_dims - 1 - k
      for (std::int64_t k = 0; k < spatial_dims; ++k) {
        const std::size_t j = static_cast<std::size_t>(spatial_dims - 1 - k);
        components.push_back(mul(grad_source[j], source_grad[j]));
      }
      out[1] = to(reshape(stack(components, 2), grid.sizes()), dtype);
    }
  }
  return out;
}

template <std::int64_t spatial_dims>
NodeDef define_grid_sampler_node() {
  const std::string forward = spatial_dims == 2 ? "grid_sampler_2d" : "grid_sampler_3d";
  return define_node<GridSamplerSaved, GridSamplerBackward<spatial_dims>>(
      {spatial_dims == 2 ? "GridSampler2DBackward0" : "GridSampler3DBackward0", forward, {"input", "grid"}, 1, {},
       "input, grid: grad.defined() ? " + forward +
           "_backward(grad, input, grid, interpolation_mode, padding_mode, align_corners, grad_input_mask) : "
           "std::tuple<Tensor, Tensor>()"},
      {saved<&GridSamplerSaved::align_corners>("align_corners", FieldKind::Bool),
       saved<&GridSamplerSaved::grid>("grid", FieldKind::Tensor),
       saved<&GridSamplerSaved::input>("input", FieldKind::Tensor),
       saved<&GridSamplerSaved::interpolation_mode>("interpolation_mode", FieldKind::Int),
       saved<&GridSamplerSaved::padding_mode>("padding_mode", FieldKind::Int)});
}

}  // namespace

void add_grid_sampler_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_grid_sampler_node<2>());
  registry.push_back(define_grid_sampler_node<3>());
}

}  // namespace refgrad::nodes
