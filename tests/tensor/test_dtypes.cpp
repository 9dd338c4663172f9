// Storage formats: float16, bfloat16, complex64/128 and the integer types.
//
// - float16 and bfloat16 conversions against hand-worked bit patterns and,
//   for every one of the 65536 patterns, against the round trip through float;
// - casts between every pair of dtypes against torch's `.to(dtype)`, bit for bit;
// - ops on float16 and bfloat16 computed in float32 and rounded once, as
//   ATen's CPU kernels do: against torch's own float16/bfloat16 results, bit
//   for bit where both compute the same float32 value (exact arithmetic,
//   selections, copies), within one unit in the last place where the float32
//   value itself may differ (transcendentals, sums and products in another order);
// - int32 indices, the narrower integers computed in int64 and wrapped, repr.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;
using refgrad::testing::torch_run;
using refgrad::testing::torch_text;

namespace {

std::string torch_dtype(DType dtype) { return "torch." + dtype_name(dtype); }

// The elements of a float16 or bfloat16 tensor as their 16 bits.
std::vector<std::uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<std::uint16_t> out(static_cast<std::size_t>(c.numel()));
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size() * 2);
  return out;
}

// Distance in units of the last place between two float16/bfloat16 values of
// the same sign (their bit patterns are ordered like the values); NaN only matches NaN.
int ulps_apart(std::uint16_t a, std::uint16_t b, DType dtype) {
  const auto nan = [&](std::uint16_t x) {
    return dtype == DType::Float16 ? std::isnan(to_float(Half{x})) : std::isnan(to_float(BFloat16{x}));
  };
  if (nan(a) || nan(b)) return nan(a) && nan(b) ? 0 : 1 << 20;
  if (a == b) return 0;
  if ((a ^ b) & 0x8000) {  // opposite signs: only +0 and -0 are close
    return ((a | b) & 0x7fff) == 0 ? 0 : 1 << 20;
  }
  return std::abs(static_cast<int>(a & 0x7fff) - static_cast<int>(b & 0x7fff));
}

// The largest ulps_apart over the elements of two tensors of the same shape and dtype.
int max_ulps(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.dtype() == expected.dtype());
  REQUIRE(actual.sizes() == expected.sizes());
  const auto a = bits_of(actual), e = bits_of(expected);
  int worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, ulps_apart(a[i], e[i], actual.dtype()));
  return worst;
}

// A complex tensor's real and imaginary parts, as a real tensor with a last dim of 2 (view_as_real).
Tensor real_lanes(const Tensor& t) {
  const Tensor c = t.contiguous();
  Shape sizes = c.sizes();
  sizes.push_back(2);
  return Tensor(c.storage(), sizes, contiguous_strides(sizes), c.storage_offset() * 2, to_real_value_type(c.dtype()));
}

// Values in a low precision dtype: drawn in float64, then rounded by the cast.
Tensor draw(const Shape& sizes, DType dtype, std::uint64_t seed, double scale = 1.0) {
  Generator generator(seed);
  return mul(randn(sizes, generator, DType::Float64), scale).to(dtype);
}

