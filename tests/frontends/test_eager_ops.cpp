// The eager tape's elementwise, linear-algebra and shape ops (eager.cpp,
// eager_shape.cpp): each op's grads against finite differences of its
// forward (float64), the nodes and saved fields torch 2.13 records for the
// multi-node ops (written by hand from walking y.grad_fn in torch 2.13.0+cpu;
// the torch call is named in a comment at each check), and bad arguments.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "eager_check.hpp"
#include "refgrad/eager.hpp"
#include "refgrad/error.hpp"
#include "refgrad/ops.hpp"

using namespace refgrad;
namespace eager = refgrad::eager;

namespace {

using eager::Variable;
using testing::binary;
using testing::check_against_finite_differences;
using testing::Op;
using testing::unary;
using testing::values;

constexpr std::int64_t kOpenEnd = std::numeric_limits<std::int64_t>::max();  // how torch saves x[a:]'s end

// The graph a backward from `y` (with an uneven grad) would run.
Graph graph_of(const Variable& y) { return eager::record({y}, {values(y.data().sizes(), 0.3)}); }

// The graph's nodes other than AccumulateGrad, in the order they were recorded (by sequence_nr).
std::vector<const GraphNode*> recorded_nodes(const Graph& graph) {
  std::vector<const GraphNode*> nodes;
  for (const GraphNode& node : graph.nodes) {
    if (node.kind != GraphNode::Kind::AccumulateGrad) nodes.push_back(&node);
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const GraphNode* a, const GraphNode* b) { return a->sequence_nr < b->sequence_nr; });
  return nodes;
}

std::vector<std::string> recorded_names(const Graph& graph) {
  std::vector<std::string> names;
  for (const GraphNode* node : recorded_nodes(graph)) names.push_back(node->name);
  return names;
}

// The i-th recorded node (in recording order).
const GraphNode& recorded(const Graph& graph, std::size_t i) { return *recorded_nodes(graph).at(i); }

// The first node recorded for `y`, copied out of its graph (which is gone after the call).
GraphNode first_node(const Variable& y) { return recorded(graph_of(y), 0); }

const FieldValue& field(const GraphNode& node, const std::string& name) {
  for (const auto& [field_name, value] : node.saved) {
    if (field_name == name) return value;
  }
  fail("node " + node.name + " has no field " + name);
}

IntList ints(const GraphNode& node, const std::string& name) { return std::get<IntList>(field(node, name)); }
std::int64_t int_field(const GraphNode& node, const std::string& name) {
  return std::get<std::int64_t>(field(node, name));
}
bool is_none(const FieldValue& value) { return std::holds_alternative<None>(value); }

// The message of the refgrad::Error `run` raises ("" when it raises none).
std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

using UnaryFn = std::function<Variable(const Variable&)>;
using BinaryFn = std::function<Variable(const Variable&, const Variable&)>;

// Finite-difference checks of a one- and a two-input op.
void check_unary(const UnaryFn& fn, const Tensor& input) { check_against_finite_differences(unary(fn), {input}); }
void check_binary(const BinaryFn& fn, const Tensor& a, const Tensor& b) {
  check_against_finite_differences(binary(fn), {a, b});
}

Variable leaf_of(const Shape& shape, double seed, const std::string& name) {
  return eager::leaf(values(shape, seed), name);
}

}  // namespace

