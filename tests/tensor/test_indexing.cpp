// Indexing ops: index_select, gather, scatter, scatter_add, index_add, index,
// index_put, masked_select, masked_scatter, embedding, one_hot.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;

namespace {

// A transposed view of a contiguous 2-d tensor (shares its storage).
Tensor transposed(const Tensor& t) {
  REQUIRE(t.dim() == 2);
  REQUIRE(t.is_contiguous());
  return Tensor(t.storage(), {t.size(1), t.size(0)}, {1, t.size(1)}, t.storage_offset(), t.dtype());
}

// A [2,3,4] float32 tensor 0..23 (built without other groups' ops).
Tensor cube() {
  std::vector<float> values(24);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  return from_vector(values, {2, 3, 4});
}

Tensor longs(const std::vector<std::int64_t>& values, const Shape& sizes) { return from_vector(values, sizes); }
Tensor bools(const std::vector<bool>& values, const Shape& sizes) { return from_vector(values, sizes); }

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("index_select") {
  const Tensor a = tensor({{0.0, 1.0, 2.0}, {3.0, 4.0, 5.0}});
  Generator gen(1);

  SUBCASE("hand values") {
    CHECK_TENSOR(index_select(a, 1, tensor({2, 0, 2})), tensor({{2.0, 0.0, 2.0}, {5.0, 3.0, 5.0}}));
    CHECK_TENSOR(index_select(a, 0, tensor({1})), tensor({{3.0, 4.0, 5.0}}));
    CHECK_TENSOR(index_select(a, -1, tensor(1)), tensor({{1.0}, {4.0}}));  // 0-d index
  }
  SUBCASE("torch") {
    const Tensor x = randn({4, 5, 3}, gen, DType::Float64);
    const Tensor i = tensor({3, 0, 0, 1});
    CHECK_TENSOR(index_select(x, 0, i), torch_eval1("torch.index_select(a, 0, b)", {x, i}));
    CHECK_TENSOR(index_select(x, 1, i), torch_eval1("torch.index_select(a, 1, b)", {x, i}));
    CHECK_TENSOR(index_select(x, -1, tensor({2, 1})), torch_eval1("torch.index_select(a, -1, b)", {x, tensor({2, 1})}));
    const Tensor xt = transposed(randn({3, 4}, gen));
    CHECK_TENSOR(index_select(xt, 1, tensor({2, 0})), torch_eval1("torch.index_select(a, 1, b)", {xt, tensor({2, 0})}));
    CHECK_TENSOR(index_select(xt, 0, tensor({3})), torch_eval1("torch.index_select(a, 0, b)", {xt, tensor({3})}));
    const Tensor ints = tensor({{1, 2}, {3, 4}});
    CHECK_TENSOR(index_select(ints, 1, tensor({1, 1})),
                 torch_eval1("torch.index_select(a, 1, b)", {ints, tensor({1, 1})}));
    const Tensor flags = tensor({true, false});
    CHECK_TENSOR(index_select(flags, 0, tensor({1, 0})),
                 torch_eval1("torch.index_select(a, 0, b)", {flags, tensor({1, 0})}));
  }
  SUBCASE("0-d and size-0") {
    const Tensor s = tensor(5.0);
    CHECK_TENSOR(index_select(s, 0, tensor({0})), torch_eval1("torch.index_select(a, 0, b)", {s, tensor({0})}));
    CHECK(index_select(s, -1, tensor(0)).dim() == 0);
    const Tensor none = longs({}, {0});
    CHECK_TENSOR(index_select(a, 1, none), torch_eval1("torch.index_select(a, 1, b)", {a, none}));
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(index_select(e, 1, tensor({2})), torch_eval1("torch.index_select(a, 1, b)", {e, tensor({2})}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(index_select(a, 1, tensor({3})),
                         "index_select: index 3 is out of bounds for dimension 1 with size 3", Error);
    CHECK_THROWS_WITH_AS(index_select(a, 1, tensor({-1})),
                         "index_select: index -1 is out of bounds for dimension 1 with size 3", Error);
    CHECK_THROWS_WITH_AS(index_select(zeros({0, 3}), 0, tensor({0})),
                         "index_select: index 0 is out of bounds for dimension 0 with size 0", Error);
    CHECK_THROWS_WITH_AS(index_select(a, 1, tensor({0.0})),
                         "index_select: expected an int32 or int64 index tensor, got float32", Error);
    CHECK_THROWS_WITH_AS(index_select(a, 1, tensor({true})), "index_select: expected an int32 or int64 index tensor, got bool",
                         Error);
    CHECK_THROWS_WITH_AS(index_select(a, 1, tensor({{0, 1}})),
                         "index_select: index must be 0-d or 1-d, got shape [1,2]", Error);
    CHECK_THROWS_WITH_AS(index_select(a, 2, tensor({0})),
                         "index_select: dimension out of range (expected to be in range of [-2, 1], but got 2)", Error);
    CHECK_THROWS_WITH_AS(index_select(tensor(5.0), 0, tensor({0, 0})),
                         "index_select: an index into a 0-d tensor must have one value, got 2", Error);
    CHECK_THROWS_WITH_AS(index_select(tensor(5.0), 0, tensor({1})),
                         "index_select: index 1 is out of bounds for dimension 0 with size 1", Error);
    // torch rejects negative indices here too.
    CHECK(testing::torch_run("torch.index_select(a, 1, b)", {a, tensor({-1})}).ok == false);
  }
}

TEST_CASE("gather") {
  Generator gen(2);
  SUBCASE("hand values") {
    const Tensor t = tensor({{1, 2}, {3, 4}});
    CHECK_TENSOR(gather(t, 1, tensor({{0, 0}, {1, 0}})), tensor({{1, 1}, {4, 3}}));
    CHECK_TENSOR(gather(t, 0, tensor({{1, 0}})), tensor({{3, 2}}));
  }
  SUBCASE("torch") {
    const Tensor x = randn({3, 4}, gen);
    const Tensor i0 = longs({2, 0, 1, 1, 0, 0, 2, 2}, {2, 4});
    CHECK_TENSOR(gather(x, 0, i0), torch_eval1("torch.gather(a, 0, b)", {x, i0}));
    const Tensor i1 = longs({3, 3, 0, 1, 2, 0}, {3, 2});
    CHECK_TENSOR(gather(x, -1, i1), torch_eval1("torch.gather(a, -1, b)", {x, i1}));
    // Index larger than self along the gathered dim.
    const Tensor i2 = longs({0, 1, 2, 3, 3, 3, 0, 1}, {1, 8});
    CHECK_TENSOR(gather(x, 1, i2), torch_eval1("torch.gather(a, 1, b)", {x, i2}));
    // Non-contiguous self and index.
    const Tensor xt = transposed(x);  // [4,3]
    const Tensor it = transposed(longs({0, 2, 1, 1, 0, 2}, {2, 3}));  // [3,2]
    CHECK_TENSOR(gather(xt, 1, it), torch_eval1("torch.gather(a, 1, b)", {xt, it}));
    const Tensor x3 = randn({2, 3, 4}, gen, DType::Float64);
    const Tensor i3 = longs({2, 1, 0, 0, 1, 2}, {1, 3, 2});
    CHECK_TENSOR(gather(x3, 1, i3), torch_eval1("torch.gather(a, 1, b)", {x3, i3}));
  }
  SUBCASE("0-d and size-0") {
    const Tensor s = tensor(5.0);
    CHECK_TENSOR(gather(s, 0, tensor(0)), torch_eval1("torch.gather(a, 0, b)", {s, tensor(0)}));
    CHECK_TENSOR(gather(s, 0, tensor({0, 0})), torch_eval1("torch.gather(a, 0, b)", {s, tensor({0, 0})}));
    const Tensor x = randn({2, 3}, gen);
    const Tensor none = longs({}, {0, 5});
    CHECK_TENSOR(gather(x, 1, none), torch_eval1("torch.gather(a, 1, b)", {x, none}));
    CHECK_TENSOR(gather(x, 1, longs({}, {0})), torch_eval1("torch.gather(a, 1, b)", {x, longs({}, {0})}));
    // ATen checks an empty index's dtype no more than its shape.
    const Tensor empty_floats = zeros({0, 5});
    CHECK_TENSOR(gather(x, 1, empty_floats), torch_eval1("torch.gather(a, 1, b)", {x, empty_floats}));
  }
  SUBCASE("errors") {
    const Tensor x = zeros({2, 3});
    CHECK_THROWS_WITH_AS(gather(x, 1, tensor({{3}})), "gather: index 3 is out of bounds for dimension 1 with size 3",
                         Error);
    CHECK_THROWS_WITH_AS(gather(x, 1, tensor({{-1}})), "gather: index -1 is out of bounds for dimension 1 with size 3",
                         Error);
    CHECK_THROWS_WITH_AS(gather(tensor(5.0), 0, tensor({1})),
                         "gather: index 1 is out of bounds for dimension 0 with size 1", Error);
    CHECK_THROWS_WITH_AS(gather(x, 1, tensor({{0.0}})), "gather: expected an int32 or int64 index tensor, got float32", Error);
    CHECK_THROWS_WITH_AS(gather(x, 1, tensor({0})),
                         "gather: index tensor must have the same number of dimensions as self tensor (index [1], self [2,3])",
                         Error);
    CHECK_THROWS_WITH_AS(gather(x, 1, zeros({3, 1}, DType::Int64)),
                         "gather: index [3,1] must be no larger than self [2,3] apart from dimension 1 (dimension 0)",
                         Error);
    CHECK_THROWS_WITH_AS(gather(x, 2, tensor({{0}})),
                         "gather: dimension out of range (expected to be in range of [-2, 1], but got 2)", Error);
  }
}

TEST_CASE("scatter") {
  Generator gen(3);
  SUBCASE("hand values") {
    const Tensor self = zeros({2, 3});
    const Tensor out = scatter(self, 1, tensor({{2, 0}}), tensor({{10.0, 20.0, 30.0}}));
    CHECK_TENSOR(out, tensor({{20.0, 0.0, 10.0}, {0.0, 0.0, 0.0}}));
    CHECK(self.to_vector<double>() == std::vector<double>(6, 0.0));  // out of place
    CHECK_TENSOR(scatter(self, 0, tensor({{1, 0, 1}}), 7), tensor({{0.0, 7.0, 0.0}, {7.0, 0.0, 7.0}}));
  }
  SUBCASE("torch, tensor src") {
    const Tensor x = randn({3, 4}, gen);
    const Tensor src = randn({2, 5}, gen);
    const Tensor i0 = longs({2, 0, 1, 0, 1, 2, 0, 2}, {2, 4});  // no duplicates within a column
    CHECK_TENSOR(scatter(x, 0, i0, src), torch_eval1("torch.scatter(a, 0, b, c)", {x, i0, src}));
    const Tensor i1 = longs({3, 0, 1, 2}, {2, 2});
    CHECK_TENSOR(scatter(x, -1, i1, src), torch_eval1("torch.scatter(a, -1, b, c)", {x, i1, src}));
    const Tensor xt = transposed(randn({4, 3}, gen));  // [3,4], non-contiguous
    const Tensor st = transposed(randn({4, 2}, gen));   // [2,4]
    CHECK_TENSOR(scatter(xt, 0, i0, st), torch_eval1("torch.scatter(a, 0, b, c)", {xt, i0, st}));
    const Tensor ints = tensor({{1, 2, 3}});
    CHECK_TENSOR(scatter(ints, 1, tensor({{2}}), tensor({{9}})),
                 torch_eval1("torch.scatter(a, 1, b, c)", {ints, tensor({{2}}), tensor({{9}})}));
  }
  SUBCASE("torch, scalar value") {
    const Tensor x = randn({3, 4}, gen, DType::Float64);
    const Tensor i = longs({0, 3, 1, 2}, {2, 2});
    CHECK_TENSOR(scatter(x, 1, i, 2.5), torch_eval1("torch.scatter(a, 1, b, 2.5)", {x, i}));
    const Tensor ints = tensor({{1, 2, 3, 4}});
    CHECK_TENSOR(scatter(ints, 1, tensor({{3, 0}}), 7.5),
                 torch_eval1("torch.scatter(a, 1, b, 7.5)", {ints, tensor({{3, 0}})}));
    const Tensor flags = tensor({false, false, false});
    CHECK_TENSOR(scatter(flags, 0, tensor({1}), true),
                 torch_eval1("torch.scatter(a, 0, b, True)", {flags, tensor({1})}));
  }
  SUBCASE("0-d and size-0") {
    const Tensor s = tensor(5.0);
    CHECK_TENSOR(scatter(s, 0, tensor({0}), tensor({1.0})),
                 torch_eval1("torch.scatter(a, 0, b, c)", {s, tensor({0}), tensor({1.0})}));
    CHECK_TENSOR(scatter(s, 0, tensor(0), tensor(2.0)),
                 torch_eval1("torch.scatter(a, 0, b, c)", {s, tensor(0), tensor(2.0)}));
    const Tensor x = randn({2, 3}, gen);
    const Tensor none = longs({}, {0, 5});
    CHECK_TENSOR(scatter(x, 1, none, tensor({{1.0}})),
                 torch_eval1("torch.scatter(a, 1, b, c)", {x, none, tensor({{1.0}})}));
    CHECK_TENSOR(scatter(x, 1, longs({}, {0}), 1.0), x);
    const Tensor empty_floats = zeros({0});
    CHECK_TENSOR(scatter(x, 1, empty_floats, 1.0), torch_eval1("torch.scatter(a, 1, b, 1.0)", {x, empty_floats}));
  }
  SUBCASE("a value that does not fit the dtype") {
    // Converted as c10 converts a Scalar: NaN and out-of-range floats raise
    // instead of an undefined cast, only when something is written.
    const Tensor ints = zeros({3}, DType::Int64);
    CHECK_THROWS_WITH_AS(scatter(ints, 0, tensor({0}), NAN),
                         "scatter: value nan cannot be converted to type int64 without overflow", Error);
    CHECK_THROWS_WITH_AS(scatter(ints, 0, tensor({0}), 1e30),
                         "scatter: value 1e+30 cannot be converted to type int64 without overflow", Error);
    CHECK(testing::torch_run("torch.scatter(a, 0, b, 1e30)", {ints, tensor({0})}).ok == false);
    CHECK_TENSOR(scatter(ints, 0, longs({}, {0}), NAN), ints);
    CHECK_TENSOR(scatter(ints, 0, tensor({1}), -0x1p63), torch_eval1("torch.scatter(a, 0, b, -2.**63)", {ints, tensor({1})}));
    CHECK_THROWS_WITH_AS(scatter(zeros({3}), 0, tensor({0}), 1e39),
                         "scatter: value 1e+39 cannot be converted to type float32 without overflow", Error);
    CHECK_TENSOR(scatter(zeros({3}), 0, tensor({0}), NAN), torch_eval1("torch.scatter(a, 0, b, float('nan'))", {zeros({3}), tensor({0})}));
  }
  SUBCASE("errors") {
    const Tensor x = zeros({2, 3});
    const Tensor src = ones({1, 3});
    CHECK_THROWS_WITH_AS(scatter(x, 1, tensor({{3}}), src),
                         "scatter: index 3 is out of bounds for dimension 1 with size 3", Error);
    CHECK_THROWS_WITH_AS(scatter(x, 1, tensor({{-1}}), 1.0),
                         "scatter: index -1 is out of bounds for dimension 1 with size 3", Error);
    CHECK_THROWS_WITH_AS(scatter(x, 1, tensor({{0}}), ones({1, 3}, DType::Float64)),
                         "scatter: expected self and src to have the same dtype, got float32 and float64", Error);
    CHECK_THROWS_WITH_AS(scatter(x, 1, tensor({{0.0}}), src), "scatter: expected an int32 or int64 index tensor, got float32",
                         Error);
    CHECK_THROWS_WITH_AS(scatter(x, 1, tensor({0}), src),
                         "scatter: index tensor must have the same number of dimensions as self tensor (index [1], self [2,3])",
                         Error);
    CHECK_THROWS_WITH_AS(scatter(x, 1, tensor({{0}}), tensor(1.0)),
                         "scatter: index tensor must have the same number of dimensions as src tensor (index [1,1], src [])",
                         Error);
    CHECK_THROWS_WITH_AS(scatter(x, 1, tensor({{0, 1, 2, 0}}), src),
                         "scatter: index [1,4] must be no larger than src [1,3] (dimension 1)", Error);
    CHECK_THROWS_WITH_AS(scatter(x, 1, zeros({3, 1}, DType::Int64), 0.0),
                         "scatter: index [3,1] must be no larger than self [2,3] apart from dimension 1 (dimension 0)",
                         Error);
    CHECK_THROWS_WITH_AS(scatter(x, -3, tensor({{0}}), src),
                         "scatter: dimension out of range (expected to be in range of [-2, 1], but got -3)", Error);
  }
}

TEST_CASE("int64 accumulation wraps around as torch's does") {
  // INT64_MIN + -1: signed overflow, undefined in C++; torch's kernels wrap to INT64_MAX.
  const Tensor low = full({1}, std::numeric_limits<std::int64_t>::min(), DType::Int64);
  const Tensor minus_one = full({1}, -1, DType::Int64);
  const Tensor index = tensor({0}, DType::Int64);
  const Tensor expected = torch_eval1("a.index_add(0, b, c)", {low, index, minus_one});
  CHECK(expected.item<std::int64_t>() == std::numeric_limits<std::int64_t>::max());
  CHECK(equal(index_add(low, 0, index, minus_one), expected));
  CHECK(equal(scatter_add(minus_one, 0, index, low), torch_eval1("a.scatter_add(0, b, c)", {minus_one, index, low})));
  CHECK(equal(index_put(low, {index}, minus_one, true), torch_eval1("a.index_put((b,), c, True)", {low, index, minus_one})));
  // alpha * source wraps too: 2 * 2^62 = 2^63 wraps to INT64_MIN
  const Tensor big = full({1}, std::int64_t{1} << 62, DType::Int64), zero = zeros({1}, DType::Int64);
  CHECK(equal(index_add(zero, 0, index, big, 2), torch_eval1("a.index_add(0, b, c, alpha=2)", {zero, index, big})));
}

TEST_CASE("scatter_add") {
  Generator gen(4);
  SUBCASE("hand values: duplicates accumulate") {
    CHECK_TENSOR(scatter_add(zeros({2, 3}), 1, tensor({{0, 0, 2}}), tensor({{1.0, 2.0, 3.0}})),
                 tensor({{3.0, 0.0, 3.0}, {0.0, 0.0, 0.0}}));
    CHECK_TENSOR(scatter_add(tensor({1, 1}), 0, tensor({1, 1, 1}), tensor({5, 6, 7})), tensor({1, 19}));
  }
  SUBCASE("torch") {
    const Tensor x = randn({3, 4}, gen, DType::Float64);
    const Tensor src = randn({4, 4}, gen, DType::Float64);
    const Tensor i = longs({2, 2, 2, 0, 2, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0}, {4, 4});
    CHECK_TENSOR(scatter_add(x, 0, i, src), torch_eval1("torch.scatter_add(a, 0, b, c)", {x, i, src}));
    const Tensor i1 = longs({3, 3, 0, 1}, {2, 2});
    CHECK_TENSOR(scatter_add(x, -1, i1, src), torch_eval1("torch.scatter_add(a, -1, b, c)", {x, i1, src}));
    const Tensor xt = transposed(randn({4, 3}, gen, DType::Float64));
    CHECK_TENSOR(scatter_add(xt, 1, i1, src), torch_eval1("torch.scatter_add(a, 1, b, c)", {xt, i1, src}));
    const Tensor flags = tensor({{false, false}});
    const Tensor fsrc = tensor({{true, false}});
    CHECK_TENSOR(scatter_add(flags, 1, tensor({{1, 1}}), fsrc),
                 torch_eval1("torch.scatter_add(a, 1, b, c)", {flags, tensor({{1, 1}}), fsrc}));
    const Tensor s = tensor(1.0);
    CHECK_TENSOR(scatter_add(s, 0, tensor({0, 0}), tensor({2.0, 3.0})),
                 torch_eval1("torch.scatter_add(a, 0, b, c)", {s, tensor({0, 0}), tensor({2.0, 3.0})}));
    CHECK_TENSOR(scatter_add(x, 0, longs({}, {0}), src), x);
  }
  SUBCASE("errors") {
    const Tensor x = zeros({2, 3});
    CHECK_THROWS_WITH_AS(scatter_add(x, 0, tensor({{2}}), ones({1, 1})),
                         "scatter_add: index 2 is out of bounds for dimension 0 with size 2", Error);
    CHECK_THROWS_WITH_AS(scatter_add(x, 0, tensor({{0}}), ones({1, 1}, DType::Int64)),
                         "scatter_add: expected self and src to have the same dtype, got float32 and int64", Error);
    CHECK_THROWS_WITH_AS(scatter_add(x, 0, tensor({{true}}), ones({1, 1})),
                         "scatter_add: expected an int32 or int64 index tensor, got bool", Error);
    CHECK_THROWS_WITH_AS(scatter_add(x, 0, tensor({{0, 0}}), ones({1, 1})),
                         "scatter_add: index [1,2] must be no larger than src [1,1] (dimension 1)", Error);
  }
}

TEST_CASE("index_add") {
  Generator gen(5);
  const Tensor a = tensor({{0.0, 1.0, 2.0}, {3.0, 4.0, 5.0}});
  SUBCASE("hand values: duplicates accumulate, alpha scales") {
    CHECK_TENSOR(index_add(a, 1, tensor({0, 0}), ones({2, 2})), tensor({{2.0, 1.0, 2.0}, {5.0, 4.0, 5.0}}));
    CHECK_TENSOR(index_add(a, 0, tensor({1}), tensor({{1.0, 1.0, 1.0}}), 2),
                 tensor({{0.0, 1.0, 2.0}, {5.0, 6.0, 7.0}}));
    CHECK(a.at<double>({0, 0}) == 0.0);  // out of place
  }
  SUBCASE("torch") {
    const Tensor x = randn({4, 3}, gen, DType::Float64);
    const Tensor src = randn({5, 3}, gen, DType::Float64);
    const Tensor i = tensor({3, 0, 3, 3, 1});
    CHECK_TENSOR(index_add(x, 0, i, src), torch_eval1("torch.index_add(a, 0, b, c)", {x, i, src}));
    CHECK_TENSOR(index_add(x, 0, i, src, 2.5), torch_eval1("torch.index_add(a, 0, b, c, alpha=2.5)", {x, i, src}));
    const Tensor src1 = randn({4, 2}, gen, DType::Float64);
    CHECK_TENSOR(index_add(x, -1, tensor({2, 2}), src1),
                 torch_eval1("torch.index_add(a, -1, b, c)", {x, tensor({2, 2}), src1}));
    const Tensor xt = transposed(randn({3, 4}, gen, DType::Float64));        // [4,3]
    const Tensor st = transposed(randn({3, 5}, gen, DType::Float64));        // [5,3]
    CHECK_TENSOR(index_add(xt, 0, i, st, -1), torch_eval1("torch.index_add(a, 0, b, c, alpha=-1)", {xt, i, st}));
    // A float alpha is truncated for integer tensors, as torch does.
    const Tensor ints = tensor({{1, 2}, {3, 4}});
    const Tensor isrc = tensor({{1, 1}, {1, 1}});
    CHECK_TENSOR(index_add(ints, 1, tensor({1, 1}), isrc, 2.5),
                 torch_eval1("torch.index_add(a, 1, b, c, alpha=2.5)", {ints, tensor({1, 1}), isrc}));
    const Tensor flags = tensor({false, false});
    CHECK_TENSOR(index_add(flags, 0, tensor({1}), tensor({true})),
                 torch_eval1("torch.index_add(a, 0, b, c)", {flags, tensor({1}), tensor({true})}));
  }
  SUBCASE("0-d and size-0") {
    const Tensor s = tensor(1.0);
    CHECK_TENSOR(index_add(s, 0, tensor({0}), tensor(2.0)),
                 torch_eval1("torch.index_add(a, 0, b, c)", {s, tensor({0}), tensor(2.0)}));
    const Tensor rows = zeros({3, 2});
    CHECK_TENSOR(index_add(rows, 0, tensor(2), tensor({{2.0, 1.0}})),
                 torch_eval1("torch.index_add(a, 0, b, c)", {rows, tensor(2), tensor({{2.0, 1.0}})}));
    CHECK_TENSOR(index_add(a, 1, longs({}, {0}), zeros({2, 0})), a);
    // With more than one dim and nothing to add, ATen reads neither the indices nor alpha.
    const Tensor empty_rows = zeros({0, 3});
    CHECK_TENSOR(index_add(empty_rows, 1, tensor({5}), zeros({0, 1})),
                 torch_eval1("torch.index_add(a, 1, b, c)", {empty_rows, tensor({5}), zeros({0, 1})}));
    const Tensor no_cols = zeros({2, 0}, DType::Int64);
    CHECK_TENSOR(index_add(no_cols, 0, tensor({1}), zeros({1, 0}, DType::Int64), NAN),
                 torch_eval1("torch.index_add(a, 0, b, c, alpha=float('nan'))", {no_cols, tensor({1}), zeros({1, 0}, DType::Int64)}));
    // With one dim it reads both.
    CHECK_THROWS_WITH_AS(index_add(zeros({0}), 0, tensor({5}), zeros({1})),
                         "index_add: index 5 is out of bounds for dimension 0 with size 0", Error);
    CHECK_THROWS_WITH_AS(index_add(zeros({2}, DType::Int64), 0, longs({}, {0}), zeros({0}, DType::Int64), NAN),
                         "index_add: alpha nan cannot be converted to type int64 without overflow", Error);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(index_add(a, 1, tensor({3}), ones({2, 1})),
                         "index_add: index 3 is out of bounds for dimension 1 with size 3", Error);
    CHECK_THROWS_WITH_AS(index_add(a, 1, tensor({-1}), ones({2, 1})),
                         "index_add: index -1 is out of bounds for dimension 1 with size 3", Error);
    CHECK_THROWS_WITH_AS(index_add(a, 1, tensor({0}), ones({2, 1}, DType::Float64)),
                         "index_add: expected self and source to have the same dtype, got float32 and float64", Error);
    CHECK_THROWS_WITH_AS(index_add(a, 1, tensor({0.0}), ones({2, 1})),
                         "index_add: expected an int32 or int64 index tensor, got float32", Error);
    CHECK_THROWS_WITH_AS(index_add(a, 1, tensor({{0}}), ones({2, 1})),
                         "index_add: index must be 0-d or 1-d, got shape [1,1]", Error);
    CHECK_THROWS_WITH_AS(index_add(a, 1, tensor({0}), ones({3, 1})),
                         "index_add: source shape [3,1] must match self shape [2,3] except at dimension 1", Error);
    CHECK_THROWS_WITH_AS(index_add(a, 1, tensor({0}), ones({2})),
                         "index_add: source shape [2] must match self shape [2,3] except at dimension 1", Error);
    CHECK_THROWS_WITH_AS(index_add(a, 1, tensor({0}), ones({2, 2})),
                         "index_add: the number of indices (1) must equal source.size(1) (2)", Error);
    CHECK_THROWS_WITH_AS(index_add(tensor(1.0), 0, tensor({0}), tensor({2.0})),
                         "index_add: source shape [1] must match self shape [] except at dimension 0", Error);
    CHECK_THROWS_WITH_AS(index_add(zeros({2, 3}, DType::Int64), 0, tensor({1}), zeros({1, 3}, DType::Int64), INFINITY),
                         "index_add: alpha inf cannot be converted to type int64 without overflow", Error);
    CHECK_THROWS_WITH_AS(index_add(a, 0, tensor({1}), ones({1, 3}), 1e300),
                         "index_add: alpha 1e+300 cannot be converted to type float32 without overflow", Error);
  }
}

TEST_CASE("index") {
  Generator gen(6);
  const Tensor x = cube();  // [2,3,4]
  SUBCASE("hand values") {
    // x[[1, 0], [2, 0]] picks rows x[1,2] and x[0,0].
    CHECK_TENSOR(index(x, {tensor({1, 0}), tensor({2, 0})}),
                 tensor({{20.0f, 21.0f, 22.0f, 23.0f}, {0.0f, 1.0f, 2.0f, 3.0f}}));
    // Negative indices wrap.
    CHECK_TENSOR(index(x, {tensor({-1}), tensor({-3}), tensor({-1})}), tensor({15.0f}));
    // A bool mask over dims 0 and 1.
    const Tensor mask = bools({true, false, false, false, false, true}, {2, 3});
    CHECK_TENSOR(index(x, {mask, tensor({1})}), tensor({1.0f, 21.0f}));
  }
  SUBCASE("torch: adjacent and separated advanced indices") {
    const Tensor i = tensor({1, 0, 1});
    const Tensor j = tensor({{3}, {0}});
    CHECK_TENSOR(index(x, {i}), torch_eval1("a[b]", {x, i}));
    CHECK_TENSOR(index(x, {tensor(1)}), torch_eval1("torch.ops.aten.index(a, [b])", {x, tensor(1)}));
    CHECK_TENSOR(index(x, {std::nullopt, tensor({2, 2})}), torch_eval1("a[:, b]", {x, tensor({2, 2})}));
    CHECK_TENSOR(index(x, {std::nullopt, tensor({2, 0, 1}), j}), torch_eval1("a[:, b, c]", {x, tensor({2, 0, 1}), j}));
    // Separated by a slice: the broadcast index dims go first.
    CHECK_TENSOR(index(x, {i, std::nullopt, j}), torch_eval1("a[b, :, c]", {x, i, j}));
    // A 0-d index tensor is an advanced index that broadcasts (Python's a[t, :, c] would select instead).
    CHECK_TENSOR(index(x, {tensor(1), std::nullopt, tensor({0, 3})}),
                 torch_eval1("torch.ops.aten.index(a, [b, None, c])", {x, tensor(1), tensor({0, 3})}));
    CHECK_TENSOR(index(x, {std::nullopt, std::nullopt, tensor({-1, -4})}),
                 torch_eval1("a[:, :, b]", {x, tensor({-1, -4})}));
    const Tensor y = randn({3, 2, 4, 2}, gen, DType::Float64);
    CHECK_TENSOR(index(y, {tensor({2, 0}), std::nullopt, std::nullopt, tensor({{1}, {0}})}),
                 torch_eval1("a[b, :, :, c]", {y, tensor({2, 0}), tensor({{1}, {0}})}));
    // Separated, with a leading slice: the index dims still go first, before every slice dim.
    CHECK_TENSOR(index(y, {std::nullopt, tensor({1, 0, 1}), std::nullopt, tensor({1})}),
                 torch_eval1("a[:, b, :, c]", {y, tensor({1, 0, 1}), tensor({1})}));
    CHECK(index(y, {std::nullopt, tensor({1, 0, 1}), std::nullopt, tensor({1})}).sizes() == Shape{3, 3, 4});
    CHECK_TENSOR(index(y, {std::nullopt, tensor({1}), tensor({{3, 2}})}),
                 torch_eval1("a[:, b, c]", {y, tensor({1}), tensor({{3, 2}})}));
  }
  SUBCASE("torch: bool masks") {
    const Tensor m0 = tensor({true, false});
    CHECK_TENSOR(index(x, {m0}), torch_eval1("a[b]", {x, m0}));
    const Tensor m1 = tensor({true, false, true});
    CHECK_TENSOR(index(x, {std::nullopt, m1}), torch_eval1("a[:, b]", {x, m1}));
    const Tensor m2 = bools({true, false, true, false, false, true}, {2, 3});
    CHECK_TENSOR(index(x, {m2}), torch_eval1("a[b]", {x, m2}));
    CHECK_TENSOR(index(x, {m2, tensor({3, 0, 1})}), torch_eval1("a[b, c]", {x, m2, tensor({3, 0, 1})}));
    const Tensor m3 = tensor({false, true, true, false});
    CHECK_TENSOR(index(x, {tensor({0, 1}), std::nullopt, m3}), torch_eval1("a[b, :, c]", {x, tensor({0, 1}), m3}));
    const Tensor none = tensor({false, false});
    CHECK_TENSOR(index(x, {none}), torch_eval1("a[b]", {x, none}));
  }
  SUBCASE("torch: non-contiguous self, dtypes") {
    const Tensor t = transposed(from_vector<std::int64_t>({0, 1, 2, 3, 4, 5}, {2, 3}));  // [3,2]
    CHECK_TENSOR(index(t, {tensor({{2}, {0}}), tensor({1, 0})}),
                 torch_eval1("a[b, c]", {t, tensor({{2}, {0}}), tensor({1, 0})}));
    CHECK_TENSOR(index(t, {std::nullopt, tensor({1})}), torch_eval1("a[:, b]", {t, tensor({1})}));
    const Tensor flags = tensor({true, false, true});
    CHECK_TENSOR(index(flags, {tensor({2, 1})}), torch_eval1("a[b]", {flags, tensor({2, 1})}));
  }
  SUBCASE("size-0") {
    const Tensor none = longs({}, {0});
    CHECK_TENSOR(index(x, {none}), torch_eval1("a[b]", {x, none}));
    CHECK_TENSOR(index(x, {none, std::nullopt, tensor({{1}, {2}})}),
                 torch_eval1("a[b, :, c]", {x, none, tensor({{1}, {2}})}));
    // Nothing is read, so an out-of-range index that broadcasts away is not an error.
    CHECK_TENSOR(index(x, {none, std::nullopt, tensor({9})}), torch_eval1("a[b, :, c]", {x, none, tensor({9})}));
    const Tensor e = zeros({2, 0});
    CHECK_TENSOR(index(e, {tensor({5})}), torch_eval1("torch.ops.aten.index(a, [b])", {e, tensor({5})}));
    const Tensor f = zeros({0, 3});
    CHECK_TENSOR(index(f, {std::nullopt, tensor({2})}), torch_eval1("a[:, b]", {f, tensor({2})}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(index(x, {tensor({2})}), "index: index 2 is out of bounds for dimension 0 with size 2", Error);
    CHECK_THROWS_WITH_AS(index(x, {tensor({-3})}), "index: index -3 is out of bounds for dimension 0 with size 2",
                         Error);
    CHECK_THROWS_WITH_AS(index(x, {std::nullopt, std::nullopt, tensor({4})}),
                         "index: index 4 is out of bounds for dimension 2 with size 4", Error);
    CHECK_THROWS_WITH_AS(index(zeros({2, 0}), {std::nullopt, tensor({0})}),
                         "index: index 0 is out of bounds for dimension 1 with size 0", Error);
    // An empty result reads nothing, but a non-empty index into a size-0 dim is still an error.
    CHECK_THROWS_WITH_AS(index(zeros({0, 0}), {std::nullopt, tensor({0})}),
                         "index: index is out of bounds for dimension 1 with size 0", Error);
    CHECK(testing::torch_run("torch.ops.aten.index(a, [None, b])", {zeros({0, 0}), tensor({0})}).ok == false);
    CHECK_THROWS_WITH_AS(index(x, {tensor({0.0})}),
                         "index: tensors used as indices must be long, int, byte or bool tensors, got float32", Error);
    CHECK_THROWS_WITH_AS(index(x, {std::nullopt, std::nullopt, std::nullopt, tensor({0})}),
                         "index: too many indices for tensor of dimension 3 (got 4)", Error);
    CHECK_THROWS_WITH_AS(index(tensor(5.0), {tensor(0)}), "index: too many indices for tensor of dimension 0 (got 1)",
                         Error);
    CHECK_THROWS_WITH_AS(index(x, {std::nullopt, std::nullopt, zeros({4, 1}, DType::Bool)}),
                         "index: too many indices for tensor of dimension 3", Error);
    CHECK_THROWS_WITH_AS(index(x, {tensor({0, 1}), tensor({0, 1, 2})}),
                         "index: shape mismatch: indexing tensors could not be broadcast together with shapes [2], [3]",
                         Error);
    CHECK_THROWS_WITH_AS(index(x, {tensor({true, false, true})}),
                         "index: the shape of the mask [3] at index 0 does not match the shape of the indexed tensor [2,3,4] at index 0",
                         Error);
    CHECK_THROWS_WITH_AS(index(x, {std::nullopt, zeros({3, 3}, DType::Bool)}),
                         "index: the shape of the mask [3,3] at index 1 does not match the shape of the indexed tensor [2,3,4] at index 2",
                         Error);
    CHECK_THROWS_WITH_AS(index(x, {tensor(true)}), "index: a 0-d bool mask is not supported as an index", Error);
    CHECK_THROWS_WITH_AS(index(x, {}), "index: at least one index must be provided", Error);
    CHECK_THROWS_WITH_AS(index(x, {std::nullopt}), "index: at least one index must be a tensor (all were full slices)",
                         Error);
    // Two small index tensors broadcast to 2^32 index tuples: their offsets
    // were allocated (32 GiB) before the result was checked against the limit.
    MemoryLimitScope limit(1ll << 30);
    CHECK_THROWS_WITH_AS(index(zeros({1, 1}), {zeros({1ll << 16, 1}, DType::Int64), zeros({1, 1ll << 16}, DType::Int64)}),
                         "index: the index tensors broadcast to shape [65536,65536], more index tuples than fit in the "
                         "memory limit of 1073741824 bytes",
                         Error);
  }
}

TEST_CASE("index_put") {
  Generator gen(7);
  const Tensor a = tensor({{0.0, 1.0, 2.0}, {3.0, 4.0, 5.0}});
  SUBCASE("hand values") {
    CHECK_TENSOR(index_put(a, {tensor({0, 0}), tensor({1, 1})}, tensor({1.0, 2.0}), true),
                 tensor({{0.0, 4.0, 2.0}, {3.0, 4.0, 5.0}}));
    // Without accumulate the last of the duplicates wins.
    CHECK_TENSOR(index_put(a, {tensor({0, 0}), tensor({1, 1})}, tensor({1.0, 2.0})),
                 tensor({{0.0, 2.0, 2.0}, {3.0, 4.0, 5.0}}));
    CHECK_TENSOR(index_put(a, {tensor({-1})}, tensor(9.0)), tensor({{0.0, 1.0, 2.0}, {9.0, 9.0, 9.0}}));
    CHECK(a.at<double>({1, 0}) == 3.0);  // out of place
  }
  SUBCASE("torch") {
    const Tensor x = randn({3, 4, 2}, gen, DType::Float64);
    const Tensor i = tensor({2, 0, 2, 2});
    const Tensor j = tensor({{1}, {3}});
    const Tensor v = randn({4, 2}, gen, DType::Float64);  // broadcast to the result shape [2,4,2]
    CHECK_TENSOR(index_put(x, {i, j}, v, true),
                 torch_eval1("torch.index_put(a, (b, c), d, accumulate=True)", {x, i, j, v}));
    const Tensor row = randn({2}, gen, DType::Float64);
    CHECK_TENSOR(index_put(x, {i, tensor({0, 1, 2, 3})}, row, true),
                 torch_eval1("torch.index_put(a, (b, c), d, accumulate=True)", {x, i, tensor({0, 1, 2, 3}), row}));
    CHECK_TENSOR(index_put(x, {tensor({1, 0})}, tensor(7.0, DType::Float64)),
                 torch_eval1("torch.index_put(a, (b,), c)", {x, tensor({1, 0}), tensor(7.0, DType::Float64)}));
    // Slices before and between advanced indices (aten's index_put takes None).
    const Tensor vals = randn({3, 3, 2}, gen, DType::Float64);
    CHECK_TENSOR(index_put(x, {std::nullopt, tensor({0, 0, 3})}, vals, true),
                 torch_eval1("torch.ops.aten.index_put(a, [None, b], c, True)", {x, tensor({0, 0, 3}), vals}));
    const Tensor sep = randn({2, 4}, gen, DType::Float64);
    CHECK_TENSOR(index_put(x, {tensor({0, 0}), std::nullopt, tensor({1, 1})}, sep, true),
                 torch_eval1("torch.ops.aten.index_put(a, [b, None, c], d, True)",
                             {x, tensor({0, 0}), tensor({1, 1}), sep}));
    const Tensor y = randn({2, 3, 2, 2}, gen, DType::Float64);
    const Tensor yv = randn({2, 2, 2}, gen, DType::Float64);  // result shape [2 (index), 2, 2]
    CHECK_TENSOR(index_put(y, {std::nullopt, tensor({2, 2}), std::nullopt, tensor({1, 1})}, yv, true),
                 torch_eval1("torch.ops.aten.index_put(a, [None, b, None, c], d, True)",
                             {y, tensor({2, 2}), tensor({1, 1}), yv}));
    // Non-contiguous self.
    const Tensor xt = transposed(randn({4, 3}, gen));
    CHECK_TENSOR(index_put(xt, {tensor({2, 2, 0})}, tensor({1.0f, 2.0f, 3.0f, 4.0f}), true),
                 torch_eval1("torch.index_put(a, (b,), c, accumulate=True)",
                             {xt, tensor({2, 2, 0}), tensor({1.0f, 2.0f, 3.0f, 4.0f})}));
    const Tensor ints = tensor({1, 2, 3});
    CHECK_TENSOR(index_put(ints, {tensor({0, 0, 2})}, tensor({5, 6, 7}), true),
                 torch_eval1("torch.index_put(a, (b,), c, accumulate=True)",
                             {ints, tensor({0, 0, 2}), tensor({5, 6, 7})}));
  }
  SUBCASE("torch: bool masks") {
    const Tensor m = bools({true, false, true, false, false, true}, {2, 3});
    CHECK_TENSOR(index_put(a, {m}, tensor({5.0f, 6.0f, 7.0f})),
                 torch_eval1("torch.index_put(a, (b,), c)", {a, m, tensor({5.0f, 6.0f, 7.0f})}));
    CHECK_TENSOR(index_put(a, {m}, tensor(1.0f), true),
                 torch_eval1("torch.index_put(a, (b,), c, accumulate=True)", {a, m, tensor(1.0f)}));
    const Tensor cols = tensor({true, false, true});
    const Tensor v = tensor({{1.0f}, {2.0f}});
    CHECK_TENSOR(index_put(a, {std::nullopt, cols}, v, true),
                 torch_eval1("torch.ops.aten.index_put(a, [None, b], c, True)", {a, cols, v}));
  }
  SUBCASE("size-0") {
    const Tensor none = longs({}, {0});
    CHECK_TENSOR(index_put(a, {none}, tensor(1.0f)), a);
    CHECK_TENSOR(index_put(a, {tensor({false, false})}, zeros({0, 3}), true), a);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(index_put(a, {tensor({2})}, tensor(1.0f)),
                         "index_put: index 2 is out of bounds for dimension 0 with size 2", Error);
    CHECK_THROWS_WITH_AS(index_put(a, {tensor({-3})}, tensor(1.0f), true),
                         "index_put: index -3 is out of bounds for dimension 0 with size 2", Error);
    CHECK_THROWS_WITH_AS(index_put(a, {tensor({0})}, tensor(1.0, DType::Float64)),
                         "index_put: expected self and values to have the same dtype, got float32 and float64",
                         Error);
    CHECK_THROWS_WITH_AS(index_put(a, {tensor({0})}, tensor(1)),
                         "index_put: expected self and values to have the same dtype, got float32 and int64",
                         Error);
    CHECK_THROWS_WITH_AS(index_put(a, {tensor({0, 0}), tensor({1, 1})}, tensor({5.0f, 6.0f, 7.0f})),
                         "index_put: shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of shape [2]",
                         Error);
    CHECK_THROWS_WITH_AS(index_put(a, {tensor({0, 0})}, zeros({1, 1, 3})),
                         "index_put: shape mismatch: value tensor of shape [1,1,3] cannot be broadcast to indexing result of shape [2,3]",
                         Error);
    CHECK_THROWS_WITH_AS(index_put(a, {tensor({0.0})}, tensor(1.0f)),
                         "index_put: tensors used as indices must be long, int, byte or bool tensors, got float32",
                         Error);
    CHECK_THROWS_WITH_AS(index_put(tensor(1.0f), {tensor(0)}, tensor(3.0f)),
                         "index_put: too many indices for tensor of dimension 0 (got 1)", Error);
    CHECK_THROWS_WITH_AS(index_put(a, {}, tensor(3.0f)), "index_put: at least one index must be provided", Error);
  }
}

TEST_CASE("masked_select") {
  Generator gen(8);
  const Tensor a = tensor({{0.0, 1.0, 2.0}, {3.0, 4.0, 5.0}});
  SUBCASE("hand values") {
    CHECK_TENSOR(masked_select(a, tensor({true, false, true})), tensor({0.0, 2.0, 3.0, 5.0}));
    // The mask broadcasts self too.
    CHECK_TENSOR(masked_select(tensor({1.0, 2.0}), tensor({{true, false}, {true, true}})), tensor({1.0, 1.0, 2.0}));
  }
  SUBCASE("torch") {
    const Tensor x = randn({3, 4}, gen, DType::Float64);
    const Tensor m = bernoulli({3, 4}, 0.5, gen).to(DType::Bool);
    CHECK_TENSOR(masked_select(x, m), torch_eval1("torch.masked_select(a, b)", {x, m}));
    const Tensor xt = transposed(randn({4, 3}, gen));
    const Tensor mt = transposed(bernoulli({4, 3}, 0.5, gen).to(DType::Bool));
    CHECK_TENSOR(masked_select(xt, mt), torch_eval1("torch.masked_select(a, b)", {xt, mt}));
    const Tensor col = tensor({{true}, {false}, {true}});
    CHECK_TENSOR(masked_select(x, col), torch_eval1("torch.masked_select(a, b)", {x, col}));
    const Tensor ints = tensor({1, 2, 3});
    CHECK_TENSOR(masked_select(ints, tensor(true)), torch_eval1("torch.masked_select(a, b)", {ints, tensor(true)}));
    const Tensor s = tensor(3.0);
    CHECK_TENSOR(masked_select(s, tensor(true)), torch_eval1("torch.masked_select(a, b)", {s, tensor(true)}));
    CHECK_TENSOR(masked_select(s, tensor(false)), torch_eval1("torch.masked_select(a, b)", {s, tensor(false)}));
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(masked_select(e, tensor({true, false, true})),
                 torch_eval1("torch.masked_select(a, b)", {e, tensor({true, false, true})}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(masked_select(a, tensor({1, 0, 1})), "masked_select: expected a bool mask, got int64", Error);
    CHECK_THROWS_WITH_AS(masked_select(a, tensor({true, false})),
                         "masked_select: self and mask: broadcast: shapes [2,3] and [2] are not broadcastable (size 3 "
                         "vs 2 at dim 1)",
                         Error);
  }
}

TEST_CASE("masked_scatter") {
  Generator gen(9);
  const Tensor a = tensor({{0.0, 1.0, 2.0}, {3.0, 4.0, 5.0}});
  const Tensor source = tensor({10.0, 11.0, 12.0, 13.0, 14.0});
  SUBCASE("hand values") {
    CHECK_TENSOR(masked_scatter(a, tensor({true, false, true}), source),
                 tensor({{10.0, 1.0, 11.0}, {12.0, 4.0, 13.0}}));
    CHECK(a.at<double>({0, 0}) == 0.0);  // out of place
  }
  SUBCASE("torch") {
    const Tensor x = randn({3, 4}, gen, DType::Float64);
    const Tensor m = bernoulli({3, 4}, 0.5, gen).to(DType::Bool);
    const Tensor src = randn({4, 3}, gen, DType::Float64);  // consumed row-major, whatever its shape
    CHECK_TENSOR(masked_scatter(x, m, src), torch_eval1("torch.masked_scatter(a, b, c)", {x, m, src}));
    const Tensor st = transposed(src.contiguous());  // a non-contiguous source
    CHECK_TENSOR(masked_scatter(x, m, st), torch_eval1("torch.masked_scatter(a, b, c)", {x, m, st}));
    const Tensor xt = transposed(randn({4, 3}, gen, DType::Float64));
    CHECK_TENSOR(masked_scatter(xt, m, src), torch_eval1("torch.masked_scatter(a, b, c)", {xt, m, src}));
    // torch broadcasts self and mask together.
    const Tensor m3 = bools({true, false, true}, {1, 1, 3});
    CHECK_TENSOR(masked_scatter(a, m3, source), torch_eval1("torch.masked_scatter(a, b, c)", {a, m3, source}));
    const Tensor v = tensor({1.0, 2.0});
    const Tensor m2 = bools({true, false, true, true}, {2, 2});
    CHECK_TENSOR(masked_scatter(v, m2, source), torch_eval1("torch.masked_scatter(a, b, c)", {v, m2, source}));
    const Tensor s = tensor(1.0);
    CHECK_TENSOR(masked_scatter(s, tensor(true), tensor(4.0)),
                 torch_eval1("torch.masked_scatter(a, b, c)", {s, tensor(true), tensor(4.0)}));
    CHECK_TENSOR(masked_scatter(a, tensor(false), zeros({0}, DType::Float32)), a);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(masked_scatter(a, tensor({true, false, true}), tensor({1.0, 2.0, 3.0})),
                         "masked_scatter: source has 3 elements but the mask has 4 true elements (mask [3], self [2,3])",
                         Error);
    CHECK_THROWS_WITH_AS(masked_scatter(a, tensor(true), zeros({0})),
                         "masked_scatter: source has 0 elements but the mask has 6 true elements (mask [], self [2,3])",
                         Error);
    CHECK_THROWS_WITH_AS(masked_scatter(a, tensor({1, 0, 1}), source),
                         "masked_scatter: expected a bool mask, got int64", Error);
    CHECK_THROWS_WITH_AS(masked_scatter(a, tensor({true, false, true}), source.to(DType::Float64)),
                         "masked_scatter: expected self and source to have the same dtype, got float32 and float64",
                         Error);
    CHECK_THROWS_WITH_AS(masked_scatter(a, tensor({true, false}), source),
                         doctest::Contains("masked_scatter: self and mask: broadcast: shapes [2,3] and [2] are not "
                                           "broadcastable"),
                         Error);
  }
}

TEST_CASE("embedding") {
  Generator gen(10);
  const Tensor w = from_vector<double>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {4, 3});
  SUBCASE("hand values") {
    CHECK_TENSOR(embedding(w, tensor({3, 0})), tensor({{9.0, 10.0, 11.0}, {0.0, 1.0, 2.0}}, DType::Float64));
    CHECK_TENSOR(embedding(w, tensor(2)), tensor({6.0, 7.0, 8.0}, DType::Float64));  // 0-d indices
    CHECK_TENSOR(embedding(w, tensor({1}), 1),
                 tensor({{3.0, 4.0, 5.0}}, DType::Float64));  // padding_idx: forward unchanged
  }
  SUBCASE("torch") {
    const Tensor weight = randn({5, 4}, gen);
    const Tensor i = longs({4, 0, 4, 1, 2, 2}, {2, 3});
    CHECK_TENSOR(embedding(weight, i), torch_eval1("torch.embedding(a, b)", {weight, i}));
    CHECK_TENSOR(embedding(weight, i, 4), torch_eval1("torch.embedding(a, b, 4)", {weight, i}));
    const Tensor wt = transposed(randn({4, 5}, gen));  // [5,4], non-contiguous
    const Tensor it = transposed(i.contiguous());       // [3,2], non-contiguous
    CHECK_TENSOR(embedding(wt, it), torch_eval1("torch.embedding(a, b)", {wt, it}));
    const Tensor ints = tensor({{1, 2}, {3, 4}});
    CHECK_TENSOR(embedding(ints, tensor({1, 1})), torch_eval1("torch.embedding(a, b)", {ints, tensor({1, 1})}));
    const Tensor none = longs({}, {0, 2});
    CHECK_TENSOR(embedding(weight, none), torch_eval1("torch.embedding(a, b)", {weight, none}));
    // aten::embedding takes any padding_idx (F.embedding is the one that checks it).
    CHECK_TENSOR(embedding(weight, i, 7), torch_eval1("torch.embedding(a, b, 7)", {weight, i}));
    CHECK_TENSOR(embedding(weight, i, -5), torch_eval1("torch.embedding(a, b, -5)", {weight, i}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(embedding(w, tensor({4})), "embedding: index 4 is out of bounds for dimension 0 with size 4",
                         Error);
    CHECK_THROWS_WITH_AS(embedding(w, tensor({-1})),
                         "embedding: index -1 is out of bounds for dimension 0 with size 4", Error);
    CHECK_THROWS_WITH_AS(embedding(w, tensor({0.0})), "embedding: expected int32 or int64 indices, got float32", Error);
    CHECK_THROWS_WITH_AS(embedding(w, tensor({true})), "embedding: expected int32 or int64 indices, got bool", Error);
    CHECK_THROWS_WITH_AS(embedding(zeros({3}), tensor({0})), "embedding: weight must be 2-D, got shape [3]", Error);
    CHECK_THROWS_WITH_AS(embedding(zeros({2, 3, 4}), tensor({0})), "embedding: weight must be 2-D, got shape [2,3,4]",
                         Error);
  }
}

TEST_CASE("one_hot") {
  SUBCASE("hand values") {
    CHECK_TENSOR(one_hot(tensor({0, 2})), tensor({{1, 0, 0}, {0, 0, 1}}));
    CHECK_TENSOR(one_hot(tensor({0, 2}), 4), tensor({{1, 0, 0, 0}, {0, 0, 1, 0}}));
    CHECK_TENSOR(one_hot(tensor(1), 2), tensor({0, 1}));
  }
  SUBCASE("torch") {
    const Tensor i = longs({3, 0, 1, 1, 2, 0}, {2, 3});
    CHECK_TENSOR(one_hot(i), torch_eval1("F.one_hot(a)", {i}));
    CHECK_TENSOR(one_hot(i, 6), torch_eval1("F.one_hot(a, 6)", {i}));
    const Tensor it = transposed(i.contiguous());
    CHECK_TENSOR(one_hot(it), torch_eval1("F.one_hot(a)", {it}));
    CHECK_TENSOR(one_hot(tensor(2)), torch_eval1("F.one_hot(a)", {tensor(2)}));
    const Tensor none = longs({}, {2, 0});
    CHECK_TENSOR(one_hot(none, 3), torch_eval1("F.one_hot(a, 3)", {none}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(one_hot(tensor({0, 2}), 2),
                         "one_hot: class values must be smaller than num_classes (2), got 2", Error);
    CHECK_THROWS_WITH_AS(one_hot(tensor({0}), 0), "one_hot: class values must be smaller than num_classes (0), got 0",
                         Error);
    CHECK_THROWS_WITH_AS(one_hot(tensor({0, -1}), 4), "one_hot: class values must be non-negative, got -1", Error);
    CHECK_THROWS_WITH_AS(one_hot(tensor({0, -1})), "one_hot: class values must be non-negative, got -1", Error);
    CHECK_THROWS_WITH_AS(one_hot(tensor({0.0, 1.0})), "one_hot: expected an int64 tensor, got float32", Error);
    CHECK_THROWS_WITH_AS(one_hot(tensor({true})), "one_hot: expected an int64 tensor, got bool", Error);
    CHECK_THROWS_WITH_AS(one_hot(longs({}, {0})),
                         "one_hot: cannot infer the number of classes from an empty tensor of shape [0] (num_classes -1)",
                         Error);
    CHECK_THROWS_WITH_AS(one_hot(tensor({0}), -2), "one_hot: num_classes must be -1 (infer) or non-negative, got -2",
                         Error);
    // max + 1 overflowed (torch: "Dimension size must be non-negative").
    CHECK_THROWS_WITH_AS(one_hot(tensor({INT64_MAX})), "one_hot: 9223372036854775807 + 1 overflows int64", Error);
  }
}

TEST_CASE("scatter_reduce") {
  Generator gen(11);
  SUBCASE("hand values: include_self, and the positions no index names") {
    const Tensor self = tensor({1.0, 2.0, 3.0, 4.0});
    const Tensor index = tensor({0, 0, 2});
    const Tensor src = tensor({5.0, 6.0, 7.0});
    CHECK_TENSOR(scatter_reduce(self, 0, index, src, "sum"), tensor({12.0, 2.0, 10.0, 4.0}));
    CHECK_TENSOR(scatter_reduce(self, 0, index, src, "sum", false), tensor({11.0, 2.0, 7.0, 4.0}));
    CHECK_TENSOR(scatter_reduce(self, 0, index, src, "prod"), tensor({30.0, 2.0, 21.0, 4.0}));
    CHECK_TENSOR(scatter_reduce(self, 0, index, src, "mean"), tensor({4.0, 2.0, 5.0, 4.0}));
    CHECK_TENSOR(scatter_reduce(self, 0, index, src, "mean", false), tensor({5.5, 2.0, 7.0, 4.0}));
    CHECK_TENSOR(scatter_reduce(self, 0, index, src, "amax"), tensor({6.0, 2.0, 7.0, 4.0}));
    CHECK_TENSOR(scatter_reduce(tensor({9.0, 2.0, 3.0, 4.0}), 0, index, src, "amin", false), tensor({5.0, 2.0, 7.0, 4.0}));
    CHECK_TENSOR(scatter_reduce(tensor({1, 2}), 0, tensor({0, 0}), tensor({-4, 0}), "mean"), tensor({-1, 2}));  // floor
  }
  SUBCASE("against torch: every reduce, with and without self, in four dtypes") {
    const Tensor index = longs({2, 0, 2, 1, 0, 0, 1, 1, 2, 2, 2, 0}, {4, 3});
    for (DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::Int64}) {
      const Tensor self = (dtype == DType::Int64 ? mul(randn({3, 5}, gen, DType::Float64), 4) : randn({3, 5}, gen))
                              .to(DType::Float64).to(dtype);
      const Tensor src = (dtype == DType::Int64 ? mul(randn({4, 3}, gen, DType::Float64), 4) : randn({4, 3}, gen))
                             .to(DType::Float64).to(dtype);
      const Tensor self_i = dtype == DType::Int64 ? div(self, 1, "floor") : self;
      const Tensor src_i = dtype == DType::Int64 ? div(src, 1, "floor") : src;
      for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"}) {
        for (bool include_self : {true, false}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(reduce);
          CAPTURE(include_self);
          const std::string expr = std::string("torch.scatter_reduce(a, 0, b, c, '") + reduce +
                                   "', include_self=" + (include_self ? "True" : "False") + ")";
          const double rtol = dtype == DType::Float16 ? 1e-2 : 1e-6;
          CHECK_TENSOR(scatter_reduce(self_i, 0, index, src_i, reduce, include_self),
                       torch_eval1(expr, {self_i, index, src_i}), rtol, 0);
        }
      }
    }
    // dim 1, a transposed self, and NaN taking over amax
    const Tensor xt = transposed(randn({5, 3}, gen, DType::Float64));
    const Tensor i1 = longs({4, 4, 0, 1, 2, 2}, {3, 2});
    const Tensor src = tensor({{1.0, NAN}, {2.0, 3.0}, {4.0, 5.0}}, DType::Float64);
    CHECK_TENSOR(scatter_reduce(xt, 1, i1, src, "amax"), torch_eval1("torch.scatter_reduce(a, 1, b, c, 'amax')", {xt, i1, src}));
    CHECK_TENSOR(scatter_reduce(xt, 1, i1, src, "amin", false),
                 torch_eval1("torch.scatter_reduce(a, 1, b, c, 'amin', include_self=False)", {xt, i1, src}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(scatter_reduce(zeros({2}), 0, tensor({0}), ones({1}), "max"),
                         "scatter_reduce: reduce argument must be one of sum, prod, mean, amax, amin, got max", Error);
    CHECK_THROWS_WITH_AS(scatter_reduce(zeros({2}), 0, tensor({2}), ones({1}), "sum"),
                         "scatter_reduce: index 2 is out of bounds for dimension 0 with size 2", Error);
  }
}

TEST_CASE("index_reduce") {
  Generator gen(12);
  SUBCASE("hand values") {
    const Tensor self = tensor({{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}});
    const Tensor source = tensor({{2.0, 2.0}, {3.0, 0.5}, {-1.0, 10.0}});
    const Tensor index = tensor({0, 0, 2});
    CHECK_TENSOR(index_reduce(self, 0, index, source, "prod"), tensor({{6.0, 2.0}, {3.0, 4.0}, {-5.0, 60.0}}));
    CHECK_TENSOR(index_reduce(self, 0, index, source, "amax", false), tensor({{3.0, 2.0}, {3.0, 4.0}, {-1.0, 10.0}}));
    CHECK_TENSOR(index_reduce(self, 0, index, source, "mean"), tensor({{2.0, 1.5}, {3.0, 4.0}, {2.0, 8.0}}));
  }
  SUBCASE("against torch") {
    const Tensor self = randn({4, 3}, gen, DType::Float64);
    const Tensor source = randn({4, 5}, gen, DType::Float64);
    const Tensor index = tensor({2, 0, 2, 2, 1});
    for (const char* reduce : {"prod", "mean", "amax", "amin"}) {
      for (bool include_self : {true, false}) {
        CAPTURE(reduce);
        CAPTURE(include_self);
        const std::string expr = std::string("torch.index_reduce(a, 1, b, c, '") + reduce +
                                 "', include_self=" + (include_self ? "True" : "False") + ")";
        CHECK_TENSOR(index_reduce(self, 1, index, source, reduce, include_self), torch_eval1(expr, {self, index, source}));
        const Tensor self16 = self.to(DType::Float16), source16 = source.to(DType::Float16);
        CHECK_TENSOR(index_reduce(self16, 1, index, source16, reduce, include_self),
                     torch_eval1(expr, {self16, index, source16}), 1e-2, 1e-3);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(index_reduce(zeros({2}), 0, tensor({0}), ones({1}), "sum"),
                         "index_reduce: reduce argument must be one of prod, mean, amax, amin, got sum", Error);
    CHECK_THROWS_WITH_AS(index_reduce(zeros({2, 2}), 0, tensor({0}), ones({2, 2}), "prod"),
                         "index_reduce: the number of indices (1) must equal source.size(0) (2)", Error);
    CHECK_THROWS_WITH_AS(index_reduce(zeros({2}), 0, tensor({5}), ones({1}), "prod"),
                         "index_reduce: index 5 is out of bounds for dimension 0 with size 2", Error);
  }
}

}  // TEST_SUITE
