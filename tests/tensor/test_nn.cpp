// nn: convolution, batch norm, pooling and upsampling and their backward kernels, against hand-worked
// values, direct loops and torch.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_error;
using refgrad::testing::torch_eval;
using refgrad::testing::torch_eval1;

namespace {

// An IntList as a Python list: "[1, 2]".
std::string py(const IntList& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// A view of `t` with its last two dims swapped: non-contiguous, same values
// as the contiguous tensor of shape [..., W, H] transposed.
Tensor swap_last_dims(const Tensor& t) {
  Shape sizes = t.sizes(), strides = t.strides();
  std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return Tensor(t.storage(), sizes, strides, t.storage_offset(), t.dtype());
}

// Tolerances: float64 tight, float32 rtol 1e-5.
double rtol_of(DType dtype) { return dtype == DType::Float64 ? 1e-12 : 1e-5; }
double atol_of(DType dtype) { return dtype == DType::Float64 ? 1e-12 : 1e-5; }

// Random integers in [-5, 5] as int64 (for exact integer convolution/pooling).
Tensor random_ints(const Shape& sizes, Generator& generator) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(numel_of(sizes)));
  for (auto& v : values) v = static_cast<std::int64_t>(generator.uniform() * 11) - 5;
  return from_vector(values, sizes);
}

// Whether torch raises for `expression` with a message containing `part`.
bool torch_rejects(const std::string& expression, const std::vector<Tensor>& inputs, const std::string& part) {
  return torch_error(expression, inputs).find(part) != std::string::npos;
}

