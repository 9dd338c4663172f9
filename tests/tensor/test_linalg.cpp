// Matrix products: matmul, mm, bmm, addmm, outer, dot.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;

namespace {

// BLAS sums in its own order, torch (MKL or its own kernels) in another.
constexpr double kFloat32Rtol = 1e-5, kFloat32Atol = 1e-5;
constexpr double kFloat64Rtol = 1e-12, kFloat64Atol = 1e-12;

// Checks a refgrad product against torch's for the same inputs.
void check_against_torch(const Tensor& actual, const std::string& expression, const std::vector<Tensor>& inputs) {
  const Tensor expected = torch_eval1(expression, inputs);
  if (actual.dtype() == DType::Float32) CHECK_TENSOR(actual, expected, kFloat32Rtol, kFloat32Atol);
  else CHECK_TENSOR(actual, expected, kFloat64Rtol, kFloat64Atol);
}

// The transpose of the last two dims, as a view (no copy): stride tricks
// written here so that the tests do not depend on the shape ops.
Tensor transposed_view(const Tensor& t) {
  Shape sizes = t.sizes(), strides = t.strides();
  const std::size_t d = sizes.size();
  std::swap(sizes[d - 2], sizes[d - 1]);
  std::swap(strides[d - 2], strides[d - 1]);
  return Tensor(t.storage(), sizes, strides, t.storage_offset(), t.dtype());
}

// A contiguous tensor of shape `sizes` holding the transpose of random values,
// returned as a transposed view: same values as a plain tensor, column-major layout.
Tensor column_major(const Shape& sizes, Generator& generator, DType dtype) {
  Shape swapped = sizes;
  std::swap(swapped[swapped.size() - 2], swapped[swapped.size() - 1]);
  return transposed_view(randn(swapped, generator, dtype));
}

// Small int64 values in a fixed pattern, for exact integer products.
Tensor int_values(const Shape& sizes, std::int64_t seed) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(numel_of(sizes)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int64_t>((i * 7 + seed * 3) % 11) - 5;
  return from_vector(values, sizes);
}

// A size-1 dim broadcast to `size` with stride 0, in front of t's dims: a view
// BLAS cannot read directly (rows 0 apart).
Tensor repeated_rows(const Tensor& row, std::int64_t size) {
  return Tensor(row.storage(), {size, row.size(0)}, {0, row.stride(0)}, row.storage_offset(), row.dtype());
}

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("matmul") {
  Generator generator(7);

  SUBCASE("hand-worked values for every rank pair") {
    const Tensor a = tensor({{1.0, 2.0}, {3.0, 4.0}});
    const Tensor b = tensor({{5.0, 6.0}, {7.0, 8.0}});
    CHECK_TENSOR(matmul(a, b), tensor({{19.0, 22.0}, {43.0, 50.0}}));
    CHECK_TENSOR(matmul(tensor({1.0, 2.0, 3.0}), tensor({4.0, 5.0, 6.0})), tensor(32.0));  // 1-D @ 1-D: 0-d
    CHECK_TENSOR(matmul(a, tensor({1.0, -1.0})), tensor({-1.0, -1.0}));                    // 2-D @ 1-D
    CHECK_TENSOR(matmul(tensor({1.0, -1.0}), a), tensor({-2.0, -2.0}));                    // 1-D @ 2-D
    // A batch of two matrices times one matrix: the second batch entry is 2 * a.
    const Tensor batch = tensor({{{1.0, 2.0}, {3.0, 4.0}}, {{2.0, 4.0}, {6.0, 8.0}}});
    CHECK_TENSOR(matmul(batch, b),
                 tensor({{{19.0, 22.0}, {43.0, 50.0}}, {{38.0, 44.0}, {86.0, 100.0}}}));
    CHECK_TENSOR(matmul(batch, tensor({1.0, 0.0})), tensor({{1.0, 3.0}, {2.0, 6.0}}));      // N-D @ 1-D
    CHECK_TENSOR(matmul(tensor({0.0, 1.0}), batch), tensor({{3.0, 4.0}, {6.0, 8.0}}));      // 1-D @ N-D
  }

  SUBCASE("every rank combination and broadcast batch dims agree with torch") {
    const std::vector<std::pair<Shape, Shape>> shapes = {
        {{3}, {3}},          {{2, 3}, {3}},          {{3}, {3, 4}},          {{2, 3}, {3, 4}},
        {{2, 2, 3}, {3}},    {{3}, {2, 3, 4}},       {{2, 2, 3}, {3, 4}},    {{2, 3}, {2, 3, 4}},
        {{4, 2, 3}, {4, 3, 5}}, {{2, 1, 2, 3}, {5, 3, 4}}, {{1, 3}, {2, 3, 4}}, {{3, 1, 2, 3}, {1, 4, 3, 2}},
        {{2, 2, 3}, {1, 3, 1}}, {{1, 1, 3}, {3, 1}},
    };
    for (DType dtype : {DType::Float32, DType::Float64}) {
      for (const auto& [shape_a, shape_b] : shapes) {
        CAPTURE(str(shape_a));
        CAPTURE(str(shape_b));
        const Tensor a = randn(shape_a, generator, dtype), b = randn(shape_b, generator, dtype);
        const Tensor result = matmul(a, b);
        CHECK(result.dtype() == dtype);
        check_against_torch(result, "torch.matmul(a, b)", {a, b});
      }
    }
  }

  SUBCASE("int64 uses exact loops, for every rank pair") {
    const Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
    CHECK_TENSOR(matmul(a, tensor({1, 0, -1})), tensor({-2, -2}));
    CHECK_TENSOR(matmul(tensor({1, 2, 3}), tensor({4, 5, 6})), tensor(32));
    const std::vector<std::pair<Shape, Shape>> shapes = {
        {{3}, {3}}, {{2, 3}, {3}}, {{3}, {3, 4}}, {{2, 3}, {3, 4}}, {{2, 2, 3}, {3}}, {{3}, {2, 3, 4}},
        {{2, 1, 2, 3}, {5, 3, 4}}};
    for (const auto& [shape_a, shape_b] : shapes) {
      CAPTURE(str(shape_a));
      CAPTURE(str(shape_b));
      const Tensor x = int_values(shape_a, 1), y = int_values(shape_b, 2);
      const Tensor result = matmul(x, y);
      CHECK(result.dtype() == DType::Int64);
      CHECK_TENSOR(result, torch_eval1("torch.matmul(a, b)", {x, y}));
    }
  }

  SUBCASE("transposed and broadcast views") {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      // Column-major operands go to BLAS as "transposed".
      const Tensor a = column_major({3, 4}, generator, dtype), b = column_major({4, 5}, generator, dtype);
      CHECK_FALSE(a.is_contiguous());
      check_against_torch(matmul(a, b), "torch.matmul(a, b)", {a, b});
      // A batch of transposed matrices, and a [B, T, C] @ [C, D] product whose
      // left side cannot be flattened into one matrix.
      const Tensor batch = column_major({2, 3, 4}, generator, dtype);
      check_against_torch(matmul(batch, b), "torch.matmul(a, b)", {batch, b});
      check_against_torch(matmul(batch, transposed_view(batch)), "torch.matmul(a, a.transpose(-2, -1))", {batch});
      // Rows that repeat one row (stride 0) are copied before BLAS.
      const Tensor row = randn({4}, generator, dtype);
      const Tensor repeated = repeated_rows(row, 3);
      check_against_torch(matmul(repeated, b), "torch.matmul(a.expand(3, 4), b)", {row, b});
    }
    // A strided (every other element) vector.
    const Tensor v = randn({6}, generator, DType::Float64);
    const Tensor every_other(v.storage(), {3}, {2}, 0, DType::Float64);
    const Tensor m = randn({3, 2}, generator, DType::Float64);
    check_against_torch(matmul(every_other, m), "torch.matmul(a[::2], b)", {v, m});
  }

