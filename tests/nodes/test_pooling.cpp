// Node tests of the pooling group's 3-d and fractional nodes (src/nodes/pooling.cpp).
#include <algorithm>
#include <limits>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

// torch code that leaves, after the forward `out` and its node `fn`, a seeded grad `g` of out's shape and
// dtype, and T, which makes an int64 tensor of a saved int list.
constexpr const char* kSeededGrad =
    "\ng = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(out.dtype)\n"
    "T = lambda s: torch.tensor(list(s), dtype=torch.int64)\n";

const Grads kNoGrad = {std::nullopt};

// torch code that, after the forward `out` (of x, and b for fractional pooling) with its node `fn` and
// the seeded grad g, runs the same forward and backward in float64 on the same values and leaves its
// grad of x in `exact`: float16/bfloat16 grads are compared with it, rounded once, as refgrad rounds.
// (ATen's float16/bfloat16 kernels round at each addition, so where overlapping windows add grads up
// they are a few ulps off; that is torch's error, not refgrad's.) The float64 run must pick the same maxima.
std::string exact_grad_after(const std::string& forward) {
  return "\nx = a.detach().double().requires_grad_()\n"
         "try: b = b.double()\nexcept NameError: pass\n"
         "out64 = " + forward + "\n"
         "assert torch.equal(out64.grad_fn._saved_result1, result[1])\n"
         "exact = torch.autograd.grad(out64, (x,), g.double())[0]\n";
}

// Tolerances for comparing with torch in each dtype (float16/bfloat16: with torch's float64 grad
// rounded once, see exact_grad_after).
double rtol_of(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float32: return 1e-5;
    default: return 1e-7;
  }
}

const std::vector<DType> kFloatDTypes = {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16};

// U[0, 1) values in float64, reproducible by seed: fractional pooling's random samples.
Tensor uniform64(const Shape& sizes, std::uint64_t seed) {
  Generator generator(seed);
  return rand(sizes, generator, DType::Float64);
}

// Whether some plane of `indices` (its last `spatial_dims` dims) names one position more than once.
bool some_index_repeats(const Tensor& indices, std::int64_t spatial_dims) {
  const std::int64_t per_plane = numel_of(Shape(indices.sizes().end() - spatial_dims, indices.sizes().end()));
  const std::vector<std::int64_t> values = indices.to_vector<std::int64_t>();
  for (std::size_t begin = 0; begin < values.size(); begin += static_cast<std::size_t>(per_plane)) {
    std::vector<std::int64_t> plane(values.begin() + static_cast<std::ptrdiff_t>(begin),
                                    values.begin() + static_cast<std::ptrdiff_t>(begin) + per_plane);
    std::sort(plane.begin(), plane.end());
    if (std::adjacent_find(plane.begin(), plane.end()) != plane.end()) return true;
  }
  return false;
}

// Values rounded to integers, so that windows tie often: the indices torch chose decide where the grad goes.
Tensor tied(const Shape& sizes, std::uint64_t seed) { return div(mul(random64(sizes, seed), 1.5), 1, "floor"); }

// The forward of a max pooling with fixed indices: gather each output from its plane (the last
// `spatial_dims` dims of x). Differentiable in x where no window ties.
Tensor gather_indices(const Tensor& x, const Tensor& indices, std::int64_t spatial_dims) {
  const std::int64_t planes = numel_of(Shape(x.sizes().begin(), x.sizes().end() - spatial_dims));
  return reshape(gather(reshape(x, {planes, -1}), 1, reshape(indices, {planes, -1})), indices.sizes());
}

