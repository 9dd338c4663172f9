// Backward nodes: upsampling — what F.interpolate runs for its modes nearest, nearest-exact, linear,
// bilinear, bicubic and trilinear, with and without antialias (upsample_nearest{1,2,3}d,
// _upsample_nearest_exact{1,2,3}d, upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d,
// upsample_bicubic2d, _upsample_bilinear2d_aa, _upsample_bicubic2d_aa).
//
// Every mode is separable: self is [N, C, spatial...], and along each spatial dim k output position o
// is a weighted sum of input positions i,
//   out = A_k self along dim k, with one [output_size[k], input_size[k]] matrix A_k per spatial dim,
// so the backward applies the transposes: grad_self = A_k^T grad along each spatial dim. ATen computes
// each backward as one kernel, in opmath (float32 for float16/bfloat16), rounded once at the end.
//
// The modes differ only in A_k's rows, all computed here as ATen's UpSample.h and upsample kernels do:
//   nearest, nearest-exact: each output copies one input (a 0/1 row): the backward adds each output's
//     grad into the input it copies (index_add), so an infinite grad stays where it is;
//   linear, cubic, antialiased: a few weights per row: the backward multiplies by A_k (matmul).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "define.hpp"

namespace refgrad::nodes {
namespace {

enum class Mode { Nearest, NearestExact, Linear, Cubic, LinearAntialias, CubicAntialias };

bool copies_one_input(Mode mode) { return mode == Mode::Nearest || mode == Mode::NearestExact; }

// One spatial dim of the upsampling: its sizes, its saved scale (the forward's scale factor, or None)
// and the scale field's name for messages.
struct SpatialDim {
  std::int64_t input_size, output_size;
  std::optional<double> scale;
  const char* field;
};

// ATen's compute_scales_value, in T: 1/scale when the forward was given a positive scale, else
// input/output. A scale whose inverse overflows T would make ATen's index arithmetic undefined (an
// infinite source index converted to int64); refgrad refuses it.
template <class T>
T compute_scales_value(const char* node, const SpatialDim& d) {
  if (!d.scale || !(*d.scale > 0)) return static_cast<T>(d.input_size) / static_cast<T>(d.output_size);
  const double inverse = 1.0 / *d.scale;
  check(inverse <= static_cast<double>(std::numeric_limits<T>::max()), node, ": ", d.field, " ", *d.scale,
        " is too small: its inverse does not fit a ", sizeof(T) == 4 ? "float" : "double");
  return static_cast<T>(inverse);
}

// ATen's area_pixel_compute_scale: with align_corners the corner pixels of input and output line up.
double area_pixel_compute_scale(const char* node, const SpatialDim& d, bool align_corners) {
  if (!align_corners) return compute_scales_value<double>(node, d);
  return d.output_size > 1 ? static_cast<double>(d.input_size - 1) / static_cast<double>(d.output_size - 1) : 0.0;
}

// min(floor(real), input_size - 1), floor taken in float as ATen's floorf does. The clamp comes before
// the conversion, which a real beyond int64 (a huge scale) could not survive.
std::int64_t floor_index_at_most_last(double real, std::int64_t input_size) {
  if (!(real < static_cast<double>(input_size - 1))) return input_size - 1;
  return std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(real))), input_size - 1);
}

// The input position each output position copies, in float as ATen computes it:
//   nearest (nearest_idx):             same size: o;  twice the size: o / 2;  else floor(o * scale)
//   nearest-exact (nearest_exact_idx): floor((o + 0.5) * scale)
// both clamped to the last input; scale is compute_scales_value's.
std::vector<std::int64_t> nearest_sources(const char* node, Mode mode, const SpatialDim& d) {
  std::vector<std::int64_t> sources(static_cast<std::size_t>(d.output_size));
  const bool plain = mode == Mode::Nearest;
  const bool copy = plain && d.output_size == d.input_size, halve = plain && d.output_size == 2 * d.input_size;
  const float scale = copy || halve ? 1.0f : compute_scales_value<float>(node, d);
  for (std::int64_t o = 0; o < d.output_size; ++o) {
    // ATen's int64 * float is a float product; (o + 0.5) * scale a double one, floored in float.
    const double real =
        plain ? static_cast<double>(static_cast<float>(o) * scale) : (static_cast<double>(o) + 0.5) * scale;
    sources[static_cast<std::size_t>(o)] = copy ? o : halve ? o / 2 : floor_index_at_most_last(real, d.input_size);
  }
  return sources;
}

