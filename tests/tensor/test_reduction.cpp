// Reductions, cumsum, softmax/log_softmax and sum_to: hand-worked values and
// torch at test time, over dtypes, dim lists, keepdim, 0-d tensors, size-0
// dims, transposed views and NaN; every error path by its message.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval;
using refgrad::testing::torch_eval1;
using refgrad::testing::torch_run;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// Values drawn from N(0, 3^2): rounded for int64, "> 0" for bool.
Tensor sample(const Shape& sizes, DType dtype, std::uint64_t seed = 7) {
  Generator generator(seed);
  std::vector<double> values(static_cast<std::size_t>(numel_of(sizes)));
  for (double& v : values) {
    v = 3 * generator.normal();
    if (dtype == DType::Int64) v = std::round(v);
    if (dtype == DType::Bool) v = v > 0 ? 1 : 0;
  }
  return from_vector(values, sizes).to(dtype);
}

// A view with dims d0 and d1 swapped: same storage, not contiguous.
Tensor swapped(const Tensor& t, std::size_t d0, std::size_t d1) {
  Shape sizes = t.sizes(), strides = t.strides();
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return Tensor(t.storage(), sizes, strides, t.storage_offset(), t.dtype());
}

std::string py(const IntList& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}
std::string py(bool value) { return value ? "True" : "False"; }
std::string py(DType dtype) { return "torch." + dtype_name(dtype); }

// Evaluates `expression` with Python warnings silenced (torch warns, on the
// oracle's stderr, about var with N - correction <= 0).
std::string quiet(const std::string& expression) {
  return "[__import__('warnings').simplefilter('ignore'), " + expression + "][1]";
}

bool torch_raises(const std::string& expression, const std::vector<Tensor>& inputs) {
  return !torch_run(expression, inputs).ok;
}

const std::vector<DType> kAllDtypes = {DType::Float32, DType::Float64, DType::Int64, DType::Bool};
const std::vector<DType> kFloatDtypes = {DType::Float32, DType::Float64};
// Dim lists for a 3-d tensor: all (empty), single, negative, several, unordered.
const std::vector<IntList> kDimLists = {{}, {0}, {-1}, {1}, {0, 2}, {2, 0}, {-3, -2}, {0, 1, 2}};