// avg_pool3d with L0 primitives: each output the sum of its window, clipped to the input, over the
// divisor (ATen's rule). Checked against torch's forward below.
Tensor avg_pool3d_reference(const Tensor& x, const IntList& kernel, const IntList& stride, const IntList& padding,
                            bool ceil_mode, bool count_include_pad, std::optional<std::int64_t> divisor_override) {
  std::int64_t in[3], out[3];
  for (int d = 0; d < 3; ++d) {
    in[d] = x.size(-3 + d);
    const std::int64_t numerator = in[d] + 2 * padding[d] - kernel[d] + (ceil_mode ? stride[d] - 1 : 0);
    out[d] = numerator / stride[d] + 1;
    if (ceil_mode && (out[d] - 1) * stride[d] >= in[d] + padding[d]) --out[d];
  }
  struct Span {
    std::int64_t begin, end, padded;
  };
  auto span = [&](std::int64_t o, int d) {
    const std::int64_t begin = o * stride[d] - padding[d];
    const std::int64_t end = std::min(begin + kernel[d], in[d] + padding[d]);
    return Span{std::max<std::int64_t>(begin, 0), std::min(end, in[d]), end - begin};
  };
  TensorList depth;
  for (std::int64_t od = 0; od < out[0]; ++od) {
    TensorList rows;
    for (std::int64_t oh = 0; oh < out[1]; ++oh) {
      TensorList columns;
      for (std::int64_t ow = 0; ow < out[2]; ++ow) {
        const Span sd = span(od, 0), sh = span(oh, 1), sw = span(ow, 2);
        const Tensor box =
            narrow(narrow(narrow(x, -3, sd.begin, sd.end - sd.begin), -2, sh.begin, sh.end - sh.begin), -1, sw.begin,
                   sw.end - sw.begin);
        const std::int64_t divisor = divisor_override    ? *divisor_override
                                     : count_include_pad ? sd.padded * sh.padded * sw.padded
                                                         : box.size(-3) * box.size(-2) * box.size(-1);
        columns.push_back(div(sum(box, {-3, -2, -1}), static_cast<double>(divisor)));
      }
      rows.push_back(stack(columns, -1));
    }
    depth.push_back(stack(rows, -2));
  }
  return stack(depth, -3);
}

}  // namespace