TEST_CASE("eager: elementwise ops and reductions over dims match finite differences") {
  const Tensor a = values({2, 3}, 0.0);
  const Tensor positive = refgrad::exp(values({2, 3}, 1.0));  // for sqrt, rsqrt, pow 0.5 and dividing by it
  const BinaryFn div = [](const Variable& x, const Variable& y) { return eager::div(x, y); };
  SUBCASE("add scalar") { check_unary([](const Variable& x) { return eager::add(x, 2.5); }, a); }
  SUBCASE("mul scalar") { check_unary([](const Variable& x) { return eager::mul(x, -1.5); }, a); }
  SUBCASE("div scalar") { check_unary([](const Variable& x) { return eager::div(x, 4); }, a); }
  SUBCASE("div") { check_binary(div, a, positive); }
  SUBCASE("div broadcasting the divisor") { check_binary(div, a, refgrad::exp(values({3}, 2.0))); }
  SUBCASE("div broadcasting the dividend") { check_binary(div, values({2, 1}, 3.0), positive); }
  SUBCASE("pow 3") { check_unary([](const Variable& x) { return eager::pow(x, 3); }, a); }
  SUBCASE("pow 0.5") { check_unary([](const Variable& x) { return eager::pow(x, 0.5); }, positive); }
  SUBCASE("sqrt") { check_unary(eager::sqrt, positive); }
  SUBCASE("rsqrt") { check_unary(eager::rsqrt, positive); }
  SUBCASE("sum over a negative dim") { check_unary([](const Variable& x) { return eager::sum(x, {-1}); }, a); }
  SUBCASE("sum keepdim") { check_unary([](const Variable& x) { return eager::sum(x, {0}, true); }, a); }
  SUBCASE("mean over two dims") {
    check_unary([](const Variable& x) { return eager::mean(x, {0, -1}); }, values({2, 3, 4}, 0.5));
  }
  SUBCASE("mean keepdim") { check_unary([](const Variable& x) { return eager::mean(x, {-2}, true); }, a); }
}

TEST_CASE("eager: bmm, matmul and linear match finite differences") {
  const Tensor batch = values({2, 3, 4}, 0.0);
  const BinaryFn linear_without_bias = [](const Variable& x, const Variable& w) { return eager::linear(x, w); };
  const Op linear = [](const std::vector<Variable>& x) { return eager::linear(x[0], x[1], x[2]); };
  SUBCASE("bmm") { check_binary(eager::bmm, batch, values({2, 4, 5}, 1.0)); }
  SUBCASE("matmul 3-d @ 2-d (folded)") { check_binary(eager::matmul, batch, values({4, 5}, 1.0)); }
  SUBCASE("matmul 4-d @ 2-d (folded)") { check_binary(eager::matmul, values({2, 2, 3, 4}, 0.0), values({4, 5}, 1.0)); }
  SUBCASE("matmul 3-d @ 3-d") { check_binary(eager::matmul, batch, values({2, 4, 5}, 1.0)); }
  SUBCASE("matmul of a transposed 3-d by a constant 2-d (batched, not folded)") {
    const Variable weight = eager::constant(values({4, 5}, 1.0));
    check_unary([weight](const Variable& x) { return eager::matmul(eager::transpose(x, 0, 1), weight); },
                values({3, 2, 4}, 0.0));
  }
  SUBCASE("linear 3-d") {
    check_against_finite_differences(linear, {batch, values({5, 4}, 1.0), values({5}, 2.0)});
  }
  SUBCASE("linear 1-d") {
    check_against_finite_differences(linear, {values({4}, 0.0), values({5, 4}, 1.0), values({5}, 2.0)});
  }
  SUBCASE("linear of a transposed 3-d (matmul, then add)") {
    const Op op = [](const std::vector<Variable>& x) {
      return eager::linear(eager::transpose(x[0], 0, 1), x[1], x[2]);
    };
    check_against_finite_differences(op, {values({3, 2, 4}, 0.0), values({5, 4}, 1.0), values({5}, 2.0)});
  }
  SUBCASE("linear without a bias, 2-d") { check_binary(linear_without_bias, values({3, 4}, 0.0), values({5, 4}, 1.0)); }
  SUBCASE("linear without a bias, 3-d") { check_binary(linear_without_bias, batch, values({5, 4}, 1.0)); }
}

