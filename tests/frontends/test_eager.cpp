// The eager tape (include/refgrad/eager.hpp): each op's recorded backward
// against finite differences of its forward, in float64; grads of small
// cases worked out by hand; the saved fields PyTorch saves (as printed by
// torch 2.13's grad_fn._saved_*); and the program text of a tiny case,
// written by hand.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "eager_check.hpp"
#include "gradcheck.hpp"
#include "refgrad/eager.hpp"
#include "refgrad/error.hpp"
#include "refgrad/ops.hpp"
#include "refgrad/program.hpp"

using namespace refgrad;
namespace eager = refgrad::eager;

namespace {

using testing::binary;
using testing::check_against_finite_differences;
using testing::check_grad;
using testing::f64;
using testing::field;
using testing::is_none;
using testing::node_named;
using testing::Op;
using testing::unary;
using testing::values;


}  // namespace

TEST_CASE("eager: each op's gradient matches finite differences") {
  const Tensor a = values({2, 3}, 0.0), b = values({2, 3}, 1.0);
  SUBCASE("add") { check_against_finite_differences(binary([](const eager::Variable& x, const eager::Variable& y) { return eager::add(x, y); }), {a, b}); }
  SUBCASE("sub") { check_against_finite_differences(binary([](const eager::Variable& x, const eager::Variable& y) { return eager::sub(x, y); }), {a, b}); }
  SUBCASE("mul") { check_against_finite_differences(binary([](const eager::Variable& x, const eager::Variable& y) { return eager::mul(x, y); }), {a, b}); }
  SUBCASE("mm") { check_against_finite_differences(binary(eager::mm), {a, values({3, 4}, 2.0)}); }
  SUBCASE("matmul") { check_against_finite_differences(binary(eager::matmul), {values({4, 2}, 3.0), a}); }
  SUBCASE("t") { check_against_finite_differences(unary(eager::t), {a}); }
  SUBCASE("relu") { check_against_finite_differences(unary(eager::relu), {a}); }
  SUBCASE("tanh") { check_against_finite_differences(unary(eager::tanh), {a}); }
  SUBCASE("sigmoid") { check_against_finite_differences(unary(eager::sigmoid), {a}); }
  SUBCASE("exp") { check_against_finite_differences(unary(eager::exp), {a}); }
  SUBCASE("log") { check_against_finite_differences(unary(eager::log), {refgrad::exp(a)}); }
  SUBCASE("neg") { check_against_finite_differences(unary(eager::neg), {a}); }
  SUBCASE("sum") { check_against_finite_differences(unary([](const eager::Variable& x) { return eager::sum(x); }), {a}); }
  SUBCASE("mean") { check_against_finite_differences(unary([](const eager::Variable& x) { return eager::mean(x); }), {a}); }
  SUBCASE("linear") {
    const Op linear = [](const std::vector<eager::Variable>& x) { return eager::linear(x[0], x[1], x[2]); };
    check_against_finite_differences(linear, {values({4, 3}, 0.5), values({2, 3}, 1.5), values({2}, 2.5)});
  }
  SUBCASE("softmax") {
    check_against_finite_differences(unary([](const eager::Variable& x) { return eager::softmax(x, 1); }), {a});
  }
  SUBCASE("log_softmax") {
    check_against_finite_differences(unary([](const eager::Variable& x) { return eager::log_softmax(x, -1); }), {a});
  }
  SUBCASE("mse_loss") { check_against_finite_differences(binary(eager::mse_loss), {a, b}); }
  SUBCASE("broadcasting mul") { check_against_finite_differences(binary([](const eager::Variable& x, const eager::Variable& y) { return eager::mul(x, y); }), {a, values({3}, 4.0)}); }
}

TEST_CASE("eager: an MLP (linear, relu, linear, sum) matches finite differences") {
  const Op mlp = [](const std::vector<eager::Variable>& p) {
    return eager::sum(eager::linear(eager::relu(eager::linear(p[0], p[1], p[2])), p[3], p[4]));
  };
  check_against_finite_differences(
      mlp, {values({4, 3}, 0.0), values({5, 3}, 1.0), values({5}, 2.0), values({2, 5}, 3.0), values({2}, 4.0)});
}