const Tensor image3x3 = tensor({{{{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}, {7.0, 8.0, 9.0}}}}, DType::Float64);

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("convolution") {
  Generator generator(7);

  SUBCASE("hand-worked: 3x3 input, 2x2 kernel, bias") {
    const Tensor weight = tensor({{{{1.0, 2.0}, {3.0, 4.0}}}}, DType::Float64);
    const Tensor bias = tensor({1.0}, DType::Float64);
    // out[i][j] = sum_{p,q} x[i+p][j+q] * w[p][q] + 1, e.g. 1 + 4 + 12 + 20 + 1 = 38.
    CHECK_TENSOR(convolution(image3x3, weight, bias, {1, 1}, {0, 0}, {1, 1}, false, {0, 0}, 1),
                 tensor({{{{38.0, 48.0}, {68.0, 78.0}}}}, DType::Float64));
    // Padding 1 and stride 2: the corners see one, two or four taps.
    // out[0][0] = x[0][0]*4, out[0][1] = x[0][1]*3 + x[0][2]*4, ...
    CHECK_TENSOR(convolution(image3x3, weight, std::nullopt, {2}, {1}, {1}, false, {0}, 1),
                 tensor({{{{4.0, 6.0 + 12.0}, {4.0 * 2 + 7.0 * 4, 5.0 + 6.0 * 2 + 8.0 * 3 + 9.0 * 4}}}},
                        DType::Float64));
  }

  SUBCASE("hand-worked transposed: every input pixel stamps the kernel") {
    const Tensor input = tensor({{{{1.0, 2.0}, {3.0, 4.0}}}}, DType::Float64);
    const Tensor weight = ones({1, 1, 2, 2}, DType::Float64);
    CHECK_TENSOR(convolution(input, weight, std::nullopt, {1, 1}, {0, 0}, {1, 1}, true, {0, 0}, 1),
                 tensor({{{{1.0, 3.0, 2.0}, {4.0, 10.0, 6.0}, {3.0, 7.0, 4.0}}}}, DType::Float64));
    // stride 2 with output_padding 1: stamps do not overlap; the extra row and column are 0.
    CHECK_TENSOR(convolution(input, weight, std::nullopt, {2, 2}, {0, 0}, {1, 1}, true, {1, 1}, 1),
                 tensor({{{{1.0, 1.0, 2.0, 2.0, 0.0},
                           {1.0, 1.0, 2.0, 2.0, 0.0},
                           {3.0, 3.0, 4.0, 4.0, 0.0},
                           {3.0, 3.0, 4.0, 4.0, 0.0},
                           {0.0, 0.0, 0.0, 0.0, 0.0}}}},
                        DType::Float64));
  }

  struct Config {
    Shape input, weight;
    IntList stride, padding, dilation;
    IntList output_padding;
    std::int64_t groups;
    bool transposed;
    bool with_bias;
  };
  const std::vector<Config> configs = {
      // 2-d direct
      {{2, 3, 5, 6}, {4, 3, 3, 2}, {1, 1}, {0, 0}, {1, 1}, {0, 0}, 1, false, true},
      {{1, 4, 7, 7}, {6, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, 2, false, true},
      {{2, 4, 9, 8}, {4, 1, 3, 2}, {2, 1}, {2, 1}, {2, 3}, {0, 0}, 4, false, false},
      {{1, 2, 4, 4}, {3, 2, 1, 1}, {3, 3}, {0, 0}, {1, 1}, {0, 0}, 1, false, true},
      {{1, 2, 5, 5}, {2, 2, 5, 5}, {1, 1}, {0, 0}, {1, 1}, {0, 0}, 1, false, true},  // kernel = input
      {{1, 2, 3, 4}, {2, 2, 2, 2}, {2, 1}, {3, 2}, {1, 2}, {0, 0}, 1, false, true},  // padding > kernel
      // 2-d transposed
      {{2, 4, 3, 4}, {4, 3, 3, 2}, {1, 1}, {0, 0}, {1, 1}, {0, 0}, 1, true, true},
      {{1, 4, 3, 3}, {4, 2, 3, 3}, {2, 3}, {1, 0}, {1, 1}, {1, 2}, 2, true, true},
      {{2, 6, 4, 3}, {6, 1, 2, 3}, {2, 2}, {1, 2}, {2, 2}, {1, 0}, 3, true, false},
      {{1, 2, 3, 3}, {2, 2, 2, 2}, {1, 1}, {0, 0}, {2, 3}, {1, 2}, 1, true, true},  // output_padding < dilation
      {{1, 2, 4, 5}, {2, 3, 3, 3}, {1, 2}, {2, 1}, {1, 1}, {0, 1}, 1, true, true},  // padding crops the output
      // 1-d, direct and transposed
      {{2, 3, 10}, {4, 3, 3}, {2}, {1}, {2}, {0}, 1, false, true},
      {{1, 4, 9}, {2, 2, 4}, {3}, {0}, {1}, {0}, 2, false, false},
      {{2, 4, 5}, {4, 3, 3}, {2}, {1}, {1}, {1}, 2, true, true},
      {{1, 2, 6}, {2, 1, 2}, {3}, {0}, {2}, {2}, 1, true, true},
  };
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (const Config& c : configs) {
      const std::int64_t out_channels = c.transposed ? c.weight[1] * c.groups : c.weight[0];
      const Tensor input = randn(c.input, generator, dtype);
      const Tensor weight = randn(c.weight, generator, dtype);
      const OptionalTensor bias = c.with_bias ? OptionalTensor(randn({out_channels}, generator, dtype)) : std::nullopt;
      const std::string expression = "torch.ops.aten.convolution(a, b, " + std::string(c.with_bias ? "c" : "None") +
                                     ", " + py(c.stride) + ", " + py(c.padding) + ", " + py(c.dilation) + ", " +
                                     (c.transposed ? "True" : "False") + ", " + py(c.output_padding) + ", " +
                                     std::to_string(c.groups) + ")";
      CAPTURE(expression);
      std::vector<Tensor> inputs = {input, weight};
      if (bias) inputs.push_back(*bias);
      const Tensor actual = convolution(input, weight, bias, c.stride, c.padding, c.dilation, c.transposed,
                                        c.output_padding, c.groups);
      CHECK_TENSOR(actual, torch_eval1(expression, inputs), rtol_of(dtype), atol_of(dtype));
      CHECK(actual.is_contiguous());
    }
  }

  SUBCASE("int64: exact integer arithmetic, direct and transposed") {
    const Tensor input = random_ints({2, 4, 5, 5}, generator);
    const Tensor weight = random_ints({4, 2, 3, 2}, generator);
    const Tensor bias = random_ints({4}, generator);
    CHECK_TENSOR(convolution(input, weight, bias, {2, 1}, {1, 0}, {1, 2}, false, {0, 0}, 2),
                 torch_eval1("torch.ops.aten.convolution(a, b, c, [2, 1], [1, 0], [1, 2], False, [0, 0], 2)",
                             {input, weight, bias}));
    CHECK_TENSOR(convolution(input, weight, std::nullopt, {2, 1}, {1, 0}, {1, 1}, true, {1, 0}, 1),
                 torch_eval1("torch.ops.aten.convolution(a, b, None, [2, 1], [1, 0], [1, 1], True, [1, 0], 1)",
                             {input, weight}));
  }

  SUBCASE("non-contiguous input and weight") {
    const Tensor input = swap_last_dims(randn({2, 3, 6, 5}, generator, DType::Float64));
    const Tensor weight = swap_last_dims(randn({2, 3, 2, 3}, generator, DType::Float64));
    REQUIRE_FALSE(input.is_contiguous());
    CHECK_TENSOR(convolution(input, weight, std::nullopt, {1, 2}, {1, 1}, {1, 1}, false, {0, 0}, 1),
                 torch_eval1("torch.ops.aten.convolution(a, b, None, [1, 2], [1, 1], [1, 1], False, [0, 0], 1)",
                             {input, weight}));
    const Tensor weight_t = swap_last_dims(randn({3, 2, 2, 3}, generator, DType::Float64));
    CHECK_TENSOR(convolution(input, weight_t, std::nullopt, {2, 1}, {0, 1}, {1, 1}, true, {1, 0}, 1),
                 torch_eval1("torch.ops.aten.convolution(a, b, None, [2, 1], [0, 1], [1, 1], True, [1, 0], 1)",
                             {input, weight_t}));
  }

  SUBCASE("empty batch and empty channels") {
    const Tensor weight = randn({3, 2, 2, 2}, generator, DType::Float64);
    const Tensor empty_batch = zeros({0, 2, 4, 4}, DType::Float64);
    CHECK_TENSOR(convolution(empty_batch, weight, std::nullopt, {1}, {0}, {1}, false, {0}, 1),
                 torch_eval1("torch.ops.aten.convolution(a, b, None, [1], [0], [1], False, [0], 1)",
                             {empty_batch, weight}));
    const Tensor weight_t = randn({2, 3, 2, 2}, generator, DType::Float64);
    CHECK_TENSOR(convolution(empty_batch, weight_t, std::nullopt, {2}, {0}, {1}, true, {1}, 1),
                 torch_eval1("torch.ops.aten.convolution(a, b, None, [2], [0], [1], True, [1], 1)",
                             {empty_batch, weight_t}));
    // ATen gives an input without channels an output without channels.
    const Tensor no_channels = zeros({1, 0, 5, 5}, DType::Float64);
    const Tensor weight0 = zeros({3, 0, 2, 2}, DType::Float64);
    const Tensor bias = ones({3}, DType::Float64);
    CHECK_TENSOR(convolution(no_channels, weight0, bias, {2}, {1}, {1}, false, {0}, 1),
                 torch_eval1("torch.ops.aten.convolution(a, b, c, [2], [1], [1], False, [0], 1)",
                             {no_channels, weight0, bias}));
  }

  SUBCASE("bias: undefined is none, another dtype is converted to the input's, as in ATen") {
    const Tensor input = randn({1, 2, 4, 4}, generator, DType::Float64);
    const Tensor weight = randn({3, 2, 2, 2}, generator, DType::Float64);
    CHECK_TENSOR(convolution(input, weight, Tensor(), {1}, {0}, {1}, false, {0}, 1),
                 torch_eval1("torch.ops.aten.convolution(a, b, None, [1], [0], [1], False, [0], 1)", {input, weight}));
    const Tensor bias = randn({3}, generator, DType::Float32);
    CHECK_TENSOR(convolution(input, weight, bias, {1}, {0}, {1}, false, {0}, 1),
                 torch_eval1("torch.ops.aten.convolution(a, b, c, [1], [0], [1], False, [0], 1)",
                             {input, weight, bias}));
  }

  SUBCASE("errors") {
    const Tensor input = ones({1, 2, 3, 3});
    const Tensor weight = ones({1, 2, 2, 2});
    const auto conv = [&](const Tensor& x, const Tensor& w, const OptionalTensor& b, IntList stride, IntList padding,
                          IntList dilation, bool transposed, IntList output_padding, std::int64_t groups) {
      return convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups);
    };
    CHECK_THROWS_WITH_AS(conv(input, ones({2}), std::nullopt, {1}, {0}, {1}, false, {0}, 1),
                         "convolution: weight should have at least three dimensions, got weight of shape [2]", Error);
    CHECK_THROWS_WITH_AS(conv(ones({1, 2, 3, 3, 3, 3}), ones({1, 2, 2, 2, 2, 2}), std::nullopt, {1}, {0}, {1}, false,
                              {0}, 1),
                         "convolution: only 1-d, 2-d and 3-d convolutions are implemented, got weight of shape "
                         "[1,2,2,2,2,2]",
                         Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1, 1, 1}, {0}, {1}, false, {0}, 1),
                         "convolution: expected stride to be a single integer value or a list of 2 values to match "
                         "the convolution dimensions, but got stride=[1,1,1]",
                         Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {}, {1}, false, {0}, 1),
                         doctest::Contains("expected padding to be a single integer value or a list of 2 values"),
                         Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {0}, {1, 1, 1}, false, {0}, 1),
                         doctest::Contains("but got dilation=[1,1,1]"), Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {0}, {1}, false, {}, 1),
                         doctest::Contains("but got output_padding=[]"), Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {0, 1}, {0}, {1}, false, {0}, 1),
                         "convolution: non-positive stride is not supported, got stride=[0,1]", Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {-1}, {0}, {1}, false, {0}, 1),
                         "convolution: non-positive stride is not supported, got stride=[-1,-1]", Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {-1, 0}, {1}, false, {0}, 1),
                         "convolution: negative padding is not supported, got padding=[-1,0]", Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {0}, {1}, true, {0, -1}, 1),
                         "convolution: negative output_padding is not supported, got output_padding=[0,-1]", Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {0}, {0, 1}, false, {0}, 1),
                         "convolution: dilation should be greater than zero, but got [0,1]", Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {0}, {1}, false, {0}, 0),
                         "convolution: non-positive groups is not supported, got groups=0", Error);
    CHECK_THROWS_WITH_AS(conv(ones({2, 3, 3}), weight, std::nullopt, {1}, {0}, {1}, false, {0}, 1),
                         "convolution: expected 4-dimensional input for 4-dimensional weight [1,2,2,2], but got "
                         "3-dimensional input of size [2,3,3] instead",
                         Error);
    CHECK_THROWS_WITH_AS(conv(input, ones({1, 2, 2, 2}, DType::Float64), std::nullopt, {1}, {0}, {1}, false, {0}, 1),
                         "convolution: input (float32) and weight (float64) must have the same dtype", Error);
    CHECK_THROWS_WITH_AS(conv(input.to(DType::Bool), weight.to(DType::Bool), std::nullopt, {1}, {0}, {1}, false, {0}, 1),
                         "convolution: not implemented for bool tensors (float32, float64 and int64 are)", Error);
    CHECK_THROWS_WITH_AS(conv(ones({1, 4, 3, 3}), ones({1, 2, 2, 2}), std::nullopt, {1}, {0}, {1}, false, {0}, 2),
                         "convolution: given groups=2, expected weight to be at least 2 at dimension 0, but got "
                         "weight of size [1,2,2,2] instead",
                         Error);
    CHECK_THROWS_WITH_AS(conv(ones({1, 4, 3, 3}), ones({3, 2, 2, 2}), std::nullopt, {1}, {0}, {1}, false, {0}, 2),
                         "convolution: given groups=2, expected weight to be divisible by 2 at dimension 0, but got "
                         "weight of size [3,2,2,2] instead",
                         Error);
    CHECK_THROWS_WITH_AS(conv(ones({1, 3, 3, 3}), ones({4, 1, 2, 2}), std::nullopt, {1}, {0}, {1}, false, {0}, 2),
                         "convolution: given groups=2, weight of size [4,1,2,2], expected input[1,3,3,3] to have 2 "
                         "channels, but got 3 channels instead",
                         Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {0}, {1}, true, {0}, 1),
                         "convolution: given transposed=1, weight of size [1,2,2,2], expected input[1,2,3,3] to have "
                         "1 channels, but got 2 channels instead",
                         Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, ones({2}), {1}, {0}, {1}, false, {0}, 1),
                         "convolution: given weight of size [1,2,2,2], expected bias to be 1-dimensional with 1 "
                         "elements, but got bias of size [2] instead",
                         Error);
    CHECK_THROWS_WITH_AS(conv(ones({1, 4, 3, 3}), ones({4, 1, 2, 2}), ones({3}), {1}, {0}, {1}, true, {0}, 2),
                         "convolution: given transposed=1, weight of size [4,1,2,2], expected bias to be "
                         "1-dimensional with 2 elements, but got bias of size [3] instead",
                         Error);
    CHECK_THROWS_WITH_AS(conv(input, ones({1, 2, 0, 2}), std::nullopt, {1}, {0}, {1}, false, {0}, 1),
                         "convolution: kernel size should be greater than zero, but got weight of shape [1,2,0,2]",
                         Error);
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {0}, {3, 1}, false, {0}, 1),
                         "convolution: calculated padded input size per channel: [3,3]. Kernel size: [4,2]. Kernel "
                         "size can't be greater than actual input size",
                         Error);
    CHECK_THROWS_WITH_AS(conv(ones({1, 2, 3}), ones({1, 2, 4}), std::nullopt, {1}, {0}, {1}, false, {0}, 1),
                         doctest::Contains("padded input size per channel: [3]. Kernel size: [4]"), Error);
    CHECK_THROWS_WITH_AS(conv(input, ones({2, 1, 2, 2}), std::nullopt, {2, 1}, {0}, {1}, true, {1, 1}, 1),
                         "convolution: output padding must be smaller than either stride or dilation, but got "
                         "output_padding=[1,1], stride=[2,1], dilation=[1,1]",
                         Error);
    CHECK_THROWS_WITH_AS(conv(ones({1, 2, 1, 1}), ones({2, 1, 2, 2}), std::nullopt, {1}, {1}, {1}, true, {0}, 1),
                         "convolution: given input size per channel [1,1], the calculated output size per channel "
                         "[0,0] is too small",
                         Error);
    CHECK_THROWS_WITH_AS(conv(ones({1, 2, 0, 3}), weight, std::nullopt, {1}, {1}, {1}, false, {0}, 1),
                         "convolution: only zero batch or zero channel inputs are supported, but got input shape "
                         "[1,2,0,3]",
                         Error);
    CHECK_THROWS_WITH_AS(conv(Tensor(), weight, std::nullopt, {1}, {0}, {1}, false, {0}, 1),
                         "convolution: input and weight must be defined", Error);
    // Geometry whose arithmetic overflows int64 raises instead of wrapping around.
    const std::int64_t huge = std::int64_t{1} << 62;
    CHECK_THROWS_WITH_AS(conv(input, weight, std::nullopt, {1}, {huge}, {1}, false, {0}, 1),
                         "convolution: 2 * 4611686018427387904 overflows int64", Error);
    CHECK_THROWS_WITH_AS(conv(input, ones({1, 2, 3, 3}), std::nullopt, {1}, {0}, {huge}, false, {0}, 1),
                         "convolution: 4611686018427387904 * 2 overflows int64", Error);
    CHECK_THROWS_WITH_AS(conv(input, ones({2, 1, 2, 2}), std::nullopt, {huge}, {0}, {1}, true, {0}, 1),
                         "convolution: 2 * 4611686018427387904 overflows int64", Error);
    CHECK_THROWS_WITH_AS(conv(input, empty({2, huge, 0, 1}), std::nullopt, {1}, {0}, {1}, false, {0}, 2),
                         "convolution: 4611686018427387904 * 2 overflows int64", Error);
    // The im2col buffer, 1000x1000 taps at 1001x1001 positions, is far larger
    // than input and output: it raises before it is allocated.
    {
      const MemoryLimitScope limit(std::size_t{1} << 30);
      CHECK_THROWS_WITH_AS(conv(zeros({1, 1, 2000, 2000}), zeros({1, 1, 1000, 1000}), std::nullopt, {1}, {0}, {1},
                                false, {0}, 1),
                           doctest::Contains("convolution: the im2col buffer: a float32 tensor of shape "
                                             "[1,1,1000,1000,1,1001,1001] would need"),
                           Error);
    }
    // torch rejects the same calls.
    CHECK(torch_rejects("torch.ops.aten.convolution(a, b, None, [1], [0], [1], True, [1, 1], 1)",
                        {input, ones({2, 1, 2, 2})}, "output padding must be smaller than either stride or dilation"));
  }
}