TEST_CASE("eager: shape, view and indexing ops match finite differences") {
  const Tensor x = values({2, 3, 4}, 0.0);
  SUBCASE("view") { check_unary([](const Variable& v) { return eager::view(v, {4, -1}); }, x); }
  SUBCASE("reshape of a contiguous tensor") {
    check_unary([](const Variable& v) { return eager::reshape(v, {6, 4}); }, x);
  }
  SUBCASE("reshape that can alias a transposed tensor") {
    check_unary([](const Variable& v) { return eager::reshape(eager::transpose(v, 0, 1), {3, 2, 2, 2}); }, x);
  }
  SUBCASE("reshape that copies a transposed tensor") {
    check_unary([](const Variable& v) { return eager::reshape(eager::transpose(v, 0, 1), {-1}); }, x);
  }
  SUBCASE("flatten") { check_unary([](const Variable& v) { return eager::flatten(v, -2, -1); }, x); }
  SUBCASE("flatten of a transposed tensor") {
    check_unary([](const Variable& v) { return eager::flatten(eager::transpose(v, 0, 2), 1); }, x);
  }
  SUBCASE("transpose") { check_unary([](const Variable& v) { return eager::transpose(v, -1, 0); }, x); }
  SUBCASE("permute") { check_unary([](const Variable& v) { return eager::permute(v, {2, -3, 1}); }, x); }
  SUBCASE("unsqueeze") { check_unary([](const Variable& v) { return eager::unsqueeze(v, -1); }, x); }
  SUBCASE("expand") {
    check_unary([](const Variable& v) { return eager::expand(v, {2, -1, 4}); }, values({3, 1}, 0.0));
  }
  SUBCASE("contiguous") {
    check_unary([](const Variable& v) { return eager::contiguous(eager::transpose(v, 1, 2)); }, x);
  }
  SUBCASE("select") { check_unary([](const Variable& v) { return eager::select(v, -1, -2); }, x); }
  SUBCASE("slice") { check_unary([](const Variable& v) { return eager::slice(v, 1, -2, std::nullopt); }, x); }
  SUBCASE("slice with a step") {
    check_unary([](const Variable& v) { return eager::slice(v, -1, std::nullopt, 3, 2); }, x);
  }
  SUBCASE("index with a repeated index") {
    const Tensor indices = from_vector<std::int64_t>({1, 0, 1}, {3});
    check_unary([indices](const Variable& v) { return eager::index(v, indices); }, x);
  }
  SUBCASE("index_select") {
    const Tensor index = from_vector<std::int64_t>({3, 3, 0}, {3});
    check_unary([index](const Variable& v) { return eager::index_select(v, -1, index); }, x);
  }
}