// float32 results may differ from torch's in the last bits (different
// summation order); 1e-5 relative, plus a little absolute slack for values
// near zero after cancellation.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("sum") {
  const Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(sum(x), tensor(21.0));
    CHECK_TENSOR(sum(x, {0}), tensor({5.0, 7.0, 9.0}));
    CHECK_TENSOR(sum(x, {-1}, true), tensor({{6.0}, {15.0}}));
    CHECK_TENSOR(sum(x, {}, true), tensor({{21.0}}));
    CHECK_TENSOR(sum(tensor({{1, 2}, {3, 4}})), tensor(10));  // int64 stays int64
    CHECK_TENSOR(sum(tensor({true, false, true})), tensor(2));  // bool counts, as int64
    CHECK_TENSOR(sum(tensor({1.5, 2.7}), DType::Int64), tensor(3));  // converted first: 1 + 2
    CHECK_TENSOR(sum(tensor({0.0, 0.5}), DType::Bool), tensor(true));
    // float32 is accumulated in double (see reduction.cpp): exact here, where
    // a float accumulator (torch's) loses the 1.
    CHECK_TENSOR(sum(tensor({1e8, 1.0, -1e8})), tensor(1.0));
    // int64 overflow wraps around, as in torch.
    const Tensor big = tensor({{kInt64Max, 2}, {kInt64Max, 3}});
    CHECK_TENSOR(sum(big), torch_eval1("torch.sum(a)", {big}));
    CHECK_TENSOR(sum(big, {0}), torch_eval1("torch.sum(a, [0])", {big}));
    CHECK_TENSOR(sum(big, {0}), tensor({-2, 5}));
  }
  SUBCASE("against torch: dtypes, dim lists, keepdim, transposed views") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      const Tensor view = swapped(a, 0, 2);
      for (const IntList& dims : kDimLists) {
        for (bool keepdim : {false, true}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(py(dims));
          CAPTURE(keepdim);
          const std::string args = ", " + py(dims) + ", keepdim=" + py(keepdim);
          CHECK_TENSOR(sum(a, dims, keepdim), torch_eval1("torch.sum(a" + args + ")", {a}), kRtol, kAtol);
          CHECK_TENSOR(sum(view, dims, keepdim), torch_eval1("torch.sum(a" + args + ")", {view}), kRtol, kAtol);
        }
      }
      for (DType to : kAllDtypes) {
        CAPTURE(dtype_name(to));
        CHECK_TENSOR(sum(a, to), torch_eval1("torch.sum(a, dtype=" + py(to) + ")", {a}), kRtol, kAtol);
        CHECK_TENSOR(sum(a, {1}, false, to), torch_eval1("torch.sum(a, [1], dtype=" + py(to) + ")", {a}), kRtol,
                     kAtol);
      }
    }
  }
  SUBCASE("float32 accuracy over many elements") {
    const Tensor a = sample({5000}, DType::Float32, 3);
    CHECK_TENSOR(sum(a), torch_eval1("torch.sum(a)", {a}), kRtol, kAtol);
    const Tensor b = sample({40, 300}, DType::Float32, 4);
    CHECK_TENSOR(sum(b, {0}), torch_eval1("torch.sum(a, [0])", {b}), kRtol, kAtol);
    CHECK_TENSOR(sum(swapped(b, 0, 1), {1}), torch_eval1("torch.sum(a, [1])", {swapped(b, 0, 1)}), kRtol, kAtol);
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    const Tensor scalar = tensor(3.5);
    for (const IntList& dims : {IntList{}, IntList{0}, IntList{-1}}) {
      for (bool keepdim : {false, true}) {
        CHECK_TENSOR(sum(scalar, dims, keepdim), tensor(3.5));
        CHECK_TENSOR(sum(scalar, dims, keepdim),
                     torch_eval1("torch.sum(a, " + py(dims) + ", keepdim=" + py(keepdim) + ")", {scalar}));
      }
    }
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(sum(e), tensor(0.0));
    CHECK_TENSOR(sum(e, {0}), zeros({3}));
    CHECK_TENSOR(sum(e, {1}), zeros({0}));
    CHECK_TENSOR(sum(e, {0}, true), torch_eval1("torch.sum(a, [0], keepdim=True)", {e}));
    CHECK_TENSOR(sum(e.to(DType::Int64), {0}), torch_eval1("torch.sum(a, [0])", {e.to(DType::Int64)}));
    const Tensor with_nan = tensor({1.0, kNaN, 2.0});
    CHECK(std::isnan(sum(with_nan).item<double>()));
    CHECK_TENSOR(sum(with_nan), torch_eval1("torch.sum(a)", {with_nan}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(sum(x, {0, 0}), "sum: dim 0 appears multiple times in the list of dims", Error);
    CHECK_THROWS_WITH_AS(sum(x, {1, -1}), "sum: dim 1 appears multiple times in the list of dims", Error);
    CHECK(torch_raises("torch.sum(a, [1, -1])", {x}));
    CHECK_THROWS_WITH_AS(sum(x, {2}), "sum: dimension out of range (expected to be in range of [-2, 1], but got 2)",
                         Error);
    CHECK_THROWS_WITH_AS(sum(tensor(1.0), {1}),
                         "sum: dimension out of range (expected to be in range of [-1, 0], but got 1)", Error);
    CHECK_THROWS_WITH_AS(sum(tensor(1.0), {0, -1}), "sum: dim 0 appears multiple times in the list of dims", Error);
    CHECK(torch_raises("torch.sum(a, [0, -1])", {tensor(1.0)}));
  }
}

TEST_CASE("mean") {
  const Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(mean(x), tensor(3.5));
    CHECK_TENSOR(mean(x, {0}), tensor({2.5, 3.5, 4.5}));
    CHECK_TENSOR(mean(x, {1}, true), tensor({{2.0}, {5.0}}));
    CHECK_TENSOR(mean(tensor({1, 2}), DType::Float64), tensor(1.5, DType::Float64));
  }
  SUBCASE("against torch") {
    for (DType dtype : kFloatDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (const IntList& dims : kDimLists) {
        for (bool keepdim : {false, true}) {
          CAPTURE(py(dims));
          const std::string expr = "torch.mean(a, " + py(dims) + ", keepdim=" + py(keepdim) + ")";
          CHECK_TENSOR(mean(a, dims, keepdim), torch_eval1(expr, {a}), kRtol, kAtol);
          CHECK_TENSOR(mean(swapped(a, 1, 2), dims, keepdim), torch_eval1(expr, {swapped(a, 1, 2)}), kRtol, kAtol);
        }
      }
    }
    const Tensor ints = sample({3, 4}, DType::Int64);
    CHECK_TENSOR(mean(ints, {1}, false, DType::Float32), torch_eval1("torch.mean(a, [1], dtype=torch.float32)", {ints}));
    const Tensor doubles = sample({3, 4}, DType::Float64);
    CHECK_TENSOR(mean(doubles, DType::Float32), torch_eval1("torch.mean(a, dtype=torch.float32)", {doubles}), kRtol);
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    CHECK_TENSOR(mean(tensor(2.0), {0}), tensor(2.0));
    CHECK_TENSOR(mean(tensor(2.0), {-1}, true), torch_eval1("torch.mean(a, [-1], keepdim=True)", {tensor(2.0)}));
    const Tensor e = zeros({0, 3});
    CHECK(std::isnan(mean(e).item<double>()));  // 0 / 0
    CHECK_TENSOR(mean(e), torch_eval1("torch.mean(a)", {e}));
    CHECK_TENSOR(mean(e, {0}), torch_eval1("torch.mean(a, [0])", {e}));
    CHECK_TENSOR(mean(e, {1}), torch_eval1("torch.mean(a, [1])", {e}));
    const Tensor with_nan = tensor({{1.0, kNaN}, {2.0, 3.0}});
    CHECK_TENSOR(mean(with_nan, {1}), torch_eval1("torch.mean(a, [1])", {with_nan}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(mean(tensor({1, 2})),
                         "mean: could not infer output dtype. Input dtype must be either a floating point or complex dtype, got int64",
                         Error);
    CHECK_THROWS_WITH_AS(mean(tensor({true}), {0}),
                         "mean: could not infer output dtype. Input dtype must be either a floating point or complex dtype, got bool",
                         Error);
    CHECK(torch_raises("torch.mean(a)", {tensor({1, 2})}));
    CHECK_THROWS_WITH_AS(
        mean(x, DType::Int64),
        "mean: could not infer output dtype. Optional dtype must be either a floating point or complex dtype, got int64", Error);
    CHECK_THROWS_WITH_AS(mean(x, {1, 1}), "mean: dim 1 appears multiple times in the list of dims", Error);
  }
}

TEST_CASE("prod") {
  const Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(prod(x), tensor(720.0));
    CHECK_TENSOR(prod(x, 0), tensor({4.0, 10.0, 18.0}));
    CHECK_TENSOR(prod(x, -1, true), tensor({{6.0}, {120.0}}));
    CHECK_TENSOR(prod(tensor({true, false})), tensor(0));
    CHECK_TENSOR(prod(tensor({true, true}), DType::Bool), tensor(true));
    const Tensor big = tensor({std::int64_t{1} << 62, 3});  // wraps, as in torch
    CHECK_TENSOR(prod(big), torch_eval1("torch.prod(a)", {big}));
    CHECK_TENSOR(prod(big, 0), tensor(-(std::int64_t{1} << 62)));
  }
  SUBCASE("against torch") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      CAPTURE(dtype_name(dtype));
      CHECK_TENSOR(prod(a), torch_eval1("torch.prod(a)", {a}), kRtol, kAtol);
      CHECK_TENSOR(prod(a, DType::Float64), torch_eval1("torch.prod(a, dtype=torch.float64)", {a}), kRtol, kAtol);
      for (std::int64_t dim : {0, 1, 2, -1, -3}) {
        for (bool keepdim : {false, true}) {
          const std::string expr = "torch.prod(a, " + std::to_string(dim) + ", keepdim=" + py(keepdim) + ")";
          CHECK_TENSOR(prod(a, dim, keepdim), torch_eval1(expr, {a}), kRtol, kAtol);
          CHECK_TENSOR(prod(swapped(a, 0, 1), dim, keepdim), torch_eval1(expr, {swapped(a, 0, 1)}), kRtol, kAtol);
        }
      }
      CHECK_TENSOR(prod(a, 1, false, DType::Int64), torch_eval1("torch.prod(a, 1, dtype=torch.int64)", {a}));
    }
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    CHECK_TENSOR(prod(tensor(3.0), 0), tensor(3.0));
    CHECK_TENSOR(prod(tensor(3.0), -1, true), torch_eval1("torch.prod(a, -1, keepdim=True)", {tensor(3.0)}));
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(prod(e), tensor(1.0));  // the empty product
    CHECK_TENSOR(prod(e, 0), ones({3}));
    CHECK_TENSOR(prod(e, 1), torch_eval1("torch.prod(a, 1)", {e}));
    CHECK_TENSOR(prod(e.to(DType::Int64), 0, true), torch_eval1("torch.prod(a, 0, keepdim=True)", {e.to(DType::Int64)}));
    CHECK(std::isnan(prod(tensor({2.0, kNaN})).item<double>()));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(prod(x, 2), "prod: dimension out of range (expected to be in range of [-2, 1], but got 2)",
                         Error);
    CHECK_THROWS_WITH_AS(prod(tensor(1.0), 1),
                         "prod: dimension out of range (expected to be in range of [-1, 0], but got 1)", Error);
    CHECK(torch_raises("torch.prod(a, 1)", {tensor(1.0)}));
  }
}