TEST_CASE("conv1d") {
  Generator generator(11);
  const Tensor input = randn({2, 4, 9}, generator, DType::Float64);
  const Tensor weight = randn({6, 2, 3}, generator, DType::Float64);
  const Tensor bias = randn({6}, generator, DType::Float64);
  CHECK_TENSOR(conv1d(input, weight, bias, {2}, {1}, {2}, 2),
               torch_eval1("F.conv1d(a, b, c, stride=2, padding=1, dilation=2, groups=2)", {input, weight, bias}));
  // Unbatched [C, W] in, [C_out, W_out] out.
  const Tensor unbatched = randn({4, 7}, generator, DType::Float32);
  const Tensor weight32 = randn({3, 4, 2}, generator, DType::Float32);
  const Tensor out = conv1d(unbatched, weight32);
  CHECK(out.sizes() == Shape{3, 6});
  CHECK_TENSOR(out, torch_eval1("F.conv1d(a, b)", {unbatched, weight32}), 1e-5, 1e-5);
  CHECK_THROWS_WITH_AS(conv1d(ones({3}), ones({1, 2, 2})),
                       "conv1d: expected 2-d (unbatched) or 3-d (batched) input, but got input of size [3]", Error);
  CHECK_THROWS_WITH_AS(conv1d(ones({2, 3, 3}), ones({1, 2, 2, 2})),
                       doctest::Contains("conv1d: expected 4-dimensional input for 4-dimensional weight"), Error);
  // An empty view may have any strides: 3 * 2^62 overflows, and the batch dim
  // put in front of it must not compute that product.
  const Tensor empty_view(ones({1}).storage(), {3, 0}, {std::int64_t{1} << 62, 1}, 0, DType::Float32);
  CHECK_THROWS_WITH_AS(conv1d(empty_view, ones({1, 3, 1})),
                       doctest::Contains("Kernel size can't be greater than actual input size"), Error);
}

TEST_CASE("conv2d") {
  Generator generator(12);
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const Tensor input = randn({2, 4, 7, 6}, generator, dtype);
    const Tensor weight = randn({6, 2, 3, 3}, generator, dtype);
    const Tensor bias = randn({6}, generator, dtype);
    CHECK_TENSOR(conv2d(input, weight, bias, {2}, {1}, {1}, 2),
                 torch_eval1("F.conv2d(a, b, c, stride=2, padding=1, dilation=1, groups=2)", {input, weight, bias}),
                 rtol_of(dtype), atol_of(dtype));
    const Tensor unbatched = randn({4, 5, 5}, generator, dtype);
    const Tensor out = conv2d(unbatched, weight, std::nullopt, {1, 2}, {0, 1}, {2, 1}, 2);
    CHECK(out.sizes() == Shape{6, 1, 3});
    CHECK_TENSOR(out, torch_eval1("F.conv2d(a, b, None, (1, 2), (0, 1), (2, 1), 2)", {unbatched, weight}),
                 rtol_of(dtype), atol_of(dtype));
  }
  const Tensor int_input = tensor({{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}});  // [1,3,3], unbatched int64
  CHECK_TENSOR(conv2d(int_input, tensor({{{{1, 2}, {3, 4}}}})), tensor({{{37, 47}, {67, 77}}}));
  CHECK_THROWS_WITH_AS(conv2d(ones({3, 3}), ones({1, 2, 2, 2})),
                       "conv2d: expected 3-d (unbatched) or 4-d (batched) input, but got input of size [3,3]", Error);
  CHECK_THROWS_WITH_AS(conv2d(ones({2, 3, 3}), ones({1, 2, 2})),
                       doctest::Contains("conv2d: expected stride to be a single integer value or a list of 1 values"),
                       Error);
}

TEST_CASE("conv_transpose1d") {
  Generator generator(13);
  const Tensor input = randn({2, 4, 5}, generator, DType::Float64);
  const Tensor weight = randn({4, 3, 3}, generator, DType::Float64);
  const Tensor bias = randn({6}, generator, DType::Float64);
  CHECK_TENSOR(conv_transpose1d(input, weight, bias, {2}, {1}, {1}, 2, {1}),
               torch_eval1("F.conv_transpose1d(a, b, c, stride=2, padding=1, output_padding=1, groups=2)",
                           {input, weight, bias}));
  const Tensor unbatched = randn({4, 3}, generator, DType::Float64);
  const Tensor out = conv_transpose1d(unbatched, weight, std::nullopt, {1}, {0}, {0}, 1, {2});
  CHECK(out.sizes() == Shape{3, 7});
  CHECK_TENSOR(out, torch_eval1("F.conv_transpose1d(a, b, dilation=2)", {unbatched, weight}));
  CHECK_THROWS_WITH_AS(conv_transpose1d(ones({1, 2, 3}), ones({2, 1, 2}), std::nullopt, {1}, {0}, {1}),
                       doctest::Contains("conv_transpose1d: output padding must be smaller than either stride or "
                                         "dilation, but got output_padding=[1]"),
                       Error);
  CHECK_THROWS_WITH_AS(conv_transpose1d(ones({1, 2, 1}), ones({2, 1, 2}), std::nullopt, {1}, {1}),
                       doctest::Contains("the calculated output size per channel [0] is too small"), Error);
}

TEST_CASE("conv_transpose2d") {
  Generator generator(14);
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const Tensor input = randn({2, 6, 3, 4}, generator, dtype);
    const Tensor weight = randn({6, 2, 3, 2}, generator, dtype);
    const Tensor bias = randn({6}, generator, dtype);
    CHECK_TENSOR(conv_transpose2d(input, weight, bias, {2, 3}, {1, 0}, {1, 2}, 3, {1, 1}),
                 torch_eval1("F.conv_transpose2d(a, b, c, stride=(2, 3), padding=(1, 0), output_padding=(1, 2), "
                             "groups=3)",
                             {input, weight, bias}),
                 rtol_of(dtype), atol_of(dtype));
    const Tensor unbatched = randn({6, 2, 2}, generator, dtype);
    const Tensor out = conv_transpose2d(unbatched, weight, std::nullopt, {1}, {0}, {1}, 1, {2});
    CHECK(out.sizes() == Shape{2, 7, 5});
    CHECK_TENSOR(out, torch_eval1("F.conv_transpose2d(a, b, output_padding=1, dilation=2)", {unbatched, weight}),
                 rtol_of(dtype), atol_of(dtype));
  }
  CHECK_THROWS_WITH_AS(conv_transpose2d(ones({3, 3}), ones({2, 1, 2, 2})),
                       "conv_transpose2d: expected 3-d (unbatched) or 4-d (batched) input, but got input of size "
                       "[3,3]",
                       Error);
}

TEST_CASE("max_pool2d_with_indices") {
  Generator generator(21);

  SUBCASE("hand-worked: 3x3 input, 2x2 kernel, stride 1") {
    const Tensor input = tensor({{{{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}, {9.0, 8.0, 7.0}}}});
    const auto [values, indices] = max_pool2d_with_indices(input, {2}, {1});
    CHECK_TENSOR(values, tensor({{{{5.0, 6.0}, {9.0, 8.0}}}}));
    CHECK_TENSOR(indices, tensor({{{{1, 5}, {6, 7}}}}));
    // Padding 1, stride 2: the padding is -inf, never the max; indices are flat within the plane.
    const auto [padded, padded_indices] = max_pool2d_with_indices(input, {2}, {2}, {1});
    CHECK_TENSOR(padded, tensor({{{{1.0, 5.0}, {9.0, 8.0}}}}));
    CHECK_TENSOR(padded_indices, tensor({{{{0, 1}, {6, 7}}}}));
  }

  struct Config {
    Shape input;
    IntList kernel, stride, padding, dilation;
    bool ceil_mode;
  };
  const std::vector<Config> configs = {
      {{2, 3, 7, 6}, {3}, {2}, {1}, {1}, false},
      {{2, 3, 7, 6}, {3}, {2}, {1}, {1}, true},
      {{1, 2, 8, 9}, {3, 2}, {}, {1, 0}, {1, 1}, true},
      {{1, 2, 9, 9}, {3, 3}, {2, 1}, {1, 1}, {2, 3}, false},
      {{1, 2, 10, 9}, {2, 3}, {3, 2}, {1, 1}, {2, 1}, true},
      {{3, 5, 5}, {2}, {1}, {0}, {1}, false},  // unbatched
  };
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (const Config& c : configs) {
      const Tensor input = randn(c.input, generator, dtype);
      const std::string expression = "torch.ops.aten.max_pool2d_with_indices(a, " + py(c.kernel) + ", " +
                                     py(c.stride) + ", " + py(c.padding) + ", " + py(c.dilation) + ", " +
                                     (c.ceil_mode ? "True" : "False") + ")";
      CAPTURE(expression);
      const auto [values, indices] = max_pool2d_with_indices(input, c.kernel, c.stride, c.padding, c.dilation,
                                                             c.ceil_mode);
      const std::vector<Tensor> expected = torch_eval(expression, {input});
      CHECK_TENSOR(values, expected[0]);
      CHECK_TENSOR(indices, expected[1]);
    }
  }

  SUBCASE("F.max_pool2d with return_indices, non-contiguous input") {
    const Tensor input = swap_last_dims(randn({2, 2, 7, 8}, generator, DType::Float64));
    const auto [values, indices] = max_pool2d_with_indices(input, {3}, {2}, {1});
    const std::vector<Tensor> expected = torch_eval("F.max_pool2d(a, 3, 2, 1, return_indices=True)", {input});
    CHECK_TENSOR(values, expected[0]);
    CHECK_TENSOR(indices, expected[1]);
  }

  SUBCASE("NaN wins, -inf everywhere keeps the first tap, int64") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const Tensor input = tensor({{{{1.0, nan, 3.0, -inf}, {nan, 2.0, -inf, -inf}}}}, DType::Float64);
    const auto [values, indices] = max_pool2d_with_indices(input, {2});
    const std::vector<Tensor> expected = torch_eval("F.max_pool2d(a, 2, return_indices=True)", {input});
    CHECK_TENSOR(values, expected[0]);
    CHECK_TENSOR(indices, expected[1]);
    CHECK(std::isnan(values.at<double>({0, 0, 0, 0})));
    CHECK(values.at<double>({0, 0, 0, 1}) == 3.0);

    const Tensor ints = random_ints({1, 2, 5, 5}, generator);
    const auto [int_values, int_indices] = max_pool2d_with_indices(ints, {2}, {2}, {1}, {1}, true);
    const std::vector<Tensor> int_expected =
        torch_eval("F.max_pool2d(a, 2, 2, 1, ceil_mode=True, return_indices=True)", {ints});
    CHECK_TENSOR(int_values, int_expected[0]);
    CHECK_TENSOR(int_indices, int_expected[1]);
  }

  SUBCASE("empty batch") {
    const auto [values, indices] = max_pool2d_with_indices(zeros({0, 2, 4, 4}), {2});
    CHECK(values.sizes() == Shape{0, 2, 2, 2});
    CHECK(indices.dtype() == DType::Int64);
  }

  SUBCASE("errors") {
    const Tensor input = ones({1, 2, 3, 3});
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {}),
                         "max_pool2d_with_indices: kernel_size must either be a single int, or a tuple of two ints, got []",
                         Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {2}, {1, 1, 1}),
                         doctest::Contains("stride must either be omitted, a single int, or a tuple of two ints"),
                         Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {2}, {}, {}),
                         doctest::Contains("padding must either be a single int, or a tuple of two ints, got []"),
                         Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {2}, {}, {0}, {1, 1, 1}),
                         doctest::Contains("dilation must be either a single int, or a tuple of two ints"), Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(ones({3, 3}), {2}),
                         "max_pool2d_with_indices: expected a 3-d or 4-d (batch mode) input, but got input of size [3,3]",
                         Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input.to(DType::Bool), {2}),
                         "max_pool2d_with_indices: not implemented for bool tensors (float32, float64 and int64 are)", Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {0, 2}), "max_pool2d_with_indices: stride should not be zero", Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {2}, {1}, {-1}),
                         "max_pool2d_with_indices: pad must be non-negative, but got pad: -1", Error);
    CHECK_THROWS_WITH_AS(
        max_pool2d_with_indices(input, {2}, {1}, {2}),
        "max_pool2d_with_indices: pad should be at most half of effective kernel size, but got pad=2, kernel_size=2 and dilation=1",
        Error);
    // A dilated kernel passes the first bound (pad <= (3 - 1) * 2 + 1) / 2) but not the second (pad <= 3 / 2).
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {3}, {1}, {2}, {2}),
                         "max_pool2d_with_indices: pad should be smaller than or equal to half of kernel size, but "
                         "got padW = 2, padH = 2, kW = 3, kH = 3",
                         Error);
    CHECK(torch_rejects("torch.ops.aten.max_pool2d_with_indices(a, [3], [1], [2], [2])", {input},
                        "pad should be smaller than or equal to half of kernel size"));
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {0, 2}, {1}),
                         "max_pool2d_with_indices: kernel size should be greater than zero, but got kH: 0 kW: 2", Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {2}, {-1}),
                         "max_pool2d_with_indices: stride should be greater than zero, but got dH: -1 dW: -1", Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(input, {2}, {1}, {0}, {0}),
                         "max_pool2d_with_indices: dilation should be greater than zero, but got dilationH: 0 dilationW: 0",
                         Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(ones({1, 0, 3, 3}), {2}),
                         "max_pool2d_with_indices: expected a 3-d or 4-d (batch mode) input with optional 0 dim batch size, but got [1,0,3,3]",
                         Error);
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(ones({0, 3, 3}), {2}),
                         doctest::Contains("with optional 0 dim batch size, but got [0,3,3]"), Error);
    CHECK_THROWS_WITH_AS(
        max_pool2d_with_indices(input, {4}),
        "max_pool2d_with_indices: given input size [1,2,3,3], the calculated output size [0,0] is too small", Error);
    CHECK(torch_rejects("torch.ops.aten.max_pool2d_with_indices(a, [4])", {input}, "Output size is too small"));
  }

  SUBCASE("parameters beyond int; windows reaching far into the padding") {
    // ATen's pooling kernels take int parameters and raise beyond them.
    const Tensor pixel = ones({1, 1, 1, 1});
    CHECK_THROWS_WITH_AS(max_pool2d_with_indices(pixel, {std::int64_t{1} << 40}, {1}, {std::int64_t{1} << 39}),
                         "max_pool2d_with_indices: kernel_size=[1099511627776] does not fit in int, as ATen's "
                         "pooling kernels need",
                         Error);
    CHECK(torch_rejects("torch.ops.aten.max_pool2d_with_indices(a, [2**40], [1], [2**39])", {pixel},
                        "value cannot be converted to type int without overflow"));
    // Each window starts up to 2^30 - 1 rows above the image and covers all
    // of it: its first tap inside the image is found without a walk through
    // the padding.
    const Tensor column = reshape(arange(1000, DType::Float64), {1, 1, 1000, 1});
    const auto [values, indices] = max_pool2d_with_indices(column, {2147483647, 1}, {1}, {1073741823, 0});
    CHECK_TENSOR(values, full({1, 1, 1000, 1}, 999.0, DType::Float64));
    CHECK_TENSOR(indices, full({1, 1, 1000, 1}, 999));
  }
}