TEST_CASE("eager: scalar ops, div, pow and reductions over dims save what torch saves") {
  const Variable x = leaf_of({2, 3}, 0.0, "x");
  const Variable c = eager::constant(values({2, 3}, 1.0));

  // torch.ops.aten.add.Scalar(x, 2.0): AddBackward1, nothing exposed (self_scalar_type hidden).
  const GraphNode add = first_node(eager::add(x, 2.0));
  CHECK(add.name == "AddBackward1");
  CHECK(std::get<DType>(field(add, "self_scalar_type")) == DType::Float64);

  // torch.ops.aten.mul.Scalar(x, 2.0)._saved_other is 2.0 (a float); div.Scalar(x, 2) saves the int 2.
  const GraphNode mul = first_node(eager::mul(x, 2.0));
  CHECK(mul.name == "MulBackward1");
  CHECK(std::get<Scalar>(field(mul, "other")).is_floating_point());
  CHECK(std::get<Scalar>(field(mul, "other")).to_double() == 2.0);
  const GraphNode div_scalar = first_node(eager::div(x, 2));
  CHECK(div_scalar.name == "DivBackward1");
  CHECK(std::get<Scalar>(field(div_scalar, "other")).is_integral());

  // x / c with only x requiring grad: _saved_other c, _saved_self None; c / x saves both.
  const GraphNode div_by_constant = first_node(eager::div(x, c));
  CHECK(div_by_constant.name == "DivBackward0");
  CHECK(std::get<Tensor>(field(div_by_constant, "other")).is_same(c.data()));
  CHECK(is_none(field(div_by_constant, "self")));
  const GraphNode constant_by_x = first_node(eager::div(c, x));
  CHECK(std::get<Tensor>(field(constant_by_x, "self")).is_same(c.data()));
  CHECK(std::get<Tensor>(field(constant_by_x, "other")).is_same(x.data()));

  // x.pow(2): PowBackward0, _saved_exponent 2 (an int), _saved_self x.
  const GraphNode pow = first_node(eager::pow(x, 2));
  CHECK(pow.name == "PowBackward0");
  CHECK(std::get<Scalar>(field(pow, "exponent")).is_integral());
  CHECK(std::get<Tensor>(field(pow, "self")).is_same(x.data()));

  // x.sqrt() and x.rsqrt() save their result.
  const Variable root = eager::sqrt(x);
  CHECK(std::get<Tensor>(field(first_node(root), "result")).is_same(root.data()));
  CHECK(recorded_names(graph_of(eager::rsqrt(x))) == std::vector<std::string>{"RsqrtBackward0"});

  // x.sum([-1], True): SumBackward1, dim (-1,), keepdim True, self_sym_sizes (2, 3).
  const GraphNode sum = first_node(eager::sum(x, {-1}, true));
  CHECK(sum.name == "SumBackward1");
  CHECK(ints(sum, "dim") == IntList{-1});
  CHECK(std::get<bool>(field(sum, "keepdim")));
  CHECK(ints(sum, "self_sym_sizes") == IntList{2, 3});

  // x.mean((0, -1)): MeanBackward1, dim (0, -1), keepdim False, self_sym_numel 6.
  const GraphNode mean = first_node(eager::mean(x, {0, -1}));
  CHECK(mean.name == "MeanBackward1");
  CHECK(ints(mean, "dim") == IntList{0, -1});
  CHECK_FALSE(std::get<bool>(field(mean, "keepdim")));
  CHECK(int_field(mean, "self_sym_numel") == 6);
}