TEST_CASE("eager: a leaf used twice gets the sum of both uses' grads") {
  // y = (w * w + w).sum(): dy/dw = 2w + 1.
  const eager::Variable w = eager::leaf(f64({1.0, -2.0, 0.5}), "w");
  eager::backward(eager::sum(eager::add(eager::mul(w, w), w)));
  check_grad(w.grad(), f64({3.0, -3.0, 2.0}));
}

TEST_CASE("eager: a broadcast add sums the grad down to each leaf's shape") {
  // (a + b).sum() with a: [2, 3], b: [3]: a.grad is ones, b.grad is 2 per element.
  const eager::Variable a = eager::leaf(values({2, 3}, 0.0), "a");
  const eager::Variable b = eager::leaf(f64({1.0, 2.0, 3.0}), "b");
  eager::backward(eager::sum(eager::add(a, b)));
  check_grad(a.grad(), ones({2, 3}, DType::Float64));
  check_grad(b.grad(), f64({2.0, 2.0, 2.0}));
}

TEST_CASE("eager: a broadcast grad is summed down to an op's output shape too") {
  // (a + neg(c)).sum() with a: [2, 3], c: [3]: neg's output gets a [2, 3]
  // grad that validate sums to [3] by NegBackward0's input metadata; c.grad = -2.
  const eager::Variable a = eager::leaf(values({2, 3}, 0.0), "a");
  const eager::Variable c = eager::leaf(f64({1.0, 2.0, 3.0}), "c");
  eager::backward(eager::sum(eager::add(a, eager::neg(c))));
  check_grad(c.grad(), f64({-2.0, -2.0, -2.0}));
}

TEST_CASE("eager: backward twice accumulates into .grad, zero_grad clears it") {
  // (w * w).sum(): 2w per backward.
  const eager::Variable w = eager::leaf(f64({1.0, 3.0}), "w");
  const eager::Variable copy = w;  // shares w's state, like a torch tensor
  eager::backward(eager::sum(eager::mul(w, w)));
  check_grad(copy.grad(), f64({2.0, 6.0}));
  eager::backward(eager::sum(eager::mul(w, w)));
  check_grad(w.grad(), f64({4.0, 12.0}));
  eager::Variable(w).zero_grad();
  CHECK_FALSE(copy.grad().has_value());
}

TEST_CASE("eager: grad() returns the grads of the inputs asked for and leaves .grad alone") {
  // z = x * y; out = z.sum(): d/dy = x, d/dz = ones.
  const eager::Variable x = eager::leaf(f64({1.0, 2.0}), "x");
  const eager::Variable y = eager::leaf(f64({3.0, -4.0}), "y");
  const eager::Variable unused = eager::leaf(f64({5.0}), "unused");
  const eager::Variable z = eager::mul(x, y);
  const eager::Variable out = eager::sum(z);

  const std::vector<std::optional<Tensor>> grads = eager::grad({out}, {y, z});
  REQUIRE(grads.size() == 2);
  check_grad(grads[0], f64({1.0, 2.0}));
  check_grad(grads[1], f64({1.0, 1.0}));
  CHECK_FALSE(x.grad().has_value());
  CHECK_FALSE(y.grad().has_value());

  CHECK_THROWS_AS(eager::grad({out}, {unused}), Error);
  const std::vector<std::optional<Tensor>> with_unused = eager::grad({out}, {x, unused}, /*allow_unused=*/true);
  REQUIRE(with_unused.size() == 2);
  check_grad(with_unused[0], f64({3.0, -4.0}));
  CHECK_FALSE(with_unused[1].has_value());
}

TEST_CASE("eager: backward from a leaf gives the leaf its grad") {
  const eager::Variable w = eager::leaf(f64({1.0, 2.0}), "w");
  eager::backward(w, f64({0.5, -1.0}));
  check_grad(w.grad(), f64({0.5, -1.0}));
}

TEST_CASE("eager: ops on constants record nothing, and backward from them raises") {
  const eager::Variable c = eager::mul(eager::constant(f64({1.0})), eager::constant(f64({2.0})));
  CHECK_FALSE(c.requires_grad());
  CHECK(c.is_leaf());
  CHECK_THROWS_AS(eager::backward(eager::sum(c)), Error);
  CHECK_THROWS_AS(eager::Variable().data(), Error);
}