TEST_CASE("avg_pool2d") {
  Generator generator(22);

  SUBCASE("hand-worked: padding counted or not, divisor override") {
    // 3x3 input, kernel 2, stride 2, padding 1: windows hold 1, 2, 2 and 4 real pixels.
    CHECK_TENSOR(avg_pool2d(image3x3, {2}, {2}, {1}),
                 tensor({{{{1.0 / 4, 5.0 / 4}, {11.0 / 4, 28.0 / 4}}}}, DType::Float64));
    CHECK_TENSOR(avg_pool2d(image3x3, {2}, {2}, {1}, false, false),
                 tensor({{{{1.0, 5.0 / 2}, {11.0 / 2, 28.0 / 4}}}}, DType::Float64));
    CHECK_TENSOR(avg_pool2d(image3x3, {2}, {2}, {1}, false, true, 3),
                 tensor({{{{1.0 / 3, 5.0 / 3}, {11.0 / 3, 28.0 / 3}}}}, DType::Float64));
    // int64 divides with truncation: (-7 + 3 + 2 + 5) / 4 = 0 and (-7 + 2) / 2 = -2.
    const Tensor ints = tensor({{{{-7, 3}, {2, 5}}}});
    CHECK_TENSOR(avg_pool2d(ints, {2}), tensor({{{{0}}}}));
    CHECK_TENSOR(avg_pool2d(ints, {2, 1}), tensor({{{{-2, 4}}}}));
  }

  struct Config {
    Shape input;
    IntList kernel, stride, padding;
    bool ceil_mode, count_include_pad;
    std::optional<std::int64_t> divisor_override;
  };
  const std::vector<Config> configs = {
      {{2, 3, 7, 6}, {3}, {2}, {1}, false, true, std::nullopt},
      {{2, 3, 7, 6}, {3}, {2}, {1}, true, true, std::nullopt},
      {{2, 3, 7, 6}, {3}, {2}, {1}, true, false, std::nullopt},
      {{1, 2, 8, 9}, {3, 2}, {}, {1, 0}, true, false, std::nullopt},
      {{1, 2, 9, 9}, {2, 3}, {2, 1}, {1, 1}, false, true, 5},
      {{1, 2, 6, 5}, {4, 3}, {3, 2}, {2, 1}, true, false, -2},
      {{3, 5, 5}, {2}, {1}, {0}, false, true, std::nullopt},  // unbatched
  };
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (const Config& c : configs) {
      const Tensor input = randn(c.input, generator, dtype);
      const std::string expression =
          "torch.ops.aten.avg_pool2d(a, " + py(c.kernel) + ", " + py(c.stride) + ", " + py(c.padding) + ", " +
          (c.ceil_mode ? "True" : "False") + ", " + (c.count_include_pad ? "True" : "False") + ", " +
          (c.divisor_override ? std::to_string(*c.divisor_override) : "None") + ")";
      CAPTURE(expression);
      CHECK_TENSOR(avg_pool2d(input, c.kernel, c.stride, c.padding, c.ceil_mode, c.count_include_pad,
                              c.divisor_override),
                   torch_eval1(expression, {input}), rtol_of(dtype), atol_of(dtype));
    }
  }

  SUBCASE("int64 sums wrap around, INT64_MIN / -1 too; parameters beyond int") {
    const Tensor big = full({1, 1, 2, 2}, std::int64_t{1} << 62);
    CHECK_TENSOR(avg_pool2d(big, {2}), torch_eval1("torch.ops.aten.avg_pool2d(a, [2])", {big}));  // 4 * 2^62 wraps to 0
    // torch dies of SIGFPE here; refgrad wraps, as torch's floor division does.
    const Tensor lowest = full({1, 1, 1, 1}, std::numeric_limits<std::int64_t>::min());
    CHECK_TENSOR(avg_pool2d(lowest, {1}, {1}, {0}, false, true, -1), lowest);
    CHECK_THROWS_WITH_AS(avg_pool2d(ones({1, 1, 1, 1}), {std::int64_t{1} << 40}, {1}, {std::int64_t{1} << 39}),
                         "avg_pool2d: kernel_size=[1099511627776] does not fit in int, as ATen's pooling kernels need",
                         Error);
  }

  SUBCASE("F.avg_pool2d: non-contiguous and int64 inputs") {
    const Tensor input = swap_last_dims(randn({2, 2, 7, 8}, generator, DType::Float64));
    CHECK_TENSOR(avg_pool2d(input, {3}, {2}, {1}, true, false),
                 torch_eval1("F.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False)", {input}));
    const Tensor ints = random_ints({1, 2, 5, 6}, generator);
    CHECK_TENSOR(avg_pool2d(ints, {3, 2}, {2}, {1}, true, false),
                 torch_eval1("F.avg_pool2d(a, (3, 2), 2, 1, ceil_mode=True, count_include_pad=False)", {ints}));
  }

  SUBCASE("errors") {
    const Tensor input = ones({1, 2, 3, 3});
    CHECK_THROWS_WITH_AS(avg_pool2d(input, {}),
                         "avg_pool2d: kernel_size must either be a single int, or a tuple of two ints, got []", Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(input, {2}, {2, 2, 2}),
                         "avg_pool2d: stride must either be omitted, a single int, or a tuple of two ints, got "
                         "[2,2,2]",
                         Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(input, {2}, {2}, {1, 1, 1}),
                         "avg_pool2d: padding must either be a single int, or a tuple of two ints, got [1,1,1]", Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(input, {2}, {}, {0}, false, true, 0), "avg_pool2d: divisor must be not zero",
                         Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(ones({3, 3}), {2}),
                         "avg_pool2d: expected a 3-d or 4-d (batch mode) input, but got input of size [3,3]", Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(input, {2}, {0}), "avg_pool2d: stride should not be zero", Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(input, {2}, {}, {2}),
                         "avg_pool2d: pad should be at most half of effective kernel size, but got pad=2, "
                         "kernel_size=2 and dilation=1",
                         Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(input, {0, 2}, {1}),
                         "avg_pool2d: kernel size should be greater than zero, but got kH: 0 kW: 2", Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(ones({1, 1, 0, 3}), {2}), doctest::Contains("but got [1,1,0,3]"), Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(input, {4}),
                         "avg_pool2d: given input size [1,2,3,3], the calculated output size [0,0] is too small",
                         Error);
    CHECK_THROWS_WITH_AS(avg_pool2d(input.to(DType::Bool), {2}),
                         "avg_pool2d: not implemented for bool tensors (float32, float64 and int64 are)", Error);
  }
}

