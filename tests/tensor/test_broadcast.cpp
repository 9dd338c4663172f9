// Broadcasting views (expand, broadcast_to, broadcast_shapes) and the copying
// primitives (contiguous, clone, to).
#include <doctest/doctest.h>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;

namespace {

// The strides of a torch expression's result, as an int64 tensor.
Tensor torch_layout(const std::string& expression, const std::vector<Tensor>& inputs) {
  return torch_eval1("torch.tensor(list((" + expression + ").stride()))", inputs);
}

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("broadcast_shapes") {
  CHECK(broadcast_shapes({2, 1, 3}, {4, 1}) == Shape{2, 4, 3});
  CHECK(broadcast_shapes({}, {5}) == Shape{5});
  CHECK(broadcast_shapes({0, 1}, {1, 3}) == Shape{0, 3});  // 0 broadcasts against 1 only
  CHECK(broadcast_shapes({3}, {3}) == Shape{3});
  CHECK_THROWS_WITH_AS(broadcast_shapes({2, 3}, {4, 3}),
                       "broadcast: shapes [2,3] and [4,3] are not broadcastable (size 2 vs 4 at dim 0)", Error);
  CHECK_THROWS_WITH_AS(broadcast_shapes({0}, {2}), doctest::Contains("are not broadcastable"), Error);
  // A negative size (from a saved field) broadcast against 1 came out as a size.
  CHECK_THROWS_WITH_AS(broadcast_shapes({-1}, {1}), "broadcast: shapes [-1] and [1] have a negative size", Error);
  CHECK(testing::torch_run("torch.broadcast_shapes((-1,), (1,))").ok == false);
}

TEST_CASE("expand") {
  Tensor column = tensor({{1.0}, {2.0}, {3.0}});  // [3,1]
  Tensor wide = expand(column, {2, 3, 4});
  CHECK(wide.sizes() == Shape{2, 3, 4});
  CHECK(wide.strides() == Shape{0, 1, 0});  // new and size-1 dims get stride 0
  CHECK(wide.storage() == column.storage());
  CHECK(wide.at<double>({1, 2, 3}) == 3.0);
  CHECK_TENSOR(wide, torch_eval1("a.expand(2, 3, 4)", {column}));
  CHECK_TENSOR(from_vector(wide.strides(), {3}), torch_layout("a.expand(2, 3, 4)", {column}));

  // -1 keeps a size; a 0-d tensor expands to anything.
  CHECK(expand(column, {-1, 5}).sizes() == Shape{3, 5});
  CHECK(expand(tensor(7), {2, 2}).to_vector<std::int64_t>() == std::vector<std::int64_t>{7, 7, 7, 7});
  CHECK(expand(zeros({1, 3}), {0, 3}).numel() == 0);

  // A transposed view keeps its strides where it is not broadcast.
  Tensor base = arange(6).to(DType::Float64);
  Tensor transposed(base.storage(), {3, 2}, {1, 3}, 0, DType::Float64);
  Tensor expanded = expand(transposed, {2, 3, 2});
  CHECK(expanded.strides() == Shape{0, 1, 3});
  CHECK_TENSOR(expanded, torch_eval1("a.reshape(2, 3).t().expand(2, 3, 2)", {base}));

  CHECK_THROWS_WITH_AS(expand(column, {3, 2, 2}),
                       "expand: the expanded size of the tensor (2) must match the existing size (3) at non-singleton "
                       "dimension 1.  Target sizes: [3,2,2].  Tensor sizes: [3,1]",
                       Error);
  CHECK_THROWS_WITH_AS(expand(column, {4}),
                       "expand: the number of sizes provided (1) must be greater or equal to the number of dimensions "
                       "in the tensor (2)",
                       Error);
  CHECK_THROWS_WITH_AS(expand(column, {-1, 3, 1}),
                       "expand: the expanded size -1 is not allowed in a leading dimension ([3,1] to [-1,3,1])", Error);
  CHECK_THROWS_WITH_AS(expand(Tensor(), {2}), "expand: tensor is undefined", Error);
  CHECK_THROWS_WITH_AS(expand(column, {3, -2}), "expand: the expanded size -2 at dimension 1 is negative ([3,1] to [3,-2])",
                       Error);
}

TEST_CASE("broadcast_to") {
  Tensor row = tensor({1, 2, 3});
  CHECK(broadcast_to(row, {3}).is_same(row));  // same shape: the tensor itself
  Tensor grid = broadcast_to(row, {2, 3});
  CHECK(grid.strides() == Shape{0, 1});
  CHECK_TENSOR(grid, torch_eval1("torch.broadcast_to(a, (2, 3))", {row}));
  CHECK_THROWS_WITH_AS(broadcast_to(row, {2, 4}), doctest::Contains("must match the existing size (3)"), Error);
  CHECK_THROWS_WITH_AS(broadcast_to(Tensor(), {}), "broadcast_to: tensor is undefined", Error);
}

TEST_CASE("contiguous") {
  Tensor base = arange(12).to(DType::Float32);
  Tensor transposed(base.storage(), {4, 3}, {1, 4}, 0, DType::Float32);
  Tensor copy = contiguous(transposed);
  CHECK(copy.is_contiguous());
  CHECK(copy.strides() == Shape{3, 1});
  CHECK_FALSE(copy.storage() == base.storage());
  CHECK_TENSOR(copy, torch_eval1("a.reshape(3, 4).t().contiguous()", {base}));
  CHECK(contiguous(base).is_same(base));
  // A size-1 dim's stride does not matter: still contiguous, no copy.
  Tensor odd(base.storage(), {1, 3}, {7, 1}, 2, DType::Float32);
  CHECK(contiguous(odd).is_same(odd));
  CHECK(contiguous(expand(tensor(1.0), {2, 2})).strides() == Shape{2, 1});
}

TEST_CASE("clone") {
  Tensor base = tensor({{1, 2}, {3, 4}});
  Tensor copy = clone(base);
  CHECK_FALSE(copy.storage() == base.storage());
  base.data_ptr<std::int64_t>()[0] = 100;
  CHECK(copy.at<std::int64_t>({0, 0}) == 1);
  CHECK_TENSOR(clone(zeros({0, 3})), zeros({0, 3}));
  CHECK_TENSOR(clone(tensor(true)), tensor(true));
  CHECK_THROWS_WITH_AS(clone(Tensor()), "clone: tensor is undefined", Error);
}

TEST_CASE("to") {
  Tensor x = tensor({-1.5, 0.0, 2.5}, DType::Float64);
  for (DType dtype : {DType::Float32, DType::Int64, DType::Bool, DType::Float64}) {
    CAPTURE(dtype_name(dtype));
    CHECK_TENSOR(to(x, dtype), torch_eval1("a.to(torch." + dtype_name(dtype) + ")", {x}));
  }
  CHECK(to(x, DType::Float64).is_same(x));  // torch's .to returns self when nothing changes
  Tensor flags = tensor({true, false});
  CHECK_TENSOR(to(flags, DType::Int64), tensor({1, 0}));
  CHECK_THROWS_WITH_AS(to(Tensor(), DType::Int64), "to: tensor is undefined", Error);
  CHECK_THROWS_WITH_AS(to(Tensor(), DType::Float32), "to: tensor is undefined", Error);
}

}  // TEST_SUITE