TEST_SUITE("nodes") {

// ------------------------------------------------------------------ 3-d pooling ---

TEST_CASE("AvgPool3DBackward0") {
  struct Case {
    const char* torch_forward;
    IntList kernel_size, stride, padding;
    bool ceil_mode, count_include_pad;
    std::optional<std::int64_t> divisor_override;
  };
  const std::vector<Case> cases = {
      {"F.avg_pool3d(x, 2)", {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, false, true, std::nullopt},
      {"F.avg_pool3d(x, 3, stride=2, padding=1, ceil_mode=True)", {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, true, true,
       std::nullopt},
      {"F.avg_pool3d(x, (3, 2, 3), stride=(2, 1, 2), padding=1, ceil_mode=True, count_include_pad=False)",
       {3, 2, 3}, {2, 1, 2}, {1, 1, 1}, true, false, std::nullopt},
      {"F.avg_pool3d(x, 2, stride=1, padding=(1, 0, 1), divisor_override=3)", {2, 2, 2}, {1, 1, 1}, {1, 0, 1}, false,
       true, 3},
  };
  const Tensor x = random64({2, 2, 4, 3, 5}, 300);
  for (const Case& c : cases) {
    CAPTURE(c.torch_forward);
    auto forward = [&](const std::vector<Tensor>& in) {
      return avg_pool3d_reference(in[0], c.kernel_size, c.stride, c.padding, c.ceil_mode, c.count_include_pad,
                                  c.divisor_override);
    };
    SUBCASE("finite differences, with the reference forward checked against torch's") {
      const Tensor pooled = forward({x});
      CHECK_TENSOR(pooled, torch_eval1(std::string("(lambda x: ") + c.torch_forward + ")(a)", {x}), 1e-12, 1e-12);
      const Tensor g = random64(pooled.sizes(), 301);
      const FieldValue divisor_override = c.divisor_override ? FieldValue(*c.divisor_override) : FieldValue(None{});
      const Saved saved = {{"ceil_mode", c.ceil_mode},   {"count_include_pad", c.count_include_pad},
                           {"divisor_override", divisor_override},
                           {"kernel_size", c.kernel_size}, {"padding", c.padding},
                           {"self", x},                  {"stride", c.stride}};
      check_against_finite_differences(call_node("AvgPool3DBackward0", {g}, {true}, saved), 0, forward, {x}, g);
    }
    SUBCASE("against torch, in each floating dtype, batched and unbatched") {
      for (const DType dtype : {DType::Float64, DType::Float32}) {  // ATen's CPU avg_pool3d has no float16/bfloat16
        for (const Tensor& input : {x, select(x, 0, 1)}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(input.dim());
          const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = )") + c.torch_forward + R"(
fn = out.grad_fn
assert fn.name() == "AvgPool3DBackward0", fn.name()
)" + kSeededGrad + R"(
d = fn._saved_divisor_override
result = (fn._saved_self, T(fn._saved_kernel_size), T(fn._saved_stride), T(fn._saved_padding), fn._saved_ceil_mode,
          fn._saved_count_include_pad, d is None, 0 if d is None else d, g, *torch.autograd.grad(out, (x,), g))
)",
                                    {input.to(dtype)});
          const Saved from_torch = {
              {"ceil_mode", r[4].item<bool>()}, {"count_include_pad", r[5].item<bool>()},
              {"divisor_override", r[6].item<bool>() ? FieldValue(None{}) : FieldValue(r[7].item<std::int64_t>())},
              {"kernel_size", int_list(r[1])},  {"padding", int_list(r[3])},
              {"self", r[0]},                   {"stride", int_list(r[2])}};
          const Tensor grad_self = *call_node("AvgPool3DBackward0", {r[8]}, {true}, from_torch)[0];
          CHECK(grad_self.dtype() == dtype);
          CHECK_TENSOR(grad_self, r[9], rtol_of(dtype), rtol_of(dtype) * 1e-2);
        }
      }
    }
  }
  const Saved saved = {{"ceil_mode", false},          {"count_include_pad", true}, {"divisor_override", None{}},
                       {"kernel_size", IntList{2}},   {"padding", IntList{0}},    {"self", x},
                       {"stride", IntList{}}};
  const Tensor g = random64({2, 2, 2, 1, 2}, 302);
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("AvgPool3DBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("AvgPool3DBackward0", kNoGrad, {true}, saved)[0].has_value());
  }
  SUBCASE("an empty batch: zeros of self's shape") {
    Saved empty_batch = saved;
    empty_batch["self"] = zeros({0, 2, 4, 3, 5}, DType::Float64);
    const Tensor grad_self =
        *call_node("AvgPool3DBackward0", {zeros({0, 2, 2, 1, 2}, DType::Float64)}, {true}, empty_batch)[0];
    CHECK(grad_self.sizes() == Shape{0, 2, 4, 3, 5});
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("AvgPool3DBackward0", {random64({2, 2, 2, 2, 2}, 1)}, {true}, saved),
                         "AvgPool3DBackward0: grad [2,2,2,2,2] is not the avg_pool3d output of self [2,2,4,3,5] with "
                         "kernel_size [2], stride [], padding [0]",
                         Error);
    Saved zero_divisor = saved;
    zero_divisor["divisor_override"] = std::int64_t{0};
    CHECK_THROWS_WITH_AS(call_node("AvgPool3DBackward0", {g}, {true}, zero_divisor),
                         "AvgPool3DBackward0: divisor_override is 0", Error);
    Saved wide_padding = saved;
    wide_padding["padding"] = IntList{0, 2, 0};
    CHECK_THROWS_WITH_AS(call_node("AvgPool3DBackward0", {g}, {true}, wide_padding),
                         "AvgPool3DBackward0: padding must be between 0 and half the kernel size, got padding=[0,2,0] "
                         "and kernel_size=[2]",
                         Error);
    Saved two_sizes = saved;
    two_sizes["kernel_size"] = IntList{2, 2};
    CHECK_THROWS_WITH_AS(call_node("AvgPool3DBackward0", {g}, {true}, two_sizes),
                         "AvgPool3DBackward0: kernel_size must be a single int or three ints, got kernel_size=[2,2]",
                         Error);
    Saved big_kernel = saved;  // ATen's avg_pool3d wants the input at least as large as the kernel
    big_kernel["kernel_size"] = IntList{4};
    big_kernel["padding"] = IntList{2};
    CHECK_THROWS_WITH_AS(call_node("AvgPool3DBackward0", {random64({2, 2, 2, 1, 2}, 1)}, {true}, big_kernel),
                         "AvgPool3DBackward0: self [2,2,4,3,5] is smaller than kernel_size [4] in its last three dims",
                         Error);
    Saved flat = saved;
    flat["self"] = random64({2, 4, 3, 5, 1, 1}, 1);
    CHECK_THROWS_WITH_AS(call_node("AvgPool3DBackward0", {g}, {true}, flat),
                         "AvgPool3DBackward0: self must be [C, D, H, W] or [N, C, D, H, W] with non-empty C, D, H "
                         "and W, got [2,4,3,5,1,1]",
                         Error);
  }
}