TEST_CASE("amax") {
  const Tensor x = tensor({{1.0, 7.0, 3.0}, {4.0, 5.0, -6.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(amax(x), tensor(7.0));
    CHECK_TENSOR(amax(x, {0}), tensor({4.0, 7.0, 3.0}));
    CHECK_TENSOR(amax(x, {-1}, true), tensor({{7.0}, {5.0}}));
    CHECK_TENSOR(amax(tensor({-kInf, -kInf})), tensor(-kInf));  // not lowest()
    CHECK_TENSOR(amax(tensor({false, true})), tensor(true));
  }
  SUBCASE("against torch") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (const IntList& dims : kDimLists) {
        for (bool keepdim : {false, true}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(py(dims));
          const std::string expr = "torch.amax(a, " + py(dims) + ", keepdim=" + py(keepdim) + ")";
          CHECK_TENSOR(amax(a, dims, keepdim), torch_eval1(expr, {a}));
          CHECK_TENSOR(amax(swapped(a, 0, 2), dims, keepdim), torch_eval1(expr, {swapped(a, 0, 2)}));
        }
      }
    }
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    CHECK_TENSOR(amax(tensor(2.0), {0}), tensor(2.0));
    CHECK_TENSOR(amax(tensor(2.0), {-1}, true), torch_eval1("torch.amax(a, [-1], keepdim=True)", {tensor(2.0)}));
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(amax(e, {1}), torch_eval1("torch.amax(a, [1])", {e}));
    const Tensor with_nan = tensor({{1.0, kNaN, 3.0}, {kNaN, 0.0, 2.0}, {1.0, 2.0, 3.0}});
    CHECK_TENSOR(amax(with_nan, {1}), torch_eval1("torch.amax(a, [1])", {with_nan}));
    CHECK_TENSOR(amax(with_nan, {0}), torch_eval1("torch.amax(a, [0])", {with_nan}));
    CHECK(std::isnan(amax(with_nan).item<double>()));
  }
  SUBCASE("errors") {
    const Tensor e = zeros({0, 3});
    CHECK_THROWS_WITH_AS(amax(e),
                         "amax: Expected reduction dim to be specified for input.numel() == 0. Specify the reduction "
                         "dim with the 'dim' argument. (shape [0,3])",
                         Error);
    CHECK(torch_raises("torch.amax(a)", {e}));
    CHECK_THROWS_WITH_AS(amax(e, {0}), "amax: Expected reduction dim 0 to have non-zero size. (shape [0,3])", Error);
    CHECK_THROWS_WITH_AS(amax(e, {1, -2}), "amax: Expected reduction dim 0 to have non-zero size. (shape [0,3])",
                         Error);
    CHECK(torch_raises("torch.amax(a, [0])", {e}));
    CHECK_THROWS_WITH_AS(amax(x, {0, -2}), "amax: dim 0 appears multiple times in the list of dims", Error);
    CHECK_THROWS_WITH_AS(amax(x, {3}),
                         "amax: dimension out of range (expected to be in range of [-2, 1], but got 3)", Error);
  }
}