TEST_CASE("eager: bmm and matmul record the nodes torch records") {
  const Variable a = leaf_of({2, 3, 4}, 0.0, "a");
  const Variable b = leaf_of({2, 4, 5}, 1.0, "b");
  const Variable w = leaf_of({4, 5}, 2.0, "w");

  // torch.bmm(a, b.detach()): BmmBackward0 with _saved_self None, _saved_mat2 b.
  const Variable b_constant = eager::constant(b.data());
  const GraphNode bmm = first_node(eager::bmm(a, b_constant));
  CHECK(bmm.name == "BmmBackward0");
  CHECK(is_none(field(bmm, "self")));
  CHECK(std::get<Tensor>(field(bmm, "mat2")).is_same(b.data()));

  SUBCASE("3-d @ 2-d folds into one mm") {
    // a @ w: ViewBackward0 (2, 3, 4), MmBackward0 with self_sym_sizes (6, 4),
    // self_sym_strides (4, 1), UnsafeViewBackward0 (6, 5).
    const Graph graph = graph_of(eager::matmul(a, w));
    CHECK(recorded_names(graph) == std::vector<std::string>{"ViewBackward0", "MmBackward0", "UnsafeViewBackward0"});
    CHECK(ints(recorded(graph, 0), "self_sym_sizes") == IntList{2, 3, 4});
    CHECK(ints(recorded(graph, 1), "self_sym_sizes") == IntList{6, 4});
    CHECK(ints(recorded(graph, 1), "self_sym_strides") == IntList{4, 1});
    CHECK(ints(recorded(graph, 2), "self_sym_sizes") == IntList{6, 5});
  }
  SUBCASE("3-d @ 3-d expands, reshapes and runs bmm") {
    // a @ b: ExpandBackward0 (2, 3, 4), ViewBackward0 (2, 3, 4), ExpandBackward0
    // (2, 4, 5), ViewBackward0 (2, 4, 5), BmmBackward0, UnsafeViewBackward0 (2, 3, 5).
    const Graph graph = graph_of(eager::matmul(a, b));
    CHECK(recorded_names(graph) == std::vector<std::string>{"ExpandBackward0", "ViewBackward0", "ExpandBackward0",
                                                            "ViewBackward0", "BmmBackward0", "UnsafeViewBackward0"});
    CHECK(ints(recorded(graph, 1), "self_sym_sizes") == IntList{2, 3, 4});
    CHECK(ints(recorded(graph, 3), "self_sym_sizes") == IntList{2, 4, 5});
    CHECK(ints(recorded(graph, 5), "self_sym_sizes") == IntList{2, 3, 5});
  }
  SUBCASE("3-d @ 3-d with a constant right operand") {
    // a @ b.detach(): only a's expand and view are recorded; bmm saves mat2, not self.
    const Graph graph = graph_of(eager::matmul(a, b_constant));
    CHECK(recorded_names(graph) ==
          std::vector<std::string>{"ExpandBackward0", "ViewBackward0", "BmmBackward0", "UnsafeViewBackward0"});
    CHECK(is_none(field(recorded(graph, 2), "self")));
    CHECK(std::get<Tensor>(field(recorded(graph, 2), "mat2")).sizes() == Shape{2, 4, 5});
  }
  SUBCASE("a transposed 3-d @ a constant 2-d does not fold") {
    // a2.transpose(0, 1) @ w.detach() with a2 (3, 2, 4): TransposeBackward0,
    // ExpandBackward0 (2, 3, 4), ReshapeAliasBackward0 (2, 3, 4), BmmBackward0
    // (_saved_self None, _saved_mat2 (2, 4, 5)), UnsafeViewBackward0 (2, 3, 5).
    const Variable a2 = leaf_of({3, 2, 4}, 3.0, "a2");
    const Graph graph = graph_of(eager::matmul(eager::transpose(a2, 0, 1), eager::constant(w.data())));
    CHECK(recorded_names(graph) == std::vector<std::string>{"TransposeBackward0", "ExpandBackward0",
                                                            "ReshapeAliasBackward0", "BmmBackward0",
                                                            "UnsafeViewBackward0"});
    CHECK(ints(recorded(graph, 2), "self_sym_sizes") == IntList{2, 3, 4});
    CHECK(is_none(field(recorded(graph, 3), "self")));
    CHECK(std::get<Tensor>(field(recorded(graph, 3), "mat2")).sizes() == Shape{2, 4, 5});
    CHECK(ints(recorded(graph, 4), "self_sym_sizes") == IntList{2, 3, 5});
  }
  SUBCASE("a transposed 3-d @ a 2-d that requires grad folds with a copy") {
    // a2.transpose(0, 1) @ w: TransposeBackward0, CloneBackward0,
    // UnsafeViewBackward0 (2, 3, 4), MmBackward0, UnsafeViewBackward0 (6, 5).
    const Variable a2 = leaf_of({3, 2, 4}, 3.0, "a2");
    const Graph graph = graph_of(eager::matmul(eager::transpose(a2, 0, 1), w));
    CHECK(recorded_names(graph) == std::vector<std::string>{"TransposeBackward0", "CloneBackward0",
                                                            "UnsafeViewBackward0", "MmBackward0",
                                                            "UnsafeViewBackward0"});
    CHECK(ints(recorded(graph, 2), "self_sym_sizes") == IntList{2, 3, 4});
  }
}