TEST_CASE("MaxPool3DWithIndicesBackward0") {
  const std::vector<std::string> forwards = {
      "F.max_pool3d(x, 2, return_indices=True)[0]",
      "F.max_pool3d(x, 3, stride=2, padding=1, ceil_mode=True)",
      "F.max_pool3d(x, (2, 3, 2), stride=1)",  // overlapping windows: elements chosen more than once add up
      "F.max_pool3d(x, 2, stride=(1, 2, 1), dilation=(2, 1, 2))",
  };
  // x has no ties; y ties often.
  const Tensor x = random64({2, 2, 4, 5, 5}, 310), y = tied({2, 4, 5, 5}, 311);
  for (const std::string& forward : forwards) {
    CAPTURE(forward);
    for (const DType dtype : kFloatDTypes) {
      for (const Tensor& input : {x, y}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(input.dim());
        const auto r = torch_exec(R"(
x = a.requires_grad_()
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == "MaxPool3DWithIndicesBackward0", fn.name()
)" + kSeededGrad + R"(
result = (fn._saved_self, fn._saved_result1, T(fn._saved_kernel_size), T(fn._saved_stride), T(fn._saved_padding),
          T(fn._saved_dilation), fn._saved_ceil_mode, g, *torch.autograd.grad(out, (x,), g))
)" + exact_grad_after(forward) + "result = (*result, exact)\n",
                                  {input.to(dtype)});
        const Saved from_torch = {{"ceil_mode", r[6].item<bool>()}, {"dilation", int_list(r[5])},
                                  {"kernel_size", int_list(r[2])}, {"padding", int_list(r[4])},
                                  {"self", r[0]}, {"stride", int_list(r[3])}, {"result1", r[1]}};
        const Grads out = call_node("MaxPool3DWithIndicesBackward0", {r[7]}, {true}, from_torch);
        CHECK(out[0]->dtype() == dtype);
        if (dtype == DType::Float64 || dtype == DType::Float32)
          CHECK_TENSOR(*out[0], r[8], rtol_of(dtype), rtol_of(dtype) * 1e-2);
        else
          CHECK_TENSOR(*out[0], r[9].to(dtype), rtol_of(dtype), rtol_of(dtype) * 1e-2);
        if (dtype == DType::Float64 && input.dim() == 5) {  // finite differences where no window ties
          const Tensor indices = r[1];
          check_against_finite_differences(
              out, 0, [&](const std::vector<Tensor>& in) { return gather_indices(in[0], indices, 3); }, {x}, r[7]);
        }
      }
    }
  }
  const Saved saved = {{"ceil_mode", false}, {"dilation", IntList{1}}, {"kernel_size", IntList{1, 1, 1}},
                       {"padding", IntList{0}}, {"self", x}, {"stride", IntList{}},
                       {"result1", zeros({2, 2, 4, 5, 5}, DType::Int64)}};
  const Tensor g = random64({2, 2, 4, 5, 5}, 312);
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("MaxPool3DWithIndicesBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("MaxPool3DWithIndicesBackward0", kNoGrad, {true}, saved)[0].has_value());
  }
  SUBCASE("an index of -1 drops its grad, as ATen's kernel skips it") {
    const Saved skip = {{"ceil_mode", false},   {"dilation", IntList{1}}, {"kernel_size", IntList{1, 1, 2}},
                        {"padding", IntList{0}}, {"self", random64({1, 1, 1, 2, 4}, 313)},
                        {"stride", IntList{}},  {"result1", reshape(tensor({-1, 6, 2, -1}, DType::Int64), {1, 1, 1, 2, 2})}};
    const Tensor grad = reshape(tensor({3.0, 5.0, 7.0, 11.0}, DType::Float64), {1, 1, 1, 2, 2});
    const Tensor grad_self = *call_node("MaxPool3DWithIndicesBackward0", {grad}, {true}, skip)[0];
    CHECK_TENSOR(grad_self, reshape(tensor({0.0, 0.0, 7.0, 0.0, 0.0, 0.0, 5.0, 0.0}, DType::Float64), {1, 1, 1, 2, 4}));
  }
  SUBCASE("errors") {
    Saved bad_indices = saved;
    bad_indices["result1"] = zeros({2, 2, 4, 5, 4}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("MaxPool3DWithIndicesBackward0", {g}, {true}, bad_indices),
                         "MaxPool3DWithIndicesBackward0: indices [2,2,4,5,4] do not have the grad's shape [2,2,4,5,5]",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("MaxPool3DWithIndicesBackward0", {random64({2, 2, 2, 2, 2}, 1)}, {true}, saved),
                         "MaxPool3DWithIndicesBackward0: grad [2,2,2,2,2] is not the max_pool3d output of self "
                         "[2,2,4,5,5] with kernel_size [1,1,1], stride [], padding [0], dilation [1]",
                         Error);
    Saved float_indices = saved;
    float_indices["result1"] = g;
    CHECK_THROWS_WITH_AS(call_node("MaxPool3DWithIndicesBackward0", {g}, {true}, float_indices),
                         "MaxPool3DWithIndicesBackward0: indices must be int64, got float64", Error);
    Saved outside = saved;
    outside["result1"] = full({2, 2, 4, 5, 5}, 100, DType::Int64);  // a 4x5x5 plane has positions 0..99
    CHECK_THROWS_WITH_AS(call_node("MaxPool3DWithIndicesBackward0", {g}, {true}, outside),
                         "MaxPool3DWithIndicesBackward0: index 100 in result1 is out of range for self's plane "
                         "[4,5,5] of 100 elements",
                         Error);
    Saved zero_dilation = saved;
    zero_dilation["dilation"] = IntList{1, 0, 1};
    CHECK_THROWS_WITH_AS(call_node("MaxPool3DWithIndicesBackward0", {g}, {true}, zero_dilation),
                         "MaxPool3DWithIndicesBackward0: dilation must be positive, got dilation=[1,0,1]", Error);
    Saved huge_stride = saved;  // ATen narrows the parameters to int
    huge_stride["stride"] = IntList{std::int64_t{1} << 40};
    CHECK_THROWS_WITH_AS(call_node("MaxPool3DWithIndicesBackward0", {g}, {true}, huge_stride),
                         "MaxPool3DWithIndicesBackward0: stride=[1099511627776] does not fit in an int", Error);
  }
}