// Keys' cubic convolution kernel (UpSample.h's cubic_convolution1 for |x| <= 1, cubic_convolution2 for
// 1 < |x| < 2) with parameter a: -0.75 for bicubic (as OpenCV), -0.5 for antialiased bicubic (as PIL).
double cubic_convolution(double x, double a) {
  x = std::abs(x);
  if (x <= 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// Row o of A for linear interpolation (compute_source_index_and_lambda): the source
// real = scale * o (align_corners) or scale * (o + 0.5) - 0.5 clamped at 0, read from its two neighbours
// i0 = floor(real) and i0 + 1 (the last input twice at the end), weighted 1 - lambda and lambda.
// Same sizes copy, whatever the scale.
void linear_row(double* row, std::int64_t o, const SpatialDim& d, double scale, bool align_corners) {
  if (d.input_size == d.output_size) {
    row[o] = 1.0;
    return;
  }
  const double oo = static_cast<double>(o);
  const double real = align_corners ? scale * oo : std::max(scale * (oo + 0.5) - 0.5, 0.0);
  const std::int64_t i0 = floor_index_at_most_last(real, d.input_size);
  const std::int64_t i1 = i0 + (i0 < d.input_size - 1 ? 1 : 0);
  const double lambda = std::clamp(real - static_cast<double>(i0), 0.0, 1.0);
  row[i0] += 1.0 - lambda;
  row[i1] += lambda;
}

// Row o of A for bicubic interpolation (upsample_bicubic2d's kernel): as linear but the source is not
// clamped at 0, and it reads the four inputs i0 - 1 .. i0 + 2 (clamped into the input, so edges repeat)
// with the cubic weights of t = real - i0 at distances 1 + t, t, 1 - t, 2 - t (a = -0.75).
void cubic_row(double* row, std::int64_t o, const SpatialDim& d, double scale, bool align_corners) {
  const double oo = static_cast<double>(o);
  const double real = align_corners ? scale * oo : scale * (oo + 0.5) - 0.5;
  const std::int64_t i0 = floor_index_at_most_last(real, d.input_size);
  const double t = std::clamp(real - static_cast<double>(i0), 0.0, 1.0);
  const double distances[4] = {1.0 + t, t, 1.0 - t, 2.0 - t};
  for (std::int64_t k = 0; k < 4; ++k)
    row[std::clamp<std::int64_t>(i0 - 1 + k, 0, d.input_size - 1)] += cubic_convolution(distances[k], -0.75);
}

// Row o of A for antialiased interpolation (ATen's HelperInterpBase::_compute_weights_aa, PIL's
// resampling): the filter (triangle for bilinear, cubic a = -0.5 for bicubic, of support `half_width`
// 1 or 2) is stretched by the scale when downsampling, centred at scale * (o + 0.5), read at the input
// pixel centres xmin .. xmin + xsize - 1 inside its support, and normalized to sum to 1.
void antialias_row(double* row, std::int64_t o, const SpatialDim& d, double scale, Mode mode) {
  const double half_width = mode == Mode::LinearAntialias ? 1.0 : 2.0;
  const double support = scale >= 1.0 ? half_width * scale : half_width;
  const double inverse_scale = scale >= 1.0 ? 1.0 / scale : 1.0;
  const std::int64_t max_taps = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  const double center = scale * (static_cast<double>(o) + 0.5);
  const std::int64_t xmin = std::max<std::int64_t>(static_cast<std::int64_t>(center - support + 0.5), 0);
  const std::int64_t xsize = std::clamp<std::int64_t>(
      std::min<std::int64_t>(static_cast<std::int64_t>(center + support + 0.5), d.input_size) - xmin, 0, max_taps);
  const auto filter = [mode](double x) {
    if (mode == Mode::CubicAntialias) return cubic_convolution(x, -0.5);
    return std::max(1.0 - std::abs(x), 0.0);
  };
  // The filter at input pixel i's centre i + 0.5, relative to the output's centre.
  const auto weight = [&](std::int64_t i) { return filter((static_cast<double>(i) + 0.5 - center) * inverse_scale); };
  double total = 0.0;
  for (std::int64_t i = xmin; i < xmin + xsize; ++i) total += weight(i);
  for (std::int64_t i = xmin; i < xmin + xsize; ++i) row[i] += total != 0.0 ? weight(i) / total : weight(i);
}

// A for one spatial dim of a weighted mode, [output_size, input_size], in float64.
Tensor interpolation_weights(const char* node, Mode mode, const SpatialDim& d, bool align_corners) {
  check_fits_memory_limit({d.output_size, d.input_size}, DType::Float64);  // the std::vector below
  const bool antialias = mode == Mode::LinearAntialias || mode == Mode::CubicAntialias;
  const bool unread = mode == Mode::Linear && d.input_size == d.output_size;  // a copy: no scale needed
  const double scale = unread ? 1.0 : area_pixel_compute_scale(node, d, align_corners);
  std::vector<double> weights(static_cast<std::size_t>(d.output_size * d.input_size), 0.0);
  for (std::int64_t o = 0; o < d.output_size; ++o) {
    double* row = weights.data() + o * d.input_size;
    if (mode == Mode::Linear)
      linear_row(row, o, d, scale, align_corners);
    else if (mode == Mode::Cubic)
      cubic_row(row, o, d, scale, align_corners);
    else if (antialias)
      antialias_row(row, o, d, scale, mode);
  }
  return from_vector(weights, {d.output_size, d.input_size});
}

// ATen's upsample_{1,2,3}d_common_check and the grad's shape: self sizes [N, C, spatial...] and
// output_size with one entry per spatial dim, spatial sizes positive (N and C may be 0), and grad
// [N, C, output_size...].
void check_upsample(const char* node, const Tensor& grad, const IntList& output_size, const IntList& self_sizes,
                    std::size_t spatial_dims) {
  check(self_sizes.size() == spatial_dims + 2 && output_size.size() == spatial_dims, node, ": self sizes ",
        shape_text(self_sizes), " and output_size ", shape_text(output_size), " must have ", spatial_dims + 2,
        " and ", spatial_dims, " entries");
  bool positive = self_sizes[0] >= 0 && self_sizes[1] >= 0;
  for (std::size_t k = 0; k < spatial_dims; ++k) positive = positive && self_sizes[2 + k] > 0 && output_size[k] > 0;
  check(positive, node, ": input and output sizes should be greater than 0, got self sizes ", shape_text(self_sizes),
        " and output_size ", shape_text(output_size));
  Shape expected = {self_sizes[0], self_sizes[1]};
  expected.insert(expected.end(), output_size.begin(), output_size.end());
  check(grad.sizes() == expected, node, ": grad ", shape_text(grad.sizes()), " does not fit output_size ",
        shape_text(output_size), " and self sizes ", shape_text(self_sizes));
}

// The saved fields every upsampling node has (align_corners only for the weighted modes), as one list of
// spatial dims. The scale fields are named as torch names them: scales (1-d), scales_h, scales_w (2-d),
// scales_d, scales_h, scales_w (3-d).
template <class Saved>
std::vector<SpatialDim> spatial_dims_of(const Saved& saved) {
  std::vector<std::optional<double>> scales;
  std::vector<const char*> fields;
  if constexpr (requires { saved.scales; }) {
    scales = {saved.scales};
    fields = {"scales"};
  } else if constexpr (requires { saved.scales_d; }) {
    scales = {saved.scales_d, saved.scales_h, saved.scales_w};
    fields = {"scales_d", "scales_h", "scales_w"};
  } else {
    scales = {saved.scales_h, saved.scales_w};
    fields = {"scales_h", "scales_w"};
  }
  std::vector<SpatialDim> dims;
  for (std::size_t k = 0; k < scales.size(); ++k)
    dims.push_back({saved.self_sym_sizes[2 + k], saved.output_size[k], scales[k], fields[k]});
  return dims;
}

template <class Saved>
Grads upsample_backward(const char* node, Mode mode, const Grads& grads, const Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  const std::size_t spatial = requires { saved.scales; } ? 1 : requires { saved.scales_d; } ? 3 : 2;
  check_upsample(node, grad, saved.output_size, saved.self_sym_sizes, spatial);
  const Tensor zero = zeros(saved.self_sym_sizes, grad.dtype());  // first: the sizes must fit in memory
  if (grad.numel() == 0) return Grads{zero};
  bool align_corners = false;
  if constexpr (requires { saved.align_corners; }) align_corners = saved.align_corners;
  const std::vector<SpatialDim> dims = spatial_dims_of(saved);
  // upsample_bicubic2d's kernel copies when every spatial size is unchanged, whatever the scales; a
  // single unchanged dim still goes through the cubic weights (the identity only for scale 1).
  if (mode == Mode::Cubic &&
      std::all_of(dims.begin(), dims.end(), [](const SpatialDim& d) { return d.input_size == d.output_size; }))
    return Grads{clone(grad)};
  Tensor grad_input = to(grad, opmath_dtype(grad.dtype()));  // float16/bfloat16 add up in float32
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const SpatialDim& d = dims[k];
    const std::int64_t dim = 2 + static_cast<std::int64_t>(k);
    if (copies_one_input(mode)) {
      check_fits_memory_limit({d.output_size}, DType::Int64);  // the sources below
      Shape folded = grad_input.sizes();
      folded[static_cast<std::size_t>(dim)] = d.input_size;
      grad_input = index_add(zeros(folded, grad_input.dtype()), dim,
                             from_vector(nearest_sources(node, mode, d), {d.output_size}), grad_input);
    } else {  // grad_input along dim, times A: [..., output] @ [output, input]
      const Tensor a = to(interpolation_weights(node, mode, d, align_corners), grad_input.dtype());
      grad_input = transpose(matmul(transpose(grad_input, dim, -1), a), dim, -1);
    }
  }
  return Grads{to(grad_input, grad.dtype())};
}

// ------------------------------------------------------------------- nearest ---

struct Upsample1DSaved {
  IntList output_size;
  std::optional<double> scales;
  IntList self_sym_sizes;
};

struct Upsample2DSaved {
  IntList output_size;
  std::optional<double> scales_h;
  std::optional<double> scales_w;
  IntList self_sym_sizes;
};

struct Upsample3DSaved {
  IntList output_size;
  std::optional<double> scales_d;
  std::optional<double> scales_h;
  std::optional<double> scales_w;
  IntList self_sym_sizes;
};

// UpsampleNearest1DBackward0 — upsample_nearest1d(Tensor self, SymInt[1] output_size, float? scales=None)
//   self: upsample_nearest1d_backward_symint(grad, output_size, self.sym_sizes(), scales)
Grads UpsampleNearest1DBackward0(const Grads& grads, const Upsample1DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleNearest1DBackward0", Mode::Nearest, grads, saved, need);
}

// UpsampleNearest2DBackward0 — upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None,
//                              float? scales_w=None)
//   self: upsample_nearest2d_backward_symint(grad, output_size, self.sym_sizes(), scales_h, scales_w)
Grads UpsampleNearest2DBackward0(const Grads& grads, const Upsample2DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleNearest2DBackward0", Mode::Nearest, grads, saved, need);
}

// UpsampleNearest3DBackward0 — upsample_nearest3d(Tensor self, SymInt[3] output_size, float? scales_d=None,
//                              float? scales_h=None, float? scales_w=None)
//   self: upsample_nearest3d_backward_symint(grad, output_size, self.sym_sizes(), scales_d, scales_h, scales_w)
Grads UpsampleNearest3DBackward0(const Grads& grads, const Upsample3DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleNearest3DBackward0", Mode::Nearest, grads, saved, need);
}

// UpsampleNearestExact1DBackward0 — _upsample_nearest_exact1d(Tensor self, SymInt[1] output_size,
//                                   float? scales=None)
//   self: _upsample_nearest_exact1d_backward_symint(grad, output_size, self.sym_sizes(), scales)
Grads UpsampleNearestExact1DBackward0(const Grads& grads, const Upsample1DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleNearestExact1DBackward0", Mode::NearestExact, grads, saved, need);
}

// UpsampleNearestExact2DBackward0 — _upsample_nearest_exact2d(Tensor self, SymInt[2] output_size,
//                                   float? scales_h=None, float? scales_w=None)
//   self: _upsample_nearest_exact2d_backward_symint(grad, output_size, self.sym_sizes(), scales_h, scales_w)
Grads UpsampleNearestExact2DBackward0(const Grads& grads, const Upsample2DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleNearestExact2DBackward0", Mode::NearestExact, grads, saved, need);
}

// UpsampleNearestExact3DBackward0 — _upsample_nearest_exact3d(Tensor self, SymInt[3] output_size,
//                                   float? scales_d=None, float? scales_h=None, float? scales_w=None)
//   self: _upsample_nearest_exact3d_backward_symint(grad, output_size, self.sym_sizes(), scales_d, scales_h,
//         scales_w)
Grads UpsampleNearestExact3DBackward0(const Grads& grads, const Upsample3DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleNearestExact3DBackward0", Mode::NearestExact, grads, saved, need);
}

// ------------------------------------------------------------ interpolating ---

struct Interpolate1DSaved {
  bool align_corners;
  IntList output_size;
  std::optional<double> scales;
  IntList self_sym_sizes;
};

struct Interpolate2DSaved {
  bool align_corners;
  IntList output_size;
  std::optional<double> scales_h;
  std::optional<double> scales_w;
  IntList self_sym_sizes;
};

struct Interpolate3DSaved {
  bool align_corners;
  IntList output_size;
  std::optional<double> scales_d;
  std::optional<double> scales_h;
  std::optional<double> scales_w;
  IntList self_sym_sizes;
};

// UpsampleLinear1DBackward0 — upsample_linear1d(Tensor self, SymInt[1] output_size, bool align_corners,
//                             float? scales=None)
//   self: upsample_linear1d_backward_symint(grad, output_size, self.sym_sizes(), align_corners, scales)
Grads UpsampleLinear1DBackward0(const Grads& grads, const Interpolate1DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleLinear1DBackward0", Mode::Linear, grads, saved, need);
}

// UpsampleBilinear2DBackward0 — upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners,
//                               float? scales_h=None, float? scales_w=None)
//   self: upsample_bilinear2d_backward_symint(grad, output_size, self.sym_sizes(), align_corners, scales_h,
//         scales_w)
Grads UpsampleBilinear2DBackward0(const Grads& grads, const Interpolate2DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleBilinear2DBackward0", Mode::Linear, grads, saved, need);
}

// UpsampleTrilinear3DBackward0 — upsample_trilinear3d(Tensor self, SymInt[3] output_size, bool align_corners,
//                                float? scales_d=None, float? scales_h=None, float? scales_w=None)
//   self: upsample_trilinear3d_backward_symint(grad, output_size, self.sym_sizes(), align_corners, scales_d,
//         scales_h, scales_w)
Grads UpsampleTrilinear3DBackward0(const Grads& grads, const Interpolate3DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleTrilinear3DBackward0", Mode::Linear, grads, saved, need);
}

// UpsampleBicubic2DBackward0 — upsample_bicubic2d(Tensor self, SymInt[2] output_size, bool align_corners,
//                              float? scales_h=None, float? scales_w=None)
//   self: upsample_bicubic2d_backward_symint(grad, output_size, self.sym_sizes(), align_corners, scales_h,
//         scales_w)
Grads UpsampleBicubic2DBackward0(const Grads& grads, const Interpolate2DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleBicubic2DBackward0", Mode::Cubic, grads, saved, need);
}

// UpsampleBilinear2DAaBackward0 — _upsample_bilinear2d_aa(Tensor self, SymInt[2] output_size, bool align_corners,
//                                 float? scales_h=None, float? scales_w=None)
//   self: _upsample_bilinear2d_aa_backward_symint(grad, output_size, self.sym_sizes(), align_corners, scales_h,
//         scales_w)
Grads UpsampleBilinear2DAaBackward0(const Grads& grads, const Interpolate2DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleBilinear2DAaBackward0", Mode::LinearAntialias, grads, saved, need);
}

// UpsampleBicubic2DAaBackward0 — _upsample_bicubic2d_aa(Tensor self, SymInt[2] output_size, bool align_corners,
//                                float? scales_h=None, float? scales_w=None)
//   self: _upsample_bicubic2d_aa_backward_symint(grad, output_size, self.sym_sizes(), align_corners, scales_h,
//         scales_w)
Grads UpsampleBicubic2DAaBackward0(const Grads& grads, const Interpolate2DSaved& saved, const Need& need) {
  return upsample_backward("UpsampleBicubic2DAaBackward0", Mode::CubicAntialias, grads, saved, need);
}

// ---------------------------------------------------------------- registry ---

// The schema of an upsampling node: `forward` is its ATen op, `scales` its scale arguments.
NodeSchema upsample_schema(const char* name, const std::string& forward, bool align_corners, const char* scales) {
  return {name, forward, {"self"}, 1, {},
          "self: " + forward + "_backward_symint(grad, output_size, self.sym_sizes(), " +
              (align_corners ? "align_corners, " : "") + scales + ")"};
}

template <Grads (*Function)(const Grads&, const Upsample1DSaved&, const Need&)>
NodeDef define_upsample_1d(const char* name, const char* forward) {
  using S = Upsample1DSaved;
  return define_node<S, Function>(upsample_schema(name, forward, false, "scales"),
                                  {saved<&S::output_size>("output_size", FieldKind::Sizes),
                                   saved<&S::scales>("scales", FieldKind::Float, true),
                                   saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)});
}