  SUBCASE("size-0 dims") {
    CHECK_TENSOR(matmul(zeros({0}), zeros({0})), tensor(0.0f));
    CHECK_TENSOR(matmul(ones({2, 0}), ones({0, 3})), zeros({2, 3}));  // k = 0: zeros
    CHECK_TENSOR(matmul(ones({3, 2, 0}), ones({0, 4}, DType::Float32)), zeros({3, 2, 4}));
    CHECK_TENSOR(matmul(ones({2, 0}, DType::Int64), ones({0, 3}, DType::Int64)), zeros({2, 3}, DType::Int64));
    CHECK(matmul(ones({0, 2, 3}), ones({3, 4})).sizes() == Shape{0, 2, 4});
    CHECK(matmul(ones({2, 0, 3}), ones({3, 4})).sizes() == Shape{2, 0, 4});
    CHECK(matmul(ones({2, 3}), ones({3, 0})).sizes() == Shape{2, 0});
  }

  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(matmul(ones({}), ones({3})),
                         "matmul: both arguments need to be at least 1D, but they are 0D and 1D", Error);
    CHECK_THROWS_WITH_AS(matmul(ones({2, 3}), ones({4, 5})), "matmul: shapes [2,3] and [4,5] cannot be multiplied",
                         Error);
    CHECK_THROWS_WITH_AS(matmul(ones({3}), ones({4})), "matmul: shapes [3] and [4] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(matmul(ones({2, 3}), ones({4})), "matmul: shapes [2,3] and [4] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(matmul(ones({4}), ones({2, 3})), "matmul: shapes [4] and [2,3] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(matmul(ones({2, 2, 3}), ones({3, 3, 4})),
                         "matmul: shapes [2,2,3] and [3,3,4] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(matmul(ones({2, 3}), ones({3, 4}, DType::Float64)),
                         "matmul: expected m1 and m2 to have the same dtype, but got: float32 != float64", Error);
    CHECK_THROWS_WITH_AS(matmul(ones({3}, DType::Int64), ones({3})),
                         "matmul: expected m1 and m2 to have the same dtype, but got: int64 != float32", Error);
    CHECK_THROWS_WITH_AS(matmul(ones({2, 3}, DType::Bool), ones({3, 4}, DType::Bool)),
                         "matmul: not implemented for bool tensors", Error);
    CHECK_THROWS_WITH_AS(matmul(ones({3}, DType::Bool), ones({3}, DType::Bool)),
                         "matmul: not implemented for bool tensors", Error);
    // torch raises for all of these too.
    CHECK_THROWS_AS(torch_eval1("torch.matmul(a, b)", {ones({2, 2, 3}), ones({3, 3, 4})}), Error);
    CHECK_THROWS_AS(torch_eval1("torch.matmul(a, b)", {ones({3}, DType::Bool), ones({3}, DType::Bool)}), Error);
  }
}