// ----------------------------------------------------------- fractional pooling ---

// torch's fractional max pooling of `input` with fixed random samples: (self, result1, kernel_size,
// output_size, the seeded grad, the grad of input).
std::vector<Tensor> torch_fractional(const char* node, const std::string& forward, const Tensor& input,
                                     const Tensor& samples) {
  return torch_exec(R"(
x = a.requires_grad_()
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == ")" + node + R"(", fn.name()
)" + kSeededGrad + R"(
result = (fn._saved_self, fn._saved_result1, T(fn._saved_kernel_size), T(fn._saved_output_size), g,
          *torch.autograd.grad(out, (x,), g))
)" + exact_grad_after(forward) + "result = (*result, exact)\n",
                    {input, samples});
}

template <std::int64_t spatial_dims>
void check_fractional(const char* node, const std::string& forward, const Tensor& no_ties, const Tensor& ties) {
  CAPTURE(forward);
  const Tensor samples = uniform64({no_ties.size(0), no_ties.size(1), spatial_dims}, 320);
  for (const DType dtype : kFloatDTypes) {
    for (const bool with_ties : {false, true}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(with_ties);
      const auto r = torch_fractional(node, forward, (with_ties ? ties : no_ties).to(dtype), samples.to(dtype));
      const Saved from_torch = {{"kernel_size", int_list(r[2])}, {"output_size", int_list(r[3])},
                                {"self", r[0]}, {"result1", r[1]}};
      const Grads out = call_node(node, {r[4]}, {true}, from_torch);
      CHECK(out[0]->dtype() == dtype);
      if (dtype == DType::Float64 || dtype == DType::Float32)
        CHECK_TENSOR(*out[0], r[5], rtol_of(dtype), rtol_of(dtype) * 1e-2);
      else
        CHECK_TENSOR(*out[0], r[6].to(dtype), rtol_of(dtype), rtol_of(dtype) * 1e-2);
      // Some element is chosen by two windows: the test covers grads that add up.
      CHECK(some_index_repeats(r[1], spatial_dims));
      if (dtype == DType::Float64 && !with_ties) {
        const Tensor indices = r[1];
        check_against_finite_differences(
            out, 0, [&](const std::vector<Tensor>& in) { return gather_indices(in[0], indices, spatial_dims); },
            {no_ties}, r[4]);
      }
    }
  }
}