template <Grads (*Function)(const Grads&, const Upsample2DSaved&, const Need&)>
NodeDef define_upsample_2d(const char* name, const char* forward) {
  using S = Upsample2DSaved;
  return define_node<S, Function>(upsample_schema(name, forward, false, "scales_h, scales_w"),
                                  {saved<&S::output_size>("output_size", FieldKind::Sizes),
                                   saved<&S::scales_h>("scales_h", FieldKind::Float, true),
                                   saved<&S::scales_w>("scales_w", FieldKind::Float, true),
                                   saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)});
}

template <Grads (*Function)(const Grads&, const Upsample3DSaved&, const Need&)>
NodeDef define_upsample_3d(const char* name, const char* forward) {
  using S = Upsample3DSaved;
  return define_node<S, Function>(upsample_schema(name, forward, false, "scales_d, scales_h, scales_w"),
                                  {saved<&S::output_size>("output_size", FieldKind::Sizes),
                                   saved<&S::scales_d>("scales_d", FieldKind::Float, true),
                                   saved<&S::scales_h>("scales_h", FieldKind::Float, true),
                                   saved<&S::scales_w>("scales_w", FieldKind::Float, true),
                                   saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)});
}

template <Grads (*Function)(const Grads&, const Interpolate1DSaved&, const Need&)>
NodeDef define_interpolate_1d(const char* name, const char* forward) {
  using S = Interpolate1DSaved;
  return define_node<S, Function>(upsample_schema(name, forward, true, "scales"),
                                  {saved<&S::align_corners>("align_corners", FieldKind::Bool),
                                   saved<&S::output_size>("output_size", FieldKind::Sizes),
                                   saved<&S::scales>("scales", FieldKind::Float, true),
                                   saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)});
}