TEST_CASE("adaptive_avg_pool2d") {
  Generator generator(23);
  // 3 -> 2: cells [0, 2) and [1, 3) overlap in the middle row and column.
  CHECK_TENSOR(adaptive_avg_pool2d(image3x3, {2, 2}),
               tensor({{{{3.0, 4.0}, {6.0, 7.0}}}}, DType::Float64));
  CHECK_TENSOR(adaptive_avg_pool2d(image3x3, {1, 3}), tensor({{{{4.0, 5.0, 6.0}}}}, DType::Float64));

  const std::vector<std::pair<Shape, IntList>> configs = {
      {{2, 3, 7, 5}, {3, 2}}, {{1, 2, 4, 4}, {5, 3}}, {{1, 2, 6, 9}, {1, 1}},
      {{3, 5, 7}, {2, 4}},  // unbatched
      {{0, 2, 3, 3}, {2, 2}}, {{1, 0, 3, 3}, {2, 2}}, {{1, 2, 3, 3}, {0, 2}},
  };
  for (DType dtype : {DType::Float64, DType::Float32})
    for (const auto& [shape, output_size] : configs) {
      const Tensor input = randn(shape, generator, dtype);
      const std::string expression = "torch.ops.aten.adaptive_avg_pool2d(a, " + py(output_size) + ")";
      CAPTURE(expression);
      CHECK_TENSOR(adaptive_avg_pool2d(input, output_size), torch_eval1(expression, {input}), rtol_of(dtype),
                   atol_of(dtype));
    }
  const Tensor strided = swap_last_dims(randn({1, 2, 7, 5}, generator, DType::Float64));
  CHECK_TENSOR(adaptive_avg_pool2d(strided, {3, 4}), torch_eval1("F.adaptive_avg_pool2d(a, (3, 4))", {strided}));

  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(image3x3, {2}), "adaptive_avg_pool2d: output_size must be 2, got [2]",
                       Error);
  CHECK_THROWS_WITH_AS(
      adaptive_avg_pool2d(image3x3, {-1, 2}),
      "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0, but got [-1,2]", Error);
  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(ones({3, 3}), {2, 2}),
                       "adaptive_avg_pool2d: expected a 3-d or 4-d input, but got input of size [3,3]", Error);
  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(ones({1, 2, 0, 3}), {2, 2}),
                       "adaptive_avg_pool2d: expected input to have non-zero size for non-batch dimensions, but got "
                       "input of size [1,2,0,3]",
                       Error);
  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(ones({1, 2, 3, 3}, DType::Int64), {2, 2}),
                       "adaptive_avg_pool2d: not implemented for int64 tensors (float32 and float64 are)", Error);
  // Cell bounds o * in / out would overflow int64: a 2^32-row view of one
  // pixel (no memory), pooled to 2^32 rows. It raises before allocating.
  const MemoryLimitScope limit(std::size_t{1} << 40);
  const Tensor pixel = ones({1, 1, 1, 1});
  const Tensor rows(pixel.storage(), {1, 1, std::int64_t{1} << 32, 1}, {1, 1, 0, 1}, 0, DType::Float32);
  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(rows, {std::int64_t{1} << 32, 1}),
                       "adaptive_avg_pool2d: output_size [4294967296,1] times the input size [1,1,4294967296,1] "
                       "overflows int64",
                       Error);
}

TEST_CASE("upsample_nearest2d") {
  Generator generator(31);
  const Tensor small = tensor({{{{1.0, 2.0}, {3.0, 4.0}}}});
  CHECK_TENSOR(upsample_nearest2d(small, {3, 4}),
               tensor({{{{1.0, 1.0, 2.0, 2.0}, {1.0, 1.0, 2.0, 2.0}, {3.0, 3.0, 4.0, 4.0}}}}));
  // A scale of 3 reads source floor(dst / 3) even though the output is only 3 wide ...
  CHECK_TENSOR(upsample_nearest2d(small, {2, 3}, 1.0, 3.0), tensor({{{{1.0, 1.0, 1.0}, {3.0, 3.0, 3.0}}}}));
  CHECK_TENSOR(upsample_nearest2d(small, {2, 3}), tensor({{{{1.0, 1.0, 2.0}, {3.0, 3.0, 4.0}}}}));
  // ... but ATen ignores the scale when the output is the same size or twice the size.
  CHECK_TENSOR(upsample_nearest2d(small, {2, 4}, 1.0, 3.0), tensor({{{{1.0, 1.0, 2.0, 2.0}, {3.0, 3.0, 4.0, 4.0}}}}));

  struct Config {
    Shape input;
    IntList output_size;
    std::optional<double> scales_h, scales_w;
  };
  const std::vector<Config> configs = {
      {{2, 3, 4, 3}, {5, 7}, std::nullopt, std::nullopt}, {{1, 2, 5, 6}, {3, 2}, std::nullopt, std::nullopt},
      {{1, 2, 3, 3}, {5, 7}, 1.7, 2.3},                   {{1, 1, 4, 4}, {4, 4}, 1.1, 1.3},
      {{1, 1, 3, 3}, {6, 5}, 0.4, 3.3},                   {{1, 1, 3, 5}, {6, 10}, 1.5, 0.9},
      {{1, 1, 3, 5}, {8, 11}, 0.0, -1.0},                 {{0, 2, 3, 3}, {2, 5}, std::nullopt, std::nullopt},
  };
  const auto optional_py = [](std::optional<double> v) { return v ? std::to_string(*v) : std::string("None"); };
  for (DType dtype : {DType::Float64, DType::Float32})
    for (const Config& c : configs) {
      const Tensor input = randn(c.input, generator, dtype);
      const std::string expression = "torch.ops.aten.upsample_nearest2d(a, " + py(c.output_size) + ", " +
                                     optional_py(c.scales_h) + ", " + optional_py(c.scales_w) + ")";
      CAPTURE(expression);
      CHECK_TENSOR(upsample_nearest2d(input, c.output_size, c.scales_h, c.scales_w), torch_eval1(expression, {input}));
    }
  const Tensor strided = swap_last_dims(randn({1, 2, 4, 3}, generator, DType::Float64));
  CHECK_TENSOR(upsample_nearest2d(strided, {5, 7}), torch_eval1("F.interpolate(a, size=(5, 7))", {strided}));
  // F.interpolate with a scale factor passes it on to upsample_nearest2d.
  const Tensor input = randn({1, 1, 3, 3}, generator, DType::Float64);
  CHECK_TENSOR(upsample_nearest2d(input, {5, 4}, 1.7, 1.4),
               torch_eval1("F.interpolate(a, scale_factor=(1.7, 1.4), mode='nearest')", {input}));

  CHECK_THROWS_WITH_AS(upsample_nearest2d(small, {5}),
                       "upsample_nearest2d: expected output_size to have 2 elements, but got [5]", Error);
  CHECK_THROWS_WITH_AS(upsample_nearest2d(ones({2, 3, 3}), {2, 5}),
                       "upsample_nearest2d: expected a 4-d input [N,C,H,W], but got input of size [2,3,3]", Error);
  CHECK_THROWS_WITH_AS(upsample_nearest2d(small, {0, 5}),
                       "upsample_nearest2d: input and output sizes should be greater than 0, but got input of size "
                       "[1,1,2,2] and output_size [0,5]",
                       Error);
  CHECK_THROWS_WITH_AS(upsample_nearest2d(ones({1, 2, 0, 3}), {2, 5}),
                       doctest::Contains("but got input of size [1,2,0,3] and output_size [2,5]"), Error);
  CHECK_THROWS_WITH_AS(upsample_nearest2d(ones({1, 0, 3, 3}), {2, 5}),
                       "upsample_nearest2d: expected a non-empty 4-d input, but got input of size [1,0,3,3]", Error);
  CHECK_THROWS_WITH_AS(upsample_nearest2d(ones({1, 1, 3, 3}, DType::Int64), {2, 5}),
                       "upsample_nearest2d: not implemented for int64 tensors (float32 and float64 are)", Error);

  SUBCASE("scales far below 1, sizes far above") {
    // 1 / 1e-300 overflows float32: ATen would convert an infinite source index to int64.
    CHECK_THROWS_WITH_AS(upsample_nearest2d(small, {3, 3}, 1e-300, 1.0),
                         "upsample_nearest2d: scales_h=1e-300 is too small: 1/scales_h overflows float32", Error);
    // 1 / 1e-38 fits, but dst * 1e38 is past the last source index and
    // beyond int64: every dst but 0 reads the last row and column.
    CHECK_TENSOR(upsample_nearest2d(small, {3, 3}, 1e-38, 1e-38),
                 tensor({{{{1.0, 2.0, 2.0}, {3.0, 4.0, 4.0}, {3.0, 4.0, 4.0}}}}));
    // An empty batch allows any output size: no table of 2^40 source indices for it.
    CHECK(upsample_nearest2d(empty({0, 1, 2, 2}), {std::int64_t{1} << 40, 1}).sizes() ==
          Shape{0, 1, std::int64_t{1} << 40, 1});
  }
}