TEST_CASE("FractionalMaxPool2DBackward0") {
  // kernel 2 on 7 positions to 5 outputs: the windows overlap.
  check_fractional<2>("FractionalMaxPool2DBackward0",
                      "F.fractional_max_pool2d(x, 2, output_size=(5, 4), _random_samples=b, return_indices=True)[0]",
                      random64({2, 3, 7, 6}, 321), tied({2, 3, 7, 6}, 322));
  SUBCASE("unbatched [C, H, W]") {
    const Tensor x = random64({3, 6, 6}, 323);
    const auto r = torch_fractional("FractionalMaxPool2DBackward0",
                                    "F.fractional_max_pool2d(x, (3, 2), output_ratio=(0.5, 0.5), _random_samples=b)", x,
                                    uniform64({1, 3, 2}, 324));
    CHECK(int_list(r[3]) == IntList{3, 3});
    const Tensor grad_self = *call_node("FractionalMaxPool2DBackward0", {r[4]}, {true},
                                        Saved{{"kernel_size", int_list(r[2])}, {"output_size", int_list(r[3])},
                                              {"self", r[0]}, {"result1", r[1]}})[0];
    CHECK_TENSOR(grad_self, r[5]);
  }
  const Tensor x = random64({1, 2, 4, 4}, 325);
  const Saved saved = {{"kernel_size", IntList{2, 2}}, {"output_size", IntList{2, 3}}, {"self", x},
                       {"result1", zeros({1, 2, 2, 3}, DType::Int64)}};
  const Tensor g = random64({1, 2, 2, 3}, 326);
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("FractionalMaxPool2DBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("FractionalMaxPool2DBackward0", kNoGrad, {true}, saved)[0].has_value());
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("FractionalMaxPool2DBackward0", {random64({1, 2, 3, 3}, 1)}, {true}, saved),
                         "FractionalMaxPool2DBackward0: grad [1,2,3,3] is not the output of self [1,2,4,4] pooled to "
                         "output_size [2,3]",
                         Error);
    Saved three_sizes = saved;
    three_sizes["output_size"] = IntList{2, 3, 1};
    CHECK_THROWS_WITH_AS(call_node("FractionalMaxPool2DBackward0", {g}, {true}, three_sizes),
                         "FractionalMaxPool2DBackward0: output_size must have 2 sizes, got output_size=[2,3,1]", Error);
    Saved minus_one = saved;  // fractional pooling never skips an output: -1 is out of range
    minus_one["result1"] = full({1, 2, 2, 3}, -1, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("FractionalMaxPool2DBackward0", {g}, {true}, minus_one),
                         "FractionalMaxPool2DBackward0: index -1 in result1 is out of range for self's plane [4,4] of "
                         "16 elements",
                         Error);
    Saved long_self = saved;
    long_self["self"] = random64({4, 4}, 1);
    CHECK_THROWS_WITH_AS(call_node("FractionalMaxPool2DBackward0", {g}, {true}, long_self),
                         "FractionalMaxPool2DBackward0: self must be [C, H, W] or [N, C, H, W], got [4,4]", Error);
  }
}