template <Grads (*Function)(const Grads&, const Interpolate2DSaved&, const Need&)>
NodeDef define_interpolate_2d(const char* name, const char* forward) {
  using S = Interpolate2DSaved;
  return define_node<S, Function>(upsample_schema(name, forward, true, "scales_h, scales_w"),
                                  {saved<&S::align_corners>("align_corners", FieldKind::Bool),
                                   saved<&S::output_size>("output_size", FieldKind::Sizes),
                                   saved<&S::scales_h>("scales_h", FieldKind::Float, true),
                                   saved<&S::scales_w>("scales_w", FieldKind::Float, true),
                                   saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)});
}

template <Grads (*Function)(const Grads&, const Interpolate3DSaved&, const Need&)>
NodeDef define_interpolate_3d(const char* name, const char* forward) {
  using S = Interpolate3DSaved;
  return define_node<S, Function>(upsample_schema(name, forward, true, "scales_d, scales_h, scales_w"),
                                  {saved<&S::align_corners>("align_corners", FieldKind::Bool),
                                   saved<&S::output_size>("output_size", FieldKind::Sizes),
                                   saved<&S::scales_d>("scales_d", FieldKind::Float, true),
                                   saved<&S::scales_h>("scales_h", FieldKind::Float, true),
                                   saved<&S::scales_w>("scales_w", FieldKind::Float, true),
                                   saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)});
}

}  // namespace