// Special values for casts: zeros, ties, the float16 limits, NaN, infinities, out of range for every integer.
Tensor special_values() {
  return tensor({0.0, -0.0, 1.0, -1.5, 2.5, 3.7, 0.1, 1.0 / 3, 65504.0, 65519.0, 65520.0, 1e5, 6e-8, 3e-8, 1e-8,
                 5.960464477539063e-08, 2.9802322387695312e-08, 1.00048828125, 1.0009765625, 255.0, 256.0, 300.0,
                 -129.0, 32767.0, 40000.0, 2147483647.0, 3e9, 1e10, -1e10, 1e30, 1e300, -1e300,
                 std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                 std::numeric_limits<double>::quiet_NaN()},
                DType::Float64);
}

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("float16 and bfloat16 conversions") {
  SUBCASE("hand-worked bit patterns") {
    CHECK(to_half(1.0f).bits == 0x3c00);
    CHECK(to_half(-2.0f).bits == 0xc000);
    CHECK(to_half(65504.0f).bits == 0x7bff);    // the largest float16
    CHECK(to_half(65519.0f).bits == 0x7bff);    // below the tie with 65536
    CHECK(to_half(65520.0f).bits == 0x7c00);    // the tie rounds to even: inf
    CHECK(to_half(0x1p-24f).bits == 0x0001);    // the smallest subnormal
    CHECK(to_half(0x1p-25f).bits == 0x0000);    // half of it: a tie, to even (zero)
    CHECK(to_half(0x1.8p-25f).bits == 0x0001);  // above the tie
    CHECK(to_half(0x1p-14f).bits == 0x0400);    // the smallest normal
    CHECK(to_half(0.1f).bits == 0x2e66);
    CHECK(to_half(1.00048828125f).bits == 0x3c00);  // 1 + 2^-11: a tie, to even
    CHECK(to_half(1.00146484375f).bits == 0x3c02);  // 1 + 3 * 2^-11: a tie, to even (up)
    CHECK(to_half(-0.0f).bits == 0x8000);
    CHECK(to_half(std::numeric_limits<float>::infinity()).bits == 0x7c00);
    CHECK(to_half(std::numeric_limits<float>::quiet_NaN()).bits == 0x7e00);
    CHECK(to_float(Half{0x3555}) == 0x1.554p-2f);
    CHECK(to_float(Half{0x8001}) == -0x1p-24f);
    CHECK(to_bfloat16(1.0f).bits == 0x3f80);
    CHECK(to_bfloat16(0x1.01p0f).bits == 0x3f80);    // 1 + 2^-8: a tie, to even
    CHECK(to_bfloat16(0x1.03p0f).bits == 0x3f82);    // 1 + 3 * 2^-8: a tie, to even (up)
    CHECK(to_bfloat16(3.0e38f).bits == 0x7f62);
    CHECK(to_bfloat16(std::numeric_limits<float>::max()).bits == 0x7f80);  // rounds up to inf
    CHECK(to_bfloat16(std::numeric_limits<float>::quiet_NaN()).bits == 0x7fc0);
    CHECK(to_float(BFloat16{0xc040}) == -3.0f);
  }

  SUBCASE("every bit pattern survives the round trip through float") {
    for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
      const auto b = static_cast<std::uint16_t>(bits);
      CAPTURE(bits);
      const float h = to_float(Half{b});
      if (std::isnan(h)) CHECK(std::isnan(to_float(to_half(h))));
      else CHECK(to_half(h).bits == b);
      const float bf = to_float(BFloat16{b});
      if (std::isnan(bf)) CHECK(std::isnan(to_float(to_bfloat16(bf))));
      else CHECK(to_bfloat16(bf).bits == b);
    }
  }

  SUBCASE("float to float16 and bfloat16 against torch, over a million floats") {
    // Every 4096th float bit pattern, both signs: normals, subnormals, ties, overflow, NaN.
    std::vector<float> values;
    for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 4093) {
      const auto b = static_cast<std::uint32_t>(bits);
      float f;
      std::memcpy(&f, &b, 4);
      values.push_back(f);
    }
    const Tensor x = from_vector(values, {static_cast<std::int64_t>(values.size())});
    for (DType dtype : {DType::Float16, DType::BFloat16}) {
      CAPTURE(dtype_name(dtype));
      // torch's vectorized cast writes NaN as 0xffff for bfloat16, its scalar one 0x7fc0: NaN matches any NaN.
      CHECK(max_ulps(x.to(dtype), torch_eval1("a.to(" + torch_dtype(dtype) + ")", {x})) == 0);
    }
  }
}

TEST_CASE("casts between every pair of dtypes against torch") {
  const Tensor values = special_values();
  for (DType from : kAllDTypes) {
    // The values as torch holds them in `from` (its own cast: refgrad's is checked below).
    const refgrad::testing::TorchResult source = torch_run("a.to(" + torch_dtype(from) + ")", {values});
    REQUIRE(source.ok);
    const Tensor x = source.outputs[0];
    for (DType to : kAllDTypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      const Tensor actual = x.to(to);
      const Tensor expected = torch_eval1("a.to(" + torch_dtype(to) + ")", {x});
      REQUIRE(actual.dtype() == expected.dtype());
      if (to == DType::Float16 || to == DType::BFloat16) {
        CHECK(max_ulps(actual, expected) == 0);
      } else if (is_complex(to)) {
        CHECK(allclose(real_lanes(actual), real_lanes(expected), 0, 0, /*equal_nan=*/true));
      } else if (is_floating_point(to)) {
        CHECK(allclose(actual, expected, 0, 0, /*equal_nan=*/true));
      } else if (is_floating_point(from) || is_complex(from)) {
        // NaN and out-of-range floats to integers are undefined in C++; torch's result is its
        // compiler's (vectorized loops differ from scalar ones). Only values in range must agree.
        const Tensor in_range = logical_and(ge(x.to(DType::Float64), -128.0), le(x.to(DType::Float64), 127.0));
        CHECK(equal(masked_select(actual.to(DType::Int64), in_range), masked_select(expected.to(DType::Int64), in_range)));
      } else {
        CHECK(equal(actual, expected));
      }
    }
  }
}

