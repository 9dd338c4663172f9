// Shape ops: views (checked for shared storage, strides and storage offset
// against torch) and the copying ops cat, stack, flip, repeat, constant_pad_nd,
// tril and triu.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval;
using refgrad::testing::torch_eval1;

namespace {

using I64 = std::vector<std::int64_t>;

constexpr std::int64_t kMax = INT64_MAX;
constexpr std::int64_t kMin = INT64_MIN;

// An int64 tensor's values as an IntList (torch's strides, to compare with a view's).
IntList int64_values(const Tensor& t) {
  const I64 values = t.to_vector<std::int64_t>();
  return IntList(values.begin(), values.end());
}

// 0, 1, 2, ... in a fresh contiguous tensor of the given shape: the same
// layout torch gives the oracle's input `a`, so strides and offsets compare.
Tensor iota(const Shape& sizes, DType dtype = DType::Float32) {
  const Tensor flat = arange(numel_of(sizes), dtype);
  return Tensor(flat.storage(), sizes, contiguous_strides(sizes), 0, dtype);
}

// The oracle hands torch its inputs through NumPy, which gives size-0 arrays
// all-zero strides; evaluating `expr` with `a` re-laid out by torch.zeros gives
// torch's own contiguous strides, the layout iota and zeros have here.
std::string with_torch_layout(const std::string& expr) {
  return "(lambda a: " + expr + ")(torch.zeros(a.shape, dtype=a.dtype).copy_(a))";
}

// `view` must be a view of `base` with the values, strides and storage offset
// that torch gives for `expr` evaluated with a = base.
void check_view(const Tensor& view, const Tensor& base, const std::string& expr) {
  INFO(expr);
  const std::string strides = with_torch_layout("torch.tensor(" + expr + ".stride(), dtype=torch.int64)");
  const std::string offset = with_torch_layout(expr + ".storage_offset()");
  CHECK(view.storage() == base.storage());
  CHECK_TENSOR(view, torch_eval1(expr, {base}));
  CHECK(int64_values(torch_eval1(strides, {base})) == view.strides());
  CHECK(torch_eval1(offset, {base}).item<std::int64_t>() == view.storage_offset());
}

// The same for a list of views (split, chunk): `expr` evaluates to a tuple.
void check_views(const TensorList& views, const Tensor& base, const std::string& expr) {
  INFO(expr);
  const std::vector<Tensor> expected = torch_eval(expr, {base});
  REQUIRE(views.size() == expected.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    const std::string piece = "(" + expr + ")[" + std::to_string(i) + "]";
    const std::string strides = with_torch_layout("torch.tensor(" + piece + ".stride(), dtype=torch.int64)");
    const std::string offset = with_torch_layout(piece + ".storage_offset()");
    CHECK(views[i].storage() == base.storage());
    CHECK_TENSOR(views[i], expected[i]);
    CHECK(int64_values(torch_eval1(strides, {base})) == views[i].strides());
    CHECK(torch_eval1(offset, {base}).item<std::int64_t>() == views[i].storage_offset());
  }
}

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("reshape") {
  const Tensor x = iota({2, 3});
  SUBCASE("contiguous input gives a view; -1 is inferred") {
    const Tensor r = reshape(x, {3, -1});
    CHECK(r.sizes() == Shape{3, 2});
    CHECK(r.strides() == Shape{2, 1});
    CHECK(r.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5});
    check_view(r, x, "a.reshape(3, -1)");
    check_view(reshape(x, {-1}), x, "a.reshape(-1)");
    check_view(reshape(x, {1, 2, 1, 3}), x, "a.reshape(1, 2, 1, 3)");
  }
  SUBCASE("non-contiguous input: a view when the strides allow (computeStride)") {
    const Tensor xt = transpose(x, 0, 1);  // [3,2] strides [1,3]
    check_view(reshape(xt, {3, 1, 2, 1}), x, "a.t().reshape(3, 1, 2, 1)");
    check_view(reshape(xt, {1, 3, 2}), x, "a.t().reshape(1, 3, 2)");
    const Tensor y = iota({2, 3, 4});
    // permute(1,0,2) keeps the last dim contiguous: splitting it is a view.
    check_view(reshape(permute(y, {1, 0, 2}), {3, 2, 2, 2}), y, "a.permute(1, 0, 2).reshape(3, 2, 2, 2)");
    // A sliced tensor: rows of a [4,6] with stride 12 and an offset.
    const Tensor z = iota({4, 6});
    check_view(reshape(slice(z, 0, 1, 4, 2), {2, 2, 3}), z, "a[1:4:2].reshape(2, 2, 3)");
  }
  SUBCASE("non-contiguous input that cannot be viewed is copied") {
    const Tensor xt = transpose(x, 0, 1);
    const Tensor r = reshape(xt, {6});
    CHECK_FALSE(r.storage() == x.storage());
    CHECK(r.strides() == Shape{1});
    CHECK(r.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
    CHECK_TENSOR(r, torch_eval1("a.t().reshape(6)", {x}));
    const Tensor y = iota({2, 3, 4}, DType::Int64);
    CHECK_TENSOR(reshape(permute(y, {1, 0, 2}), {3, 8}), torch_eval1("a.permute(1, 0, 2).reshape(3, 8)", {y}));
  }
  SUBCASE("0-d and size-0") {
    const Tensor s = scalar_tensor(5.0);
    check_view(reshape(s, {1, 1}), s, "a.reshape(1, 1)");
    check_view(reshape(s, {-1}), s, "a.reshape(-1)");
    const Tensor one = iota({1});
    check_view(reshape(one, {}), one, "a.reshape(())");
    const Tensor e = zeros({2, 0, 3});
    check_view(reshape(e, {0, 4}), e, "a.reshape(0, 4)");
    check_view(reshape(e, {-1}), e, "a.reshape(-1)");
    check_view(reshape(e, {2, 0, 3}), e, "a.reshape(2, 0, 3)");
    check_view(reshape(transpose(e, 0, 2), {6, 0}), e, "a.transpose(0, 2).reshape(6, 0)");
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(reshape(x, {-1, -1}), "reshape: only one dimension can be inferred (shape [-1,-1])", Error);
    CHECK_THROWS_WITH_AS(reshape(x, {4, -1}), "reshape: shape [4,-1] is invalid for input of size 6", Error);
    CHECK_THROWS_WITH_AS(reshape(x, {4}), "reshape: shape [4] is invalid for input of size 6", Error);
    CHECK_THROWS_WITH_AS(reshape(x, {}), "reshape: shape [] is invalid for input of size 6", Error);
    CHECK_THROWS_WITH_AS(reshape(x, {-2, 3}), "reshape: invalid shape dimension -2 at index 0 of shape [-2,3]", Error);
    CHECK_THROWS_WITH_AS(reshape(x, {0, -1}),
                         "reshape: cannot reshape tensor of 0 elements into shape [0,-1] because the unspecified "
                         "dimension size -1 can be any value and is ambiguous",
                         Error);
    CHECK_THROWS_WITH_AS(reshape(zeros({0, 3}), {0, -1}), doctest::Contains("ambiguous"), Error);
  }
}

TEST_CASE("view") {
  const Tensor x = iota({2, 3}, DType::Float64);
  check_view(view(x, {3, 2}), x, "a.view(3, 2)");
  check_view(view(x, {-1}), x, "a.view(-1)");
  const Tensor y = iota({2, 3, 4});
  check_view(view(permute(y, {1, 0, 2}), {3, 2, 2, 2}), y, "a.permute(1, 0, 2).view(3, 2, 2, 2)");
  // A size-1 dim never breaks contiguity, whatever its stride.
  const Tensor row = iota({1, 3});
  check_view(view(transpose(row, 0, 1), {3}), row, "a.t().view(3)");
  const Tensor z = iota({2, 3, 1});
  check_view(view(permute(z, {0, 2, 1}), {6}), z, "a.permute(0, 2, 1).view(6)");
  check_view(view(as_strided(z, {2, 1, 3}, {3, 100, 1}), {3, 2}), z, "a.as_strided((2, 1, 3), (3, 100, 1)).view(3, 2)");
  const Tensor s = scalar_tensor(2.0);
  check_view(view(s, {1, 1, 1}), s, "a.view(1, 1, 1)");

  CHECK_THROWS_WITH_AS(view(transpose(x, 0, 1), {6}),
                       doctest::Contains("view: view size is not compatible with input tensor's size and stride (at "
                                         "least one dimension spans across two contiguous subspaces). Use "
                                         ".reshape(...) instead."),
                       Error);
  CHECK_THROWS_WITH_AS(view(permute(y, {1, 0, 2}), {3, 8}), doctest::Contains("Use .reshape(...) instead."), Error);
  CHECK_THROWS_WITH_AS(view(x, {5}), "view: shape [5] is invalid for input of size 6", Error);
  CHECK_THROWS_WITH_AS(view(x, {-1, 2, -1}), doctest::Contains("view: only one dimension can be inferred"), Error);
  // The known sizes' product overflows int64 (it was computed unchecked).
  CHECK_THROWS_WITH_AS(view(x, {1ll << 62, 4}), "view: shape [4611686018427387904,4] is invalid for input of size 6",
                       Error);
  CHECK_THROWS_WITH_AS(reshape(x, {-1, 1ll << 62, 4}),
                       "reshape: shape [-1,4611686018427387904,4] is invalid for input of size 6", Error);
  // With a 0 among them the product is 0 however large the others (torch: strides (1, 1)).
  const Tensor none = zeros({0});
  const Tensor wide = view(none, {1ll << 62, 0});
  CHECK(wide.sizes() == Shape{1ll << 62, 0});
  CHECK(wide.strides() == Shape{1, 1});
  CHECK(wide.storage() == none.storage());
}

TEST_CASE("squeeze") {
  const Tensor x = iota({1, 3, 1, 2});
  SUBCASE("all size-1 dims") {
    const Tensor s = squeeze(x);
    CHECK(s.sizes() == Shape{3, 2});
    check_view(s, x, "a.squeeze()");
    check_view(squeeze(permute(x, {3, 2, 1, 0})), x, "a.permute(3, 2, 1, 0).squeeze()");
  }
  SUBCASE("one dim; a non-1 dim is left alone") {
    check_view(squeeze(x, 0), x, "a.squeeze(0)");
    check_view(squeeze(x, -2), x, "a.squeeze(-2)");
    const Tensor same = squeeze(x, 1);
    CHECK(same.sizes() == x.sizes());
    check_view(same, x, "a.squeeze(1)");
    const Tensor z = iota({3, 1, 2});
    check_view(squeeze(slice(z, 2, 1), 1), z, "a[:, :, 1:].squeeze(1)");
  }
  SUBCASE("dim list") {
    check_view(squeeze(x, IntList{0, 2}), x, "a.squeeze((0, 2))");
    check_view(squeeze(x, IntList{-1, 0}), x, "a.squeeze((-1, 0))");
    check_view(squeeze(x, IntList{}), x, "a.squeeze(())");
  }
  SUBCASE("0-d and size-0") {
    const Tensor s = scalar_tensor(1.5);
    check_view(squeeze(s), s, "a.squeeze()");
    check_view(squeeze(s, 0), s, "a.squeeze(0)");
    check_view(squeeze(s, -1), s, "a.squeeze(-1)");
    const Tensor e = zeros({0, 1});
    check_view(squeeze(e), e, "a.squeeze()");
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(squeeze(x, 4), "squeeze: dimension out of range (expected to be in range of [-4, 3], but got 4)",
                         Error);
    CHECK_THROWS_WITH_AS(squeeze(scalar_tensor(1.0), 1), doctest::Contains("[-1, 0], but got 1"), Error);
    CHECK_THROWS_WITH_AS(squeeze(x, IntList{0, -4}), "squeeze: dim 0 appears multiple times in the list of dims", Error);
  }
}

TEST_CASE("unsqueeze") {
  const Tensor x = iota({2, 3});
  const Tensor u = unsqueeze(x, 1);
  CHECK(u.sizes() == Shape{2, 1, 3});
  CHECK(u.strides() == Shape{3, 3, 1});
  for (std::int64_t d = -3; d <= 2; ++d)
    check_view(unsqueeze(x, d), x, "a.unsqueeze(" + std::to_string(d) + ")");
  for (std::int64_t d = 0; d <= 2; ++d)  // non-contiguous input: the new stride follows the dim after it
    check_view(unsqueeze(transpose(x, 0, 1), d), x, "a.t().unsqueeze(" + std::to_string(d) + ")");
  const Tensor s = scalar_tensor(3);
  check_view(unsqueeze(s, 0), s, "a.unsqueeze(0)");
  check_view(unsqueeze(s, -1), s, "a.unsqueeze(-1)");
  const Tensor e = zeros({0, 2});
  check_view(unsqueeze(e, 1), e, "a.unsqueeze(1)");
  CHECK_THROWS_WITH_AS(unsqueeze(x, 3), "unsqueeze: dimension out of range (expected to be in range of [-3, 2], but got 3)",
                       Error);
  CHECK_THROWS_WITH_AS(unsqueeze(x, -4), doctest::Contains("but got -4"), Error);
  // An empty view's strides are never bounded by its storage; size * stride
  // overflowed (torch wraps it around to 2^63 - 3).
  CHECK_THROWS_WITH_AS(unsqueeze(as_strided(x, {3, 0}, {kMax, 1}), 0), "unsqueeze: 3 * 9223372036854775807 overflows int64",
                       Error);
}

TEST_CASE("permute") {
  const Tensor x = iota({2, 3, 4}, DType::Int64);
  const Tensor p = permute(x, {2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.at<std::int64_t>({3, 1, 2}) == 1 * 12 + 2 * 4 + 3);
  check_view(p, x, "a.permute(2, 0, 1)");
  check_view(permute(x, {-1, -3, 1}), x, "a.permute(-1, -3, 1)");
  check_view(permute(transpose(x, 0, 2), {1, 2, 0}), x, "a.transpose(0, 2).permute(1, 2, 0)");
  const Tensor s = scalar_tensor(1.0);
  check_view(permute(s, {}), s, "a.permute(())");
  const Tensor e = zeros({0, 3});
  check_view(permute(e, {1, 0}), e, "a.permute(1, 0)");
  CHECK_THROWS_WITH_AS(permute(x, {0, 1}),
                       "permute: number of dims in the permutation [0,1] does not match the number of dimensions of the "
                       "input (3, shape [2,3,4])",
                       Error);
  CHECK_THROWS_WITH_AS(permute(x, {0, 1, -3}), "permute: duplicate dims are not allowed in [0,1,-3]", Error);
  CHECK_THROWS_WITH_AS(permute(x, {0, 1, 3}), doctest::Contains("permute: dimension out of range"), Error);
}

TEST_CASE("transpose") {
  const Tensor x = iota({2, 3, 4});
  const Tensor tr = transpose(x, 0, 2);
  CHECK(tr.sizes() == Shape{4, 3, 2});
  CHECK(tr.strides() == Shape{1, 4, 12});
  check_view(tr, x, "a.transpose(0, 2)");
  check_view(transpose(x, -1, 1), x, "a.transpose(-1, 1)");
  check_view(transpose(x, 1, 1), x, "a.transpose(1, 1)");
  check_view(transpose(slice(x, 2, 1, std::nullopt, 2), 0, 1), x, "a[:, :, 1::2].transpose(0, 1)");
  const Tensor s = scalar_tensor(1.0);
  check_view(transpose(s, 0, -1), s, "a.transpose(0, -1)");
  CHECK_THROWS_WITH_AS(transpose(x, 0, 3), doctest::Contains("transpose: dimension out of range"), Error);
  CHECK_THROWS_WITH_AS(transpose(s, 0, 1), doctest::Contains("transpose: dimension out of range"), Error);
}

TEST_CASE("t") {
  const Tensor x = iota({2, 3});
  const Tensor xt = t(x);
  CHECK(xt.sizes() == Shape{3, 2});
  CHECK(xt.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  check_view(xt, x, "a.t()");
  check_view(t(t(x)), x, "a.t().t()");
  const Tensor v = iota({3});
  check_view(t(v), v, "a.t()");
  const Tensor s = scalar_tensor(4.0);
  check_view(t(s), s, "a.t()");
  CHECK_THROWS_WITH_AS(t(zeros({2, 3, 4})), "t: expects a tensor with <= 2 dimensions, but self is 3D (shape [2,3,4])",
                       Error);
}

TEST_CASE("narrow") {
  const Tensor x = iota({2, 3});
  const Tensor n = narrow(x, 1, 1, 2);
  CHECK(n.to_vector<double>() == std::vector<double>{1, 2, 4, 5});
  CHECK(n.storage_offset() == 1);
  check_view(n, x, "a.narrow(1, 1, 2)");
  check_view(narrow(x, -1, -1, 1), x, "a.narrow(-1, -1, 1)");
  check_view(narrow(x, 1, 3, 0), x, "a.narrow(1, 3, 0)");  // empty at the end
  check_view(narrow(x, 0, 1, 1), x, "a.narrow(0, 1, 1)");
  check_view(narrow(transpose(x, 0, 1), 0, 1, 2), x, "a.t().narrow(0, 1, 2)");
  CHECK_THROWS_WITH_AS(narrow(scalar_tensor(1.0), 0, 0, 1), "narrow: cannot be applied to a 0-dim tensor", Error);
  CHECK_THROWS_WITH_AS(narrow(x, 1, 4, 0), "narrow: start out of range (expected to be in range of [-3, 3], but got 4)",
                       Error);
  CHECK_THROWS_WITH_AS(narrow(x, 1, -4, 0), doctest::Contains("but got -4"), Error);
  CHECK_THROWS_WITH_AS(narrow(x, 1, 1, 3), "narrow: start (1) + length (3) exceeds dimension size (3) of dim 1 (shape [2,3])",
                       Error);
  CHECK_THROWS_WITH_AS(narrow(x, 1, 1, -1), "narrow: length must be non-negative, got -1", Error);
  CHECK_THROWS_WITH_AS(narrow(x, 2, 0, 1), doctest::Contains("narrow: dimension out of range"), Error);
  SUBCASE("overflow") {
    // start + length was computed unchecked.
    CHECK_THROWS_WITH_AS(narrow(x, 1, 1, kMax),
                         "narrow: start (1) + length (9223372036854775807) exceeds dimension size (3) of dim 1 (shape "
                         "[2,3])",
                         Error);
    // An empty piece at the end of a size-1 dim of huge stride: its offset overflows (torch: "invalid storage offset").
    const Tensor v = as_strided(x, {1}, {kMax}, 1);
    CHECK_THROWS_WITH_AS(narrow(v, 0, 1, 0), "narrow: 1 + 9223372036854775807 overflows int64", Error);
  }
}

TEST_CASE("slice") {
  const Tensor x = iota({4, 5});
  const Tensor s = slice(x, 1, 1, 5, 2);
  CHECK(s.sizes() == Shape{4, 2});
  CHECK(s.strides() == Shape{5, 2});
  CHECK(s.storage_offset() == 1);
  CHECK(s.to_vector<double>() == std::vector<double>{1, 3, 6, 8, 11, 13, 16, 18});
  check_view(s, x, "a[:, 1:5:2]");
  check_view(slice(x), x, "a[:]");
  check_view(slice(x, 0, std::nullopt, -1), x, "a[:-1]");
  check_view(slice(x, -1, -3), x, "a[:, -3:]");
  check_view(slice(x, 1, -10, 10, 2), x, "a[:, -10:10:2]");  // clamped like Python
  check_view(slice(x, 1, 5, 1, 2), x, "a[:, 5:1:2]");         // empty, starting at the clamped start
  check_view(slice(x, 0, 3, 100, 3), x, "a[3:100:3]");
  check_view(slice(x, 0, 1, 3, 1), x, "torch.ops.aten.slice(a, 0, 1, 3, 1)");
  check_view(slice(slice(transpose(x, 0, 1), 0, 1, std::nullopt, 2), 1, 2), x, "a.t()[1::2, 2:]");
  const Tensor e = zeros({0, 3});
  check_view(slice(e, 0, 1, 2), e, "a[1:2]");
  CHECK_THROWS_WITH_AS(slice(scalar_tensor(1.0)), "slice: cannot be applied to a 0-dim tensor", Error);
  CHECK_THROWS_WITH_AS(slice(x, 1, 0, 3, 0), "slice: step must be positive, got 0", Error);
  CHECK_THROWS_WITH_AS(slice(x, 1, 0, 3, -1), "slice: step must be positive, got -1", Error);
  CHECK_THROWS_WITH_AS(slice(x, 2), doctest::Contains("slice: dimension out of range"), Error);
  SUBCASE("huge steps and bounds") {
    check_view(slice(x, 1, 0, 5, 1ll << 62), x, "a[:, ::2**62]");
    check_view(slice(x, 0, kMin, kMax, 1), x, "torch.ops.aten.slice(a, 0, -2**63, 2**63 - 1, 1)");
    check_view(slice(x, 0, kMax, kMax, 1), x, "torch.ops.aten.slice(a, 0, 2**63 - 1, 2**63 - 1, 1)");
    // (stop - start + step - 1) / step overflowed. torch overflows too and
    // refuses; the view is one row of stride 2^63 - 1 (hand-worked).
    const Tensor v = slice(iota({3}), 0, 0, 3, kMax);
    CHECK(v.sizes() == Shape{1});
    CHECK(v.strides() == Shape{kMax});
    CHECK(v.to_vector<double>() == std::vector<double>{0});
    // The stride itself overflows, as in torch.
    CHECK_THROWS_WITH_AS(slice(x, 0, 0, 4, kMax), "slice: 5 * 9223372036854775807 overflows int64", Error);
    CHECK_THROWS_WITH_AS(slice(as_strided(x, {1}, {kMax}, 1), 0, 1), "slice: 1 + 9223372036854775807 overflows int64",
                         Error);
  }
}

TEST_CASE("select") {
  const Tensor x = iota({2, 3});
  const Tensor s = select(x, 1, 2);
  CHECK(s.sizes() == Shape{2});
  CHECK(s.to_vector<double>() == std::vector<double>{2, 5});
  check_view(s, x, "a.select(1, 2)");
  check_view(select(x, 0, -1), x, "a.select(0, -1)");
  check_view(select(x, -1, -3), x, "a.select(-1, -3)");
  check_view(select(select(x, 0, 1), 0, 1), x, "a[1][1]");  // down to 0-d
  check_view(select(transpose(x, 0, 1), 0, 1), x, "a.t().select(0, 1)");
  const Tensor e = zeros({2, 0});
  check_view(select(e, 0, 1), e, "a.select(0, 1)");
  CHECK_THROWS_WITH_AS(select(scalar_tensor(1.0), 0, 0), "select: cannot be applied to a 0-dim tensor", Error);
  CHECK_THROWS_WITH_AS(select(x, 1, 3), "select: index 3 out of range for tensor of size [2,3] at dimension 1", Error);
  CHECK_THROWS_WITH_AS(select(x, 1, -4), "select: index -4 out of range for tensor of size [2,3] at dimension 1", Error);
  CHECK_THROWS_WITH_AS(select(x, 2, 0), doctest::Contains("select: dimension out of range"), Error);
  // An empty view's strides are never bounded by its storage: the offset overflowed (torch: "invalid storage offset").
  CHECK_THROWS_WITH_AS(select(as_strided(x, {3, 0}, {kMax, 1}), 0, 2), "select: 2 * 9223372036854775807 overflows int64",
                       Error);
}

TEST_CASE("as_strided") {
  const Tensor x = iota({2, 3});
  const Tensor a = as_strided(x, {2, 2}, {1, 2}, 1);
  CHECK(a.to_vector<double>() == std::vector<double>{1, 3, 2, 4});
  check_view(a, x, "a.as_strided((2, 2), (1, 2), 1)");
  check_view(as_strided(x, {3, 3}, {1, 1}), x, "a.as_strided((3, 3), (1, 1))");  // overlapping
  check_view(as_strided(x, {}, {}, 5), x, "a.as_strided((), (), 5)");
  check_view(as_strided(x, {4}, {0}), x, "a.as_strided((4,), (0,))");
  // The offset defaults to the input's own, and bounds are the whole storage's.
  check_view(as_strided(slice(x, 0, 1), {2}, {1}), x, "a[1:].as_strided((2,), (1,))");
  check_view(as_strided(slice(x, 0, 1), {6}, {1}, 0), x, "a[1:].as_strided((6,), (1,), 0)");
  check_view(as_strided(x, {0, 100}, {100, 1}, 6), x, "a.as_strided((0, 100), (100, 1), 6)");  // empty: never read
  CHECK_THROWS_WITH_AS(as_strided(x, {10}, {1}),
                       "as_strided: sizes [10], strides [1] and storage offset 0 are out of bounds for a storage of 6 "
                       "elements (they need 10)",
                       Error);
  CHECK_THROWS_WITH_AS(as_strided(slice(x, 0, 1), {2, 2}, {3, 1}), doctest::Contains("(they need 8)"), Error);
  CHECK_THROWS_WITH_AS(as_strided(x, {2}, {1}, 5), doctest::Contains("out of bounds for a storage of 6 elements"), Error);
  CHECK_THROWS_WITH_AS(as_strided(x, {1ll << 40, 1ll << 20}, {1ll << 40, 1}), doctest::Contains("(the extent overflows)"), Error);
  CHECK_THROWS_WITH_AS(as_strided(x, {2}, {1, 1}), "as_strided: mismatch in length of strides [1,1] and shape [2]", Error);
  CHECK_THROWS_WITH_AS(as_strided(x, {2}, {-1}), "as_strided: negative strides are not supported, got strides [-1]",
                       Error);
  CHECK_THROWS_WITH_AS(as_strided(x, {-2}, {1}), "as_strided: negative size in shape [-2]", Error);
  CHECK_THROWS_WITH_AS(as_strided(x, {2}, {1}, -1), "as_strided: negative storage offset -1", Error);
  // offset + 1 overflowed.
  CHECK_THROWS_WITH_AS(as_strided(x, {1}, {1}, kMax),
                       "as_strided: sizes [1], strides [1] and storage offset 9223372036854775807 are out of bounds for "
                       "a storage of 6 elements (the extent overflows)",
                       Error);
}

TEST_CASE("flip") {
  const Tensor x = iota({2, 3}, DType::Int64);
  const Tensor f = flip(x, {1});
  CHECK(f.to_vector<std::int64_t>() == I64{2, 1, 0, 5, 4, 3});
  CHECK(f.dtype() == DType::Int64);
  CHECK_FALSE(f.storage() == x.storage());
  CHECK(flip(x, {0, -1}).to_vector<std::int64_t>() == I64{5, 4, 3, 2, 1, 0});
  CHECK_TENSOR(flip(x, {-2}), torch_eval1("torch.flip(a, [-2])", {x}));
  CHECK_TENSOR(flip(x, {}), torch_eval1("torch.flip(a, [])", {x}));
  const Tensor y = iota({2, 3, 4}, DType::Float64);
  CHECK_TENSOR(flip(permute(y, {2, 0, 1}), {0, 2}), torch_eval1("torch.flip(a.permute(2, 0, 1), [0, 2])", {y}));
  CHECK_TENSOR(flip(slice(y, 2, 1, std::nullopt, 2), {2}), torch_eval1("torch.flip(a[:, :, 1::2], [2])", {y}));
  const Tensor b = tensor({true, false, false});
  CHECK_TENSOR(flip(b, {0}), torch_eval1("torch.flip(a, [0])", {b}));
  const Tensor s = scalar_tensor(2.5);
  CHECK_TENSOR(flip(s, {0}), torch_eval1("torch.flip(a, [0])", {s}));
  CHECK(flip(zeros({0, 3}), {0, 1}).sizes() == Shape{0, 3});
  CHECK_THROWS_WITH_AS(flip(x, {0, -2}), "flip: dim 0 appears multiple times in the list of dims", Error);
  CHECK_THROWS_WITH_AS(flip(x, {2}), doctest::Contains("flip: dimension out of range"), Error);
}

TEST_CASE("cat") {
  const Tensor x = iota({2, 3});
  const Tensor y = full({2, 1}, 9.0);
  SUBCASE("values, negative dims, non-contiguous inputs") {
    const Tensor c = cat({x, y}, 1);
    CHECK(c.sizes() == Shape{2, 4});
    CHECK(c.to_vector<double>() == std::vector<double>{0, 1, 2, 9, 3, 4, 5, 9});
    CHECK_TENSOR(cat({x, y}, -1), torch_eval1("torch.cat([a, b], -1)", {x, y}));
    CHECK_TENSOR(cat({x, x, x}), torch_eval1("torch.cat([a, a, a])", {x}));
    CHECK_TENSOR(cat({transpose(x, 0, 1), slice(iota({3, 4}), 1, 1, std::nullopt, 2)}, 1),
                 torch_eval1("torch.cat([a.t(), b[:, 1::2]], 1)", {x, iota({3, 4})}));
    CHECK_TENSOR(cat({x}), torch_eval1("torch.cat([a])", {x}));
    CHECK_FALSE(cat({x}).storage() == x.storage());
  }
  SUBCASE("dtype promotion across inputs") {
    const Tensor i = iota({2, 1}, DType::Int64);
    const Tensor b = full({2, 2}, true);
    const Tensor d = iota({2, 1}, DType::Float64);
    CHECK(cat({i, b}, 1).dtype() == DType::Int64);
    CHECK_TENSOR(cat({b, i}, 1), torch_eval1("torch.cat([a, b], 1)", {b, i}));
    CHECK_TENSOR(cat({x, i}, 1), torch_eval1("torch.cat([a, b], 1)", {x, i}));
    CHECK_TENSOR(cat({i, x, d, b}, 1), torch_eval1("torch.cat([a, b, c, d], 1)", {i, x, d, b}));
  }
  SUBCASE("legacy 1-d empty tensors are skipped, but count for the dtype") {
    const Tensor e32 = zeros({0});
    const Tensor e64 = zeros({0}, DType::Float64);
    const Tensor c = cat({e32, x, e64}, 1);
    CHECK(c.sizes() == Shape{2, 3});
    CHECK(c.dtype() == DType::Float64);
    CHECK_TENSOR(c, torch_eval1("torch.cat([a, b, c], 1)", {e32, x, e64}));
    const Tensor ei = zeros({0}, DType::Int64);
    CHECK_TENSOR(cat({e32, ei}, 0), torch_eval1("torch.cat([a, b], 0)", {e32, ei}));
    CHECK_TENSOR(cat({e32, e32}, 5), torch_eval1("torch.cat([a, a], 5)", {e32}));  // dim unchecked when all skipped
    const Tensor rows0 = zeros({0, 3});
    CHECK_TENSOR(cat({rows0, x}, 0), torch_eval1("torch.cat([a, b], 0)", {rows0, x}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(cat({}), "cat: expected a non-empty list of Tensors", Error);
    CHECK_THROWS_WITH_AS(cat({x, y}),
                         "cat: sizes of tensors must match except in dimension 0. Expected size 3 but got size 1 in "
                         "dimension 1 for tensor number 1 in the list (shapes [2,3] and [2,1])",
                         Error);
    CHECK_THROWS_WITH_AS(cat({zeros({0, 2}), x}, 0), doctest::Contains("Expected size 2 but got size 3 in dimension 1 "
                                                                       "for tensor number 1"),
                         Error);
    CHECK_THROWS_WITH_AS(cat({x, zeros({2})}, 1),
                         "cat: tensors must have same number of dimensions: got 2 and 1 (tensor number 1 in the list "
                         "has shape [2])",
                         Error);
    CHECK_THROWS_WITH_AS(cat({x, scalar_tensor(1.0)}), "cat: zero-dimensional tensor (at position 1) cannot be concatenated",
                         Error);
    CHECK_THROWS_WITH_AS(cat({x}, 2), doctest::Contains("cat: dimension out of range"), Error);
  }
}

TEST_CASE("stack") {
  const Tensor x = iota({2, 3});
  const Tensor y = full({2, 3}, 7.0);
  const Tensor s = stack({x, y});
  CHECK(s.sizes() == Shape{2, 2, 3});
  CHECK(s.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5, 7, 7, 7, 7, 7, 7});
  for (std::int64_t d = -3; d <= 2; ++d)
    CHECK_TENSOR(stack({x, y}, d), torch_eval1("torch.stack([a, b], " + std::to_string(d) + ")", {x, y}));
  CHECK_TENSOR(stack({transpose(x, 0, 1), transpose(y, 0, 1)}, 1), torch_eval1("torch.stack([a.t(), b.t()], 1)", {x, y}));
  const Tensor i = iota({2, 3}, DType::Int64);
  CHECK_TENSOR(stack({i, x}, 2), torch_eval1("torch.stack([a, b], 2)", {i, x}));  // promotion
  const Tensor s0 = scalar_tensor(1.0), s1 = scalar_tensor(2);
  CHECK_TENSOR(stack({s0, s1}), torch_eval1("torch.stack([a, b])", {s0, s1}));
  const Tensor e = zeros({0});
  CHECK_TENSOR(stack({e, e}, 1), torch_eval1("torch.stack([a, a], 1)", {e}));
  CHECK_THROWS_WITH_AS(stack({}), "stack: expects a non-empty TensorList", Error);
  CHECK_THROWS_WITH_AS(stack({x, zeros({3, 2})}),
                       "stack: expects each tensor to be equal size, but got [2,3] at entry 0 and [3,2] at entry 1", Error);
  CHECK_THROWS_WITH_AS(stack({x, x}, 3), doctest::Contains("stack: dimension out of range"), Error);
}

TEST_CASE("split") {
  const Tensor x = iota({5, 2});
  const TensorList parts = split(x, 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].sizes() == Shape{1, 2});
  CHECK(parts[2].to_vector<double>() == std::vector<double>{8, 9});
  check_views(parts, x, "a.split(2)");
  check_views(split(x, 5), x, "a.split(5)");
  check_views(split(x, 7), x, "a.split(7)");
  check_views(split(x, 1, -1), x, "a.split(1, -1)");
  check_views(split(transpose(x, 0, 1), 3, 1), x, "a.t().split(3, 1)");
  const Tensor e = zeros({0, 3});
  check_views(split(e, 0), e, "a.split(0)");
  check_views(split(e, 2), e, "a.split(2)");
  CHECK_THROWS_WITH_AS(split(x, -1), "split: expects split_size be non-negative, but got split_size=-1", Error);
  CHECK_THROWS_WITH_AS(split(x, 0), "split: split_size can only be 0 if dimension size is 0, but got dimension size of 5",
                       Error);
  CHECK_THROWS_WITH_AS(split(scalar_tensor(1.0), 1), "split: expects at least a 1-dimensional tensor", Error);
  CHECK_THROWS_WITH_AS(split(x, 1, 2), doctest::Contains("split: dimension out of range"), Error);
  SUBCASE("huge") {
    check_views(split(x, kMax), x, "a.split(2**63 - 1)");  // size + split_size - 1 overflowed
    // 2^39 pieces of a broadcast view: the list alone is far over the limit.
    MemoryLimitScope limit(1ll << 40);
    const Tensor wide = expand(tensor({true}), {1ll << 39});
    CHECK_THROWS_WITH_AS(split(wide, 1),
                         doctest::Contains("split: 549755813888 pieces of a tensor of shape [549755813888] would need "
                                           "more than the memory limit of 1099511627776 bytes"),
                         Error);
  }
}

TEST_CASE("split_with_sizes") {
  const Tensor x = iota({2, 6});
  const TensorList parts = split_with_sizes(x, {1, 0, 3, 2}, 1);
  REQUIRE(parts.size() == 4);
  CHECK(parts[1].sizes() == Shape{2, 0});
  CHECK(parts[2].to_vector<double>() == std::vector<double>{1, 2, 3, 7, 8, 9});
  check_views(parts, x, "a.split_with_sizes([1, 0, 3, 2], 1)");
  check_views(split_with_sizes(x, {2}, 0), x, "a.split_with_sizes([2], 0)");
  check_views(split_with_sizes(transpose(x, 0, 1), {4, 2}, -2), x, "a.t().split_with_sizes([4, 2], -2)");
  CHECK_THROWS_WITH_AS(split_with_sizes(x, {1, 1}, 1),
                       "split_with_sizes: expects split_sizes to sum exactly to 6 (input tensor's size at dimension 1), "
                       "but got split_sizes=[1,1]",
                       Error);
  CHECK_THROWS_WITH_AS(split_with_sizes(x, {7, -1}, 1),
                       "split_with_sizes: expects split_sizes have only non-negative entries, but got split_sizes=[7,-1]",
                       Error);
  CHECK_THROWS_WITH_AS(split_with_sizes(scalar_tensor(1.0), {1}), "split_with_sizes: expects at least a 1-dimensional tensor",
                       Error);
  CHECK_THROWS_WITH_AS(split_with_sizes(x, {2}, -3), doctest::Contains("split_with_sizes: dimension out of range"), Error);
  // The sum overflowed, and wrapped around to the dim's size (torch then returns nonsense pieces).
  CHECK_THROWS_WITH_AS(split_with_sizes(x, {kMax, kMax, 8}, 1),
                       "split_with_sizes: expects split_sizes to sum exactly to 6 (input tensor's size at dimension 1), "
                       "but got split_sizes=[9223372036854775807,9223372036854775807,8]",
                       Error);
}

TEST_CASE("chunk") {
  const Tensor x = iota({5, 2});
  const TensorList parts = chunk(x, 4);  // ceil(5 / 4) = 2 rows each: only 3 chunks
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].sizes() == Shape{1, 2});
  check_views(parts, x, "a.chunk(4)");
  check_views(chunk(x, 5), x, "a.chunk(5)");
  check_views(chunk(x, 9), x, "a.chunk(9)");
  check_views(chunk(x, 2, -1), x, "a.chunk(2, -1)");
  const Tensor six = iota({6});
  check_views(chunk(six, 4), six, "a.chunk(4)");
  check_views(chunk(transpose(x, 0, 1), 2, 1), x, "a.t().chunk(2, 1)");
  const Tensor e = zeros({0, 3});
  const TensorList empties = chunk(e, 3);
  CHECK(empties.size() == 3);
  check_views(empties, e, "a.chunk(3)");
  CHECK_THROWS_WITH_AS(chunk(x, 0), "chunk: expects `chunks` to be greater than 0, got: 0", Error);
  CHECK_THROWS_WITH_AS(chunk(x, -2), "chunk: expects `chunks` to be greater than 0, got: -2", Error);
  CHECK_THROWS_WITH_AS(chunk(scalar_tensor(1.0), 1), "chunk: expects at least a 1-dimensional tensor", Error);
  CHECK_THROWS_WITH_AS(chunk(x, 2, 2), doctest::Contains("chunk: dimension out of range"), Error);
  SUBCASE("huge") {
    // size + chunks - 1 overflowed (torch too); ceil(5 / chunks) = 1 row each.
    check_views(chunk(x, kMax), x, "a.chunk(5)");
    // An empty dim gives `chunks` pieces: a list of 2^63 - 1 tensors was allocated.
    CHECK_THROWS_WITH_AS(chunk(e, kMax),
                         doctest::Contains("chunk: 9223372036854775807 pieces of a tensor of shape [0,3] would need "
                                           "more than the memory limit"),
                         Error);
  }
}

TEST_CASE("repeat") {
  const Tensor x = tensor({{1, 2}, {3, 4}});
  const Tensor r = repeat(x, {2, 3});
  CHECK(r.sizes() == Shape{4, 6});
  CHECK(r.to_vector<std::int64_t>() ==
        I64{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
  CHECK_TENSOR(repeat(x, {2, 1, 2}), torch_eval1("a.repeat(2, 1, 2)", {x}));  // a new leading dim
  CHECK_TENSOR(repeat(transpose(x, 0, 1), {1, 2}), torch_eval1("a.t().repeat(1, 2)", {x}));
  CHECK_TENSOR(repeat(x, {0, 2}), torch_eval1("a.repeat(0, 2)", {x}));
  CHECK_TENSOR(repeat(zeros({0, 2}), {3, 1}), torch_eval1("a.repeat(3, 1)", {zeros({0, 2})}));
  const Tensor s = scalar_tensor(1.5);
  CHECK_TENSOR(repeat(s, {}), torch_eval1("a.repeat([])", {s}));
  CHECK_TENSOR(repeat(s, {2, 3}), torch_eval1("a.repeat(2, 3)", {s}));
  CHECK_FALSE(repeat(x, {1, 1}).storage() == x.storage());
  CHECK_THROWS_WITH_AS(repeat(x, {2}),
                       "repeat: number of dimensions of repeat dims (1) can not be smaller than number of dimensions of "
                       "tensor (2, shape [2,2])",
                       Error);
  CHECK_THROWS_WITH_AS(repeat(x, {2, -1}), "repeat: repeats [2,-1] must be non-negative", Error);
  // size * repeats was computed unchecked.
  CHECK_THROWS_WITH_AS(repeat(x, {1ll << 62, 4}), "repeat: 2 * 4611686018427387904 overflows int64", Error);
  CHECK_THROWS_WITH_AS(repeat(zeros({0, 3}), {2, 1ll << 62}), "repeat: 3 * 4611686018427387904 overflows int64", Error);
}

TEST_CASE("constant_pad_nd") {
  const Tensor x = iota({2, 3});
  SUBCASE("hand values: pairs run from the last dim backwards") {
    const Tensor p = constant_pad_nd(x, {1, 0, 0, 1}, -1);
    CHECK(p.sizes() == Shape{3, 4});
    CHECK(p.to_vector<double>() == std::vector<double>{-1, 0, 1, 2, -1, 3, 4, 5, -1, -1, -1, -1});
    CHECK(p.dtype() == DType::Float32);
  }
  SUBCASE("against torch: negative pads crop, non-contiguous input") {
    CHECK_TENSOR(constant_pad_nd(x, {2, 1}, 0.5), torch_eval1("torch.constant_pad_nd(a, [2, 1], 0.5)", {x}));
    CHECK_TENSOR(constant_pad_nd(x, {-1, 2, 1, -1}), torch_eval1("torch.constant_pad_nd(a, [-1, 2, 1, -1])", {x}));
    CHECK_TENSOR(constant_pad_nd(x, {-2, -1}), torch_eval1("torch.constant_pad_nd(a, [-2, -1])", {x}));  // size 0
    CHECK_TENSOR(constant_pad_nd(x, {-1, 0}), torch_eval1("torch.constant_pad_nd(a, [-1, 0])", {x}));    // crop only
    CHECK_TENSOR(constant_pad_nd(x, {}), torch_eval1("torch.constant_pad_nd(a, [])", {x}));
    CHECK_FALSE(constant_pad_nd(x, {}).storage() == x.storage());
    CHECK_TENSOR(constant_pad_nd(transpose(x, 0, 1), {1, 1, 0, 2}, 7),
                 torch_eval1("torch.constant_pad_nd(a.t(), [1, 1, 0, 2], 7)", {x}));
    const Tensor e = zeros({0, 3});
    CHECK_TENSOR(constant_pad_nd(e, {0, 0, 1, 1}, 2.0), torch_eval1("torch.constant_pad_nd(a, [0, 0, 1, 1], 2.)", {e}));
    const Tensor s = scalar_tensor(3.0);
    CHECK_TENSOR(constant_pad_nd(s, {}), torch_eval1("torch.constant_pad_nd(a, [])", {s}));
  }
  SUBCASE("the value is cast to the dtype") {
    const Tensor i = tensor({1, 2});
    CHECK(constant_pad_nd(i, {1, 1}, 1.7).to_vector<std::int64_t>() == I64{1, 1, 2, 1});
    CHECK_TENSOR(constant_pad_nd(i, {1, 1}, 1.7), torch_eval1("torch.constant_pad_nd(a, [1, 1], 1.7)", {i}));
    const Tensor b = tensor({true, false});
    CHECK_TENSOR(constant_pad_nd(b, {1, 1}, 2), torch_eval1("torch.constant_pad_nd(a, [1, 1], 2)", {b}));
    CHECK_TENSOR(constant_pad_nd(b, {1, 1}, NAN), torch_eval1("torch.constant_pad_nd(a, [1, 1], float('nan'))", {b}));
    // A float that does not fit raises, as c10's checked conversion does (a
    // plain cast is undefined behaviour); 2^63 passes and gives INT64_MIN.
    CHECK_TENSOR(constant_pad_nd(i, {1, 1}, 0x1p63), torch_eval1("torch.constant_pad_nd(a, [1, 1], 2.**63)", {i}));
    CHECK_TENSOR(constant_pad_nd(i, {1, 1}, kMax), torch_eval1("torch.constant_pad_nd(a, [1, 1], 2**63 - 1)", {i}));
    CHECK_THROWS_WITH_AS(constant_pad_nd(i, {1, 1}, NAN),
                         "constant_pad_nd: value nan cannot be converted to type int64 without overflow", Error);
    CHECK_THROWS_WITH_AS(constant_pad_nd(i, {0, 1}, 1e30),
                         "constant_pad_nd: value 1e+30 cannot be converted to type int64 without overflow", Error);
    CHECK_THROWS_WITH_AS(constant_pad_nd(i, {0, 1}, -INFINITY),
                         "constant_pad_nd: value -inf cannot be converted to type int64 without overflow", Error);
    CHECK(testing::torch_run("torch.constant_pad_nd(a, [0, 1], float('-inf'))", {i}).ok == false);
    const Tensor f = tensor({1.0f, 2.0f});
    CHECK_THROWS_WITH_AS(constant_pad_nd(f, {1, 0}, 1e300),
                         "constant_pad_nd: value 1e+300 cannot be converted to type float32 without overflow", Error);
    CHECK_TENSOR(constant_pad_nd(f, {1, 0}, INFINITY), torch_eval1("torch.constant_pad_nd(a, [1, 0], float('inf'))", {f}));
    // Only a pad that adds elements uses the value.
    CHECK_TENSOR(constant_pad_nd(i, {-1, 0}, NAN), torch_eval1("torch.constant_pad_nd(a, [-1, 0], float('nan'))", {i}));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(constant_pad_nd(x, {1, 2, 3}), "constant_pad_nd: length of pad must be even but instead it equals 3",
                         Error);
    CHECK_THROWS_WITH_AS(constant_pad_nd(x, {1, 2, 3, 4, 5, 6}),
                         "constant_pad_nd: length of pad should be no more than twice the number of dimensions of the "
                         "input. Pad length is 6 while the input has 2 dimensions (shape [2,3])",
                         Error);
    CHECK_THROWS_WITH_AS(constant_pad_nd(x, {-2, -2}),
                         "constant_pad_nd: the input size 3, plus negative padding -2 and -2 resulted in a negative "
                         "output size, which is invalid. Check dimension 1 of your input (shape [2,3])",
                         Error);
    CHECK_THROWS_WITH_AS(constant_pad_nd(x, {0, 0, -4, 1}), doctest::Contains("Check dimension 0 of your input"), Error);
    // size + before + after overflowed, negative and positive.
    CHECK_THROWS_WITH_AS(constant_pad_nd(x, {kMin, kMin}),
                         "constant_pad_nd: the input size 3, plus negative padding -9223372036854775808 and "
                         "-9223372036854775808 resulted in a negative output size, which is invalid. Check dimension 1 "
                         "of your input (shape [2,3])",
                         Error);
    CHECK_THROWS_WITH_AS(constant_pad_nd(x, {kMax, 1}), "constant_pad_nd: 3 + 9223372036854775807 overflows int64", Error);
  }
}

TEST_CASE("tril") {
  const Tensor x = iota({3, 4});
  CHECK(tril(x).to_vector<double>() == std::vector<double>{0, 0, 0, 0, 4, 5, 0, 0, 8, 9, 10, 0});
  for (std::int64_t k : {-4, -1, 0, 1, 5})
    CHECK_TENSOR(tril(x, k), torch_eval1("torch.tril(a, " + std::to_string(k) + ")", {x}));
  const Tensor batched = iota({2, 3, 3}, DType::Int64);
  CHECK_TENSOR(tril(batched, -1), torch_eval1("torch.tril(a, -1)", {batched}));
  CHECK_TENSOR(tril(transpose(x, 0, 1)), torch_eval1("torch.tril(a.t())", {x}));
  const Tensor b = full({3, 3}, true);
  CHECK_TENSOR(tril(b), torch_eval1("torch.tril(a)", {b}));
  CHECK_TENSOR(tril(zeros({2, 0, 3})), torch_eval1("torch.tril(a)", {zeros({2, 0, 3})}));
  CHECK_FALSE(tril(x, 10).storage() == x.storage());
  CHECK_THROWS_WITH_AS(tril(iota({3})), "tril: input tensor must have at least 2 dimensions (shape [3])", Error);
  CHECK_THROWS_WITH_AS(tril(scalar_tensor(1.0)), "tril: input tensor must have at least 2 dimensions (shape [])", Error);
}

TEST_CASE("triu") {
  const Tensor x = iota({3, 4});
  CHECK(triu(x).to_vector<double>() == std::vector<double>{0, 1, 2, 3, 0, 5, 6, 7, 0, 0, 10, 11});
  for (std::int64_t k : {-4, -1, 0, 2, 5})
    CHECK_TENSOR(triu(x, k), torch_eval1("torch.triu(a, " + std::to_string(k) + ")", {x}));
  const Tensor batched = iota({2, 2, 3, 3}, DType::Float64);
  CHECK_TENSOR(triu(batched, 1), torch_eval1("torch.triu(a, 1)", {batched}));
  CHECK_TENSOR(triu(slice(x, 1, 1)), torch_eval1("torch.triu(a[:, 1:])", {x}));
  const Tensor b = full({2, 3}, true);
  CHECK_TENSOR(triu(b, -1), torch_eval1("torch.triu(a, -1)", {b}));
  CHECK_THROWS_WITH_AS(triu(iota({3})), "triu: input tensor must have at least 2 dimensions (shape [3])", Error);
}

TEST_CASE("xtensor pad and tile under C++17") {
  // Debian's xtensor 0.24.3 gets pad and tile wrong under C++20; this layer is
  // C++17, and these compare its results with torch on 1-d, 2-d and 3-d inputs
  // of every dtype (repeat no longer uses tile, whose bool kernel read
  // uninitialized bytes).
  Generator generator(7);
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64, DType::Bool}) {
    for (const Shape& shape : {Shape{5}, Shape{3, 4}, Shape{2, 3, 4}}) {
      // Values that survive every cast: small integers (and True/False).
      std::vector<double> ints = randn(shape, generator, DType::Float64).to_vector<double>();
      for (double& v : ints) v = static_cast<double>(static_cast<std::int64_t>(v * 3));
      const Tensor input = from_vector<double>(ints, shape).to(dtype);
      INFO("dtype ", dtype_name(dtype), " shape ", str(shape));

      IntList pad;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        pad.push_back(static_cast<std::int64_t>(d) + 1);
        pad.push_back(2 - static_cast<std::int64_t>(d));
      }
      const std::string pad_text = str(pad);
      CHECK_TENSOR(constant_pad_nd(input, pad, 1), torch_eval1("torch.constant_pad_nd(a, " + pad_text + ", 1)", {input}));
      const IntList last_only = {2, 1};
      CHECK_TENSOR(constant_pad_nd(input, last_only, 0),
                   torch_eval1("torch.constant_pad_nd(a, [2, 1], 0)", {input}));

      IntList repeats(shape.size(), 2);
      repeats.back() = 3;
      CHECK_TENSOR(repeat(input, repeats), torch_eval1("a.repeat(" + str(repeats) + ")", {input}));
      IntList more = repeats;
      more.insert(more.begin(), 2);
      CHECK_TENSOR(repeat(input, more), torch_eval1("a.repeat(" + str(more) + ")", {input}));
    }
  }
}

}  // TEST_SUITE
