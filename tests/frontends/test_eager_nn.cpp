// The eager tape's neural-network ops (src/frontends/eager_nn.cpp): each op's
// recorded backward against finite differences of its forward (float64);
// forward values and the recorded nodes' saved fields against what torch
// 2.13 computes and records (its printed output, written in below, with the
// torch call that printed it); dropout's seeded mask; and bad arguments.
#include <cmath>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <doctest/doctest.h>

#include "eager_check.hpp"
#include "refgrad/eager.hpp"
#include "refgrad/error.hpp"
#include "refgrad/ops.hpp"

using namespace refgrad;
namespace eager = refgrad::eager;

namespace {

using testing::check_against_finite_differences;
using testing::f64;
using testing::field;
using testing::is_none;
using testing::node_named;
using testing::Op;
using testing::typed_field;
using testing::unary;
using testing::values;

// A copy of node `name` in the graph a backward from `root` would run (the graph itself is dropped).
GraphNode recorded_node(const eager::Variable& root, const std::string& name) {
  return node_named(eager::record({root}), name);
}

const GraphNode& next_node(const Graph& graph, const GraphNode& node, std::size_t edge) {
  return graph.nodes.at(static_cast<std::size_t>(node.next_edges.at(edge).node));
}

const Tensor& tensor_field(const GraphNode& node, const std::string& name) { return typed_field<Tensor>(node, name); }
const IntList& ints_field(const GraphNode& node, const std::string& name) { return typed_field<IntList>(node, name); }
std::int64_t int_field(const GraphNode& node, const std::string& name) { return typed_field<std::int64_t>(node, name); }

Tensor i64(const std::vector<std::int64_t>& data, const Shape& shape) { return from_vector(data, shape); }

// CHECKs that `actual` has `shape` and holds `expected` (torch's printed float64 values) to 1e-12.
void check_values(const Tensor& actual, const Shape& shape, const std::vector<double>& expected) {
  INFO("shape ", str(actual.sizes()), ", torch's ", str(shape));
  REQUIRE(actual.sizes() == shape);
  const std::vector<double> got = actual.contiguous().to_vector<double>();
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("element ", i, ": ", got[i], " vs torch's ", expected[i]);
    CHECK(std::fabs(got[i] - expected[i]) <= 1e-12 * (1 + std::fabs(expected[i])));
  }
}

// Dropout with a fresh generator seeded `seed`, so every call draws the same mask.
eager::Variable seeded_dropout(const eager::Variable& x, double p, std::uint64_t seed) {
  Generator generator(seed);
  return eager::dropout(x, p, true, generator);
}

// The logits and targets the loss tests share: [3, 4] and a target per row.
Tensor loss_input() {
  return from_vector<double>({0.1, -0.2, 0.3, -0.4, 1.0, 2.0, -1.0, 0.5, -0.3, 0.6, 0.2, -1.2}, {3, 4});
}

}  // namespace