TEST_CASE("upsample_bilinear2d") {
  Generator generator(32);
  const Tensor small = tensor({{{{1.0, 2.0}, {3.0, 4.0}}}}, DType::Float64);
  // align_corners: the corners stay, the middle is the mean.
  CHECK_TENSOR(upsample_bilinear2d(small, {3, 3}, true),
               tensor({{{{1.0, 1.5, 2.0}, {2.0, 2.5, 3.0}, {3.0, 3.5, 4.0}}}}, DType::Float64));
  // Half-pixel centres: dst 0..3 read (dst + 0.5) / 2 - 0.5 = 0 (clamped), 0.25, 0.75, 1.25 (clamped to 1).
  CHECK_TENSOR(upsample_bilinear2d(small, {1, 4}, false),
               tensor({{{{2.0, 2.25, 2.75, 3.0}}}}, DType::Float64));

  struct Config {
    Shape input;
    IntList output_size;
    bool align_corners;
    std::optional<double> scales_h, scales_w;
  };
  const std::vector<Config> configs = {
      {{2, 3, 4, 3}, {5, 7}, false, std::nullopt, std::nullopt},
      {{2, 3, 4, 3}, {5, 7}, true, std::nullopt, std::nullopt},
      {{1, 2, 6, 7}, {3, 2}, false, std::nullopt, std::nullopt},
      {{1, 2, 6, 7}, {1, 1}, true, std::nullopt, std::nullopt},
      {{1, 2, 3, 3}, {5, 6}, false, 1.7, 2.3},
      {{1, 2, 3, 3}, {5, 6}, true, 1.7, 2.3},  // align_corners ignores the scales
      {{1, 1, 4, 4}, {4, 9}, false, 1.1, 2.3},  // same height: a copy whatever the scale
      {{0, 2, 1, 3}, {5, 5}, true, 2.0, 2.0},
  };
  const auto optional_py = [](std::optional<double> v) { return v ? std::to_string(*v) : std::string("None"); };
  for (DType dtype : {DType::Float64, DType::Float32})
    for (const Config& c : configs) {
      const Tensor input = randn(c.input, generator, dtype);
      const std::string expression = "torch.ops.aten.upsample_bilinear2d(a, " + py(c.output_size) + ", " +
                                     (c.align_corners ? "True" : "False") + ", " + optional_py(c.scales_h) + ", " +
                                     optional_py(c.scales_w) + ")";
      CAPTURE(expression);
      CHECK_TENSOR(upsample_bilinear2d(input, c.output_size, c.align_corners, c.scales_h, c.scales_w),
                   torch_eval1(expression, {input}), rtol_of(dtype), atol_of(dtype));
    }
  const Tensor strided = swap_last_dims(randn({1, 2, 4, 3}, generator, DType::Float64));
  CHECK_TENSOR(upsample_bilinear2d(strided, {5, 7}, false),
               torch_eval1("F.interpolate(a, size=(5, 7), mode='bilinear', align_corners=False)", {strided}));
  const Tensor input = randn({1, 1, 3, 4}, generator, DType::Float32);
  CHECK_TENSOR(upsample_bilinear2d(input, {6, 5}, false, 2.0, 1.4),
               torch_eval1("F.interpolate(a, scale_factor=(2.0, 1.4), mode='bilinear')", {input}), 1e-5, 1e-5);

  CHECK_THROWS_WITH_AS(upsample_bilinear2d(small, {5, 5, 5}, false),
                       "upsample_bilinear2d: expected output_size to have 2 elements, but got [5,5,5]", Error);
  CHECK_THROWS_WITH_AS(upsample_bilinear2d(ones({3, 3}), {5, 5}, true),
                       "upsample_bilinear2d: expected a 4-d input [N,C,H,W], but got input of size [3,3]", Error);
  CHECK_THROWS_WITH_AS(upsample_bilinear2d(small, {0, 5}, true),
                       doctest::Contains("upsample_bilinear2d: input and output sizes should be greater than 0"),
                       Error);
  CHECK_THROWS_WITH_AS(upsample_bilinear2d(ones({1, 0, 3, 3}), {2, 5}, false),
                       "upsample_bilinear2d: expected a non-empty 4-d input, but got input of size [1,0,3,3]", Error);
  CHECK_THROWS_WITH_AS(upsample_bilinear2d(ones({1, 1, 3, 3}, DType::Bool), {2, 5}, false),
                       "upsample_bilinear2d: not implemented for bool tensors (float32 and float64 are)", Error);

  SUBCASE("scales far below 1, sizes far above") {
    CHECK_THROWS_WITH_AS(upsample_bilinear2d(small.to(DType::Float32), {3, 3}, false, 1e-300, 1.0),
                         "upsample_bilinear2d: scales_h=1e-300 is too small: 1/scales_h overflows float32", Error);
    // In float64 1 / 1e-300 fits, but the source index (dst + 0.5) * 1e300 is
    // far past the last one: every output reads the last input pixel.
    CHECK_TENSOR(upsample_bilinear2d(small, {3, 3}, false, 1e-300, 1e-300), full({1, 1, 3, 3}, 4.0, DType::Float64));
    CHECK(upsample_bilinear2d(empty({0, 1, 2, 2}), {std::int64_t{1} << 40, 1}, false).sizes() ==
          Shape{0, 1, std::int64_t{1} << 40, 1});
  }
}

TEST_CASE("convolution 3-d") {
  Generator gen(31);
  SUBCASE("against torch: strides, padding, dilation, groups, bias, transposed with output_padding") {
    const Tensor x = randn({2, 4, 5, 6, 4}, gen, DType::Float64);
    const Tensor w = randn({6, 2, 3, 2, 2}, gen, DType::Float64);
    const Tensor b = randn({6}, gen, DType::Float64);
    CHECK_TENSOR(conv3d(x, w, b, {1, 2, 1}, {1, 0, 1}, {1, 1, 2}, 2),
                 torch_eval1("F.conv3d(a, b, c, stride=(1, 2, 1), padding=(1, 0, 1), dilation=(1, 1, 2), groups=2)",
                             {x, w, b}),
                 1e-12, 1e-12);
    const Tensor wt = randn({4, 3, 2, 3, 2}, gen, DType::Float64);
    CHECK_TENSOR(conv_transpose3d(x, wt, std::nullopt, {2, 1, 2}, {0, 1, 1}, {1, 0, 1}, 1, {1, 1, 1}),
                 torch_eval1("F.conv_transpose3d(a, b, stride=(2, 1, 2), padding=(0, 1, 1), output_padding=(1, 0, 1))",
                             {x, wt}),
                 1e-12, 1e-12);
    const Tensor unbatched = randn({4, 3, 3, 3}, gen, DType::Float64);
    CHECK_TENSOR(conv3d(unbatched, w, std::nullopt, {1}, {1}, {1}, 2),
                 torch_eval1("F.conv3d(a, b, padding=1, groups=2)", {unbatched, w}), 1e-12, 1e-12);
    const Tensor x16 = x.to(DType::Float16), w16 = w.to(DType::Float16);
    CHECK_TENSOR(conv3d(x16, w16, std::nullopt, {1}, {0}, {1}, 2),
                 torch_eval1("F.conv3d(a, b, groups=2)", {x16, w16}), 1e-2, 1e-2);
  }
}

