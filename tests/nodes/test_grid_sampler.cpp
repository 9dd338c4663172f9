// Node tests of grid sampling (src/nodes/grid_sampler.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

const char* const kInterpolation[] = {"bilinear", "nearest", "bicubic"};
const char* const kPadding[] = {"zeros", "border", "reflection"};

// ---- the forward with L0 primitives, as a sum over every input element rather than over taps ----
//
// Along each spatial dim the output reads the input at a continuous source coordinate s; the weight of
// the element at integer position m is a kernel of the distance s - m:
//   bilinear: the tent max(0, 1 - |d|);   nearest: 1 where |d| < 1/2, or |d| = 1/2 with m even;
//   bicubic:  Keys' cubic (A = -0.75), 0 beyond |d| >= 2.
// bilinear and nearest pad the coordinate (border clamps it, reflection folds it back with a triangle
// wave); bicubic pads each position m instead, so it sums over positions beyond the input, each reading
// the element the padding maps it to (zeros: none).

// The reflection of x into [low, high] (a triangle wave of period 2 (high - low)), then clamped.
double reflect_scalar(double x, double low, double high) {
  const double width = high - low;
  if (width <= 0) return 0;
  const double y = std::fmod(std::fabs(x - low), 2 * width);
  return std::clamp(low + width - std::fabs(y - width), low, high);
}

Tensor reflect_tensor(const Tensor& x, double low, double high) {
  const double width = high - low;
  if (width <= 0) return zeros_like(x);
  const Tensor distance = abs(sub(x, Scalar(low)));
  const Tensor y = sub(distance, mul(div(distance, Scalar(2 * width), "floor"), Scalar(2 * width)));
  return clamp(add(neg(abs(sub(y, Scalar(width)))), Scalar(low + width)), Scalar(low), Scalar(high));
}

// Reflection's range: the centers of the end elements with align_corners, their outer edges without.
double reflect_low(bool align_corners) { return align_corners ? 0.0 : -0.5; }
double reflect_high(std::int64_t size, bool align_corners) { return align_corners ? size - 1.0 : size - 0.5; }

Tensor pad_coordinate(const Tensor& s, std::int64_t size, int padding, bool align_corners) {
  if (padding == 1) return clamp(s, Scalar(0.0), Scalar(size - 1.0));
  if (padding == 2)
    return clamp(reflect_tensor(s, reflect_low(align_corners), reflect_high(size, align_corners)), Scalar(0.0),
                 Scalar(size - 1.0));
  return s;
}

Tensor kernel(const Tensor& d, int interpolation) {
  const Tensor a = abs(d);
  if (interpolation == 0) return relu(add(neg(a), Scalar(1)));
  if (interpolation == 1) {
    // m even is decided by the caller's parity tensor; here: the strict part only (see weights_of).
    return to(lt(a, Scalar(0.5)), DType::Float64);
  }
  const double A = -0.75;
  const Tensor near = add(mul(mul(sub(mul(a, Scalar(A + 2)), Scalar(A + 3)), a), a), Scalar(1));
  const Tensor far = sub(mul(add(mul(sub(mul(a, Scalar(A)), Scalar(5 * A)), a), Scalar(8 * A)), a), Scalar(4 * A));
  return where(le(a, Scalar(1)), near, where(lt(a, Scalar(2)), far, Scalar(0.0)));
}

// The weights [N, P, M] of the positions `positions` (M of them) for source coordinates s [N, P].
Tensor weights_of(const Tensor& s, const std::vector<double>& positions, int interpolation) {
  const Tensor m = from_vector(positions, {1, 1, static_cast<std::int64_t>(positions.size())});
  const Tensor d = sub(unsqueeze(s, 2), m);
  Tensor w = kernel(d, interpolation);
  if (interpolation == 1) {
    std::vector<double> even(positions.size());
    for (std::size_t i = 0; i < positions.size(); ++i) even[i] = std::fmod(std::fabs(positions[i]), 2.0) == 0 ? 1 : 0;
    const Tensor half_to_even = mul(to(eq(abs(d), Scalar(0.5)), DType::Float64),
                                    from_vector(even, {1, 1, static_cast<std::int64_t>(even.size())}));
    w = add(w, half_to_even);
  }
  return w;
}