TEST_CASE("eager: each nn op's gradient matches finite differences") {
  SUBCASE("gelu") {
    check_against_finite_differences(unary([](const eager::Variable& x) { return eager::gelu(x); }),
                                     {values({2, 3}, 0.0)});
  }
  SUBCASE("gelu tanh") {
    check_against_finite_differences(unary([](const eager::Variable& x) { return eager::gelu(x, "tanh"); }),
                                     {values({2, 3}, 0.0)});
  }
  SUBCASE("layer_norm with weight and bias") {
    const Op op = [](const std::vector<eager::Variable>& x) { return eager::layer_norm(x[0], {4}, x[1], x[2]); };
    check_against_finite_differences(op, {values({2, 3, 4}, 0.0), values({4}, 1.0), values({4}, 2.0)});
  }
  SUBCASE("layer_norm over two dims, no weight or bias") {
    check_against_finite_differences(unary([](const eager::Variable& x) { return eager::layer_norm(x, {3, 4}); }),
                                     {values({2, 3, 4}, 0.5)});
  }
  SUBCASE("dropout") {
    // One seed for the tape's run and every finite-difference evaluation: one mask.
    check_against_finite_differences(unary([](const eager::Variable& x) { return seeded_dropout(x, 0.4, 7); }),
                                     {values({4, 5}, 0.0)});
  }
  SUBCASE("embedding") {
    const Tensor indices = i64({1, 4, 1, 0, 2, 4}, {2, 3});
    const Op op = [indices](const std::vector<eager::Variable>& x) { return eager::embedding(x[0], indices); };
    check_against_finite_differences(op, {values({5, 3}, 0.0)});
  }
  // One target ignored; each reduction in turn.
  const Tensor target = i64({1, -100, 3, 0}, {4});
  const std::vector<std::string> reductions = {"mean", "sum", "none"};
  SUBCASE("nll_loss") {
    for (const std::string& reduction : reductions) {
      CAPTURE(reduction);
      const Op op = [target, reduction](const std::vector<eager::Variable>& x) {
        return eager::nll_loss(x[0], target, -100, reduction);
      };
      check_against_finite_differences(op, {values({4, 5}, 0.0)});
    }
  }
  SUBCASE("cross_entropy") {
    for (const std::string& reduction : reductions) {
      CAPTURE(reduction);
      const Op op = [target, reduction](const std::vector<eager::Variable>& x) {
        return eager::cross_entropy(x[0], target, -100, reduction);
      };
      check_against_finite_differences(op, {values({4, 5}, 0.0)});
    }
  }
  SUBCASE("conv2d with stride 2, padding 1, groups 2 and a bias") {
    const Op op = [](const std::vector<eager::Variable>& x) {
      return eager::conv2d(x[0], x[1], x[2], {2, 2}, {1, 1}, {1, 1}, 2);
    };
    check_against_finite_differences(op, {values({2, 4, 5, 5}, 0.0), values({6, 2, 3, 3}, 1.0), values({6}, 2.0)});
  }
  SUBCASE("conv2d with dilation 2, no bias") {
    const Op op = [](const std::vector<eager::Variable>& x) {
      return eager::conv2d(x[0], x[1], {}, {1}, {0}, {2});
    };
    check_against_finite_differences(op, {values({1, 2, 6, 5}, 0.0), values({3, 2, 2, 2}, 1.0)});
  }
  // values() are sin(1.3 i + seed): no two inputs of a window are tied.
  SUBCASE("max_pool2d") {
    check_against_finite_differences(unary([](const eager::Variable& x) { return eager::max_pool2d(x, {2}); }),
                                     {values({1, 2, 5, 5}, 0.0)});
  }
  SUBCASE("max_pool2d with stride and padding") {
    check_against_finite_differences(
        unary([](const eager::Variable& x) { return eager::max_pool2d(x, {3, 2}, {1, 2}, {1, 1}); }),
        {values({2, 1, 5, 4}, 0.3)});
  }
}

TEST_CASE("eager: embedding gives the padding row no grad") {
  // The padding row is read by the forward, so finite differences would see it: checked by hand instead.
  const eager::Variable weight = eager::leaf(values({4, 2}, 0.0), "weight");
  eager::backward(eager::sum(eager::embedding(weight, i64({1, 2, 1}, {3}), /*padding_idx=*/1)));
  // Row 2 is used once, row 1 (padding) twice but gets nothing, rows 0 and 3 are unused.
  CHECK(equal(*weight.grad(), from_vector<double>({0, 0, 0, 0, 1, 1, 0, 0}, {4, 2})));
}