TEST_CASE("FractionalMaxPool3DBackward0") {
  check_fractional<3>("FractionalMaxPool3DBackward0",
                      "F.fractional_max_pool3d(x, 2, output_size=(3, 4, 2), _random_samples=b, return_indices=True)[0]",
                      random64({2, 2, 5, 6, 4}, 331), tied({2, 2, 5, 6, 4}, 332));
  SUBCASE("unbatched [C, D, H, W]") {
    const Tensor x = random64({2, 4, 5, 6}, 333);
    const auto r = torch_fractional("FractionalMaxPool3DBackward0",
                                    "F.fractional_max_pool3d(x, (2, 2, 3), output_size=(2, 3, 3), _random_samples=b)",
                                    x, uniform64({1, 2, 3}, 334));
    const Tensor grad_self = *call_node("FractionalMaxPool3DBackward0", {r[4]}, {true},
                                        Saved{{"kernel_size", int_list(r[2])}, {"output_size", int_list(r[3])},
                                              {"self", r[0]}, {"result1", r[1]}})[0];
    CHECK_TENSOR(grad_self, r[5]);
  }
  const Saved saved = {{"kernel_size", IntList{2, 2, 2}}, {"output_size", IntList{2, 2, 2}},
                       {"self", random64({1, 2, 3, 3, 3}, 335)}, {"result1", zeros({1, 2, 2, 2, 2}, DType::Int64)}};
  const Tensor g = random64({1, 2, 2, 2, 2}, 336);
  SUBCASE("need mask, undefined grad and errors") {
    CHECK_FALSE(call_node("FractionalMaxPool3DBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("FractionalMaxPool3DBackward0", kNoGrad, {true}, saved)[0].has_value());
    Saved outside = saved;
    outside["result1"] = full({1, 2, 2, 2, 2}, 27, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("FractionalMaxPool3DBackward0", {g}, {true}, outside),
                         "FractionalMaxPool3DBackward0: index 27 in result1 is out of range for self's plane [3,3,3] "
                         "of 27 elements",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("FractionalMaxPool3DBackward0", {random64({1, 2, 2, 2}, 1)}, {true}, saved),
                         "FractionalMaxPool3DBackward0: grad [1,2,2,2] is not the output of self [1,2,3,3,3] pooled "
                         "to output_size [2,2,2]",
                         Error);
  }
}

}  // TEST_SUITE