// The forward: input [N, C, *in], grid [N, *out, S] -> [N, C, *out].
Tensor grid_sample_reference(const Tensor& input, const Tensor& grid, int interpolation, int padding,
                             bool align_corners) {
  const std::int64_t S = grid.size(-1), N = input.size(0), C = input.size(1);
  Shape out_sizes(grid.sizes().begin() + 1, grid.sizes().end() - 1);
  const std::int64_t P = numel_of(out_sizes);
  const Tensor flat_grid = reshape(grid, {N, P, S});
  Tensor extended = input;  // the input at every position each dim sums over
  std::vector<Tensor> weights;
  for (std::int64_t j = 0; j < S; ++j) {
    const std::int64_t size = input.size(2 + j);
    const Tensor x = select(flat_grid, 2, S - 1 - j);
    Tensor s = align_corners ? mul(add(x, Scalar(1)), Scalar((size - 1) / 2.0))
                             : div(sub(mul(add(x, Scalar(1)), Scalar(size)), Scalar(1)), Scalar(2));
    std::vector<double> positions;
    std::vector<std::int64_t> reads;
    std::vector<double> present;
    if (interpolation == 2) {
      for (std::int64_t m = -4 * size - 4; m <= 5 * size + 4; ++m) {  // wide enough for |grid| < 4
        double read = static_cast<double>(m);
        if (padding == 1) read = std::clamp(read, 0.0, size - 1.0);
        if (padding == 2)
          read = std::clamp(reflect_scalar(read, reflect_low(align_corners), reflect_high(size, align_corners)), 0.0,
                            size - 1.0);
        const bool inside = read >= 0 && read <= size - 1;
        positions.push_back(static_cast<double>(m));
        reads.push_back(inside ? static_cast<std::int64_t>(read) : 0);
        present.push_back(inside ? 1 : 0);
      }
    } else {
      s = pad_coordinate(s, size, padding, align_corners);
      for (std::int64_t m = 0; m < size; ++m) {
        positions.push_back(static_cast<double>(m));
        reads.push_back(m);
        present.push_back(1);
      }
    }
    const std::int64_t M = static_cast<std::int64_t>(positions.size());
    Shape mask_sizes(static_cast<std::size_t>(S + 2), 1);
    mask_sizes[static_cast<std::size_t>(2 + j)] = M;
    extended = mul(index_select(extended, 2 + j, from_vector(reads, {M})), from_vector(present, mask_sizes));
    weights.push_back(weights_of(s, positions, interpolation));
  }
  // Contract the last spatial dim first: T [N, C, P, M_0 .. M_j] times W_j over M_j.
  Tensor t = unsqueeze(extended, 2);
  for (std::int64_t j = S - 1; j >= 0; --j) {
    Shape view_sizes = {N, 1, P};
    for (std::int64_t e = 0; e < j; ++e) view_sizes.push_back(1);
    view_sizes.push_back(weights[static_cast<std::size_t>(j)].size(2));
    t = sum(mul(t, reshape(weights[static_cast<std::size_t>(j)], view_sizes)), {-1});
  }
  Shape result_sizes = {N, C};
  result_sizes.insert(result_sizes.end(), out_sizes.begin(), out_sizes.end());
  return reshape(t, result_sizes);
}

std::string forward_text(int interpolation, int padding, bool align_corners) {
  return std::string("F.grid_sample(x, y, mode='") + kInterpolation[interpolation] + "', padding_mode='" +
         kPadding[padding] + "', align_corners=" + (align_corners ? "True" : "False") + ")";
}

Saved saved_of(const Tensor& input, const Tensor& grid, int interpolation, int padding, bool align_corners) {
  return {{"align_corners", align_corners},
          {"grid", grid},
          {"input", input},
          {"interpolation_mode", std::int64_t{interpolation}},
          {"padding_mode", std::int64_t{padding}}};
}

double rtol_of(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float32: return 1e-5;
    default: return 1e-7;
  }
}

double max_abs(const Tensor& t) { return t.numel() == 0 ? 0.0 : max(abs(to(t, DType::Float64))).item<double>(); }

// Grid values that land on the kinks and ties: element centers and edges, the reflection's turning
// points, and beyond (several reflections), mixed with random ones.
Tensor kinky_grid(const Shape& sizes, std::uint64_t seed) {
  const std::vector<double> special = {-1.0, 1.0, 0.0, 0.25, -0.5, 0.5, -0.75, 1.5, -2.25, 3.75, -1.25, 2.0};
  Tensor g = random64(sizes, seed);
  std::vector<double> values = g.to_vector<double>();
  for (std::size_t i = 0; i < values.size(); i += 2) values[i] = special[(i / 2) % special.size()];
  return from_vector(values, sizes);
}