TEST_CASE("eager: saved fields are the ones PyTorch saves") {
  // Only x requires grad: mul saves other (y) but not self; torch 2.13 gives
  // (x * y).grad_fn._saved_self None, _saved_other y.
  const eager::Variable x = eager::leaf(values({2, 3}, 0.0), "x");
  const eager::Variable y = eager::constant(values({2, 3}, 1.0));
  const Graph mul_graph = eager::record({eager::sum(eager::mul(x, y))});
  const GraphNode& mul = node_named(mul_graph, "MulBackward0");
  CHECK(is_none(field(mul, "self")));
  CHECK(std::get<Tensor>(field(mul, "other")).is_same(y.data()));
  CHECK(std::get<DType>(field(mul, "self_scalar_type")) == DType::Float64);
  CHECK(mul.next_edges.size() == 2);
  CHECK_FALSE(mul.next_edges[1].valid());

  // F.linear(x, W, b) with x [2,3] not requiring grad, W [4,3]: torch gives
  // AddmmBackward0 with _saved_mat1 x, _saved_mat2 None, mat1_sym_strides (),
  // mat2_sym_sizes (3, 4), mat2_sym_strides (1, 3), next (b, None, TBackward0).
  const eager::Variable input = eager::constant(values({2, 3}, 0.0));
  const eager::Variable weight = eager::leaf(values({4, 3}, 1.0), "W");
  const eager::Variable bias = eager::leaf(values({4}, 2.0), "b");
  const Graph linear_graph = eager::record({eager::sum(eager::linear(input, weight, bias))});
  const GraphNode& addmm = node_named(linear_graph, "AddmmBackward0");
  CHECK(std::get<Tensor>(field(addmm, "mat1")).is_same(input.data()));
  CHECK(is_none(field(addmm, "mat2")));
  CHECK(std::get<IntList>(field(addmm, "mat1_sym_sizes")) == IntList{2, 3});
  CHECK(std::get<IntList>(field(addmm, "mat1_sym_strides")).empty());
  CHECK(std::get<IntList>(field(addmm, "mat2_sym_sizes")) == IntList{3, 4});
  CHECK(std::get<IntList>(field(addmm, "mat2_sym_strides")) == IntList{1, 3});
  REQUIRE(addmm.next_edges.size() == 3);
  CHECK_FALSE(addmm.next_edges[1].valid());
  const GraphNode& transpose = linear_graph.nodes.at(static_cast<std::size_t>(addmm.next_edges[2].node));
  CHECK(transpose.name == "TBackward0");
  CHECK(transpose.sequence_nr < addmm.sequence_nr);  // torch records t first
  CHECK(linear_graph.nodes.at(static_cast<std::size_t>(addmm.next_edges[0].node)).kind ==
        GraphNode::Kind::AccumulateGrad);
}

TEST_CASE("eager: the recorded program of mul then sum") {
  const eager::Variable x = eager::leaf(f64({1.0, 2.0}), "x");
  const eager::Variable y = eager::leaf(f64({3.0, 4.0}), "y");
  const Graph graph = eager::record({eager::sum(eager::mul(x, y))});
  const Functionalized result = functionalize(graph);
  std::string code;
  for (const Instr& instr : result.bundle.program.code) code += print_instruction(instr) + "\n";
  // Written by hand from the engine's order: the root grad is validated,
  // SumBackward0 runs, then MulBackward0, then x's and y's AccumulateGrad
  // (the heap gives the first pushed first on a tie). Nodes are numbered
  // depth first from the root: SumBackward0 0, MulBackward0 1.
  CHECK(code ==
        "%0 = validate %g0 : f64[]\n"
        "%1 = SumBackward0 %0  self_sym_sizes=[2]\n"
        "%2 = validate %1 : f64[2]\n"
        "%3, %4 = MulBackward0 %2  other=$n1_other other_scalar_type=f64 self=$n1_self self_scalar_type=f64\n"
        "%5, %6 = validate %3, %4 : f64[2], f64[2]\n"
        "accumulate_grad @x %5\n"
        "accumulate_grad @y %6\n");
  for (const Diagnostic& diagnostic : verify(result.bundle.program)) {
    CHECK_MESSAGE(diagnostic.severity != Diagnostic::Severity::Error, to_string(diagnostic));
  }
  CHECK(parse_program(print_program(result.bundle.program)) == result.bundle.program);
}