TEST_CASE("eager: nn forward values match torch's") {
  SUBCASE("layer_norm") {
    // F.layer_norm(x, [3], w, b) with x = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], w = [0.5, 1.0, -2.0],
    // b = [0.1, 0.2, 0.3] (float64); mean and rstd from grad_fn._saved_result1 and _saved_result2.
    const eager::Variable x = eager::leaf(from_vector<double>({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, {2, 3}), "x");
    const eager::Variable y = eager::layer_norm(x, {3}, eager::constant(f64({0.5, 1.0, -2.0})),
                                                eager::constant(f64({0.1, 0.2, 0.3})));
    check_values(y.data(), {2, 3},
                 {0.1, -1.0247407889290967, -2.1494815778581935, 0.7337464821654925, 0.10946478826207245,
                  2.6539155051861156});
    const GraphNode node = recorded_node(eager::sum(y), "NativeLayerNormBackward0");
    check_values(tensor_field(node, "result1"), {2, 1}, {0.5, 0.33333333333333337});
    check_values(tensor_field(node, "result2"), {2, 1}, {0.8164938592860644, 1.0864225408551302});
  }
  SUBCASE("gelu") {
    // F.gelu(g) and F.gelu(g, approximate='tanh'), g = [-2.0, -0.5, 0.0, 0.7, 3.0] (float64).
    const eager::Variable g = eager::constant(f64({-2.0, -0.5, 0.0, 0.7, 3.0}));
    check_values(eager::gelu(g).data(), {5},
                 {-0.04550026389635842, -0.15426876936299344, 0.0, 0.5306254434438489, 2.99595030590511});
    check_values(eager::gelu(g, "tanh").data(), {5},
                 {-0.04540230591222494, -0.15428599017485606, 0.0, 0.5305701347051167, 2.996362607918227});
  }
  const eager::Variable logits = eager::constant(loss_input());
  SUBCASE("nll_loss") {
    // F.nll_loss(lp, torch.tensor([1, -100, 3]), reduction=r), lp = loss_input() (float64).
    const Tensor target = i64({1, -100, 3}, {3});
    check_values(eager::nll_loss(logits, target).data(), {}, {0.7});
    check_values(eager::nll_loss(logits, target, -100, "sum").data(), {}, {1.4});
    check_values(eager::nll_loss(logits, target, -100, "none").data(), {3}, {0.2, 0.0, 1.2});
  }
  SUBCASE("cross_entropy") {
    // F.cross_entropy(lp, torch.tensor([2, 0, 1]), reduction=r), and with target [1, -100, 3] (mean).
    const Tensor target = i64({2, 0, 1}, {3});
    check_values(eager::cross_entropy(logits, target).data(), {}, {1.1249500638009486});
    check_values(eager::cross_entropy(logits, target, -100, "sum").data(), {}, {3.374850191402846});
    check_values(eager::cross_entropy(logits, target, -100, "none").data(), {3},
                 {1.0722158535616986, 1.495181898085856, 0.8074524397552912});
    check_values(eager::cross_entropy(logits, i64({1, -100, 3}, {3})).data(), {}, {2.089834146658495});
  }
  SUBCASE("conv2d") {
    // F.conv2d(inp, cw, cb, stride=2, padding=1, groups=2) with inp = 0.1 * arange(18) - 0.8 as [1, 2, 3, 3],
    // cw = [0.5, -1.0, 0.25, 2.0, -0.5, 1.5, 1.0, -0.75] as [2, 1, 2, 2], cb = [0.1, -0.2] (float64).
    std::vector<double> input(18);
    for (std::size_t i = 0; i < input.size(); ++i) input[i] = 0.1 * static_cast<double>(i) - 0.8;
    const eager::Variable y = eager::conv2d(
        eager::constant(from_vector(input, {1, 2, 3, 3})),
        eager::constant(from_vector<double>({0.5, -1.0, 0.25, 2.0, -0.5, 1.5, 1.0, -0.75}, {2, 1, 2, 2})),
        eager::constant(f64({0.1, -0.2})), {2, 2}, {1, 1}, {1, 1}, 2);
    check_values(y.data(), {1, 2, 2, 2},
                 {-1.5, -1.2750000000000001, 0.20000000000000007, 0.17500000000000004, -0.275, -0.2250000000000001,
                  -0.12499999999999972, 0.5750000000000002});
  }
}

TEST_CASE("eager: nn ops record the nodes and saved fields torch records") {
  SUBCASE("layer_norm") {
    // torch: F.layer_norm(x, [5], w) with x [3, 5] and w [5] requiring grad records NativeLayerNormBackward0
    // with _saved_bias None, _saved_input x, _saved_normalized_shape (5,), _saved_weight w, _saved_result1 and
    // _saved_result2 of shape (3, 1); next_functions (x, w, None); len(_input_metadata) 1 (mean and rstd are
    // not differentiable outputs, so the node has no input for them).
    const eager::Variable x = eager::leaf(values({3, 5}, 0.0), "x");
    const eager::Variable w = eager::leaf(values({5}, 1.0), "w");
    const Graph graph = eager::record({eager::sum(eager::layer_norm(x, {5}, w))});
    const GraphNode& node = node_named(graph, "NativeLayerNormBackward0");
    CHECK(is_none(field(node, "bias")));
    CHECK(tensor_field(node, "input").is_same(x.data()));
    CHECK(ints_field(node, "normalized_shape") == IntList{5});
    CHECK(tensor_field(node, "weight").is_same(w.data()));
    CHECK(tensor_field(node, "result1").sizes() == Shape{3, 1});
    CHECK(tensor_field(node, "result2").sizes() == Shape{3, 1});
    REQUIRE(node.next_edges.size() == 3);
    CHECK(next_node(graph, node, 0).leaf == "x");
    CHECK(next_node(graph, node, 1).leaf == "w");
    CHECK_FALSE(node.next_edges[2].valid());
    REQUIRE(node.input_metadata.size() == 1);
    CHECK(node.input_metadata[0]->shape == Shape{3, 5});
  }
  SUBCASE("cross_entropy") {
    // torch: F.cross_entropy(x, torch.tensor([1, 0, 4])) with x [3, 5] records NllLossBackward0
    // (_saved_ignore_index -100, _saved_reduction 1, _saved_self of shape (3, 5), _saved_target the target,
    // _saved_total_weight tensor(3.) of shape (), _saved_weight None) over LogSoftmaxBackward0 (_saved_dim 1).
    const eager::Variable x = eager::leaf(values({3, 5}, 0.0), "x");
    const Tensor target = i64({1, 0, 4}, {3});
    const Graph graph = eager::record({eager::cross_entropy(x, target)});
    const GraphNode& nll = node_named(graph, "NllLossBackward0");
    CHECK(int_field(nll, "ignore_index") == -100);
    CHECK(int_field(nll, "reduction") == 1);
    CHECK(tensor_field(nll, "self").sizes() == Shape{3, 5});
    CHECK(tensor_field(nll, "target").is_same(target));
    CHECK(is_none(field(nll, "weight")));
    check_values(tensor_field(nll, "total_weight"), {}, {3.0});
    REQUIRE(nll.next_edges.size() == 1);
    const GraphNode& log_softmax = next_node(graph, nll, 0);
    CHECK(log_softmax.name == "LogSoftmaxBackward0");
    CHECK(int_field(log_softmax, "dim") == 1);
    CHECK(tensor_field(log_softmax, "result").is_same(tensor_field(nll, "self")));
    // F.nll_loss(x, t, reduction='none') saves total_weight tensor(0.); with t = [1, -100, 4], tensor(2.).
    check_values(tensor_field(recorded_node(eager::sum(eager::nll_loss(x, target, -100, "none")),
                                         "NllLossBackward0"),
                              "total_weight"),
                 {}, {0.0});
    check_values(tensor_field(recorded_node(eager::nll_loss(x, i64({1, -100, 4}, {3})),
                                         "NllLossBackward0"),
                              "total_weight"),
                 {}, {2.0});
  }
  SUBCASE("dropout") {
    // torch: F.dropout(x, 0.3, True) with x [3, 5] records MulBackward0 with _saved_self None and
    // _saved_other the noise, each element 0 or 1/0.7 = 1.4285714285714286; p = 1 saves a 0-d zero as other.
    const eager::Variable x = eager::leaf(values({3, 5}, 0.0), "x");
    const eager::Variable y = seeded_dropout(x, 0.3, 1);
    const Graph graph = eager::record({eager::sum(y)});
    const GraphNode& node = node_named(graph, "MulBackward0");
    CHECK(is_none(field(node, "self")));
    const Tensor& other = tensor_field(node, "other");
    REQUIRE(other.sizes() == Shape{3, 5});
    for (const double noise : other.to_vector<double>()) CHECK((noise == 0.0 || noise == 1.0 / 0.7));
    CHECK(equal(y.data(), refgrad::mul(x.data(), other)));
    REQUIRE(node.next_edges.size() == 2);
    CHECK(next_node(graph, node, 0).leaf == "x");
    CHECK_FALSE(node.next_edges[1].valid());

    const GraphNode all_dropped = recorded_node(eager::sum(seeded_dropout(x, 1.0, 1)), "MulBackward0");
    check_values(tensor_field(all_dropped, "other"), {}, {0.0});
  }
  SUBCASE("conv2d") {
    // torch: F.conv2d(inp, w, b, stride=2, padding=1, groups=2) with inp [1, 4, 5, 5], w [6, 2, 3, 3], b [6]
    // records ConvolutionBackward0 with _saved_bias_sym_sizes_opt (6,), _saved_dilation (1, 1),
    // _saved_groups 2, _saved_output_padding (0, 0), _saved_padding (1, 1), _saved_stride (2, 2),
    // _saved_transposed False, _saved_input and _saved_weight; next_functions (inp, w, b). With b None:
    // _saved_bias_sym_sizes_opt (0,) and next_functions (inp, w, None).
    const eager::Variable input = eager::leaf(values({1, 4, 5, 5}, 0.0), "input");
    const eager::Variable weight = eager::leaf(values({6, 2, 3, 3}, 1.0), "weight");
    const eager::Variable bias = eager::leaf(values({6}, 2.0), "bias");
    const Graph graph = eager::record({eager::sum(eager::conv2d(input, weight, bias, {2}, {1}, {1}, 2))});
    const GraphNode& node = node_named(graph, "ConvolutionBackward0");
    CHECK(ints_field(node, "bias_sym_sizes_opt") == IntList{6});
    CHECK(ints_field(node, "dilation") == IntList{1, 1});
    CHECK(int_field(node, "groups") == 2);
    CHECK(tensor_field(node, "input").is_same(input.data()));
    CHECK(ints_field(node, "output_padding") == IntList{0, 0});
    CHECK(ints_field(node, "padding") == IntList{1, 1});
    CHECK(ints_field(node, "stride") == IntList{2, 2});
    CHECK_FALSE(typed_field<bool>(node, "transposed"));
    CHECK(tensor_field(node, "weight").is_same(weight.data()));
    REQUIRE(node.next_edges.size() == 3);
    CHECK(next_node(graph, node, 2).leaf == "bias");

    const Graph unbiased = eager::record({eager::sum(eager::conv2d(input, weight, {}, {2}, {1}, {1}, 2))});
    const GraphNode& unbiased_node = node_named(unbiased, "ConvolutionBackward0");
    CHECK(ints_field(unbiased_node, "bias_sym_sizes_opt") == IntList{0});
    CHECK_FALSE(unbiased_node.next_edges.at(2).valid());
  }
  SUBCASE("max_pool2d") {
    // torch: F.max_pool2d(inp, 2) with inp [1, 4, 5, 5] saves _saved_kernel_size (2, 2), _saved_stride (),
    // _saved_padding (0, 0), _saved_dilation (1, 1), _saved_ceil_mode False, _saved_result1 of shape [1, 4, 2, 2];
    // len(_input_metadata) 1 (none for the indices).
    const eager::Variable input = eager::leaf(values({1, 4, 5, 5}, 0.0), "input");
    const GraphNode node = recorded_node(eager::sum(eager::max_pool2d(input, {2})),
                                       "MaxPool2DWithIndicesBackward0");
    CHECK(ints_field(node, "kernel_size") == IntList{2, 2});
    CHECK(ints_field(node, "stride").empty());
    CHECK(ints_field(node, "padding") == IntList{0, 0});
    CHECK(ints_field(node, "dilation") == IntList{1, 1});
    CHECK_FALSE(typed_field<bool>(node, "ceil_mode"));
    CHECK(tensor_field(node, "result1").sizes() == Shape{1, 4, 2, 2});
    CHECK(tensor_field(node, "result1").dtype() == DType::Int64);
    REQUIRE(node.input_metadata.size() == 1);
    CHECK(node.input_metadata[0]->shape == Shape{1, 4, 2, 2});
  }
  SUBCASE("embedding") {
    // torch: F.embedding(idx, W) with W [6, 3] saves _saved_padding_idx -1, _saved_scale_grad_by_freq False,
    // _saved_sparse False, _saved_weight_sym_argsize_0 6 and _saved_indices idx.
    const eager::Variable weight = eager::leaf(values({6, 3}, 0.0), "weight");
    const Tensor indices = i64({1, 2, 0, 5}, {2, 2});
    const GraphNode node = recorded_node(eager::sum(eager::embedding(weight, indices)),
                                       "EmbeddingBackward0");
    CHECK(tensor_field(node, "indices").is_same(indices));
    CHECK(int_field(node, "padding_idx") == -1);
    CHECK_FALSE(typed_field<bool>(node, "scale_grad_by_freq"));
    CHECK_FALSE(typed_field<bool>(node, "sparse"));
    CHECK(int_field(node, "weight_sym_argsize_0") == 6);
  }
  SUBCASE("gelu") {
    // torch: F.gelu(x, approximate='tanh') saves _saved_approximate 'tanh' and _saved_self x.
    const eager::Variable x = eager::leaf(values({3}, 0.0), "x");
    const GraphNode node = recorded_node(eager::sum(eager::gelu(x, "tanh")), "GeluBackward0");
    CHECK(typed_field<std::string>(node, "approximate") == "tanh");
    CHECK(tensor_field(node, "self").is_same(x.data()));
  }
}

TEST_CASE("eager: dropout's mask is seeded") {
  const eager::Variable ones = eager::leaf(full({100, 100}, 1.0, DType::Float64), "ones");
  const Tensor first = seeded_dropout(ones, 0.3, 42).data();
  CHECK(equal(first, seeded_dropout(ones, 0.3, 42).data()));     // same seed, same mask
  CHECK_FALSE(equal(first, seeded_dropout(ones, 0.3, 43).data()));  // another seed, another mask
  // The kept fraction is close to 1 - p: its standard deviation over 10000 draws is 0.0046.
  const double kept = refgrad::mean(to(ne(first, 0.0), DType::Float64)).item<double>();
  CHECK(kept == doctest::Approx(0.7).epsilon(0.03));
  SUBCASE("p = 0 or not training: the input itself") {
    Generator generator(1);
    CHECK(eager::dropout(ones, 0.0, true, generator).same_as(ones));
    CHECK(eager::dropout(ones, 0.3, false, generator).same_as(ones));
  }
  SUBCASE("p = 1: zeros") { CHECK(equal(seeded_dropout(ones, 1.0, 1).data(), zeros({100, 100}, DType::Float64))); }
}

TEST_CASE("eager: nn ops raise on bad arguments") {
  const eager::Variable x = eager::leaf(values({3, 5}, 0.0), "x");
  const eager::Variable image = eager::leaf(values({4, 5, 5}, 0.0), "image");  // unbatched: not supported
  CHECK_THROWS_WITH_AS(eager::conv2d(image, eager::leaf(values({6, 4, 3, 3}, 1.0), "w")),
                       "eager::conv2d: expected 4-d (N, C, H, W) input, got [4,5,5]", Error);
  CHECK_THROWS_WITH_AS(eager::nll_loss(x, i64({1, 2}, {2})),
                       "eager::nll_loss: expected target of shape [3] for input [3,5], got [2]", Error);
  CHECK_THROWS_WITH_AS(eager::cross_entropy(x, i64({1, 2, 3}, {1, 3})),
                       "eager::cross_entropy: expected target of shape [3] for input [3,5], got [1,3]", Error);
  CHECK_THROWS_WITH_AS(eager::nll_loss(x, i64({1, 2, 7}, {3})),
                       "eager::nll_loss: target 7 is out of bounds for 5 classes", Error);
  CHECK_THROWS_WITH_AS(eager::nll_loss(x, i64({1, 2, 3}, {3}), -100, "avg"),
                       "eager::nll_loss: avg is not a valid value for reduction (none, mean or sum)", Error);
  CHECK_THROWS_WITH_AS(eager::layer_norm(x, {4}),
                       "eager::layer_norm: normalized_shape [4] does not match the last dims of input [3,5]", Error);
  CHECK_THROWS_WITH_AS(eager::layer_norm(x, {5}, eager::leaf(values({4}, 0.0), "w")),
                       "eager::layer_norm: weight [4] does not have normalized_shape [5]", Error);
  CHECK_THROWS_WITH_AS(eager::gelu(x, "erf"),
                       "eager::gelu: approximate argument must be either none or tanh, got 'erf'", Error);
  Generator generator(1);
  CHECK_THROWS_WITH_AS(eager::dropout(x, 1.5, true, generator),
                       "eager::dropout: dropout probability has to be between 0 and 1, but got 1.5", Error);
  CHECK_THROWS_WITH_AS(eager::embedding(x, i64({0}, {1}), 5),
                       "eager::embedding: padding_idx 5 is out of range for weight [3,5]", Error);
  CHECK_THROWS_WITH_AS(eager::max_pool2d(x, {2}), "eager::max_pool2d: expected 3-d or 4-d input, got [3,5]", Error);
}