// One node, every mode: finite differences of the reference (checked against torch's forward) at a
// random grid, then torch's own grad_fn fed its saved values, at random and at kinky grids, in each dtype.
void check_grid_sampler(const char* node, const Shape& input_sizes, const Shape& grid_sizes) {
  const int interpolations = input_sizes.size() == 4 ? 3 : 2;
  std::uint64_t seed = 600;
  for (int interpolation = 0; interpolation < interpolations; ++interpolation) {
    for (int padding = 0; padding < 3; ++padding) {
      for (const bool align_corners : {false, true}) {
        const std::string forward = forward_text(interpolation, padding, align_corners);
        CAPTURE(forward);
        const Tensor input = random64(input_sizes, ++seed);
        const Tensor grid = mul(random64(grid_sizes, ++seed), Scalar(0.8));  // mostly inside, some beyond
        auto reference = [&](const std::vector<Tensor>& in) {
          return grid_sample_reference(in[0], in[1], interpolation, padding, align_corners);
        };
        {
          const Tensor out = reference({input, grid});
          CHECK_TENSOR(out, torch_eval1("(lambda x, y: " + forward + ")(a, b)", {input, grid}), 1e-12, 1e-12);
          const Tensor g = random64(out.sizes(), ++seed);
          const Grads grads = call_node(node, {g}, {true, true}, saved_of(input, grid, interpolation, padding,
                                                                            align_corners));
          check_against_finite_differences(grads, 0, reference, {input, grid}, g);
          if (interpolation != 1) {
            check_against_finite_differences(grads, 1, reference, {input, grid}, g);
          } else {
            CHECK_TENSOR(*grads[1], zeros(grid_sizes, DType::Float64), 0, 0);
          }
        }
        for (const Tensor& at : {grid, kinky_grid(grid_sizes, ++seed)}) {
          for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
            CAPTURE(dtype_name(dtype));
            const auto r = torch_exec(R"(
x = a.requires_grad_()
y = b.requires_grad_()
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == ")" + node + R"(", fn.name()
g = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(out.dtype)
result = (fn._saved_input, fn._saved_grid, g, torch.tensor(fn._saved_interpolation_mode),
          torch.tensor(fn._saved_padding_mode), torch.tensor(fn._saved_align_corners),
          *torch.autograd.grad(out, (x, y), g))
x64 = result[0].detach().double().requires_grad_()
y64 = result[1].detach().double().requires_grad_()
out64 = )" + forward_text(interpolation, padding, align_corners).replace(14, 4, "x64, y64") + R"(
result = (*result, *torch.autograd.grad(out64, (x64, y64), g.double()))
)",
                                      {input.to(dtype), at.to(dtype)});
            CHECK(r[3].item<std::int64_t>() == interpolation);
            CHECK(r[4].item<std::int64_t>() == padding);
            CHECK(r[5].item<bool>() == align_corners);
            const Grads out = call_node(
                node, {r[2]}, {true, true},
                Saved{{"align_corners", r[5].item<bool>()}, {"grid", r[1]}, {"input", r[0]},
                      {"interpolation_mode", r[3].item<std::int64_t>()}, {"padding_mode", r[4].item<std::int64_t>()}});
            REQUIRE(out[0].has_value());
            REQUIRE(out[1].has_value());
            CHECK(out[0]->dtype() == dtype);
            CHECK(out[1]->dtype() == dtype);
            // float16/bfloat16: against torch's float64 gradient at the same (rounded) values, rounded
            // once, as refgrad computes in float32 and rounds once (ATen's kernel rounds along the way).
            const bool storage_format = dtype == DType::Float16 || dtype == DType::BFloat16;
            const double rtol = rtol_of(dtype);
            for (int k = 0; k < 2; ++k) {
              CAPTURE(k);
              const Tensor expected = storage_format ? r[8 + k].to(dtype) : r[6 + k];
              CHECK_TENSOR(*out[static_cast<std::size_t>(k)], expected, rtol, rtol * max_abs(expected));
            }
          }
        }
      }
    }
  }
}