TEST_CASE("convolution_backward_weight") {
  Generator generator(41);

  // grad_weight[o][ci][i][j] = sum_{n,y,x} grad[n][o][y][x] * input[n][g*C/g + ci][y*s - p + i*d][x*s - p + j*d]
  // (transposed: input and grad trade places), in int64: exact.
  struct Geometry {
    std::int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
  };
  const auto naive_2d = [](const Tensor& left, const Tensor& image, const Shape& weight_sizes, const Geometry& p) {
    const std::vector<std::int64_t> l = left.to_vector<std::int64_t>(), im = image.to_vector<std::int64_t>();
    const std::int64_t N = left.size(0), L = left.size(1), LH = left.size(2), LW = left.size(3);
    const std::int64_t I = image.size(1), IH = image.size(2), IW = image.size(3);
    const std::int64_t rows = weight_sizes[0], cols = weight_sizes[1], KH = weight_sizes[2], KW = weight_sizes[3];
    const std::int64_t rows_per_group = L / p.groups;
    std::vector<std::int64_t> out(static_cast<std::size_t>(numel_of(weight_sizes)), 0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        for (std::int64_t i = 0; i < KH; ++i)
          for (std::int64_t j = 0; j < KW; ++j) {
            const std::int64_t ic = r / rows_per_group * cols + c;  // the image channel of this tap
            std::int64_t total = 0;
            for (std::int64_t n = 0; n < N; ++n)
              for (std::int64_t y = 0; y < LH; ++y)
                for (std::int64_t x = 0; x < LW; ++x) {
                  const std::int64_t h = y * p.stride_h - p.pad_h + i * p.dil_h, w = x * p.stride_w - p.pad_w + j * p.dil_w;
                  if (h < 0 || h >= IH || w < 0 || w >= IW) continue;
                  total += l[((n * L + r) * LH + y) * LW + x] * im[((n * I + ic) * IH + h) * IW + w];
                }
            out[((r * cols + c) * KH + i) * KW + j] = total;
          }
    return from_vector(out, weight_sizes);
  };

  SUBCASE("int64 against a direct loop: groups, stride, padding, dilation; transposed") {
    const Geometry p{2, 1, 1, 2, 2, 1, 2};
    const Tensor input = random_ints({3, 4, 7, 6}, generator);
    const Shape weight_sizes = {6, 2, 3, 2};
    const Tensor grad = random_ints(convolution(input, zeros(weight_sizes, DType::Int64), std::nullopt, {2, 1}, {1, 2},
                                                {2, 1}, false, {0, 0}, 2).sizes(),
                                    generator);
    CHECK_TENSOR(convolution_backward_weight(grad, input, weight_sizes, {2, 1}, {1, 2}, {2, 1}, false, 2),
                 naive_2d(grad, input, weight_sizes, p));
    // Transposed: weight [C_in, C_out/groups, kH, kW]; the window is on its output, whose grad it reads.
    const Shape weight_t = {4, 3, 3, 2};
    const Tensor grad_t = random_ints(convolution(input, zeros(weight_t, DType::Int64), std::nullopt, {2, 1}, {1, 2},
                                                  {2, 1}, true, {1, 0}, 2).sizes(),
                                      generator);
    CHECK_TENSOR(convolution_backward_weight(grad_t, input, weight_t, {2, 1}, {1, 2}, {2, 1}, true, 2),
                 naive_2d(input, grad_t, weight_t, p));
  }

  struct Config {
    Shape input, weight;
    IntList stride, padding, dilation, output_padding;
    std::int64_t groups;
    bool transposed;
  };
  const std::vector<Config> configs = {
      {{2, 3, 5, 6}, {4, 3, 3, 2}, {1, 1}, {0, 0}, {1, 1}, {0, 0}, 1, false},
      {{3, 4, 7, 7}, {6, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, 2, false},
      {{2, 4, 9, 8}, {4, 1, 3, 2}, {2, 1}, {2, 1}, {2, 3}, {0, 0}, 4, false},  // depthwise, dilated
      {{1, 2, 3, 4}, {2, 2, 2, 2}, {2, 1}, {3, 2}, {1, 2}, {0, 0}, 1, false},  // padding > kernel
      {{2, 4, 3, 4}, {4, 3, 3, 2}, {1, 1}, {0, 0}, {1, 1}, {0, 0}, 1, true},
      {{2, 4, 3, 3}, {4, 2, 3, 3}, {2, 3}, {1, 0}, {1, 1}, {1, 2}, 2, true},   // output_padding
      {{2, 6, 4, 3}, {6, 1, 2, 3}, {2, 2}, {1, 2}, {2, 2}, {1, 0}, 3, true},
      {{2, 3, 10}, {4, 3, 3}, {2}, {1}, {2}, {0}, 1, false},                   // 1-d
      {{2, 4, 5}, {4, 3, 3}, {2}, {1}, {1}, {1}, 2, true},
      {{2, 4, 5, 6, 4}, {6, 2, 3, 2, 2}, {1, 2, 1}, {1, 0, 1}, {1, 1, 2}, {0, 0, 0}, 2, false},  // 3-d
      {{2, 4, 3, 4, 3}, {4, 3, 2, 3, 2}, {2, 1, 2}, {0, 1, 1}, {1, 1, 1}, {1, 0, 1}, 1, true},
  };
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (const Config& c : configs) {
      const Tensor input = randn(c.input, generator, dtype), weight = randn(c.weight, generator, dtype);
      const Tensor grad = randn(convolution(input, weight, std::nullopt, c.stride, c.padding, c.dilation, c.transposed,
                                            c.output_padding, c.groups).sizes(),
                                generator, dtype);
      const std::string expression = "torch.ops.aten.convolution_backward(a, b, c, None, " + py(c.stride) + ", " +
                                     py(c.padding) + ", " + py(c.dilation) + ", " + (c.transposed ? "True" : "False") +
                                     ", " + py(c.output_padding) + ", " + std::to_string(c.groups) +
                                     ", [False, True, False])[1]";
      CAPTURE(expression);
      const Tensor actual = convolution_backward_weight(grad, input, c.weight, c.stride, c.padding, c.dilation,
                                                        c.transposed, c.groups);
      CHECK_TENSOR(actual, torch_eval1(expression, {grad, input, weight}), rtol_of(dtype),
                   dtype == DType::Float64 ? 1e-12 : 1e-4);
    }
  }

  SUBCASE("non-contiguous grad and input; float16 in float32; empty batch") {
    const Tensor input = swap_last_dims(randn({2, 3, 6, 5}, generator, DType::Float64));
    const Tensor weight = randn({2, 3, 2, 3}, generator, DType::Float64);
    const Tensor grad = swap_last_dims(randn({2, 2, 3, 6}, generator, DType::Float64));  // [2, 2, 6, 3]
    const std::string expression =
        "torch.ops.aten.convolution_backward(a, b, c, None, [1, 2], [1, 1], [1, 1], False, [0, 0], 1, "
        "[False, True, False])[1]";
    CHECK_TENSOR(convolution_backward_weight(grad, input, weight.sizes(), {1, 2}, {1, 1}, {1, 1}, false, 1),
                 torch_eval1(expression, {grad, input, weight}), 1e-12, 1e-12);
    const Tensor grad16 = grad.to(DType::Float16), input16 = input.to(DType::Float16);
    const Tensor actual16 = convolution_backward_weight(grad16, input16, weight.sizes(), {1, 2}, {1, 1}, {1, 1}, false, 1);
    CHECK(actual16.dtype() == DType::Float16);
    // torch's float32 product of the same float16 values, rounded once.
    CHECK_TENSOR(actual16,
                 torch_eval1("torch.ops.aten.convolution_backward(a.float(), b.float(), c.float(), None, [1, 2], [1, 1], "
                             "[1, 1], False, [0, 0], 1, [False, True, False])[1].half()",
                             {grad16, input16, weight}),
                 2e-3, 2e-3);
    CHECK_TENSOR(convolution_backward_weight(zeros({0, 2, 6, 3}), zeros({0, 3, 5, 6}), {2, 3, 2, 3}, {1, 2}, {1, 1},
                                             {1, 1}, false, 1),
                 zeros({2, 3, 2, 3}));
  }

  SUBCASE("errors") {
    const Tensor input = ones({1, 2, 4, 4}), grad = ones({1, 3, 3, 3});
    const Shape weight = {3, 2, 2, 2};
    const auto backward = [](const Tensor& g, const Tensor& x, const Shape& w, const IntList& stride, bool transposed,
                             std::int64_t groups) {
      return convolution_backward_weight(g, x, w, stride, {0}, {1}, transposed, groups);
    };
    CHECK_THROWS_WITH_AS(backward(ones({1, 3, 2, 2}), input, weight, {1}, false, 1),
                         "convolution_backward_weight: grad_output [1,3,2,2] is not the output of the convolution of "
                         "input [1,2,4,4] with a weight of shape [3,2,2,2], stride=[1,1], padding=[0,0], "
                         "dilation=[1,1], groups=1",
                         Error);
    CHECK_THROWS_WITH_AS(backward(ones({1, 3, 3, 3}), input, {3, 1, 2, 2}, {1}, false, 1),
                         doctest::Contains("is not the output of the convolution of input [1,2,4,4] with a weight "
                                           "of shape [3,1,2,2]"),
                         Error);
    // A transposed convolution's output may be longer than its natural size by less than the stride.
    CHECK(backward(ones({1, 2, 6, 6}), ones({1, 3, 3, 3}), {3, 2, 2, 2}, {2}, true, 1).sizes() == Shape{3, 2, 2, 2});
    CHECK_THROWS_WITH_AS(backward(ones({1, 2, 8, 6}), ones({1, 3, 3, 3}), {3, 2, 2, 2}, {2}, true, 1),
                         doctest::Contains("is not the output of the transposed convolution of input [1,3,3,3]"),
                         Error);
    CHECK_THROWS_WITH_AS(backward(grad.to(DType::Float64), input, weight, {1}, false, 1),
                         "convolution_backward_weight: grad_output (float64) and input (float32) must have the same "
                         "dtype",
                         Error);
    CHECK_THROWS_WITH_AS(backward(grad.to(DType::Bool), input.to(DType::Bool), weight, {1}, false, 1),
                         "convolution_backward_weight: not implemented for bool tensors (float32, float64 and int64 "
                         "are)",
                         Error);
    CHECK_THROWS_WITH_AS(backward(grad, input, {3, 2}, {1}, false, 1),
                         "convolution_backward_weight: only 1-d, 2-d and 3-d convolutions are implemented, got weight "
                         "of shape [3,2]",
                         Error);
    CHECK_THROWS_WITH_AS(backward(grad, ones({1, 2, 4}), weight, {1}, false, 1),
                         "convolution_backward_weight: input [1,2,4] and grad_output [1,3,3,3] must have as many dims "
                         "as the weight [3,2,2,2]",
                         Error);
    CHECK_THROWS_WITH_AS(backward(grad, input, weight, {1}, false, 2),
                         "convolution_backward_weight: weight of shape [3,2,2,2] does not split into groups=2 along "
                         "dim 0",
                         Error);
    CHECK_THROWS_WITH_AS(backward(grad, input, weight, {0, 1}, false, 1),
                         "convolution_backward_weight: expected positive stride, dilation and kernel size and "
                         "non-negative padding, got stride=[0,1], padding=[0,0], dilation=[1,1] and weight of shape "
                         "[3,2,2,2]",
                         Error);
    CHECK_THROWS_WITH_AS(backward(grad, input, weight, {1, 1, 1}, false, 1),
                         doctest::Contains("expected stride to be a single integer value or a list of 2 values"),
                         Error);
    CHECK_THROWS_WITH_AS(backward(Tensor(), input, weight, {1}, false, 1),
                         "convolution_backward_weight: grad_output and input must be defined", Error);
  }
}

TEST_CASE("native_batch_norm_backward") {
  Generator generator(42);
  using Grads3 = std::tuple<Tensor, Tensor, Tensor>;
  const auto check_against = [](const Grads3& actual, const std::vector<Tensor>& expected, const std::array<bool, 3>& mask,
                                double rtol, double atol) {
    const Tensor outputs[3] = {std::get<0>(actual), std::get<1>(actual), std::get<2>(actual)};
    for (std::size_t k = 0; k < 3; ++k) {
      CAPTURE(k);
      REQUIRE(outputs[k].defined() == mask[k]);
      if (mask[k]) CHECK_TENSOR(outputs[k], expected[k], rtol, atol);
    }
  };

  SUBCASE("training, against torch: with and without weight, 2-d to 5-d inputs, output_mask") {
    struct Config {
      Shape input;
      bool with_weight;
      std::array<bool, 3> mask;
    };
    const std::vector<Config> configs = {
        {{4, 3, 5, 6}, true, {true, true, true}},
        {{6, 4}, false, {true, false, true}},  // one element per plane
        {{3, 2, 7}, true, {false, true, false}},
        {{2, 3, 2, 3, 4}, true, {true, true, true}},
        {{1, 2, 9, 9}, true, {true, false, false}},  // planes longer than eight lanes, with a tail
    };
    for (DType dtype : {DType::Float64, DType::Float32}) {
      for (const Config& c : configs) {
        CAPTURE(shape_text(c.input));
        const std::int64_t channels = c.input[1];
        // Shifted and scaled, so that the mean and invstd matter.
        const Tensor input = add(mul(randn(c.input, generator, dtype), Scalar(3.0)), Scalar(1.5));
        const Tensor grad = randn(c.input, generator, dtype);
        const Tensor weight = randn({channels}, generator, dtype);
        const std::vector<Tensor> forward =
            torch_eval("torch.ops.aten.native_batch_norm(a, None, None, None, None, True, 0.1, 1e-5)", {input});
        const Tensor &save_mean = forward[1], &save_invstd = forward[2];
        const OptionalTensor w = c.with_weight ? OptionalTensor(weight) : std::nullopt;
        // (torch is asked for all three: the masked ones are compared)
        const std::string expression = std::string("torch.ops.aten.native_batch_norm_backward(a, b, ") +
                                       (c.with_weight ? "e" : "None") +
                                       ", None, None, c, d, True, 1e-5, [True, True, True])";
        check_against(native_batch_norm_backward(grad, input, w, std::nullopt, std::nullopt, save_mean, save_invstd,
                                                 true, 1e-5, c.mask),
                      torch_eval(expression, {grad, input, save_mean, save_invstd, weight}), c.mask, rtol_of(dtype),
                      dtype == DType::Float64 ? 1e-12 : 1e-5);
      }
    }
  }

  SUBCASE("eval, against torch: the running statistics, invstd in double; non-contiguous input") {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      const Tensor input = swap_last_dims(randn({3, 4, 6, 5}, generator, dtype));
      const Tensor grad = randn({3, 4, 5, 6}, generator, dtype);
      const Tensor weight = randn({4}, generator, dtype), running_mean = randn({4}, generator, dtype);
      const Tensor running_var = add(abs(randn({4}, generator, dtype)), Scalar(0.1));
      const std::array<bool, 3> all = {true, true, true};
      check_against(native_batch_norm_backward(grad, input, weight, running_mean, running_var, std::nullopt,
                                               std::nullopt, false, 1e-3, all),
                    torch_eval("torch.ops.aten.native_batch_norm_backward(a, b, c, d, e, None, None, False, 1e-3, "
                               "[True, True, True])",
                               {grad, input, weight, running_mean, running_var}),
                    all, rtol_of(dtype), dtype == DType::Float64 ? 1e-12 : 1e-5);
    }
  }

  SUBCASE("hand-worked: one channel of x = [1, 3], g = [1, 0], no weight") {
    // mean 2, invstd 1 (as given), x_hat = [-1, 1]: grad_bias = 1, grad_weight = sum(g * x_hat) = -1,
    // grad_input = g - mean(g) - x_hat * mean(g * x_hat) = [1 - 0.5 - 0.5, 0 - 0.5 + 0.5] = [0, 0].
    const Tensor x = tensor({{1.0}, {3.0}}, DType::Float64), g = tensor({{1.0}, {0.0}}, DType::Float64);
    const auto [grad_input, grad_weight, grad_bias] =
        native_batch_norm_backward(g, x, std::nullopt, std::nullopt, std::nullopt, tensor({2.0}, DType::Float64),
                                   tensor({1.0}, DType::Float64), true, 1e-5, {true, true, true});
    CHECK_TENSOR(grad_input, tensor({{0.0}, {0.0}}, DType::Float64));
    CHECK_TENSOR(grad_weight, tensor({-1.0}, DType::Float64));
    CHECK_TENSOR(grad_bias, tensor({1.0}, DType::Float64));
    // eval: g * invstd * weight, invstd = 1 / sqrt(3 + 1) = 0.5.
    const auto eval = native_batch_norm_backward(g, x, tensor({4.0}, DType::Float64), tensor({2.0}, DType::Float64),
                                                 tensor({3.0}, DType::Float64), std::nullopt, std::nullopt, false, 1.0,
                                                 {true, true, true});
    CHECK_TENSOR(std::get<0>(eval), tensor({{2.0}, {0.0}}, DType::Float64));
    CHECK_TENSOR(std::get<1>(eval), tensor({-0.5}, DType::Float64));  // sum((x - 2) * g) * 0.5
  }

  SUBCASE("float16 and bfloat16 in float32, rounded once; an empty batch") {
    for (DType dtype : {DType::Float16, DType::BFloat16}) {
      const Tensor input = randn({4, 3, 5, 5}, generator, DType::Float32).to(dtype);
      const Tensor grad = randn({4, 3, 5, 5}, generator, DType::Float32).to(dtype);
      const Tensor weight = randn({3}, generator, DType::Float32);  // mixed: float32 parameters
      const std::vector<Tensor> forward = torch_eval(
          "torch.ops.aten.native_batch_norm(a.float(), None, None, None, None, True, 0.1, 1e-5)", {input});
      const auto actual = native_batch_norm_backward(grad, input, weight, std::nullopt, std::nullopt, forward[1],
                                                     forward[2], true, 1e-5, {true, true, true});
      CHECK(std::get<0>(actual).dtype() == dtype);
      CHECK(std::get<1>(actual).dtype() == DType::Float32);
      const std::vector<Tensor> expected =
          torch_eval("[t.to(o) for t, o in zip(torch.ops.aten.native_batch_norm_backward(a.float(), b.float(), e, "
                     "None, None, c, d, True, 1e-5, [True, True, True]), [a.dtype, e.dtype, e.dtype])]",
                     {grad, input, forward[1], forward[2], weight});
      const double tolerance = dtype == DType::Float16 ? 2e-3 : 1e-2;
      check_against(actual, expected, {true, true, true}, tolerance, tolerance);
    }
    const auto empty_batch = native_batch_norm_backward(zeros({0, 2, 3}), zeros({0, 2, 3}), std::nullopt, std::nullopt,
                                                        std::nullopt, zeros({2}), ones({2}), true, 1e-5,
                                                        {true, true, true});
    CHECK(std::get<0>(empty_batch).sizes() == Shape{0, 2, 3});
    CHECK_TENSOR(std::get<1>(empty_batch), zeros({2}));
    CHECK_TENSOR(std::get<2>(empty_batch), zeros({2}));
  }

  SUBCASE("errors") {
    const Tensor x = ones({2, 3, 4}), stat = ones({3});
    const std::array<bool, 3> all = {true, true, true};
    CHECK_THROWS_WITH_AS(native_batch_norm_backward(ones({2, 3, 5}), x, std::nullopt, std::nullopt, std::nullopt, stat,
                                                    stat, true, 1e-5, all),
                         "native_batch_norm_backward: grad_out [2,3,5] does not have the shape of input [2,3,4]", Error);
    CHECK_THROWS_WITH_AS(native_batch_norm_backward(ones({3}), ones({3}), std::nullopt, std::nullopt, std::nullopt,
                                                    stat, stat, true, 1e-5, all),
                         "native_batch_norm_backward: expected input with a channel dim (at least 2 dims), got input "
                         "of shape [3]",
                         Error);
    CHECK_THROWS_WITH_AS(native_batch_norm_backward(x, x, std::nullopt, std::nullopt, std::nullopt, std::nullopt, stat,
                                                    true, 1e-5, all),
                         "native_batch_norm_backward: save_mean must be defined in training", Error);
    CHECK_THROWS_WITH_AS(native_batch_norm_backward(x, x, std::nullopt, stat, std::nullopt, std::nullopt, std::nullopt,
                                                    false, 1e-5, all),
                         "native_batch_norm_backward: running_var must be defined in eval mode", Error);
    CHECK_THROWS_WITH_AS(native_batch_norm_backward(x, x, ones({4}), std::nullopt, std::nullopt, stat, stat, true, 1e-5,
                                                    all),
                         "native_batch_norm_backward: weight of shape [4] does not have the 3 channels of input [2,3,4]",
                         Error);
    CHECK_THROWS_WITH_AS(native_batch_norm_backward(x.to(DType::Float64), x, std::nullopt, std::nullopt, std::nullopt,
                                                    stat, stat, true, 1e-5, all),
                         "native_batch_norm_backward: grad_out (float64) and input (float32) must have the same dtype",
                         Error);
    CHECK_THROWS_WITH_AS(native_batch_norm_backward(x.to(DType::Int64), x.to(DType::Int64), std::nullopt, std::nullopt,
                                                    std::nullopt, stat, stat, true, 1e-5, all),
                         "native_batch_norm_backward: expected a floating point tensor, got int64", Error);
  }
}