TEST_CASE("mm") {
  Generator generator(11);

  SUBCASE("hand-worked values") {
    CHECK_TENSOR(mm(tensor({{1.0, 2.0, 3.0}}), tensor({{1.0}, {0.5}, {2.0}})), tensor({{8.0}}));
    CHECK_TENSOR(mm(tensor({{1, 2}, {3, 4}}), tensor({{5, 6}, {7, 8}})), tensor({{19, 22}, {43, 50}}));
  }

  SUBCASE("agrees with torch in float32 and float64, contiguous or transposed") {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      const Tensor a = randn({5, 7}, generator, dtype), b = randn({7, 3}, generator, dtype);
      check_against_torch(mm(a, b), "torch.mm(a, b)", {a, b});
      const Tensor at = column_major({5, 7}, generator, dtype), bt = column_major({7, 3}, generator, dtype);
      check_against_torch(mm(at, b), "torch.mm(a, b)", {at, b});
      check_against_torch(mm(a, bt), "torch.mm(a, b)", {a, bt});
      check_against_torch(mm(at, bt), "torch.mm(a, b)", {at, bt});
      // Row and column vectors as matrices (size-1 dims with any stride).
      const Tensor column = transposed_view(randn({1, 7}, generator, dtype));
      check_against_torch(mm(a, column), "torch.mm(a, b)", {a, column});
    }
  }

  SUBCASE("int64 wraps around on overflow, as torch") {
    const Tensor big = tensor({{std::int64_t{1} << 62}}), four = tensor({{4}});
    CHECK_TENSOR(mm(big, four), torch_eval1("torch.mm(a, b)", {big, four}));
    CHECK(mm(big, four).item<std::int64_t>() == 0);
  }

  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(mm(ones({3}), ones({3, 3})), "mm: self must be a matrix, got 1-D tensor", Error);
    CHECK_THROWS_WITH_AS(mm(ones({3, 3}), ones({3})), "mm: mat2 must be a matrix, got 1-D tensor", Error);
    CHECK_THROWS_WITH_AS(mm(ones({2, 3}), ones({4, 5})), "mm: shapes [2,3] and [4,5] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(mm(ones({2, 3}), ones({3, 4}, DType::Float64)),
                         "mm: expected m1 and m2 to have the same dtype, but got: float32 != float64", Error);
    CHECK_THROWS_WITH_AS(mm(ones({2, 3}, DType::Bool), ones({3, 4}, DType::Bool)),
                         "mm: not implemented for bool tensors", Error);
    CHECK_THROWS_AS(torch_eval1("torch.mm(a, b)", {ones({2, 3}, DType::Bool), ones({3, 4}, DType::Bool)}), Error);
    CHECK_THROWS_WITH_AS(mm(Tensor(), ones({3, 4})), "mm: tensor is undefined", Error);
  }
}