TEST_CASE("amin") {
  const Tensor x = tensor({{1.0, 7.0, 3.0}, {4.0, 5.0, -6.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(amin(x), tensor(-6.0));
    CHECK_TENSOR(amin(x, {1}), tensor({1.0, -6.0}));
    CHECK_TENSOR(amin(tensor({kInf, kInf})), tensor(kInf));
    CHECK_TENSOR(amin(tensor({{3, 1}, {2, 8}}), {0}, true), tensor({{2, 1}}));
  }
  SUBCASE("against torch") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype, 11);
      for (const IntList& dims : kDimLists) {
        for (bool keepdim : {false, true}) {
          CAPTURE(py(dims));
          const std::string expr = "torch.amin(a, " + py(dims) + ", keepdim=" + py(keepdim) + ")";
          CHECK_TENSOR(amin(a, dims, keepdim), torch_eval1(expr, {a}));
          CHECK_TENSOR(amin(swapped(a, 1, 2), dims, keepdim), torch_eval1(expr, {swapped(a, 1, 2)}));
        }
      }
    }
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    CHECK_TENSOR(amin(tensor(2.0), {0}, true), tensor(2.0));
    CHECK_TENSOR(amin(zeros({2, 0}), {0}), torch_eval1("torch.amin(a, [0])", {zeros({2, 0})}));
    const Tensor with_nan = tensor({1.0, kNaN, -3.0});
    CHECK_TENSOR(amin(with_nan), torch_eval1("torch.amin(a)", {with_nan}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(amin(zeros({3, 0}), {-1}),
                         "amin: Expected reduction dim 1 to have non-zero size. (shape [3,0])", Error);
    CHECK_THROWS_WITH_AS(amin(zeros({0})), doctest::Contains("amin: Expected reduction dim to be specified"), Error);
  }
}

TEST_CASE("max") {
  const Tensor x = tensor({{1.0, 7.0, 3.0}, {7.0, 5.0, 7.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(max(x), tensor(7.0));
    auto [values, indices] = max(x, 1);
    CHECK_TENSOR(values, tensor({7.0, 7.0}));
    CHECK_TENSOR(indices, tensor({1, 0}));  // the first of equal maxima
    auto [kept_values, kept_indices] = max(x, 0, true);
    CHECK_TENSOR(kept_values, tensor({{7.0, 7.0, 7.0}}));
    CHECK_TENSOR(kept_indices, tensor({{1, 0, 1}}));
    CHECK_TENSOR(max(tensor({false, true})), tensor(true));
  }
  SUBCASE("against torch") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      CAPTURE(dtype_name(dtype));
      CHECK_TENSOR(max(a), torch_eval1("torch.max(a)", {a}));
      for (std::int64_t dim : {0, 1, 2, -1}) {
        for (bool keepdim : {false, true}) {
          CAPTURE(dim);
          const std::string expr = "torch.max(a, " + std::to_string(dim) + ", keepdim=" + py(keepdim) + ")";
          for (const Tensor& input : {a, swapped(a, 0, 2)}) {
            const std::vector<Tensor> expected = torch_eval(expr, {input});
            auto [values, indices] = max(input, dim, keepdim);
            CHECK_TENSOR(values, expected[0]);
            CHECK_TENSOR(indices, expected[1]);
          }
        }
      }
    }
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    auto [values, indices] = max(tensor(4.0), -1, true);
    CHECK_TENSOR(values, tensor(4.0));
    CHECK_TENSOR(indices, tensor(0));
    CHECK_TENSOR(max(tensor(4.0)), tensor(4.0));
    const Tensor e = zeros({0, 3});
    const std::vector<Tensor> expected = torch_eval("torch.max(a, 1)", {e});
    auto [empty_values, empty_indices] = max(e, 1);
    CHECK_TENSOR(empty_values, expected[0]);
    CHECK_TENSOR(empty_indices, expected[1]);
    // NaN is the maximum, and its first position is the index.
    const Tensor with_nan = tensor({{1.0, kNaN, 3.0, kNaN}, {kNaN, 9.0, 2.0, 1.0}, {1.0, 9.0, 2.0, 9.0}});
    auto [nan_values, nan_indices] = max(with_nan, 1);
    CHECK_TENSOR(nan_indices, tensor({1, 0, 1}));
    const std::vector<Tensor> nan_expected = torch_eval("torch.max(a, 1)", {with_nan});
    CHECK_TENSOR(nan_values, nan_expected[0]);
    CHECK_TENSOR(nan_indices, nan_expected[1]);
    CHECK(std::isnan(max(with_nan).item<double>()));
    CHECK_TENSOR(max(with_nan), torch_eval1("torch.max(a)", {with_nan}));
  }
  SUBCASE("errors") {
    const Tensor e = zeros({0, 3});
    CHECK_THROWS_WITH_AS(max(e),
                         "max: Expected reduction dim to be specified for input.numel() == 0. Specify the reduction "
                         "dim with the 'dim' argument. (shape [0,3])",
                         Error);
    CHECK(torch_raises("torch.max(a)", {e}));
    CHECK_THROWS_WITH_AS(max(e, 0), "max: Expected reduction dim 0 to have non-zero size. (shape [0,3])", Error);
    CHECK(torch_raises("torch.max(a, 0)", {e}));
    CHECK_THROWS_WITH_AS(max(x, 2), "max: dimension out of range (expected to be in range of [-2, 1], but got 2)",
                         Error);
  }
}

TEST_CASE("min") {
  const Tensor x = tensor({{1.0, -7.0, 3.0}, {-7.0, 5.0, -7.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(min(x), tensor(-7.0));
    auto [values, indices] = min(x, -1);
    CHECK_TENSOR(values, tensor({-7.0, -7.0}));
    CHECK_TENSOR(indices, tensor({1, 0}));
  }
  SUBCASE("against torch") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({3, 4, 2}, dtype, 5);
      CAPTURE(dtype_name(dtype));
      CHECK_TENSOR(min(a), torch_eval1("torch.min(a)", {a}));
      for (std::int64_t dim : {0, 1, -1}) {
        for (bool keepdim : {false, true}) {
          const std::string expr = "torch.min(a, " + std::to_string(dim) + ", keepdim=" + py(keepdim) + ")";
          for (const Tensor& input : {a, swapped(a, 0, 1)}) {
            const std::vector<Tensor> expected = torch_eval(expr, {input});
            auto [values, indices] = min(input, dim, keepdim);
            CHECK_TENSOR(values, expected[0]);
            CHECK_TENSOR(indices, expected[1]);
          }
        }
      }
    }
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    auto [values, indices] = min(tensor(4), 0);
    CHECK_TENSOR(values, tensor(4));
    CHECK_TENSOR(indices, tensor(0));
    const Tensor with_nan = tensor({-1.0, 2.0, kNaN, -5.0, kNaN});
    const std::vector<Tensor> expected = torch_eval("torch.min(a, 0)", {with_nan});
    auto [nan_values, nan_indices] = min(with_nan, 0);
    CHECK_TENSOR(nan_indices, tensor(2));
    CHECK_TENSOR(nan_values, expected[0]);
    CHECK_TENSOR(nan_indices, expected[1]);
    CHECK_TENSOR(min(with_nan), torch_eval1("torch.min(a)", {with_nan}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(min(zeros({2, 0})), doctest::Contains("min: Expected reduction dim to be specified"), Error);
    CHECK_THROWS_WITH_AS(min(zeros({2, 0}), 1), "min: Expected reduction dim 1 to have non-zero size. (shape [2,0])",
                         Error);
  }
}

TEST_CASE("argmax") {
  const Tensor x = tensor({{1.0, 7.0, 3.0}, {7.0, 5.0, 7.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(argmax(x), tensor(1));  // flattened: the first 7
    CHECK_TENSOR(argmax(x, std::nullopt, true), tensor({{1}}));
    CHECK_TENSOR(argmax(x, 1), tensor({1, 0}));
    CHECK_TENSOR(argmax(x, 0, true), tensor({{1, 0, 1}}));
  }
  SUBCASE("against torch") {
    for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (const Tensor& input : {a, swapped(a, 0, 2)}) {
        CHECK_TENSOR(argmax(input), torch_eval1("torch.argmax(a)", {input}));
        CHECK_TENSOR(argmax(input, std::nullopt, true), torch_eval1("torch.argmax(a, keepdim=True)", {input}));
        for (std::int64_t dim : {0, 1, 2, -2}) {
          for (bool keepdim : {false, true}) {
            const std::string expr = "torch.argmax(a, " + std::to_string(dim) + ", keepdim=" + py(keepdim) + ")";
            CHECK_TENSOR(argmax(input, dim, keepdim), torch_eval1(expr, {input}));
          }
        }
      }
    }
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    CHECK_TENSOR(argmax(tensor(2.0)), tensor(0));
    CHECK_TENSOR(argmax(tensor(2.0), 0, true), tensor(0));
    CHECK_TENSOR(argmax(zeros({0, 3}), 1), torch_eval1("torch.argmax(a, 1)", {zeros({0, 3})}));
    const Tensor with_nan = tensor({{1.0, 9.0, kNaN, kNaN}, {3.0, 1.0, 0.0, 2.0}});
    CHECK_TENSOR(argmax(with_nan), tensor(2));
    CHECK_TENSOR(argmax(with_nan, 1), torch_eval1("torch.argmax(a, 1)", {with_nan}));
    CHECK_TENSOR(argmax(with_nan), torch_eval1("torch.argmax(a)", {with_nan}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(argmax(tensor({true, false})), "argmax: does not support bool input (shape [2])", Error);
    CHECK(torch_raises("torch.argmax(a)", {tensor({true, false})}));
    CHECK_THROWS_WITH_AS(argmax(zeros({0, 3})),
                         "argmax: Expected reduction dim to be specified for input.numel() == 0. (shape [0,3])", Error);
    CHECK_THROWS_WITH_AS(argmax(zeros({0, 3}), 0),
                         "argmax: Expected reduction dim 0 to have non-zero size. (shape [0,3])", Error);
    CHECK(torch_raises("torch.argmax(a, 0)", {zeros({0, 3})}));
    CHECK_THROWS_WITH_AS(argmax(x, -3),
                         "argmax: dimension out of range (expected to be in range of [-2, 1], but got -3)", Error);
  }
}

TEST_CASE("argmin") {
  const Tensor x = tensor({{1, -7, 3}, {-7, 5, -7}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(argmin(x), tensor(1));
    CHECK_TENSOR(argmin(x, 0), tensor({1, 0, 1}));
  }
  SUBCASE("against torch") {
    for (DType dtype : {DType::Float32, DType::Int64}) {
      const Tensor a = sample({4, 3}, dtype, 9);
      for (const Tensor& input : {a, swapped(a, 0, 1)}) {
        CHECK_TENSOR(argmin(input), torch_eval1("torch.argmin(a)", {input}));
        CHECK_TENSOR(argmin(input, -1, true), torch_eval1("torch.argmin(a, -1, keepdim=True)", {input}));
        CHECK_TENSOR(argmin(input, 0), torch_eval1("torch.argmin(a, 0)", {input}));
      }
    }
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    CHECK_TENSOR(argmin(tensor(2), -1), tensor(0));
    const Tensor with_nan = tensor({1.0, -9.0, kNaN, kNaN});
    CHECK_TENSOR(argmin(with_nan), torch_eval1("torch.argmin(a)", {with_nan}));
    CHECK_TENSOR(argmin(with_nan, 0), tensor(2));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(argmin(tensor({true})), "argmin: does not support bool input (shape [1])", Error);
    CHECK_THROWS_WITH_AS(argmin(zeros({0})), doctest::Contains("argmin: Expected reduction dim to be specified"),
                         Error);
  }
}

TEST_CASE("var") {
  const Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 6.0, 8.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(var(x, {1}), tensor({1.0, 4.0}));                   // sum of squares 2 and 8, over N - 1 = 2
    CHECK_TENSOR(var(x, {1}, 0, true), tensor({{2.0 / 3}, {8.0 / 3}}));  // over N
    CHECK_TENSOR(var(x, {1}, 2.5), tensor({4.0, 16.0}));             // over 0.5
  }
  SUBCASE("against torch") {
    for (DType dtype : kFloatDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (const IntList& dims : kDimLists) {
        for (double correction : {0.0, 1.0, 2.0}) {
          for (bool keepdim : {false, true}) {
            CAPTURE(py(dims));
            const std::string expr = "torch.var(a, " + py(dims) + ", correction=" + std::to_string(correction) +
                                     ", keepdim=" + py(keepdim) + ")";
            CHECK_TENSOR(var(a, dims, correction, keepdim), torch_eval1(quiet(expr), {a}), kRtol, kAtol);
            CHECK_TENSOR(var(swapped(a, 0, 1), dims, correction, keepdim), torch_eval1(quiet(expr), {swapped(a, 0, 1)}),
                         kRtol, kAtol);
          }
        }
      }
    }
  }
  SUBCASE("N - correction <= 0, 0-d, size-0 dims and NaN") {
    // Divisor max(0, N - correction) = 0: inf for a positive sum of squares, NaN for 0.
    CHECK_TENSOR(var(x, {1}, 3), tensor({kInf, kInf}));
    CHECK_TENSOR(var(x, {1}, 3), torch_eval1(quiet("torch.var(a, [1], correction=3)"), {x}));
    CHECK_TENSOR(var(x, {1}, 5), torch_eval1(quiet("torch.var(a, [1], correction=5)"), {x}));
    CHECK_TENSOR(var(tensor({{2.0, 2.0}}), {1}, 2), torch_eval1(quiet("torch.var(a, [1], correction=2)"), {tensor({{2.0, 2.0}})}));
    CHECK(std::isnan(var(tensor(1.0)).item<double>()));
    CHECK_TENSOR(var(tensor(1.0), {0}), torch_eval1(quiet("torch.var(a, [0])"), {tensor(1.0)}));
    CHECK_TENSOR(var(tensor(1.0), {}, 0), tensor(0.0));
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(var(e), torch_eval1(quiet("torch.var(a)"), {e}));
    CHECK_TENSOR(var(e, {0}), torch_eval1(quiet("torch.var(a, [0])"), {e}));
    CHECK_TENSOR(var(e, {1}, 1, true), torch_eval1(quiet("torch.var(a, [1], keepdim=True)"), {e}));
    const Tensor with_nan = tensor({{1.0, kNaN}, {1.0, 2.0}});
    CHECK_TENSOR(var(with_nan, {1}), torch_eval1("torch.var(a, [1])", {with_nan}));
    // An empty tensor whose reduced sizes alone overflow int64 (torch cannot
    // even make it): no row, nothing to compute.
    const Tensor huge_empty = empty({std::int64_t{1} << 40, std::int64_t{1} << 40, 0}, DType::Float64);
    CHECK(var(huge_empty, {0, 1}).sizes() == Shape{0});
    CHECK(logsumexp(huge_empty, {0, 1}).sizes() == Shape{0});
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(var(tensor({1, 2})), "var: std and var only support floating point dtypes, got int64", Error);
    CHECK(torch_raises("torch.var(a)", {tensor({1, 2})}));
    CHECK_THROWS_WITH_AS(var(x, {0, -2}), "var: dim 0 appears multiple times in the list of dims", Error);
  }
}

TEST_CASE("linalg_vector_norm") {
  const Tensor x = tensor({{3.0, -4.0, 0.0}, {1.0, 0.0, -2.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(linalg_vector_norm(x, 2, {1}), tensor({5.0, std::sqrt(5.0)}));
    CHECK_TENSOR(linalg_vector_norm(x, 1, {1}), tensor({7.0, 3.0}));
    CHECK_TENSOR(linalg_vector_norm(x, kInf, {1}), tensor({4.0, 2.0}));
    CHECK_TENSOR(linalg_vector_norm(x, -kInf, {1}), tensor({0.0, 0.0}));
    CHECK_TENSOR(linalg_vector_norm(x, 0, {1}), tensor({2.0, 2.0}));   // nonzero count
    CHECK_TENSOR(linalg_vector_norm(x, -1, {1}), tensor({0.0, 0.0}));  // 1 / (... + 1/0)
    CHECK_TENSOR(linalg_vector_norm(x, 3, {0}, true), tensor({{std::cbrt(28.0), 4.0, 2.0}}), 1e-6);
  }
  SUBCASE("against torch") {
    for (DType dtype : kFloatDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (double ord : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5, -1.5}) {
        for (const IntList& dims : {IntList{}, IntList{0}, IntList{-1}, IntList{2, 0}}) {
          for (bool keepdim : {false, true}) {
            CAPTURE(ord);
            CAPTURE(py(dims));
            const std::string expr = "torch.linalg.vector_norm(a, " + std::string(std::isinf(ord) ? (ord > 0 ? "math.inf" : "-math.inf") : std::to_string(ord)) +
                                     ", " + py(dims) + ", keepdim=" + py(keepdim) + ")";
            CHECK_TENSOR(linalg_vector_norm(a, ord, dims, keepdim), torch_eval1(expr, {a}), kRtol, kAtol);
            CHECK_TENSOR(linalg_vector_norm(swapped(a, 1, 2), ord, dims, keepdim),
                         torch_eval1(expr, {swapped(a, 1, 2)}), kRtol, kAtol);
          }
        }
      }
    }
    const Tensor a = sample({3, 4}, DType::Float32);
    const Tensor as_double = linalg_vector_norm(a, 2, {1}, false, DType::Float64);
    CHECK(as_double.dtype() == DType::Float64);
    CHECK_TENSOR(as_double, torch_eval1("torch.linalg.vector_norm(a, 2, [1], dtype=torch.float64)", {a}));
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    CHECK_TENSOR(linalg_vector_norm(tensor(-3.0)), tensor(3.0));
    CHECK_TENSOR(linalg_vector_norm(tensor(-3.0), kInf, {0}), tensor(3.0));
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(linalg_vector_norm(e), tensor(0.0));
    CHECK_TENSOR(linalg_vector_norm(e, 2, {0}), torch_eval1("torch.linalg.vector_norm(a, 2, [0])", {e}));
    CHECK_TENSOR(linalg_vector_norm(e, 0, {0}), torch_eval1("torch.linalg.vector_norm(a, 0, [0])", {e}));
    CHECK_TENSOR(linalg_vector_norm(e, kInf, {1}), torch_eval1("torch.linalg.vector_norm(a, math.inf, [1])", {e}));
    CHECK_TENSOR(linalg_vector_norm(e, kNaN, {0}), torch_eval1("torch.linalg.vector_norm(a, math.nan, [0])", {e}));
    const Tensor with_nan = tensor({{1.0, kNaN}, {1.0, 2.0}});
    for (double ord : {2.0, kInf, 0.0}) {
      CAPTURE(ord);
      const std::string expr = "torch.linalg.vector_norm(a, " + std::string(std::isinf(ord) ? "math.inf" : std::to_string(ord)) + ", [1])";
      CHECK_TENSOR(linalg_vector_norm(with_nan, ord, {1}), torch_eval1(expr, {with_nan}));
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(linalg_vector_norm(tensor({1, 2})),
                         "linalg_vector_norm: expected a floating point tensor as input, got int64", Error);
    CHECK(torch_raises("torch.linalg.vector_norm(a)", {tensor({1, 2})}));
    CHECK_THROWS_WITH_AS(linalg_vector_norm(x, 2, {}, false, DType::Int64),
                         "linalg_vector_norm: dtype should be floating point, but got int64", Error);
    CHECK_THROWS_WITH_AS(linalg_vector_norm(x.to(DType::Float64), 2, {}, false, DType::Float32),
                         "linalg_vector_norm: the dtype of the input (float64) should be convertible without "
                         "narrowing to the specified dtype (float32)",
                         Error);
    CHECK(torch_raises("torch.linalg.vector_norm(a, dtype=torch.float32)", {x.to(DType::Float64)}));
    const Tensor e = zeros({0, 3});
    CHECK_THROWS_WITH_AS(linalg_vector_norm(e, kInf),
                         "linalg_vector_norm: cannot compute the inf norm on an empty tensor because the operation "
                         "does not have an identity (shape [0,3])",
                         Error);
    CHECK(torch_raises("torch.linalg.vector_norm(a, math.inf)", {e}));
    CHECK_THROWS_WITH_AS(linalg_vector_norm(e, -1, {0}),
                         "linalg_vector_norm: cannot compute the -1 norm on the dimension 0 because this dimension is "
                         "empty and the operation does not have an identity (shape [0,3])",
                         Error);
    CHECK(torch_raises("torch.linalg.vector_norm(a, -1, [0])", {e}));
    CHECK_THROWS_WITH_AS(linalg_vector_norm(x, 2, {1, 1}),
                         "linalg_vector_norm: dim 1 appears multiple times in the list of dims", Error);
  }
}

TEST_CASE("norm") {
  const Tensor x = tensor({{3.0, -4.0}, {0.0, 1.0}});
  CHECK_TENSOR(norm(x), tensor(std::sqrt(26.0)));
  CHECK_TENSOR(norm(x, 2, {1}), tensor({5.0, 1.0}));
  CHECK_TENSOR(norm(x, 1, {0}, true), tensor({{3.0, 5.0}}));
  const Tensor a = sample({3, 4}, DType::Float64);
  for (double p : {2.0, 1.0, 0.0, 3.0, kInf}) {
    CAPTURE(p);
    const std::string ord = std::isinf(p) ? "math.inf" : std::to_string(p);
    CHECK_TENSOR(norm(a, p), torch_eval1("torch.norm(a, " + ord + ")", {a}), kRtol);
    CHECK_TENSOR(norm(swapped(a, 0, 1), p, {1}, true),
                 torch_eval1("torch.norm(a, " + ord + ", [1], True)", {swapped(a, 0, 1)}), kRtol);
  }
  CHECK_THROWS_WITH_AS(norm(tensor({1, 2})), "norm: expected a floating point tensor as input, got int64", Error);
  CHECK(torch_raises("torch.norm(a)", {tensor({1, 2})}));
}

TEST_CASE("cumsum") {
  const Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(cumsum(x, 1), tensor({{1.0, 3.0, 6.0}, {4.0, 9.0, 15.0}}));
    CHECK_TENSOR(cumsum(x, -2), tensor({{1.0, 2.0, 3.0}, {5.0, 7.0, 9.0}}));
    CHECK_TENSOR(cumsum(tensor({true, false, true}), 0), tensor({1, 1, 2}));  // bool -> int64
    CHECK_TENSOR(cumsum(tensor({1.5, 2.5}), 0, DType::Int64), tensor({1, 3}));  // converted first
    const Tensor big = tensor({kInt64Max, 1});  // wraps, as in torch
    CHECK_TENSOR(cumsum(big, 0), torch_eval1("torch.cumsum(a, 0)", {big}));
  }
  SUBCASE("against torch") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (std::int64_t dim : {0, 1, 2, -1}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(dim);
        const std::string expr = "torch.cumsum(a, " + std::to_string(dim) + ")";
        CHECK_TENSOR(cumsum(a, dim), torch_eval1(expr, {a}), kRtol, kAtol);
        CHECK_TENSOR(cumsum(swapped(a, 0, 2), dim), torch_eval1(expr, {swapped(a, 0, 2)}), kRtol, kAtol);
      }
      CHECK_TENSOR(cumsum(a, 1, DType::Float64), torch_eval1("torch.cumsum(a, 1, dtype=torch.float64)", {a}));
      CHECK_TENSOR(cumsum(a, 2, DType::Int64), torch_eval1("torch.cumsum(a, 2, dtype=torch.int64)", {a}));
    }
    const Tensor long_row = sample({3000}, DType::Float32, 2);
    CHECK_TENSOR(cumsum(long_row, 0), torch_eval1("torch.cumsum(a, 0)", {long_row}), kRtol, kAtol);
  }
  SUBCASE("0-d, size-0 dims and NaN") {
    CHECK_TENSOR(cumsum(tensor(3.0), 0), tensor(3.0));
    CHECK_TENSOR(cumsum(tensor(3), -1), torch_eval1("torch.cumsum(a, -1)", {tensor(3)}));
    CHECK_TENSOR(cumsum(zeros({0, 3}), 0), torch_eval1("torch.cumsum(a, 0)", {zeros({0, 3})}));
    CHECK_TENSOR(cumsum(zeros({2, 0}), 0), zeros({2, 0}));
    const Tensor with_nan = tensor({1.0, kNaN, 2.0});
    CHECK_TENSOR(cumsum(with_nan, 0), torch_eval1("torch.cumsum(a, 0)", {with_nan}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(cumsum(x, 0, DType::Bool), "cumsum: not implemented for output dtype bool", Error);
    CHECK(torch_raises("torch.cumsum(a, 0, dtype=torch.bool)", {x}));
    CHECK_THROWS_WITH_AS(cumsum(x, 2), "cumsum: dimension out of range (expected to be in range of [-2, 1], but got 2)",
                         Error);
  }
}

TEST_CASE("logsumexp") {
  const Tensor x = tensor({{0.0, std::log(3.0)}, {1000.0, 1000.0}});
  SUBCASE("hand-worked values") {
    // log(1 + 3) and 1000 + log 2: the second overflows exp without the max shift.
    CHECK_TENSOR(logsumexp(x, {1}), tensor({std::log(4.0), 1000.0 + std::log(2.0)}), 1e-6);
    CHECK(logsumexp(x, {0}, true).sizes() == Shape{1, 2});
    CHECK_TENSOR(logsumexp(tensor({0, 0}), {0}), tensor(std::log(2.0)));  // int64 -> float32
  }
  SUBCASE("against torch") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (const IntList& dims : kDimLists) {
        for (bool keepdim : {false, true}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(py(dims));
          // torch.logsumexp(a, []) without keepdim fails in torch 2.13; ask it for every dim instead.
          const IntList torch_dims = dims.empty() ? IntList{0, 1, 2} : dims;
          const std::string expr = "torch.logsumexp(a, " + py(torch_dims) + ", keepdim=" + py(keepdim) + ")";
          CHECK_TENSOR(logsumexp(a, dims, keepdim), torch_eval1(expr, {a}), kRtol, kAtol);
          CHECK_TENSOR(logsumexp(swapped(a, 0, 1), dims, keepdim), torch_eval1(expr, {swapped(a, 0, 1)}), kRtol,
                       kAtol);
        }
      }
    }
  }
  SUBCASE("infinities, 0-d, size-0 dims and NaN") {
    const Tensor rows = tensor({{-kInf, -kInf}, {kInf, 1.0}, {kInf, -kInf}, {kNaN, 1.0}, {kInf, kInf}});
    CHECK_TENSOR(logsumexp(rows, {1}), tensor({-kInf, kInf, kInf, kNaN, kInf}));
    CHECK_TENSOR(logsumexp(rows, {1}), torch_eval1("torch.logsumexp(a, [1])", {rows}));
    CHECK_TENSOR(logsumexp(tensor(2.0), {0}), tensor(2.0));
    CHECK_TENSOR(logsumexp(tensor(2.0), {}, true), torch_eval1("torch.logsumexp(a, [], keepdim=True)", {tensor(2.0)}));
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(logsumexp(e, {0}), torch_eval1("torch.logsumexp(a, [0])", {e}));  // log(0) = -inf
    CHECK_TENSOR(logsumexp(e, {1}), torch_eval1("torch.logsumexp(a, [1])", {e}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(logsumexp(x, {0, 0}), "logsumexp: dim 0 appears multiple times in the list of dims", Error);
    CHECK_THROWS_WITH_AS(logsumexp(x, {-3}),
                         "logsumexp: dimension out of range (expected to be in range of [-2, 1], but got -3)", Error);
  }
}

TEST_CASE("softmax") {
  const Tensor x = tensor({{0.0, std::log(3.0)}, {1000.0, 1000.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(softmax(x, 1), tensor({{0.25, 0.75}, {0.5, 0.5}}), 1e-6);  // no overflow at 1000
    CHECK_TENSOR(softmax(tensor({0, 0}), 0, DType::Float64), tensor({0.5, 0.5}, DType::Float64));
  }
  SUBCASE("against torch") {
    for (DType dtype : kFloatDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (std::int64_t dim : {0, 1, 2, -1}) {
        CAPTURE(dim);
        const std::string expr = "torch.softmax(a, " + std::to_string(dim) + ")";
        CHECK_TENSOR(softmax(a, dim), torch_eval1(expr, {a}), kRtol, 1e-7);
        CHECK_TENSOR(softmax(swapped(a, 0, 2), dim), torch_eval1(expr, {swapped(a, 0, 2)}), kRtol, 1e-7);
      }
    }
    const Tensor ints = sample({3, 4}, DType::Int64);
    CHECK_TENSOR(softmax(ints, 1, DType::Float32), torch_eval1("torch.softmax(a, 1, dtype=torch.float32)", {ints}),
                 kRtol, 1e-7);
    const Tensor doubles = sample({3, 4}, DType::Float64);
    CHECK_TENSOR(softmax(doubles, 0, DType::Float32),
                 torch_eval1("torch.softmax(a, 0, dtype=torch.float32)", {doubles}), kRtol, 1e-7);
  }
  SUBCASE("infinities, 0-d, size-0 dims and NaN") {
    const Tensor rows = tensor({{-kInf, -kInf}, {kInf, 1.0}, {-kInf, 1.0}, {kNaN, 1.0}});
    CHECK_TENSOR(softmax(rows, 1), torch_eval1("torch.softmax(a, 1)", {rows}));
    CHECK(softmax(rows, 1).at<double>({2, 0}) == 0.0);  // exp(-inf)
    CHECK_TENSOR(softmax(tensor(5.0), 0), tensor(1.0));
    CHECK_TENSOR(softmax(tensor(5.0), -1), torch_eval1("torch.softmax(a, -1)", {tensor(5.0)}));
    CHECK_TENSOR(softmax(zeros({0, 3}), 0), torch_eval1("torch.softmax(a, 0)", {zeros({0, 3})}));
    CHECK_TENSOR(softmax(zeros({0, 3}), 1), zeros({0, 3}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(softmax(tensor({1, 2}), 0),
                         "softmax: not implemented for int64; expected a floating point tensor or a floating point "
                         "dtype argument (shape [2])",
                         Error);
    CHECK(torch_raises("torch.softmax(a, 0)", {tensor({1, 2})}));
    CHECK_THROWS_WITH_AS(softmax(tensor({1.0, 2.0}), 0, DType::Bool), doctest::Contains("softmax: not implemented for bool"),
                         Error);
    CHECK(torch_raises("torch.softmax(a, 0, dtype=torch.bool)", {tensor({1.0, 2.0})}));
    CHECK_THROWS_WITH_AS(softmax(x, 2),
                         "softmax: dimension out of range (expected to be in range of [-2, 1], but got 2)", Error);
  }
}

TEST_CASE("log_softmax") {
  const Tensor x = tensor({{0.0, std::log(3.0)}, {1000.0, 1000.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(log_softmax(x, 1), tensor({{std::log(0.25), std::log(0.75)}, {std::log(0.5), std::log(0.5)}}), 1e-6);
  }
  SUBCASE("against torch") {
    for (DType dtype : kFloatDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (std::int64_t dim : {0, 1, 2, -2}) {
        CAPTURE(dim);
        const std::string expr = "torch.log_softmax(a, " + std::to_string(dim) + ")";
        CHECK_TENSOR(log_softmax(a, dim), torch_eval1(expr, {a}), kRtol, kAtol);
        CHECK_TENSOR(log_softmax(swapped(a, 1, 2), dim), torch_eval1(expr, {swapped(a, 1, 2)}), kRtol, kAtol);
      }
    }
    const Tensor bools = tensor({true, false, true});
    CHECK_TENSOR(log_softmax(bools, 0, DType::Float32),
                 torch_eval1("torch.log_softmax(a, 0, dtype=torch.float32)", {bools}), kRtol);
  }
  SUBCASE("infinities, 0-d, size-0 dims and NaN") {
    const Tensor rows = tensor({{-kInf, -kInf}, {kInf, 1.0}, {-kInf, 1.0}, {kNaN, 1.0}});
    CHECK_TENSOR(log_softmax(rows, 1), torch_eval1("torch.log_softmax(a, 1)", {rows}));
    CHECK_TENSOR(log_softmax(tensor(5.0), 0), tensor(0.0));
    CHECK_TENSOR(log_softmax(zeros({0, 3}), 0), torch_eval1("torch.log_softmax(a, 0)", {zeros({0, 3})}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(log_softmax(tensor({true}), 0), doctest::Contains("log_softmax: not implemented for bool"),
                         Error);
    CHECK(torch_raises("torch.log_softmax(a, 0)", {tensor({true})}));
    CHECK_THROWS_WITH_AS(log_softmax(tensor({1.0}), 0, DType::Int64),
                         doctest::Contains("log_softmax: not implemented for int64"), Error);
  }
}

TEST_CASE("sum_to") {
  const Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(sum_to(x, {3}), tensor({5.0, 7.0, 9.0}));
    CHECK_TENSOR(sum_to(x, {2, 1}), tensor({{6.0}, {15.0}}));
    CHECK_TENSOR(sum_to(x, {1, 1}), tensor({{21.0}}));
    CHECK_TENSOR(sum_to(x, {}), tensor(21.0));
    CHECK(sum_to(x, {2, 3}).is_same(x));  // nothing to sum: self itself
  }
  SUBCASE("against torch (sum_to_size)") {
    const Tensor a = sample({2, 3, 4}, DType::Float64);
    const Tensor view = swapped(sample({3, 2, 4}, DType::Float64, 8), 0, 1);  // [2,3,4], not contiguous
    for (const Shape& shape : {Shape{4}, Shape{3, 1}, Shape{1, 4}, Shape{2, 1, 4}, Shape{1, 3, 1}, Shape{1},
                               Shape{2, 3, 4}, Shape{1, 1, 1}}) {
      std::string args;
      for (std::int64_t s : shape) args += std::to_string(s) + ", ";
      CAPTURE(str(shape));
      CHECK_TENSOR(sum_to(a, shape), torch_eval1("a.sum_to_size(" + args + ")", {a}));
      CHECK_TENSOR(sum_to(view, shape), torch_eval1("a.sum_to_size(" + args + ")", {view}));
    }
    const Tensor bools = sample({2, 3}, DType::Bool);
    CHECK_TENSOR(sum_to(bools, {1}), torch_eval1("a.sum_to_size(1)", {bools}));  // summed: int64
    CHECK_TENSOR(sum_to(zeros({0, 3}), {3}), torch_eval1("a.sum_to_size(3)", {zeros({0, 3})}));
    CHECK_TENSOR(sum_to(zeros({2, 0}), {1, 0}), torch_eval1("a.sum_to_size(1, 0)", {zeros({2, 0})}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(sum_to(x, {3, 3}), "sum_to: size [3,3] is not expandable to size [2,3]", Error);
    CHECK(torch_raises("a.sum_to_size(3, 3)", {x}));
    CHECK_THROWS_WITH_AS(sum_to(x, {4}), "sum_to: size [4] is not expandable to size [2,3]", Error);
    CHECK_THROWS_WITH_AS(sum_to(x, {1, 2, 3}), "sum_to: size [1,2,3] is not expandable to size [2,3]", Error);
    CHECK(torch_raises("a.sum_to_size(1, 2, 3)", {x}));
  }
}

TEST_CASE("is_expandable_to") {
  CHECK(is_expandable_to({}, {2, 3}));
  CHECK(is_expandable_to({3}, {2, 3}));
  CHECK(is_expandable_to({1, 3}, {2, 3}));
  CHECK(is_expandable_to({2, 1}, {2, 3}));
  CHECK(is_expandable_to({2, 3}, {2, 3}));
  CHECK(is_expandable_to({1}, {0}));
  CHECK(is_expandable_to({0}, {2, 0}));
  CHECK_FALSE(is_expandable_to({2}, {2, 3}));
  CHECK_FALSE(is_expandable_to({1, 2, 3}, {2, 3}));
  CHECK_FALSE(is_expandable_to({0}, {1}));
  CHECK_FALSE(is_expandable_to({3, 3}, {2, 3}));
  // The same verdicts as torch.broadcast_to.
  for (const auto& [shape, desired] : std::vector<std::pair<Shape, Shape>>{
           {{1, 3}, {2, 3}}, {{2}, {2, 3}}, {{1}, {0}}, {{0}, {1}}, {{1, 2, 3}, {2, 3}}}) {
    CAPTURE(str(shape));
    CAPTURE(str(desired));
    const bool torch_ok = !torch_raises("torch.broadcast_to(a, " + str(desired) + ")", {zeros(shape)});
    CHECK(is_expandable_to(shape, desired) == torch_ok);
  }
}

TEST_CASE("xtensor reductions under C++17") {
  // sum, prod and amax go through xt::sum, xt::prod and xt::reduce on
  // kernel::adapt views; xtensor 0.24.3 got these wrong under C++20, so each
  // axis set of a 3-d tensor (contiguous and transposed) is checked against torch.
  const std::vector<IntList> axes = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (DType dtype : {DType::Float64, DType::Float32, DType::Int64}) {
    const Tensor a = sample({3, 4, 5}, dtype, 21);
    for (const Tensor& input : {a, swapped(a, 0, 2)}) {
      for (const IntList& dims : axes) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(py(dims));
        CAPTURE(str(input.sizes()));
        CHECK_TENSOR(sum(input, dims), torch_eval1("torch.sum(a, " + py(dims) + ")", {input}), kRtol, kAtol);
        CHECK_TENSOR(amax(input, dims), torch_eval1("torch.amax(a, " + py(dims) + ")", {input}));
        if (dims.size() == 1) {
          CHECK_TENSOR(prod(input, dims[0]), torch_eval1("torch.prod(a, " + py(dims) + "[0])", {input}), kRtol,
                       kAtol);
        }
      }
      // Over all 60 elements only in float64: an int64 product that large would overflow.
      if (dtype == DType::Float64) CHECK_TENSOR(prod(input), torch_eval1("torch.prod(a)", {input}), kRtol, kAtol);
    }
  }
}

TEST_CASE("logcumsumexp") {
  const double inf = std::numeric_limits<double>::infinity();
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(logcumsumexp(tensor({0.0, 0.0, std::log(2.0)}), 0),
                 tensor({0.0, std::log(2.0), std::log(4.0)}), 1e-6, 1e-7);
    CHECK_TENSOR(logcumsumexp(tensor(2.5), 0), tensor(2.5));  // 0-d
  }
  SUBCASE("against torch: large values, infinities, NaN, complex, float16") {
    const Tensor edges = tensor({{1000.0, 0.0, -1000.0, 1001.0},
                                 {-inf, -inf, 2.0, -inf},
                                 {inf, 1.0, inf, -inf},
                                 {1.0, std::nan(""), 2.0, -inf}},
                                DType::Float64);
    for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      CAPTURE(dtype_name(dtype));
      // float16/bfloat16 accumulate in float32 in ATen, in double here: one rounding apart at most.
      const double rtol = dtype == DType::Float16 ? 1e-3 : dtype == DType::BFloat16 ? 8e-3 : kRtol;
      for (std::int64_t dim : {0, 1, -1}) {
        const std::string expr = "torch.logcumsumexp(a, " + std::to_string(dim) + ")";
        const Tensor a = sample({3, 4}, dtype);
        CHECK_TENSOR(logcumsumexp(a, dim), torch_eval1(expr, {a}), rtol, 0);
        CHECK_TENSOR(logcumsumexp(swapped(a, 0, 1), dim), torch_eval1(expr, {swapped(a, 0, 1)}), rtol, 0);
        CHECK_TENSOR(logcumsumexp(edges.to(dtype), dim), torch_eval1(expr, {edges.to(dtype)}), rtol, 0);
      }
    }
    const Tensor z = complex(sample({3, 4}, DType::Float64, 4), sample({3, 4}, DType::Float64, 5));
    const Tensor z_edges = complex(tensor({-inf, -inf, 1.0, inf, inf}, DType::Float64),
                                   tensor({1.0, 2.0, 0.5, 1.0, 2.0}, DType::Float64));
    for (const Tensor& c : {z, z.to(DType::ComplexFloat), z_edges}) {
      CHECK_TENSOR(logcumsumexp(c, -1), torch_eval1("torch.logcumsumexp(a, -1)", {c}), kRtol, 0);
    }
    CHECK(logcumsumexp(zeros({0, 3}), 0).sizes() == Shape{0, 3});
    CHECK_THROWS_WITH_AS(logcumsumexp(tensor({1, 2}), 0),
                         "logcumsumexp: expected a floating point or complex tensor, got int64", Error);
  }
}

TEST_CASE("cumprod") {
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(cumprod(tensor({{1.0, 2.0, 3.0}, {4.0, 0.5, -2.0}}), 1), tensor({{1.0, 2.0, 6.0}, {4.0, 2.0, -4.0}}));
    CHECK_TENSOR(cumprod(tensor({{1.0, 2.0}, {3.0, 0.0}}), 0), tensor({{1.0, 2.0}, {3.0, 0.0}}));
    CHECK_TENSOR(cumprod(tensor({true, true, false}), 0), tensor({1, 1, 0}));  // bool -> int64
    CHECK_TENSOR(cumprod(tensor(2.5), 0), tensor(2.5));                       // 0-d
  }
  SUBCASE("against torch") {
    for (DType dtype : kAllDtypes) {
      const Tensor a = sample({2, 3, 4}, dtype);
      for (std::int64_t dim : {0, 1, 2, -1}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(dim);
        const std::string expr = "torch.cumprod(a, " + std::to_string(dim) + ")";
        CHECK_TENSOR(cumprod(a, dim), torch_eval1(expr, {a}), kRtol, 0);
        CHECK_TENSOR(cumprod(swapped(a, 0, 2), dim), torch_eval1(expr, {swapped(a, 0, 2)}), kRtol, 0);
      }
      CHECK_TENSOR(cumprod(a, 1, DType::Float64), torch_eval1("torch.cumprod(a, 1, dtype=torch.float64)", {a}));
    }
    // float16 accumulates in double and rounds each element once; complex multiplies in complex128.
    const Tensor h = sample({3, 5}, DType::Float32, 3).to(DType::Float16);
    CHECK_TENSOR(cumprod(h, 1), torch_eval1("torch.cumprod(a, 1)", {h}));
    const Tensor z = complex(sample({2, 4}, DType::Float64, 4), sample({2, 4}, DType::Float64, 5));
    CHECK_TENSOR(cumprod(z, 1), torch_eval1("torch.cumprod(a, 1)", {z}), 1e-12, 0);
    CHECK_TENSOR(cumprod(z.to(DType::ComplexFloat), 0), torch_eval1("torch.cumprod(a, 0)", {z.to(DType::ComplexFloat)}),
                 kRtol, 0);
    const Tensor big = tensor({kInt64Max, 3});  // wraps, as in torch
    CHECK_TENSOR(cumprod(big, 0), torch_eval1("torch.cumprod(a, 0)", {big}));
    const Tensor empty_rows = zeros({0, 3});
    CHECK(cumprod(empty_rows, 1).sizes() == Shape{0, 3});
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(cumprod(tensor({1.0, 2.0}), 1), doctest::Contains("cumprod"), Error);
    CHECK_THROWS_WITH_AS(cumprod(Tensor(), 0), "cumprod: tensor is undefined", Error);
  }
}

}  // TEST_SUITE