TEST_CASE("max_pool_backward") {
  Generator generator(43);

  SUBCASE("hand-worked: overlapping windows add up, -1 is skipped") {
    const Tensor grad = tensor({{{{1.0, 2.0}, {3.0, 4.0}}}}, DType::Float64);
    const Tensor indices = tensor({{{{0, 4}, {4, -1}}}});
    CHECK_TENSOR(max_pool_backward(grad, indices, {1, 1, 3, 3}, 2),
                 tensor({{{{1.0, 0.0, 0.0}, {0.0, 5.0, 0.0}, {0.0, 0.0, 0.0}}}}, DType::Float64));
  }

  SUBCASE("against torch: max_pool2d and max_pool3d backward, overlapping windows, unbatched, float16") {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      const Tensor input = randn({2, 3, 7, 6}, generator, dtype);
      const std::vector<Tensor> pooled =
          torch_eval("torch.ops.aten.max_pool2d_with_indices(a, [3, 3], [2, 1], [1, 1], [1, 1], True)", {input});
      const Tensor grad = randn(pooled[0].sizes(), generator, dtype);
      CHECK_TENSOR(max_pool_backward(grad, pooled[1], input.sizes(), 2),
                   torch_eval1("torch.ops.aten.max_pool2d_with_indices_backward(a, b, [3, 3], [2, 1], [1, 1], [1, 1], "
                               "True, c)",
                               {grad, input, pooled[1]}),
                   0, 0);
      const Tensor volume = randn({3, 5, 6, 4}, generator, dtype);  // unbatched [C, D, H, W]
      const std::vector<Tensor> pooled3 =
          torch_eval("torch.ops.aten.max_pool3d_with_indices(a, [2, 3, 2], [1, 2, 1], [1, 1, 0], [1, 1, 2], False)",
                     {volume});
      const Tensor grad3 = randn(pooled3[0].sizes(), generator, dtype);
      CHECK_TENSOR(max_pool_backward(grad3, pooled3[1], volume.sizes(), 3),
                   torch_eval1("torch.ops.aten.max_pool3d_with_indices_backward(a, b, [2, 3, 2], [1, 2, 1], [1, 1, 0], "
                               "[1, 1, 2], False, c)",
                               {grad3, volume, pooled3[1]}),
                   0, 0);
    }
    // float16 grads summed in float32, rounded once (torch's float32 sums of the same values, rounded).
    const Tensor input = randn({2, 2, 6, 6}, generator, DType::Float32);
    const std::vector<Tensor> pooled = torch_eval("F.max_pool2d(a, 3, 1, 1, return_indices=True)", {input});
    const Tensor grad16 = randn(pooled[0].sizes(), generator, DType::Float32).to(DType::Float16);
    CHECK_TENSOR(max_pool_backward(grad16, pooled[1], input.sizes(), 2),
                 torch_eval1("torch.ops.aten.max_pool2d_with_indices_backward(a.float(), b, [3, 3], [1, 1], [1, 1], "
                             "[1, 1], False, c).half()",
                             {grad16, input, pooled[1]}),
                 0, 0);
  }

  SUBCASE("1-d against a direct loop; non-contiguous grad; no planes") {
    const Tensor grad = swap_last_dims(randn({2, 5, 3}, generator, DType::Float64));  // [2, 3, 5]
    std::vector<std::int64_t> index_values(30);
    for (std::size_t k = 0; k < index_values.size(); ++k) index_values[k] = static_cast<std::int64_t>((k * 7) % 4);
    const Tensor indices = from_vector(index_values, {2, 3, 5});
    const std::vector<double> g = grad.contiguous().to_vector<double>();
    std::vector<double> expected(2 * 3 * 4, 0.0);
    for (std::size_t k = 0; k < 30; ++k) expected[k / 5 * 4 + static_cast<std::size_t>(index_values[k])] += g[k];
    CHECK_TENSOR(max_pool_backward(grad, indices, {2, 3, 4}, 1), from_vector(expected, {2, 3, 4}), 1e-15, 1e-15);
    CHECK(max_pool_backward(zeros({0, 3, 2}), zeros({0, 3, 2}, DType::Int64), {0, 3, 4}, 1).sizes() == Shape{0, 3, 4});
  }

  SUBCASE("errors") {
    const Tensor grad = ones({1, 2, 2});
    CHECK_THROWS_WITH_AS(max_pool_backward(grad, tensor({{{0, 1}, {9, 2}}}), {1, 3, 3}, 2),
                         "max_pool_backward: index 9 in indices is out of range for self's plane [3,3] of 9 elements",
                         Error);
    CHECK_THROWS_WITH_AS(max_pool_backward(grad, tensor({{{0, -2}, {1, 2}}}), {1, 3, 3}, 2),
                         doctest::Contains("index -2 in indices is out of range"), Error);
    CHECK_THROWS_WITH_AS(max_pool_backward(grad, ones({1, 2, 2}), {1, 3, 3}, 2),
                         "max_pool_backward: indices must be int64, got float32", Error);
    CHECK_THROWS_WITH_AS(max_pool_backward(grad, zeros({1, 2, 3}, DType::Int64), {1, 3, 3}, 2),
                         "max_pool_backward: indices [1,2,3] do not have the shape of grad_output [1,2,2]", Error);
    CHECK_THROWS_WITH_AS(max_pool_backward(grad, zeros({1, 2, 2}, DType::Int64), {2, 3, 3}, 2),
                         "max_pool_backward: grad_output [1,2,2] does not have the leading dims of self [2,3,3] "
                         "(2 spatial dims)",
                         Error);
    CHECK_THROWS_WITH_AS(max_pool_backward(grad, zeros({1, 2, 2}, DType::Int64), {1, 3, 3}, 4),
                         "max_pool_backward: self of shape [1,3,3] has no 4 spatial dims", Error);
    CHECK_THROWS_WITH_AS(max_pool_backward(grad.to(DType::Int64), zeros({1, 2, 2}, DType::Int64), {1, 3, 3}, 2),
                         "max_pool_backward: expected a floating point tensor, got int64", Error);
  }
}

}  // TEST_SUITE