TEST_CASE("bmm") {
  Generator generator(13);

  SUBCASE("hand-worked values") {
    const Tensor a = tensor({{{1.0, 2.0}}, {{3.0, 4.0}}});    // [2, 1, 2]
    const Tensor b = tensor({{{1.0}, {1.0}}, {{2.0}, {0.0}}});  // [2, 2, 1]
    CHECK_TENSOR(bmm(a, b), tensor({{{3.0}}, {{6.0}}}));
  }

  SUBCASE("agrees with torch, with transposed batches and int64") {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      const Tensor a = randn({3, 4, 5}, generator, dtype), b = column_major({3, 5, 2}, generator, dtype);
      check_against_torch(bmm(a, b), "torch.bmm(a, b)", {a, b});
      check_against_torch(bmm(transposed_view(b), transposed_view(a)), "torch.bmm(a, b)",
                          {transposed_view(b), transposed_view(a)});
    }
    const Tensor x = int_values({2, 3, 4}, 1), y = int_values({2, 4, 2}, 2);
    CHECK_TENSOR(bmm(x, y), torch_eval1("torch.bmm(a, b)", {x, y}));
  }

  SUBCASE("size-0 dims") {
    CHECK(bmm(ones({0, 2, 3}), ones({0, 3, 4})).sizes() == Shape{0, 2, 4});
    CHECK_TENSOR(bmm(ones({2, 2, 0}), ones({2, 0, 4})), zeros({2, 2, 4}));
  }

  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(bmm(ones({2, 3}), ones({2, 3, 3})), "bmm: batch1 must be a 3D tensor, got 2-D tensor", Error);
    CHECK_THROWS_WITH_AS(bmm(ones({2, 2, 3}), ones({2, 3})), "bmm: batch2 must be a 3D tensor, got 2-D tensor", Error);
    CHECK_THROWS_WITH_AS(bmm(ones({2, 2, 3}), ones({3, 3, 3})),
                         "bmm: shapes [2,2,3] and [3,3,3] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(bmm(ones({2, 2, 3}), ones({2, 4, 3})),
                         "bmm: shapes [2,2,3] and [2,4,3] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(bmm(ones({1, 2, 3}, DType::Float64), ones({1, 3, 4})),
                         "bmm: expected m1 and m2 to have the same dtype, but got: float64 != float32", Error);
    CHECK_THROWS_WITH_AS(bmm(ones({1, 2, 3}, DType::Bool), ones({1, 3, 4}, DType::Bool)),
                         "bmm: not implemented for bool tensors", Error);
  }
}

