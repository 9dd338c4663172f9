// Tensor::repr against hand-written text and against torch's repr(tensor).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "refgrad/tensor.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_text;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// The same buffer seen with another (contiguous) shape.
Tensor reshaped(const Tensor& t, const Shape& sizes) {
  return Tensor(t.storage(), sizes, contiguous_strides(sizes), t.storage_offset(), t.dtype());
}

// A float tensor of the given shape holding `values` (cast to `dtype`).
Tensor floats(const std::vector<double>& values, const Shape& sizes, DType dtype = DType::Float32) {
  return from_vector(values, sizes).to(dtype);
}

void check_like_torch(const Tensor& x) {
  const std::string expected = torch_text("repr(a)", {x});
  CHECK_EQ(x.repr(), expected);
}

// Enough random cases to meet most branches; each costs one oracle call.
const int kSweepTrials = 300;

// The random tensors' dtypes (storage formats print as their opmath values: test_dtypes.cpp checks them).
const std::vector<DType> kComputeDTypes = {DType::Bool, DType::Int64, DType::Float32, DType::Float64};

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("repr") {
  SUBCASE("hand-worked") {
    CHECK(tensor(1.5).repr() == "tensor(1.5000)");
    CHECK(tensor({1.0, 2.0}).repr() == "tensor([1., 2.])");
    CHECK(tensor({{1, 2}, {3, 4}}).repr() == "tensor([[1, 2],\n        [3, 4]])");
    CHECK(tensor({true, false}).repr() == "tensor([ True, False])");
    CHECK(zeros({0, 3}).repr() == "tensor([], size=(0, 3))");
    CHECK(zeros({0}, DType::Int64).repr() == "tensor([], dtype=torch.int64)");
    CHECK(tensor({1.0, 2.5}, DType::Float64).repr() == "tensor([1.0000, 2.5000], dtype=torch.float64)");
    CHECK(tensor({1.0, 1e10}).repr() == "tensor([1.0000e+00, 1.0000e+10])");
    CHECK(tensor({-1.0, 100.0}).repr() == "tensor([ -1., 100.])");
    CHECK(floats({1.0, kNaN, -kInf}, {3}).repr() == "tensor([1., nan, -inf])");
    CHECK(tensor({{{1}}, {{2}}}).repr() == "tensor([[[1]],\n\n        [[2]]])");
    CHECK(Tensor().repr() == "tensor(undefined)");
  }

  SUBCASE("0-d tensors of every dtype") {
    check_like_torch(tensor(1.5));
    check_like_torch(tensor(2.0));
    check_like_torch(tensor(-0.0));
    check_like_torch(tensor(0.0));
    check_like_torch(tensor(-3.25, DType::Float64));
    check_like_torch(tensor(7));
    check_like_torch(tensor(-7));
    check_like_torch(tensor(true));
    check_like_torch(tensor(false));
    check_like_torch(tensor(1e10));
    check_like_torch(tensor(1e-5, DType::Float64));
    check_like_torch(tensor(123456789.0, DType::Float64));
    check_like_torch(scalar_tensor(kNaN));
    check_like_torch(scalar_tensor(-kInf, DType::Float64));
  }

  SUBCASE("1-d of every dtype, with negatives") {
    check_like_torch(tensor({1, -2, 30}));
    check_like_torch(tensor({true, false, true}));
    check_like_torch(tensor({true, true}));
    check_like_torch(tensor({-1.5, 2.25, 0.0}));
    check_like_torch(tensor({-1.5, 2.25, 0.0}, DType::Float64));
    check_like_torch(tensor({1.0, 2.0, -3.0}, DType::Float64));
    check_like_torch(tensor({0.1, 1.0 / 3.0, 2.0 / 3.0}));             // float32 values printed exactly
    check_like_torch(tensor({0.1, 1.0 / 3.0, 2.0 / 3.0}, DType::Float64));
    check_like_torch(tensor({0.00015, 0.00025, 1.00005}, DType::Float64));  // rounding of the 4th decimal
    check_like_torch(tensor({std::numeric_limits<std::int64_t>::min(), std::int64_t{0},
                             std::numeric_limits<std::int64_t>::max()}));
    check_like_torch(tensor({5}));
  }

  SUBCASE("zeros, negative zeros and non-finite values") {
    check_like_torch(zeros({3}));
    check_like_torch(zeros({2, 2}, DType::Float64));
    check_like_torch(tensor({-0.0, 0.0}));
    check_like_torch(tensor({-0.0, 1.5}));  // "-0.0000" is wider than the others
    check_like_torch(floats({kNaN}, {1}));
    check_like_torch(floats({kInf, -kInf}, {2}));
    check_like_torch(floats({0.0, kNaN}, {2}));
    check_like_torch(floats({1.0, kNaN, 100.0}, {3}));
    check_like_torch(floats({1.5, kInf, -2.0}, {3}, DType::Float64));
    check_like_torch(floats({1e10, kNaN, 1.0}, {3}));
    check_like_torch(floats({-kInf, 1e-6}, {2}, DType::Float64));
    check_like_torch(floats({kNaN, 2.0, kInf, 3.0}, {2, 2}));
  }

  SUBCASE("fixed and scientific modes at their thresholds") {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      CAPTURE(dtype_name(dtype));
      check_like_torch(tensor({1.0, 1000.0}, dtype));    // ratio 1000: still int mode
      check_like_torch(tensor({1.0, 1001.0}, dtype));    // ratio > 1000: scientific
      check_like_torch(tensor({0.5, 500.0}, dtype));
      check_like_torch(tensor({0.5, 500.5}, dtype));
      check_like_torch(tensor({1e8, 2.0}, dtype));       // max 1e8: not yet scientific
      check_like_torch(tensor({1e8 + 1, 1e8}, dtype));
      check_like_torch(tensor({123456789.0}, dtype));    // max > 1e8
      check_like_torch(tensor({1e-4, 2e-4}, dtype));     // float32's 1e-4 is just below 1e-4
      check_like_torch(tensor({9.9e-5, 1e-4}, dtype));
      check_like_torch(tensor({-1e-20, 5e20}, dtype));
      check_like_torch(tensor({1.5, -2.5e5, 3.0}, dtype));
      check_like_torch(tensor({1e-300, 1e300}, DType::Float64));  // 3-digit exponents
      check_like_torch(tensor({12345678.0, -1.0}, dtype));
      check_like_torch(tensor({1234.5678, -0.5}, dtype));
    }
  }

  SUBCASE("2-d, 3-d and 4-d with column alignment") {
    check_like_torch(tensor({{1.0, -22.5}, {333.0, 4.0}}));
    check_like_torch(tensor({{1, -22}, {333, 4}}));
    check_like_torch(tensor({{true, false}, {false, false}}));
    check_like_torch(reshaped(arange(24, DType::Float64), {2, 3, 4}));
    check_like_torch(reshaped(arange(-12, 12), {2, 3, 2, 2}));
    check_like_torch(reshaped(arange(0.0, 1.2, 0.1), {3, 1, 4}));
    check_like_torch(zeros({1, 1, 1, 1}, DType::Bool));
    Generator generator(7);
    check_like_torch(randn({3, 4}, generator));
    check_like_torch(randn({2, 3, 4}, generator, DType::Float64));
  }

  SUBCASE("empty tensors of every dtype") {
    for (DType dtype : kAllDTypes) {
      if (is_complex(dtype)) continue;  // no complex repr yet
      CAPTURE(dtype_name(dtype));
      check_like_torch(zeros({0}, dtype));
      check_like_torch(zeros({0, 3}, dtype));
      check_like_torch(zeros({2, 0, 4}, dtype));
      check_like_torch(zeros({3, 0}, dtype));
    }
  }

  SUBCASE("long rows wrap at 80 columns") {
    Generator generator(11);
    check_like_torch(arange(30, DType::Float32));
    check_like_torch(arange(100));
    check_like_torch(arange(-50, 50, 3));
    check_like_torch(randn({25}, generator));
    check_like_torch(randn({20}, generator, DType::Float64));  // the dtype suffix may go on its own line
    check_like_torch(randn({3, 20}, generator));
    check_like_torch(randn({2, 2, 15}, generator, DType::Float64));
    check_like_torch(bernoulli({50}, 0.5, generator).to(DType::Bool));
    check_like_torch(floats(std::vector<double>(17, 1e-9), {17}, DType::Float64));
    check_like_torch(arange(0.0, 40.0, 1.0, DType::Float64));
    // A last line that is nearly full forces the suffix onto the next line.
    for (std::int64_t n = 5; n <= 12; ++n) check_like_torch(arange(0.0, static_cast<double>(n), 1.0, DType::Float64));
    for (std::int64_t n = 10; n <= 15; ++n) check_like_torch(randn({n}, generator, DType::Float64));
  }

  SUBCASE("summarized beyond 1000 elements") {
    Generator generator(3);
    check_like_torch(arange(1000));  // exactly the threshold: printed in full
    check_like_torch(arange(1001));
    check_like_torch(arange(2000, DType::Float32));
    check_like_torch(reshaped(arange(2000, DType::Float64), {40, 50}));
    check_like_torch(reshaped(arange(1210), {10, 11, 11}));
    check_like_torch(reshaped(arange(2000), {2, 1000}));  // a short dim stays whole, the long one is cut
    check_like_torch(reshaped(arange(1001), {1001, 1}));
    check_like_torch(reshaped(arange(1008), {6, 168}));
    check_like_torch(randn({7, 200}, generator));
    check_like_torch(reshaped(bernoulli({1100}, 0.5, generator).to(DType::Bool), {11, 100}));
    check_like_torch(reshaped(randn({1024}, generator, DType::Float64), {2, 8, 8, 8}));
    check_like_torch(reshaped(arange(4096, DType::Float32), {4, 8, 2, 8, 4}));

    // Only the shown values choose the format: a hidden 1e10 does not switch
    // the tensor to scientific notation, a shown one does.
    std::vector<double> values(1200, 1.0);
    values[600] = 1e10;
    check_like_torch(floats(values, {1200}));
    values[1] = 1e10;
    check_like_torch(floats(values, {1200}));
    values[1] = 2.5;
    check_like_torch(floats(values, {30, 40}));
  }

  SUBCASE("seeded random sweep of shapes, dtypes and magnitudes") {
    Generator generator(2024);
    auto pick = [&](std::int64_t n) { return static_cast<std::int64_t>(generator.uniform() * static_cast<double>(n)); };
    for (int trial = 0; trial < kSweepTrials; ++trial) {
      Shape sizes(static_cast<std::size_t>(pick(5)));
      for (std::int64_t& size : sizes) size = pick(9);
      if (pick(8) == 0) sizes = {pick(3) + 1, 300 + pick(300)};  // summarized
      const std::int64_t n = numel_of(sizes);

      // Magnitudes from 1e-7 to 1e11, sometimes integers, sometimes spread
      // over a wide range, sometimes with nan and inf.
      const double scale = std::pow(10.0, static_cast<double>(pick(19) - 7));
      const bool integers = pick(3) == 0, spread = pick(4) == 0, non_finite = pick(5) == 0;
      std::vector<double> values(static_cast<std::size_t>(n));
      for (double& v : values) {
        v = generator.normal() * scale * (spread ? std::pow(10.0, static_cast<double>(pick(9) - 4)) : 1.0);
        if (integers) v = std::round(v);
        if (non_finite && pick(6) == 0) v = std::vector<double>{kNaN, kInf, -kInf, 0.0}[pick(4)];
      }
      const DType dtype = kComputeDTypes[pick(4)];
      Tensor x = from_vector(values, sizes);
      if (dtype == DType::Int64) {  // finite, in range
        for (double& v : values) v = std::isfinite(v) ? std::round(std::clamp(v, -1e15, 1e15)) : 0.0;
        x = from_vector(values, sizes);
      }
      x = x.to(dtype);
      CAPTURE(trial);
      check_like_torch(x);
    }
  }

  SUBCASE("non-contiguous views") {
    Tensor base = reshaped(arange(-6.0, 6.0, 1.0), {3, 4});
    const Tensor transposed(base.storage(), {4, 3}, {1, 4}, 0, DType::Float32);
    CHECK(!transposed.is_contiguous());
    check_like_torch(transposed);
    check_like_torch(Tensor(base.storage(), {2, 2}, {8, 2}, 1, DType::Float32));  // strided slice
    check_like_torch(Tensor(base.storage(), {3, 5}, {0, 1}, 2, DType::Float32));  // expanded rows
    check_like_torch(Tensor(base.storage(), {}, {}, 5, DType::Float32));          // an element as a 0-d view

    Tensor big = arange(3000);
    check_like_torch(Tensor(big.storage(), {1500}, {2}, 1, DType::Int64));
    check_like_torch(Tensor(big.storage(), {50, 30}, {1, 50}, 0, DType::Int64));
  }

  SUBCASE("many size-1 dims") {
    check_like_torch(zeros({2, 1, 1, 3, 1}));
    check_like_torch(reshaped(arange(6.0), {1, 2, 1, 3}));
    check_like_torch(reshaped(arange(1200), {1, 2, 1, 600, 1}));  // summarized
    // One level of recursion and one separator string per dim: 200000 dims
    // overflowed the stack, and the separators alone needed 2 * 10^10 bytes.
    const std::size_t ndim = 200000;
    const Tensor deep = zeros(Shape(ndim, 1));
    CHECK(deep.repr() == "tensor(" + std::string(ndim, '[') + "0." + std::string(ndim, ']') + ")");
    Shape sizes(ndim, 1);
    sizes.front() = 2;
    CHECK(zeros(sizes, DType::Int64).repr() == "tensor([" + std::string(ndim - 1, '[') + "0" + std::string(ndim - 1, ']') +
                                                   "," + std::string(ndim - 1, '\n') + std::string(8, ' ') +
                                                   std::string(ndim - 1, '[') + "0" + std::string(ndim - 1, ']') + "])");
  }
}

}  // TEST_SUITE