// Expected values from torch 2.13:
//   x = torch.tensor([1., 2.], requires_grad=True); h = x * x; h.retain_grad()
//   h.register_hook(lambda g: g * 3); h.register_hook(lambda g: None)   # records g
//   x.register_hook(lambda g: g + 1); x.register_post_accumulate_grad_hook(...)  # records x.grad
//   h.sum().backward()
// runs the hooks in the order a, b (b sees [3, 3]), leaf (sees [6, 12]),
// post (sees [7, 13]); h.grad == [3, 3]; x.grad == [7, 13].
TEST_CASE("eager: tensor hooks, retain_grad and post-accumulate-grad hooks run as torch runs them") {
  const eager::Variable x = eager::leaf(f64({1, 2}), "x");
  const eager::Variable h = eager::mul(x, x);
  std::vector<std::string> order;
  const auto values_of = [](const Tensor& t) { return fmt::format("{}", fmt::join(t.to_vector<double>(), ", ")); };
  h.retain_grad();
  h.register_hook([&](const Tensor& grad) -> std::optional<Tensor> {
    order.push_back("a");
    return refgrad::mul(grad, Scalar(3.0));
  });
  h.register_hook([&](const Tensor& grad) -> std::optional<Tensor> {
    order.push_back("b: " + values_of(grad));
    return std::nullopt;
  });
  x.register_hook([&](const Tensor& grad) -> std::optional<Tensor> {
    order.push_back("leaf: " + values_of(grad));
    return refgrad::add(grad, Scalar(1.0));
  });
  x.register_post_accumulate_grad_hook([&](const Tensor& grad) { order.push_back("post: " + values_of(grad)); });
  eager::backward(eager::sum(h));

  CHECK(order == std::vector<std::string>{"a", "b: 3, 3", "leaf: 6, 12", "post: 7, 13"});
  REQUIRE(h.grad().has_value());
  CHECK(h.grad()->to_vector<double>() == std::vector<double>{3, 3});
  REQUIRE(x.grad().has_value());
  CHECK(x.grad()->to_vector<double>() == std::vector<double>{7, 13});
}

TEST_CASE("eager: hooks are refused where torch refuses them") {
  const eager::Variable c = eager::constant(f64({1, 2}));
  const auto keep = [](const Tensor&) -> std::optional<Tensor> { return std::nullopt; };
  CHECK_THROWS_WITH_AS(c.register_hook(keep), "cannot register a hook on a tensor that doesn't require gradient",
                       Error);
  CHECK_THROWS_WITH_AS(c.retain_grad(), "can't retain_grad on Tensor that has requires_grad=False", Error);
  const eager::Variable x = eager::leaf(f64({1, 2}), "x");
  CHECK_THROWS_WITH_AS(eager::mul(x, x).register_post_accumulate_grad_hook([](const Tensor&) {}),
                       "post accumulate grad hooks cannot be registered on non-leaf tensors", Error);
}

TEST_CASE("eager: a hook's graph names the hooks, and grad() runs them too") {
  const eager::Variable x = eager::leaf(f64({1, 2}), "x");
  x.register_hook([](const Tensor& grad) -> std::optional<Tensor> { return refgrad::mul(grad, Scalar(10.0)); });
  const eager::Variable y = eager::sum(eager::mul(x, x));
  const Graph graph = eager::record({y});
  bool named = false;
  for (const GraphNode& node : graph.nodes) {
    if (node.kind == GraphNode::Kind::AccumulateGrad) named = node.tensor_pre_hooks.at(0) == std::vector<std::string>{"hook0"};
  }
  CHECK(named);
  // A tensor hook on a captured tensor runs before the capture: torch 2.13's
  // torch.autograd.grad(y, x) with x.register_hook(lambda g: g * 10) gives [20, 40].
  const auto grads = eager::grad({y}, {x});
  REQUIRE(grads[0].has_value());
  CHECK(grads[0]->to_vector<double>() == std::vector<double>{20, 40});
}