TEST_CASE("addmm") {
  Generator generator(17);

  SUBCASE("hand-worked values") {
    // 2 * [[10, 20]] + 3 * ([[1, 2]] @ [[1, 0], [0, 1]]) = [[23, 46]]
    CHECK_TENSOR(addmm(tensor({{10.0, 20.0}}), tensor({{1.0, 2.0}}), tensor({{1.0, 0.0}, {0.0, 1.0}}), 2, 3),
                 tensor({{23.0, 46.0}}));
  }

  SUBCASE("agrees with torch: beta, alpha, broadcast self, transposed mats") {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      const Tensor mat1 = randn({4, 3}, generator, dtype), mat2 = column_major({3, 5}, generator, dtype);
      for (const Shape& self_shape : {Shape{4, 5}, Shape{5}, Shape{1, 5}, Shape{4, 1}, Shape{}}) {
        CAPTURE(str(self_shape));
        const Tensor self = randn(self_shape, generator, dtype);
        check_against_torch(addmm(self, mat1, mat2), "torch.addmm(a, b, c)", {self, mat1, mat2});
        check_against_torch(addmm(self, mat1, mat2, 0.5, -2.0), "torch.addmm(a, b, c, beta=0.5, alpha=-2.0)",
                            {self, mat1, mat2});
      }
      const Tensor self_t = column_major({4, 5}, generator, dtype);
      check_against_torch(addmm(self_t, mat1, mat2, 2), "torch.addmm(a, b, c, beta=2)", {self_t, mat1, mat2});
    }
  }

  SUBCASE("beta = 0 ignores NaN in self; alpha = 0 ignores inf in the mats") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (DType dtype : {DType::Float32, DType::Float64}) {
      const Tensor self = tensor({{nan, 1.0}, {1.0, 1.0}}, dtype), mats = ones({2, 2}, dtype);
      CHECK_TENSOR(addmm(self, mats, mats, 0), full({2, 2}, 2.0, dtype));
      CHECK_TENSOR(addmm(self, mats, mats, 0), torch_eval1("torch.addmm(a, b, b, beta=0)", {self, mats}));
      CHECK_TENSOR(addmm(self, mats, mats, 0.0), full({2, 2}, 2.0, dtype));
      CHECK(std::isnan(addmm(self, mats, mats).at<double>({0, 0})));  // beta = 1 keeps it

      const Tensor with_inf = tensor({{inf, 1.0}, {1.0, 1.0}}, dtype);
      CHECK_TENSOR(addmm(mats, with_inf, mats, 1, 0), mats);
      CHECK_TENSOR(addmm(mats, with_inf, mats, 1, 0), torch_eval1("torch.addmm(a, b, a, alpha=0)", {mats, with_inf}));
    }
  }

  SUBCASE("int64 truncates beta and alpha to integers, as torch") {
    const Tensor self = ones({2, 4}, DType::Int64), mat1 = int_values({2, 3}, 1), mat2 = int_values({3, 4}, 2);
    CHECK_TENSOR(addmm(self, mat1, mat2, 2, 3), torch_eval1("torch.addmm(a, b, c, beta=2, alpha=3)", {self, mat1, mat2}));
    CHECK_TENSOR(addmm(self, mat1, mat2, 0.5, 1.5),
                 torch_eval1("torch.addmm(a, b, c, beta=0.5, alpha=1.5)", {self, mat1, mat2}));
  }

  SUBCASE("beta and alpha must fit the dtype, as in torch") {
    const Tensor ints = ones({2, 2}, DType::Int64);
    CHECK_THROWS_WITH_AS(addmm(ints, ints, ints, NAN), "addmm: beta=nan cannot be converted to type int64 without overflow",
                         Error);
    CHECK_THROWS_WITH_AS(addmm(ints, ints, ints, 1, 1e30),
                         "addmm: alpha=1e+30 cannot be converted to type int64 without overflow", Error);
    // 2^63 passes c10's check and converts to INT64_MIN.
    CHECK_TENSOR(addmm(ints, ints, ints, 0x1p63), torch_eval1("torch.addmm(a, a, a, beta=2.0**63)", {ints}));
    const Tensor floats = ones({2, 2});
    CHECK_THROWS_WITH_AS(addmm(floats, floats, floats, 1, 1e300),
                         "addmm: alpha=1e+300 cannot be converted to type float32 without overflow", Error);
    CHECK_TENSOR(addmm(floats, floats, floats, NAN, INFINITY),
                 torch_eval1("torch.addmm(a, a, a, beta=math.nan, alpha=math.inf)", {floats}));
  }

  SUBCASE("k = 0: only beta * self") {
    CHECK_TENSOR(addmm(ones({2, 4}), ones({2, 0}), ones({0, 4}), 2), full({2, 4}, 2.0));
  }

  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(addmm(ones({2, 2}), ones({2}), ones({2, 2})), "addmm: mat1 must be a matrix, got 1-D tensor",
                         Error);
    CHECK_THROWS_WITH_AS(addmm(ones({2, 2}), ones({2, 2}), ones({2})), "addmm: mat2 must be a matrix, got 1-D tensor",
                         Error);
    CHECK_THROWS_WITH_AS(addmm(ones({2, 2}), ones({2, 3}), ones({2, 2})),
                         "addmm: shapes [2,3] and [2,2] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(addmm(ones({3}), ones({2, 3}), ones({3, 4})),
                         "addmm: self of shape [3] cannot be broadcast to the result shape [2,4]", Error);
    CHECK_THROWS_WITH_AS(addmm(ones({2, 2, 2}), ones({2, 3}), ones({3, 2})),
                         "addmm: self of shape [2,2,2] cannot be broadcast to the result shape [2,2]", Error);
    CHECK_THROWS_WITH_AS(addmm(ones({3, 2}), ones({2, 2}), ones({2, 2}), 0),
                         "addmm: self of shape [3,2] cannot be broadcast to the result shape [2,2]", Error);
    CHECK_THROWS_WITH_AS(addmm(ones({2, 2}), ones({2, 2}, DType::Float64), ones({2, 2})),
                         "addmm: mat1 and mat2 must have the same dtype, but got float64 and float32", Error);
    CHECK_THROWS_WITH_AS(addmm(ones({2, 2}, DType::Int64), ones({2, 2}), ones({2, 2})),
                         "addmm: self and mat2 must have the same dtype, but got int64 and float32", Error);
    CHECK_THROWS_WITH_AS(addmm(ones({2, 2}, DType::Bool), ones({2, 2}, DType::Bool), ones({2, 2}, DType::Bool)),
                         "addmm: not implemented for bool tensors", Error);
  }
}