TEST_CASE("eager: linear records the nodes torch records") {
  const Variable w = leaf_of({5, 4}, 1.0, "w");
  const Variable bias = leaf_of({5}, 2.0, "bias");

  SUBCASE("3-d input with a bias: view, t, addmm, view") {
    // F.linear(x, w, b), x (2, 3, 4): ViewBackward0 (2, 3, 4), TBackward0,
    // AddmmBackward0 (mat1_sym_sizes (6, 4), mat1_sym_strides (4, 1),
    // mat2_sym_strides (1, 4)), ViewBackward0 (6, 5).
    const Variable x = leaf_of({2, 3, 4}, 0.0, "x");
    const Variable y = eager::linear(x, w, bias);
    CHECK(y.data().sizes() == Shape{2, 3, 5});
    const Graph graph = graph_of(y);
    CHECK(recorded_names(graph) ==
          std::vector<std::string>{"ViewBackward0", "TBackward0", "AddmmBackward0", "ViewBackward0"});
    CHECK(ints(recorded(graph, 0), "self_sym_sizes") == IntList{2, 3, 4});
    const GraphNode& addmm = recorded(graph, 2);
    CHECK(ints(addmm, "mat1_sym_sizes") == IntList{6, 4});
    CHECK(ints(addmm, "mat1_sym_strides") == IntList{4, 1});
    CHECK(ints(addmm, "mat2_sym_strides") == IntList{1, 4});
    CHECK(ints(recorded(graph, 3), "self_sym_sizes") == IntList{6, 5});
  }
  SUBCASE("3-d input without a bias: t, then matmul") {
    // F.linear(x, w): TBackward0, ViewBackward0 (2, 3, 4), MmBackward0, UnsafeViewBackward0 (6, 5).
    const Variable x = leaf_of({2, 3, 4}, 0.0, "x");
    const Graph graph = graph_of(eager::linear(x, w));
    CHECK(recorded_names(graph) ==
          std::vector<std::string>{"TBackward0", "ViewBackward0", "MmBackward0", "UnsafeViewBackward0"});
    CHECK(ints(recorded(graph, 2), "mat2_sym_strides") == IntList{1, 4});
  }
  SUBCASE("2-d input without a bias: t, mm") {
    // F.linear(x, w), x (3, 4): TBackward0, MmBackward0.
    const Graph graph = graph_of(eager::linear(leaf_of({3, 4}, 0.0, "x"), w));
    CHECK(recorded_names(graph) == std::vector<std::string>{"TBackward0", "MmBackward0"});
  }
  SUBCASE("a transposed 3-d input with a bias: matmul, then add") {
    // F.linear(x.transpose(0, 1), w, b): TransposeBackward0, TBackward0,
    // CloneBackward0, UnsafeViewBackward0, MmBackward0, UnsafeViewBackward0, AddBackward0.
    const Variable x = leaf_of({2, 3, 4}, 0.0, "x");
    const Graph graph = graph_of(eager::linear(eager::transpose(x, 0, 1), w, bias));
    CHECK(recorded_names(graph) == std::vector<std::string>{"TransposeBackward0", "TBackward0", "CloneBackward0",
                                                            "UnsafeViewBackward0", "MmBackward0",
                                                            "UnsafeViewBackward0", "AddBackward0"});
  }
}