TEST_CASE("float16 and bfloat16 ops compute in float32 and round once") {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = draw({7, 9}, dtype, 1), b = draw({7, 9}, dtype, 2), row = draw({9}, dtype, 3);
    const Tensor positive = abs(draw({7, 9}, dtype, 4)).to(dtype);
    struct Case {
      const char* torch;
      Tensor actual;
      std::vector<Tensor> inputs;
      int ulps;  // 0: the same float32 value, rounded once; 1: the float32 value may differ
    };
    const std::vector<Case> cases = {
        {"a + b", add(a, b), {a, b}, 0},
        // ATen's vectorized loop computes a - 2.5 b in float32 and rounds once; its scalar loop (a tensor's
        // last elements, or a small one) rounds 2.5 b to the dtype first, so torch's bits depend on the
        // element's position. refgrad computes as the vectorized loop does: against that, in float32.
        {"(a.float() - 2.5 * b.float()).to(a.dtype)", sub(a, b, 2.5), {a, b}, 0},
        {"a * b", mul(a, b), {a, b}, 0},
        {"a / b", div(a, b), {a, b}, 0},
        {"a * 0.1", mul(a, Scalar(0.1)), {a}, 0},  // the Python float stays float32, not float16 (ATen's opmath)
        {"a + b", add(a, b), {a, b}, 0},
        {"a + b", add(a, row), {a, row}, 0},
        {"-a", neg(a), {a}, 0},
        {"a.abs()", abs(a), {a}, 0},
        {"a.relu()", relu(a), {a}, 0},
        {"torch.maximum(a, b)", maximum(a, b), {a, b}, 0},
        {"a.clamp(-0.5, 0.25)", clamp(a, Scalar(-0.5), Scalar(0.25)), {a}, 0},
        {"torch.where(a > b, a, b)", where(gt(a, b), a, b), {a, b}, 0},
        {"a.sqrt()", sqrt(a), {a}, 0},
        {"a * a", square(a), {a}, 0},
        {"a.exp()", exp(a), {a}, 1},
        {"a.log()", log(a), {a}, 1},
        {"a.tanh()", tanh(a), {a}, 1},
        {"a.sigmoid()", sigmoid(a), {a}, 1},
        {"a.sin()", sin(a), {a}, 1},
        {"a.pow(b)", pow(a, b), {a, b}, 1},
        {"a.pow(3)", pow(a, Scalar(3)), {a}, 1},
        {"a.sum(1)", sum(a, {1}), {a}, 1},
        {"a.sum()", sum(a), {a}, 1},
        {"a.mean(0)", mean(a, {0}), {a}, 1},
        {"a.amax(1)", amax(a, {1}), {a}, 0},
        {"a.var(1)", var(a, {1}), {a}, 1},
        {"a.softmax(1)", softmax(a, 1), {a}, 1},
        {"a.log_softmax(0)", log_softmax(a, 0), {a}, 1},
        {"a.cumsum(1)", cumsum(a, 1), {a}, 1},
        {"torch.linalg.vector_norm(a, 2, (1,))", linalg_vector_norm(a, 2, {1}), {a}, 1},
        {"a @ b.T", matmul(a, t(b)), {a, b}, 1},
        {"torch.mm(a, b.T)", mm(a, t(b)), {a, b}, 1},
        {"a.flip(0)", flip(a, {0}), {a}, 0},
        {"torch.cat([a, b], 1)", cat({a, b}, 1), {a, b}, 0},
        {"a.t().contiguous()", t(a).contiguous(), {a}, 0},
        {"F.pad(a, (1, 2), value=0.5)", constant_pad_nd(a, {1, 2}, 0.5), {a}, 0},
        {"a.tril()", tril(a), {a}, 0},
        {"a.repeat(2, 1)", repeat(a, {2, 1}), {a}, 0},
        {"a.masked_fill(a > 0, 0.3)", masked_fill(a, gt(a, 0.0), Scalar(0.3)), {a}, 0},
        {"a + b", add(positive, b), {positive, b}, 0},
    };
    for (const Case& c : cases) {
      const std::string expression = c.torch;
      CAPTURE(expression);
      REQUIRE(c.actual.dtype() == dtype);
      const Tensor expected = torch_eval1(c.torch, c.inputs);
      CHECK(max_ulps(c.actual, expected) <= c.ulps);
    }

    SUBCASE("convolution and pooling") {
      const Tensor image = draw({2, 3, 6, 6}, dtype, 5), weight = draw({4, 3, 3, 3}, dtype, 6);
      const Tensor bias = draw({4}, dtype, 7);
      CHECK(max_ulps(conv2d(image, weight, bias, {1, 1}, {1, 1}),
                     torch_eval1("F.conv2d(a, b, c, padding=1)", {image, weight, bias})) <= 1);
      CHECK(max_ulps(max_pool2d_with_indices(image, {2, 2}).first,
                     torch_eval1("F.max_pool2d(a, 2)", {image})) == 0);
      CHECK(max_ulps(avg_pool2d(image, {2, 2}), torch_eval1("F.avg_pool2d(a, 2)", {image})) <= 1);
      CHECK(max_ulps(upsample_bilinear2d(image, {9, 9}, false),
                     torch_eval1("F.interpolate(a, size=(9, 9), mode='bilinear')", {image})) <= 1);
    }

    SUBCASE("indexing with int64 and int32 indices") {
      for (DType index_dtype : {DType::Int64, DType::Int32}) {
        CAPTURE(dtype_name(index_dtype));
        const Tensor positions = tensor({{0, 2, 1}, {6, 6, 0}}, index_dtype);
        const Tensor rows = tensor({4, 0, 4}, index_dtype);
        CHECK(max_ulps(gather(a, 0, positions), torch_eval1("a.gather(0, b)", {a, positions})) == 0);
        CHECK(max_ulps(index_select(a, 0, rows), torch_eval1("a.index_select(0, b)", {a, rows})) == 0);
        CHECK(max_ulps(index(a, {rows}), torch_eval1("a[b]", {a, rows})) == 0);
        const Tensor source = slice(b, 0, 0, 2).contiguous();
        const Tensor index3 = tensor({{0, 2, 1, 0, 0, 0, 0, 0, 0}, {6, 6, 0, 1, 1, 1, 1, 1, 1}}, index_dtype);
        CHECK(max_ulps(scatter_add(a, 0, index3, source), torch_eval1("a.scatter_add(0, b, c)", {a, index3, source})) <= 1);
        CHECK(max_ulps(index_add(a, 0, rows, slice(b, 0, 0, 3)),
                       torch_eval1("a.index_add(0, b, c)", {a, rows, slice(b, 0, 0, 3).contiguous()})) <= 1);
        CHECK(max_ulps(embedding(a, rows), torch_eval1("F.embedding(b, a)", {a, rows})) == 0);
      }
    }
  }
}