void add_upsample_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_upsample_1d<UpsampleNearest1DBackward0>("UpsampleNearest1DBackward0",
                                                                    "upsample_nearest1d"));
  registry.push_back(define_upsample_2d<UpsampleNearest2DBackward0>("UpsampleNearest2DBackward0",
                                                                    "upsample_nearest2d"));
  registry.push_back(define_upsample_3d<UpsampleNearest3DBackward0>("UpsampleNearest3DBackward0",
                                                                    "upsample_nearest3d"));
  registry.push_back(define_upsample_1d<UpsampleNearestExact1DBackward0>("UpsampleNearestExact1DBackward0",
                                                                         "_upsample_nearest_exact1d"));
  registry.push_back(define_upsample_2d<UpsampleNearestExact2DBackward0>("UpsampleNearestExact2DBackward0",
                                                                         "_upsample_nearest_exact2d"));
  registry.push_back(define_upsample_3d<UpsampleNearestExact3DBackward0>("UpsampleNearestExact3DBackward0",
                                                                         "_upsample_nearest_exact3d"));
  registry.push_back(define_interpolate_1d<UpsampleLinear1DBackward0>("UpsampleLinear1DBackward0",
                                                                      "upsample_linear1d"));
  registry.push_back(
      define_interpolate_2d<UpsampleBilinear2DBackward0>("UpsampleBilinear2DBackward0", "upsample_bilinear2d"));
  registry.push_back(
      define_interpolate_3d<UpsampleTrilinear3DBackward0>("UpsampleTrilinear3DBackward0", "upsample_trilinear3d"));
  registry.push_back(
      define_interpolate_2d<UpsampleBicubic2DBackward0>("UpsampleBicubic2DBackward0", "upsample_bicubic2d"));
  registry.push_back(define_interpolate_2d<UpsampleBilinear2DAaBackward0>("UpsampleBilinear2DAaBackward0",
                                                                          "_upsample_bilinear2d_aa"));
  registry.push_back(define_interpolate_2d<UpsampleBicubic2DAaBackward0>("UpsampleBicubic2DAaBackward0",
                                                                         "_upsample_bicubic2d_aa"));
}

}  // namespace refgrad::nodes