TEST_CASE("eager: reshape and flatten record a view, an alias or a copy as torch does") {
  const Variable x = leaf_of({2, 3, 4}, 0.0, "x");
  const Variable transposed = eager::transpose(x, 0, 1);  // (3, 2, 4), not contiguous

  // x.reshape(6, 4): ViewBackward0 (2, 3, 4).
  const Graph view = graph_of(eager::reshape(x, {6, 4}));
  CHECK(recorded_names(view) == std::vector<std::string>{"ViewBackward0"});
  CHECK(ints(recorded(view, 0), "self_sym_sizes") == IntList{2, 3, 4});

  // x.transpose(0, 1).reshape(3, 2, 2, 2): ReshapeAliasBackward0 (3, 2, 4), sharing x's storage.
  const Variable alias = eager::reshape(transposed, {3, 2, 2, 2});
  CHECK(alias.data().storage() == x.data().storage());
  const Graph alias_graph = graph_of(alias);
  CHECK(recorded_names(alias_graph) == std::vector<std::string>{"TransposeBackward0", "ReshapeAliasBackward0"});
  CHECK(ints(recorded(alias_graph, 1), "self_sym_sizes") == IntList{3, 2, 4});

  // x.transpose(0, 1).reshape(-1): CloneBackward0, UnsafeViewBackward0 (3, 2, 4).
  const Variable copy = eager::reshape(transposed, {-1});
  CHECK(copy.data().sizes() == Shape{24});
  const Graph copy_graph = graph_of(copy);
  CHECK(recorded_names(copy_graph) ==
        std::vector<std::string>{"TransposeBackward0", "CloneBackward0", "UnsafeViewBackward0"});
  CHECK(ints(recorded(copy_graph, 2), "self_sym_sizes") == IntList{3, 2, 4});

  // x.flatten(1): ViewBackward0; x.transpose(0, 2).flatten(1): CloneBackward0,
  // UnsafeViewBackward0 (4, 3, 2); x.flatten(1, 1) is x itself; a 0-d
  // tensor's flatten is ViewBackward0 with self_sym_sizes ().
  const Variable flat = eager::flatten(x, 1);
  CHECK(flat.data().sizes() == Shape{2, 12});
  CHECK(recorded_names(graph_of(flat)) == std::vector<std::string>{"ViewBackward0"});
  const Graph flat_copy = graph_of(eager::flatten(eager::transpose(x, 0, 2), 1));
  CHECK(recorded_names(flat_copy) ==
        std::vector<std::string>{"TransposeBackward0", "CloneBackward0", "UnsafeViewBackward0"});
  CHECK(ints(recorded(flat_copy, 2), "self_sym_sizes") == IntList{4, 3, 2});
  CHECK(eager::flatten(x, 1, 1).same_as(x));
  const Variable scalar = eager::leaf(full({}, 2.0, DType::Float64), "scalar");
  const Variable scalar_flat = eager::flatten(scalar);
  CHECK(scalar_flat.data().sizes() == Shape{1});
  CHECK(ints(first_node(scalar_flat), "self_sym_sizes").empty());

  // contiguous() of a contiguous tensor is the tensor; of a transposed one, CloneBackward0.
  CHECK(eager::contiguous(x).same_as(x));
  CHECK(recorded_names(graph_of(eager::contiguous(transposed))) ==
        std::vector<std::string>{"TransposeBackward0", "CloneBackward0"});
}

TEST_CASE("eager: view and indexing ops save dims and indices as torch does") {
  const Variable x = leaf_of({2, 3, 4}, 0.0, "x");

  // x.transpose(-1, 0): dim0 -1, dim1 0 (as given, not wrapped).
  const GraphNode transpose = first_node(eager::transpose(x, -1, 0));
  CHECK(int_field(transpose, "dim0") == -1);
  CHECK(int_field(transpose, "dim1") == 0);
  // x.permute(2, -3, 1): dims (2, -3, 1).
  CHECK(ints(first_node(eager::permute(x, {2, -3, 1})), "dims") == IntList{2, -3, 1});
  // x.unsqueeze(-1): dim -1.
  CHECK(int_field(first_node(eager::unsqueeze(x, -1)), "dim") == -1);
  // x.expand(3, -1, -1, -1): ExpandBackward0 saving only self_sym_sizes (2, 3, 4).
  const GraphNode expand = first_node(eager::expand(x, {3, -1, -1, -1}));
  CHECK(expand.name == "ExpandBackward0");
  CHECK(ints(expand, "self_sym_sizes") == IntList{2, 3, 4});

  // x.select(-1, -2): dim -1, index -2, self_sym_sizes (2, 3, 4).
  const GraphNode select = first_node(eager::select(x, -1, -2));
  CHECK(select.name == "SelectBackward0");
  CHECK(int_field(select, "dim") == -1);
  CHECK(int_field(select, "index") == -2);
  CHECK(ints(select, "self_sym_sizes") == IntList{2, 3, 4});

  // x[:, 1:]: dim 1, start 1, end INT64_MAX, step 1; x[..., ::2]: start 0, end INT64_MAX, step 2;
  // x[:, -2:-1]: start -2, end -1.
  const GraphNode open_end = first_node(eager::slice(x, 1, 1, std::nullopt));
  CHECK(open_end.name == "SliceBackward0");
  CHECK(int_field(open_end, "dim") == 1);
  CHECK(int_field(open_end, "start") == 1);
  CHECK(int_field(open_end, "end") == kOpenEnd);
  CHECK(int_field(open_end, "step") == 1);
  const GraphNode stepped = first_node(eager::slice(x, 2, std::nullopt, std::nullopt, 2));
  CHECK(int_field(stepped, "start") == 0);
  CHECK(int_field(stepped, "end") == kOpenEnd);
  CHECK(int_field(stepped, "step") == 2);
  const GraphNode negative = first_node(eager::slice(x, 1, -2, -1));
  CHECK(int_field(negative, "start") == -2);
  CHECK(int_field(negative, "end") == -1);

  // x2[torch.tensor([2, 0, 2])], x2 (4, 3): IndexBackward0, _saved_indices a
  // tuple of one tensor, self_sym_sizes (4, 3); self_options (hidden) f64 on the CPU.
  const Variable x2 = leaf_of({4, 3}, 1.0, "x2");
  const Tensor indices = from_vector<std::int64_t>({2, 0, 2}, {3});
  const Variable indexed = eager::index(x2, indices);
  CHECK(indexed.data().sizes() == Shape{3, 3});
  const GraphNode index = first_node(indexed);
  CHECK(index.name == "IndexBackward0");
  const auto& saved_indices = std::get<std::vector<OptionalTensor>>(field(index, "indices"));
  REQUIRE(saved_indices.size() == 1);
  CHECK(saved_indices[0]->is_same(indices));
  CHECK(std::get<TensorOptions>(field(index, "self_options")) ==
        TensorOptions{DType::Float64, Device::CPU, Layout::Strided, std::nullopt});
  CHECK(ints(index, "self_sym_sizes") == IntList{4, 3});

  // x2.index_select(-1, torch.tensor([2, 2, 0])): dim -1, index, self_sym_sizes (4, 3).
  const Tensor select_index = from_vector<std::int64_t>({2, 2, 0}, {3});
  const GraphNode index_select = first_node(eager::index_select(x2, -1, select_index));
  CHECK(index_select.name == "IndexSelectBackward0");
  CHECK(int_field(index_select, "dim") == -1);
  CHECK(std::get<Tensor>(field(index_select, "index")).is_same(select_index));
  CHECK(ints(index_select, "self_sym_sizes") == IntList{4, 3});
}