TEST_CASE("the narrower integers compute in int64 and wrap") {
  for (DType dtype : {DType::UInt8, DType::Int8, DType::Int16, DType::Int32}) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = tensor({0, 1, 100, 127, 7, 3}, DType::Int64).to(dtype);
    const Tensor b = tensor({5, 3, 100, 1, 9, 2}, DType::Int64).to(dtype);
    for (const char* expression : {"a + b", "a * b", "a - b", "a // b", "a.sum()", "a.max()", "a > b", "a / b"}) {
      CAPTURE(expression);
      Tensor actual;
      const std::string e = expression;
      if (e == "a + b") actual = add(a, b);
      else if (e == "a * b") actual = mul(a, b);
      else if (e == "a - b") actual = sub(a, b);
      else if (e == "a // b") actual = div(a, b, std::string("floor"));
      else if (e == "a.sum()") actual = sum(a);
      else if (e == "a.max()") actual = max(a);
      else if (e == "a > b") actual = gt(a, b);
      else actual = div(a, b);
      const Tensor expected = torch_eval1(expression, {a, b});
      CHECK(actual.dtype() == expected.dtype());
      CHECK(equal(actual, expected));
    }
  }
}

TEST_CASE("repr of every dtype is torch's") {
  const Tensor values = tensor({0.0, 1.5, -2.0, 100.0}, DType::Float64);
  for (DType dtype : kAllDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = values.to(dtype);
    CHECK(x.repr() == torch_text("repr(a)", {x}));
  }
}

TEST_CASE("complex dtypes are converted, and refused by ops without a complex kernel") {
  const Tensor x = tensor({1.5, -2.0}, DType::Float64).to(DType::ComplexFloat);
  CHECK(x.to(DType::Float64).to_vector<double>() == std::vector<double>{1.5, -2.0});
  CHECK_THROWS_WITH_AS(relu(x),
                       "relu: complex64 is not supported: refgrad has no complex kernel for this op (it has them "
                       "for arithmetic, the analytic functions, sums, products of matrices, indexing and views)",
                       Error);
}

}  // TEST_SUITE