TEST_CASE("outer") {
  SUBCASE("hand-worked values") {
    CHECK_TENSOR(outer(tensor({1.0, 2.0}), tensor({3.0, 4.0, 5.0})), tensor({{3.0, 4.0, 5.0}, {6.0, 8.0, 10.0}}));
    CHECK_TENSOR(outer(tensor({true, false}), tensor({true, true})), tensor({{true, true}, {false, false}}));
  }

  SUBCASE("dtypes promote like a broadcast multiply, as torch") {
    const std::vector<Tensor> vectors = {tensor({1.5, -2.0}), tensor({1.5, -2.0}, DType::Float64), tensor({3, -4}),
                                         tensor({true, false})};
    for (const Tensor& x : vectors)
      for (const Tensor& y : vectors) {
        CAPTURE(dtype_name(x.dtype()));
        CAPTURE(dtype_name(y.dtype()));
        CHECK_TENSOR(outer(x, y), torch_eval1("torch.outer(a, b)", {x, y}));
      }
  }

  SUBCASE("strided input and size-0 dims") {
    const Tensor v = arange(6.0);
    const Tensor every_other(v.storage(), {3}, {2}, 0, v.dtype());
    CHECK_TENSOR(outer(every_other, tensor({1.0, -1.0})), tensor({{0.0, -0.0}, {2.0, -2.0}, {4.0, -4.0}}));
    CHECK(outer(zeros({0}), zeros({3})).sizes() == Shape{0, 3});
  }

  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(outer(ones({3, 1}), ones({3})), "outer: Expected 1-D argument self, but got 2-D", Error);
    CHECK_THROWS_WITH_AS(outer(ones({3}), ones({})), "outer: Expected 1-D argument vec2, but got 0-D", Error);
  }
}

TEST_CASE("dot") {
  Generator generator(19);

  SUBCASE("hand-worked values") {
    CHECK_TENSOR(dot(tensor({1.0, 2.0, 3.0}), tensor({4.0, -5.0, 6.0})), tensor(12.0));
    CHECK_TENSOR(dot(tensor({1, 2, 3}), tensor({4, -5, 6})), tensor(12));
    CHECK_TENSOR(dot(zeros({0}), zeros({0})), tensor(0.0f));  // empty sum
  }

  SUBCASE("agrees with torch, including strided and broadcast vectors") {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      const Tensor x = randn({50}, generator, dtype), y = randn({50}, generator, dtype);
      check_against_torch(dot(x, y), "torch.dot(a, b)", {x, y});
      const Tensor every_other(x.storage(), {25}, {2}, 0, dtype);
      const Tensor first_repeated(y.storage(), {25}, {0}, 0, dtype);  // stride 0
      check_against_torch(dot(every_other, first_repeated), "torch.dot(a[::2], b[0].expand(25))", {x, y});
    }
  }

  SUBCASE("a one-element vector's stride does not matter") {
    const Tensor three = tensor({3.0});
    const Tensor far(three.storage(), {1}, {std::int64_t{1} << 40}, 0, DType::Float32);
    CHECK_TENSOR(dot(far, far), tensor(9.0f));
  }

  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(dot(ones({3, 1}), ones({3})), "dot: 1D tensors expected, but got 2D and 1D tensors", Error);
    CHECK_THROWS_WITH_AS(dot(ones({3}), ones({})), "dot: 1D tensors expected, but got 1D and 0D tensors", Error);
    CHECK_THROWS_WITH_AS(dot(ones({3}), ones({4})), "dot: shapes [3] and [4] cannot be multiplied", Error);
    CHECK_THROWS_WITH_AS(dot(ones({3}, DType::Int64), ones({3})),
                         "dot: expected both vectors to have same dtype, but found int64 and float32", Error);
    CHECK_THROWS_WITH_AS(dot(ones({3}, DType::Bool), ones({3}, DType::Bool)), "dot: not implemented for bool tensors",
                         Error);
  }
}

}  // TEST_SUITE