TEST_CASE("eager: bad arguments raise refgrad::Error naming the op and the shapes") {
  const Variable vector = leaf_of({4}, 0.0, "v");
  const Variable matrix = leaf_of({2, 3}, 1.0, "m");
  const Variable batch = leaf_of({2, 3, 4}, 2.0, "b");

  CHECK(error_of([&] { eager::matmul(vector, vector); }) ==
        "eager::matmul: supports 2-d @ 2-d, n-d @ 2-d and 3-d @ 3-d with equal batch sizes, got [4] and [4]");
  CHECK(error_of([&] { eager::matmul(batch, leaf_of({3, 4, 5}, 3.0, "c")); }).find("[2,3,4] and [3,4,5]") !=
        std::string::npos);
  CHECK(error_of([&] { eager::matmul(matrix, matrix); }) ==
        "eager::matmul: shapes [2,3] and [2,3] cannot be multiplied");
  CHECK(error_of([&] { eager::bmm(matrix, batch); }) == "eager::bmm: expected 3-d operands, got [2,3] and [2,3,4]");
  CHECK(error_of([&] { eager::mm(batch, matrix); }) == "eager::mm: expected 2-d operands, got [2,3,4] and [2,3]");
  CHECK(error_of([&] { eager::linear(batch, matrix); }) ==
        "eager::linear: expected input [..., in] and weight [out, in], got [2,3,4] and [2,3]");
  const std::string bad_view = error_of([&] { eager::view(batch, {5, -1}); });
  CHECK(bad_view.find("view") != std::string::npos);
  CHECK(bad_view.find("[5,-1]") != std::string::npos);
  CHECK(error_of([&] { eager::flatten(batch, 2, 1); }) ==
        "eager::flatten: start_dim 2 cannot come after end_dim 1 (shape [2,3,4])");
  CHECK(error_of([&] { eager::index(matrix, from_vector<double>({0.0}, {1})); }) ==
        "eager::index: expected int64 indices, got float64");
}