void check_grid_sampler_edges(const char* node, const Shape& input_sizes, const Shape& grid_sizes) {
  const Tensor input = random64(input_sizes, 700), grid = mul(random64(grid_sizes, 701), Scalar(0.8));
  Shape out_sizes = {input_sizes[0], input_sizes[1]};
  out_sizes.insert(out_sizes.end(), grid_sizes.begin() + 1, grid_sizes.end() - 1);
  const Tensor g = random64(out_sizes, 702);
  const Saved saved = saved_of(input, grid, 0, 0, false);
  const Grads both = call_node(node, {g}, {true, true}, saved);
  SUBCASE("need mask and undefined grad") {
    const Grads only_input = call_node(node, {g}, {true, false}, saved);
    CHECK_FALSE(only_input[1].has_value());
    CHECK_TENSOR(*only_input[0], *both[0], 0, 0);
    const Grads only_grid = call_node(node, {g}, {false, true}, saved);
    CHECK_FALSE(only_grid[0].has_value());
    CHECK_TENSOR(*only_grid[1], *both[1], 0, 0);
    const Grads none = call_node(node, {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(none[0].has_value());
    CHECK_FALSE(none[1].has_value());
  }
  SUBCASE("a grid far outside, infinite and NaN: zeros padding reads and receives nothing") {
    Tensor far = full(grid_sizes, Scalar(1e30), DType::Float64);
    const Grads out = call_node(node, {g}, {true, true}, saved_of(input, far, 0, 0, false));
    CHECK_TENSOR(*out[0], zeros(input_sizes, DType::Float64), 0, 0);
    CHECK_TENSOR(*out[1], zeros(grid_sizes, DType::Float64), 0, 0);
    const auto r = torch_exec(R"(
x = a.requires_grad_()
y = b.requires_grad_()
out = F.grid_sample(x, y, align_corners=False)
result = torch.autograd.grad(out, (x, y), c)
)",
                              {input, far, g});
    CHECK_TENSOR(*out[0], r[0], 0, 0);
    CHECK_TENSOR(*out[1], r[1], 0, 0);
    far = full(grid_sizes, Scalar(std::numeric_limits<double>::infinity()), DType::Float64);
    const Grads infinite = call_node(node, {g}, {true, true}, saved_of(input, far, 0, 0, false));
    CHECK_TENSOR(*infinite[0], zeros(input_sizes, DType::Float64), 0, 0);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {input}, {true, true}, saved),
                         (std::string(node) + ": grad " + str(input.sizes()) + " is not the output shape " +
                          str(out_sizes) + " of input " + str(input.sizes()) + " and grid " + str(grid.sizes()))
                             .c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true, true}, saved_of(input, grid, input_sizes.size() == 4 ? 3 : 2, 0, false)),
                         (std::string(node) + ": interpolation_mode " + (input_sizes.size() == 4 ? "3" : "2") +
                          " is not one of 0 (bilinear), 1 (nearest)" + (input_sizes.size() == 4 ? ", 2 (bicubic)" : ""))
                             .c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true, true}, saved_of(input, grid, 0, 3, false)),
                         (std::string(node) + ": padding_mode 3 is not one of 0 (zeros), 1 (border), 2 (reflection)")
                             .c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true, true}, saved_of(input, select(grid, -1, 0), 0, 0, false)),
                         (std::string(node) + ": expected input [N, C, " +
                          (input_sizes.size() == 4 ? "H, W] and grid [N, H_out, W_out, 2]"
                                                   : "D, H, W] and grid [N, D_out, H_out, W_out, 3]") +
                          ", got input " + str(input.sizes()) + " and grid " + str(select(grid, -1, 0).sizes()))
                             .c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true, true}, saved_of(input, grid.to(DType::Float32), 0, 0, false)),
                         (std::string(node) + ": input (float64) and grid (float32) must have one dtype").c_str(),
                         Error);
  }
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("GridSampler2DBackward0") {
  // input [N=2, C=2, H=3, W=4]; grid [2, 3, 2, 2]: 6 points per batch.
  check_grid_sampler("GridSampler2DBackward0", {2, 2, 3, 4}, {2, 3, 2, 2});
  check_grid_sampler_edges("GridSampler2DBackward0", {2, 2, 3, 4}, {2, 3, 2, 2});
  SUBCASE("a one-element dim") {
    // H = 1: reflection with align_corners has nothing to reflect in (coordinate 0, derivative 0).
    for (int padding = 0; padding < 3; ++padding) {
      for (const bool align_corners : {false, true}) {
        const std::string forward = forward_text(0, padding, align_corners);
        CAPTURE(forward);
        const Tensor input = random64({1, 2, 1, 3}, 710), grid = mul(random64({1, 2, 3, 2}, 711), Scalar(0.9));
        const auto r = torch_exec(R"(
x = a.requires_grad_()
y = b.requires_grad_()
out = )" + forward + R"(
result = torch.autograd.grad(out, (x, y), c)
)",
                                  {input, grid, random64({1, 2, 2, 3}, 712)});
        const Grads out = call_node("GridSampler2DBackward0", {random64({1, 2, 2, 3}, 712)}, {true, true},
                                    saved_of(input, grid, 0, padding, align_corners));
        CHECK_TENSOR(*out[0], r[0], 1e-7, 1e-9);
        CHECK_TENSOR(*out[1], r[1], 1e-7, 1e-9);
      }
    }
  }
}

TEST_CASE("GridSampler3DBackward0") {
  // input [N=1, C=2, D=2, H=3, W=3]; grid [1, 2, 2, 2, 3].
  check_grid_sampler("GridSampler3DBackward0", {1, 2, 2, 3, 3}, {1, 2, 2, 2, 3});
  check_grid_sampler_edges("GridSampler3DBackward0", {1, 2, 2, 3, 3}, {1, 2, 2, 2, 3});
}

}  // TEST_SUITE
