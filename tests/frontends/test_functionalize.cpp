// functionalize() (include/refgrad/graph.hpp): hand-built autograd graphs
// turned into programs, each checked by the verifier, run by the interpreter
// against hand-computed grads, and compared with the instruction text the
// engine's order gives (worked out by hand from
// ../shared/reference/pytorch-autograd.md §2, never printed by the code under test).
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "refgrad/error.hpp"
#include "refgrad/graph.hpp"
#include "refgrad/interpreter.hpp"
#include "refgrad/ops.hpp"

using namespace refgrad;

namespace {

Tensor f32(const std::vector<float>& values) {
  return from_vector(values, Shape{static_cast<std::int64_t>(values.size())});
}
Tensor scalar(float value) { return from_vector(std::vector<float>{value}, Shape{}); }

InputMetadata meta(const Shape& shape) {
  InputMetadata metadata;
  metadata.shape = shape;
  return metadata;
}

// ------------------------------------------------------------ graph builders ---

int add_node(Graph& graph, GraphNode node) {
  graph.nodes.push_back(std::move(node));
  return static_cast<int>(graph.nodes.size()) - 1;
}

GraphNode builtin(std::string name, std::uint64_t sequence_nr, const Shape& grad_shape, std::vector<Edge> next,
                  std::vector<std::pair<std::string, FieldValue>> saved) {
  GraphNode node;
  node.name = std::move(name);
  node.sequence_nr = sequence_nr;
  node.input_metadata = {meta(grad_shape)};
  node.next_edges = std::move(next);
  node.saved = std::move(saved);
  return node;
}

// A leaf with its AccumulateGrad node; returns the node.
int add_leaf(Graph& graph, const std::string& name, const Shape& shape, std::optional<Tensor> grad = std::nullopt) {
  graph.leaves.push_back({name, TensorType{DType::Float32, shape, Device::CPU}, std::move(grad)});
  GraphNode node;
  node.kind = GraphNode::Kind::AccumulateGrad;
  node.leaf = name;
  node.input_metadata = {meta(shape)};
  return add_node(graph, std::move(node));
}

std::vector<std::pair<std::string, FieldValue>> mul_saved(std::optional<Tensor> self, std::optional<Tensor> other) {
  const auto value = [](const std::optional<Tensor>& t) -> FieldValue {
    if (t) return *t;
    return None{};
  };
  return {{"other", value(other)},
          {"other_scalar_type", DType::Float32},
          {"self", value(self)},
          {"self_scalar_type", DType::Float32}};
}

std::vector<std::pair<std::string, FieldValue>> add_saved() {
  return {{"alpha", Scalar(1)}, {"other_scalar_type", DType::Float32}, {"self_scalar_type", DType::Float32}};
}

std::vector<std::pair<std::string, FieldValue>> sum_saved(std::int64_t n) {
  return {{"self_sym_sizes", IntList{n}}};
}

void set_root(Graph& graph, int node, std::optional<Tensor> grad, const std::string& name = "g") {
  graph.roots.push_back({node, 0});
  graph.root_grads.emplace_back(name, std::move(grad));
}

// ------------------------------------------------------------------ checks ---

// The instructions, one per line, as print_instruction writes them.
std::string code_text(const Program& program) {
  std::string text;
  for (const Instr& instr : program.code) text += print_instruction(instr) + "\n";
  return text;
}

void require_verified(const Program& program) {
  for (const Diagnostic& diagnostic : verify(program)) {
    INFO(print_program(program));
    REQUIRE_MESSAGE(diagnostic.severity != Diagnostic::Severity::Error, to_string(diagnostic));
  }
}

// Verifies the program, checks that its text reads back, and runs it: leaf
// grads by "@name", outputs by "^name".
TensorMap run(const Functionalized& result, Host host = {}) {
  require_verified(result.bundle.program);
  const std::string text = print_program(result.bundle.program);
  INFO(text);
  CHECK(parse_program(text) == result.bundle.program);
  return run_program(bind(result.bundle), {}, std::move(host));
}

bool close(const TensorMap& results, const std::string& key, const std::vector<float>& expected) {
  const auto found = results.find(key);
  if (found == results.end()) return false;
  const Tensor value = contiguous(found->second);  // an expanded grad has zero strides
  if (value.dtype() != DType::Float32 || value.numel() != static_cast<std::int64_t>(expected.size())) return false;
  const auto* data = static_cast<const float*>(value.raw_data());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (std::fabs(data[i] - expected[i]) > 1e-5F * (1.0F + std::fabs(expected[i]))) return false;
  }
  return true;
}

// --------------------------------------------------------------- graphs ---

// a = exp(x); b = a.sin(); c = a.cos(); (b + c).sum() — examples/programs/diamond.bwd,
// with sin's and cos's sequence_nrs given.
const std::vector<float> kDiamondX = {0.5F, 1.0F, 2.0F};
Graph diamond(std::uint64_t sin_sequence_nr, std::uint64_t cos_sequence_nr, bool add_cos_first = false) {
  std::vector<float> a_values;
  for (float x : kDiamondX) a_values.push_back(std::exp(x));
  const Tensor a = f32(a_values);
  Graph graph;
  const int sum = add_node(graph, builtin("SumBackward0", 4, {}, {{1, 0}}, sum_saved(3)));
  const std::vector<Edge> add_edges =
      add_cos_first ? std::vector<Edge>{{3, 0}, {2, 0}} : std::vector<Edge>{{2, 0}, {3, 0}};
  add_node(graph, builtin("AddBackward0", 3, {3}, add_edges, add_saved()));
  add_node(graph, builtin("SinBackward0", sin_sequence_nr, {3}, {{4, 0}}, {{"self", a}}));
  add_node(graph, builtin("CosBackward0", cos_sequence_nr, {3}, {{4, 0}}, {{"self", a}}));
  add_node(graph, builtin("ExpBackward0", 0, {3}, {{5, 0}}, {{"result", a}}));
  add_leaf(graph, "x", {3});
  set_root(graph, sum, scalar(1.0F));
  return graph;
}
// From torch (diamond.bwd's comment): x.grad = exp(x) * (cos(exp(x)) - sin(exp(x))).
const std::vector<float> kDiamondGrad = {-1.7720644F, -3.594969F, -3.2918158F};

// y = w * x + w; y.sum() with x not requiring grad — examples/programs/leaf_twice.bwd.
Graph leaf_twice() {
  Graph graph;
  const int sum = add_node(graph, builtin("SumBackward0", 2, {}, {{1, 0}}, sum_saved(3)));
  add_node(graph, builtin("AddBackward0", 1, {3}, {{2, 0}, {3, 0}}, add_saved()));
  add_node(graph, builtin("MulBackward0", 0, {3}, {{3, 0}, {}}, mul_saved(std::nullopt, f32({1.0F, -2.0F, 4.0F}))));
  const int w = add_leaf(graph, "w", {3}, f32({0.5F, 0.5F, 0.5F}));
  graph.nodes[static_cast<std::size_t>(w)].tensor_pre_hooks[0] = {"double"};
  graph.nodes[static_cast<std::size_t>(w)].post_acc_grad_hooks = {"log"};
  set_root(graph, sum, scalar(1.0F));
  return graph;
}

// loss = (x.sin() + y.cos()).sum(): two branches that meet in AddBackward0.
Graph two_branches() {
  Graph graph;
  const Tensor x = f32({0.5F, 1.0F, 2.0F});
  const Tensor y = f32({-1.0F, 0.25F, 3.0F});
  const int sum = add_node(graph, builtin("SumBackward0", 3, {}, {{1, 0}}, sum_saved(3)));
  add_node(graph, builtin("AddBackward0", 2, {3}, {{2, 0}, {3, 0}}, add_saved()));
  add_node(graph, builtin("SinBackward0", 0, {3}, {{4, 0}}, {{"self", x}}));
  add_node(graph, builtin("CosBackward0", 1, {3}, {{5, 0}}, {{"self", y}}));
  add_leaf(graph, "x", {3});
  add_leaf(graph, "y", {3});
  set_root(graph, sum, scalar(1.0F));
  return graph;
}

// z = x * y; z.sum(), with x = [1, 2, 3] and y = [4, 5, 6].
Graph mul_sum() {
  Graph graph;
  const int sum = add_node(graph, builtin("SumBackward0", 1, {}, {{1, 0}}, sum_saved(3)));
  add_node(graph, builtin("MulBackward0", 0, {3}, {{2, 0}, {3, 0}}, mul_saved(f32({1, 2, 3}), f32({4, 5, 6}))));
  add_leaf(graph, "x", {3});
  add_leaf(graph, "y", {3});
  set_root(graph, sum, scalar(1.0F));
  return graph;
}

}  // namespace

TEST_CASE("functionalize: a single MulBackward0") {
  // z = x * y; z.backward(g): the root node is MulBackward0 itself (skip_dummy_node).
  Graph graph;
  const int mul_node = add_node(graph, builtin("MulBackward0", 0, {3}, {{1, 0}, {2, 0}},
                                         mul_saved(f32({1, 2, 3}), f32({4, 5, 6}))));
  add_leaf(graph, "x", {3});
  add_leaf(graph, "y", {3});
  set_root(graph, mul_node, f32({1.0F, 0.5F, 2.0F}));

  const Functionalized result = functionalize(graph);
  // Both AccumulateGrads tie on sequence_nr: pushed x then y, the heap gives x first.
  CHECK(code_text(result.bundle.program) ==
        "%0 = validate %g : f32[3]\n"
        "%1, %2 = MulBackward0 %0  other=$n0_other other_scalar_type=f32 self=$n0_self self_scalar_type=f32\n"
        "%3, %4 = validate %1, %2 : f32[3], f32[3]\n"
        "accumulate_grad @x %3\n"
        "accumulate_grad @y %4\n");
  CHECK(result.node_of_instruction == std::vector<int>{-1, 0, -1, 1, 2});
  const TensorMap grads = run(result);
  CHECK(close(grads, "@x", {4.0F, 2.5F, 12.0F}));  // g * y
  CHECK(close(grads, "@y", {1.0F, 1.0F, 6.0F}));   // g * x
}

TEST_CASE("functionalize: a diamond adds its two grads in sequence_nr order") {
  SUBCASE("cos ran last in the forward, so its grad comes first") {
    const Functionalized result = functionalize(diamond(1, 2));
    CHECK(code_text(result.bundle.program) ==
          "%0 = validate %g : f32[]\n"
          "%1 = SumBackward0 %0  self_sym_sizes=[3]\n"
          "%2 = validate %1 : f32[3]\n"
          "%3, %4 = AddBackward0 %2  alpha=1 other_scalar_type=f32 self_scalar_type=f32\n"
          "%5, %6 = validate %3, %4 : f32[3], f32[3]\n"
          "%7 = CosBackward0 %6  self=$n3_self\n"
          "%8 = validate %7 : f32[3]\n"
          "%9 = SinBackward0 %5  self=$n2_self\n"
          "%10 = validate %9 : f32[3]\n"
          "%11 = add %8, %10\n"
          "%12 = ExpBackward0 %11  result=$n4_result\n"
          "%13 = validate %12 : f32[3]\n"
          "accumulate_grad @x %13\n");
    CHECK(close(run(result), "@x", kDiamondGrad));
  }
  SUBCASE("with sin's sequence_nr higher, sin runs first and its grad is add's first operand") {
    const Functionalized result = functionalize(diamond(2, 1));
    const std::string text = code_text(result.bundle.program);
    CHECK(text.find("%7 = SinBackward0 %5  self=$n2_self\n"
                    "%8 = validate %7 : f32[3]\n"
                    "%9 = CosBackward0 %6  self=$n3_self\n"
                    "%10 = validate %9 : f32[3]\n"
                    "%11 = add %8, %10\n") != std::string::npos);
    CHECK(close(run(result), "@x", kDiamondGrad));
  }
}

TEST_CASE("functionalize: a leaf used twice gets one buffer, its hooks and one accumulate_grad") {
  const Functionalized result = functionalize(leaf_twice());
  // examples/programs/leaf_twice.bwd, written by hand.
  CHECK(code_text(result.bundle.program) ==
        "%0 = validate %g : f32[]\n"
        "%1 = SumBackward0 %0  self_sym_sizes=[3]\n"
        "%2 = validate %1 : f32[3]\n"
        "%3, %4 = AddBackward0 %2  alpha=1 other_scalar_type=f32 self_scalar_type=f32\n"
        "%5, %6 = validate %3, %4 : f32[3], f32[3]\n"
        "%7, _ = MulBackward0 %5  other=$n2_other other_scalar_type=f32 self=none self_scalar_type=f32 need=[1,0]\n"
        "%8, _ = validate %7, none : f32[3], _\n"
        "%9 = add %6, %8\n"
        "%10 = hook &double %9\n"
        "accumulate_grad @w %10\n"
        "hook &log @w\n");
  std::vector<std::string> calls;
  Host host;
  host.tensor_pre_hooks["double"] = [](const Tensor& grad) -> std::optional<Tensor> { return mul(grad, Scalar(2)); };
  host.post_acc_grad_hooks["log"] = [&calls](const std::string& leaf, const std::optional<Tensor>&) {
    calls.push_back(leaf);
  };
  CHECK(close(run(result, host), "@w", {4.5F, -1.5F, 10.5F}));  // 0.5 + 2 * (x + 1)
  CHECK(calls == std::vector<std::string>{"w"});
}

TEST_CASE("functionalize: a pruned branch — autograd.grad w.r.t. one of two leaves") {
  Graph graph = two_branches();
  graph.captures = {{"gx", {4, 0}}};
  FunctionalizeOptions options;
  options.accumulate_grad = false;
  const Functionalized result = functionalize(graph, options);
  // CosBackward0 and both AccumulateGrads never run; AddBackward0 does not compute y's branch.
  CHECK(code_text(result.bundle.program) ==
        "%0 = validate %g : f32[]\n"
        "%1 = SumBackward0 %0  self_sym_sizes=[3]\n"
        "%2 = validate %1 : f32[3]\n"
        "%3, _ = AddBackward0 %2  alpha=1 other_scalar_type=f32 self_scalar_type=f32 need=[1,0]\n"
        "%4, _ = validate %3, none : f32[3], f32[3]\n"
        "%5 = SinBackward0 %4  self=$n2_self\n"
        "%6 = validate %5 : f32[3]\n"
        "output ^gx %6\n");
  const TensorMap results = run(result);
  CHECK(close(results, "^gx", {std::cos(0.5F), std::cos(1.0F), std::cos(2.0F)}));
  CHECK(results.count("@x") == 0);  // autograd.grad does not accumulate
  CHECK(results.count("@y") == 0);
}

TEST_CASE("functionalize: autograd.grad with a subset of inputs, one of them interior") {
  // z = x * y (x = [1,2,3]); autograd.grad(z.sum(), [z, y]) with z.register_hook(double).
  Graph graph = mul_sum();
  graph.nodes[1].tensor_pre_hooks[0] = {"double"};
  graph.captures = {{"gz", {1, 0}}, {"gy", {3, 0}}};
  FunctionalizeOptions options;
  options.accumulate_grad = false;
  Host host;
  host.tensor_pre_hooks["double"] = [](const Tensor& grad) -> std::optional<Tensor> { return mul(grad, Scalar(2)); };

  SUBCASE("eager: MulBackward0 is needed, so z's grad is captured before its tensor hook") {
    const Functionalized result = functionalize(graph, options);
    CHECK(code_text(result.bundle.program) ==
          "%0 = validate %g : f32[]\n"
          "%1 = SumBackward0 %0  self_sym_sizes=[3]\n"
          "%2 = validate %1 : f32[3]\n"
          "output ^gz %2\n"
          "%3 = hook &double %2\n"
          "_, %4 = MulBackward0 %3  other=$n1_other other_scalar_type=f32 self=$n1_self self_scalar_type=f32 "
          "need=[0,1]\n"
          "_, %5 = validate none, %4 : f32[3], f32[3]\n"
          "output ^gy %5\n");
    const TensorMap results = run(result, host);
    CHECK(close(results, "^gz", {1, 1, 1}));
    CHECK(close(results, "^gy", {2, 4, 6}));  // 2 * x: the hook doubled the grad before MulBackward0
    CHECK(results.count("@x") == 0);
    CHECK(results.count("@y") == 0);
  }
  SUBCASE("compiled autograd captures after the tensor hook") {
    options.order = Order::CompiledAutograd;
    const Functionalized result = functionalize(graph, options);
    const std::string text = code_text(result.bundle.program);
    CHECK(text.find("%3 = hook &double %2\noutput ^gz %3\n") != std::string::npos);
    const TensorMap results = run(result, host);
    CHECK(close(results, "^gz", {2, 2, 2}));
    CHECK(close(results, "^gy", {2, 4, 6}));
  }
}

TEST_CASE("functionalize: hooks fire in the engine's order — tensor pre, pre, post, then the leaf's") {
  // y doesn't require grad; z = x * y; z.register_hook(tp); z.grad_fn.register_prehook(pre);
  // z.grad_fn.register_hook(post); x.register_hook(tp_leaf); x.register_post_accumulate_grad_hook(acc).
  Graph graph;
  const int mul_node =
      add_node(graph, builtin("MulBackward0", 0, {2}, {{1, 0}, {}}, mul_saved(std::nullopt, f32({3, 4}))));
  const int x = add_leaf(graph, "x", {2});
  graph.nodes[0].tensor_pre_hooks[0] = {"tp"};
  graph.nodes[0].pre_hooks = {"pre"};
  graph.nodes[0].post_hooks = {"post"};
  graph.nodes[1].tensor_pre_hooks[0] = {"tp_leaf"};
  graph.nodes[1].post_acc_grad_hooks = {"acc"};
  set_root(graph, mul_node, f32({1, 2}));
  CHECK(x == 1);

  const Functionalized result = functionalize(graph);
  CHECK(code_text(result.bundle.program) ==
        "%0 = validate %g : f32[2]\n"
        "%1 = hook &tp %0\n"
        "%2 = hook &pre %1\n"
        "%3, _ = MulBackward0 %2  other=$n0_other other_scalar_type=f32 self=none self_scalar_type=f32 need=[1,0]\n"
        "%4, _ = validate %3, none : f32[2], _\n"
        "%5, _ = hook &post %4, none, %2\n"
        "%6 = hook &tp_leaf %5\n"
        "accumulate_grad @x %6\n"
        "hook &acc @x\n");

  std::vector<std::string> calls;
  Host host;
  host.tensor_pre_hooks["tp"] = [&](const Tensor& grad) -> std::optional<Tensor> {
    calls.push_back("tp");
    return mul(grad, Scalar(2));  // [2, 4]
  };
  host.pre_hooks["pre"] = [&](const Grads&) -> std::optional<Grads> {
    calls.push_back("pre");
    return std::nullopt;
  };
  host.post_hooks["post"] = [&](const Grads& grad_inputs, const Grads& grad_outputs) -> std::optional<Grads> {
    calls.push_back("post");
    CHECK(grad_inputs.size() == 2);
    CHECK(grad_outputs.size() == 1);
    CHECK((grad_inputs[0] && equal(*grad_inputs[0], f32({6, 16}))));  // [2, 4] * y
    CHECK((grad_outputs[0] && equal(*grad_outputs[0], f32({2, 4}))));
    return std::nullopt;
  };
  host.tensor_pre_hooks["tp_leaf"] = [&](const Tensor& grad) -> std::optional<Tensor> {
    calls.push_back("tp_leaf");
    return add(grad, Scalar(1));  // [7, 17]
  };
  host.post_acc_grad_hooks["acc"] = [&](const std::string& leaf, const std::optional<Tensor>& grad) {
    calls.push_back("acc " + leaf);
    CHECK((grad && equal(*grad, f32({7, 17}))));
  };
  CHECK(close(run(result, host), "@x", {7, 17}));
  CHECK(calls == std::vector<std::string>{"tp", "pre", "post", "tp_leaf", "acc x"});
}

TEST_CASE("functionalize: an unused input raises PyTorch's error unless allow_unused") {
  Graph graph = mul_sum();
  add_leaf(graph, "w", {3});  // a leaf the loss does not use: its AccumulateGrad is unreachable
  graph.captures = {{"gx", {2, 0}}, {"gw", {4, 0}}};
  FunctionalizeOptions options;
  options.accumulate_grad = false;
  CHECK_THROWS_WITH_AS(functionalize(graph, options),
                       "One of the differentiated Tensors appears to not have been used in the graph. Set "
                       "allow_unused=True if this is the desired behavior.",
                       Error);
  options.allow_unused = true;
  const Functionalized result = functionalize(graph, options);
  const TensorMap results = run(result);
  CHECK(close(results, "^gx", {4, 5, 6}));
  CHECK(results.count("^gw") == 0);  // None
}

TEST_CASE("functionalize: eager and compiled autograd orders differ, the values do not") {
  // (c + b) with cos's sequence_nr higher: eager runs cos first; compiled autograd's LIFO
  // worklist pushes cos then sin (AddBackward0's edge order) and pops sin first.
  const Graph graph = diamond(1, 2, /*add_cos_first=*/true);
  FunctionalizeOptions options;
  const Functionalized eager = functionalize(graph, options);
  options.order = Order::CompiledAutograd;
  const Functionalized compiled = functionalize(graph, options);
  const std::string head =
      "%0 = validate %g : f32[]\n"
      "%1 = SumBackward0 %0  self_sym_sizes=[3]\n"
      "%2 = validate %1 : f32[3]\n"
      "%3, %4 = AddBackward0 %2  alpha=1 other_scalar_type=f32 self_scalar_type=f32\n"
      "%5, %6 = validate %3, %4 : f32[3], f32[3]\n";
  const std::string tail =
      "%11 = add %8, %10\n"
      "%12 = ExpBackward0 %11  result=$n4_result\n"
      "%13 = validate %12 : f32[3]\n"
      "accumulate_grad @x %13\n";
  CHECK(code_text(eager.bundle.program) == head +
                                               "%7 = CosBackward0 %5  self=$n3_self\n"
                                               "%8 = validate %7 : f32[3]\n"
                                               "%9 = SinBackward0 %6  self=$n2_self\n"
                                               "%10 = validate %9 : f32[3]\n" +
                                               tail);
  CHECK(code_text(compiled.bundle.program) == head +
                                                  "%7 = SinBackward0 %6  self=$n2_self\n"
                                                  "%8 = validate %7 : f32[3]\n"
                                                  "%9 = CosBackward0 %5  self=$n3_self\n"
                                                  "%10 = validate %9 : f32[3]\n" +
                                                  tail);
  const TensorMap eager_grads = run(eager);
  const TensorMap compiled_grads = run(compiled);
  CHECK(close(eager_grads, "@x", kDiamondGrad));
  CHECK(equal(eager_grads.at("@x"), compiled_grads.at("@x")));  // a + b == b + a
}

TEST_CASE("functionalize: multiple roots go through a GraphRoot") {
  SUBCASE("four leaves as roots: the heap breaks AccumulateGrad's ties as libstdc++ does") {
    // torch.autograd.backward([a, b, c, d], grads): pushed a, b, c, d with equal sequence_nr;
    // std::priority_queue pops a, c, b, d. Compiled autograd's LIFO worklist pops d, c, b, a.
    Graph graph;
    for (const char* name : {"a", "b", "c", "d"}) {
      const int node = add_leaf(graph, name, {2});
      set_root(graph, node, f32({1, static_cast<float>(node)}), std::string("g") + name);
    }
    const std::string validate = "%0, %1, %2, %3 = validate %ga, %gb, %gc, %gd : f32[2], f32[2], f32[2], f32[2]\n";
    const Functionalized eager = functionalize(graph);
    CHECK(code_text(eager.bundle.program) == validate +
                                                 "accumulate_grad @a %0\n"
                                                 "accumulate_grad @c %2\n"
                                                 "accumulate_grad @b %1\n"
                                                 "accumulate_grad @d %3\n");
    FunctionalizeOptions options;
    options.order = Order::CompiledAutograd;
    CHECK(code_text(functionalize(graph, options).bundle.program) == validate +
                                                                        "accumulate_grad @d %3\n"
                                                                        "accumulate_grad @c %2\n"
                                                                        "accumulate_grad @b %1\n"
                                                                        "accumulate_grad @a %0\n");
    const TensorMap grads = run(eager);
    CHECK(close(grads, "@a", {1, 0}));
    CHECK(close(grads, "@d", {1, 3}));
  }
  SUBCASE("two roots into one node: their grads are added in root order") {
    // z = x * y; torch.autograd.backward([z, z], [g1, g2]).
    Graph graph;
    const int mul_node =
        add_node(graph, builtin("MulBackward0", 0, {3}, {{1, 0}, {}}, mul_saved(std::nullopt, f32({4, 5, 6}))));
    add_leaf(graph, "x", {3});
    set_root(graph, mul_node, f32({1, 1, 1}), "g1");
    set_root(graph, mul_node, f32({0.5F, 0, 2}), "g2");
    const Functionalized result = functionalize(graph);
    CHECK(code_text(result.bundle.program) ==
          "%0, %1 = validate %g1, %g2 : f32[3], f32[3]\n"
          "%2 = add %0, %1\n"
          "%3, _ = MulBackward0 %2  other=$n0_other other_scalar_type=f32 self=none self_scalar_type=f32 need=[1,0]\n"
          "%4, _ = validate %3, none : f32[3], _\n"
          "accumulate_grad @x %4\n");
    CHECK(close(run(result), "@x", {6, 5, 18}));  // (g1 + g2) * y
  }
}

TEST_CASE("functionalize: errors") {
  Graph graph = mul_sum();
  CHECK_THROWS_WITH_AS(
      [&] {
        Graph no_grad = graph;
        no_grad.roots[0] = Edge{};
        functionalize(no_grad);
      }(),
      "element 0 of tensors does not require grad and does not have a grad_fn", Error);
  FunctionalizeOptions options;
  options.accumulate_grad = false;
  CHECK_THROWS_WITH_AS(functionalize(graph, options), "grad requires non-empty inputs.", Error);
  graph.nodes[1].name = "MulBackwards0";
  CHECK_THROWS_WITH_AS(functionalize(graph), "functionalize: node 1 (MulBackwards0) is not a node refgrad has",
                       Error);
}

TEST_CASE("functionalize: an autograd.Function, retains_grad, and tensors too large to write inline") {
  // z = MyMul.apply(x, y) saving (x, y); z.retain_grad(); z.backward(g), with inline_limit 2.
  Graph graph;
  GraphNode function;
  function.kind = GraphNode::Kind::Function;
  function.name = "MyMul";
  function.function_saved = {f32({1, 2, 3}), f32({4, 5, 6})};
  function.next_edges = {{1, 0}, {2, 0}};
  function.input_metadata = {meta({3})};
  function.retains_grad[0] = "z";
  const int node = add_node(graph, std::move(function));
  add_leaf(graph, "x", {3});
  add_leaf(graph, "y", {3});
  set_root(graph, node, f32({1.0F, 0.5F, 2.0F}));
  FunctionalizeOptions options;
  options.inline_limit = 2;
  const Functionalized result = functionalize(graph, options);
  CHECK(code_text(result.bundle.program) ==
        "%0 = validate %g : f32[3]\n"
        "output ^z %0\n"
        "%1, %2 = call_backward &MyMul %0  saved=[$n0_saved_0, $n0_saved_1]\n"
        "%3, %4 = validate %1, %2 : f32[3], f32[3]\n"
        "accumulate_grad @x %3\n"
        "accumulate_grad @y %4\n");
  std::vector<std::string> keys;
  for (const auto& [key, value] : result.bundle.tensors) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{"$n0_saved_0", "$n0_saved_1", "%g"});
  CHECK(!result.bundle.program.grads.at(0).value.has_value());

  Host host;
  host.functions["MyMul"] = [](const std::vector<Tensor>& saved, const Need& need, const Grads& grads) -> Grads {
    CHECK(need == Need{true, true});
    return {mul(*grads[0], saved[1]), mul(*grads[0], saved[0])};
  };
  const TensorMap results = run(result, host);
  CHECK(close(results, "^z", {1.0F, 0.5F, 2.0F}));
  CHECK(close(results, "@x", {4.0F, 2.5F, 12.0F}));
  CHECK(close(results, "@y", {1.0F, 1.0F, 6.0F}));
}

TEST_CASE("functionalize: backward(inputs=[x]) accumulates only x") {
  Graph graph = mul_sum();
  graph.captures = {{"x", {2, 0}}};  // accumulate_grad (the default): backward(inputs=...)
  const Functionalized result = functionalize(graph);
  CHECK(code_text(result.bundle.program) ==
        "%0 = validate %g : f32[]\n"
        "%1 = SumBackward0 %0  self_sym_sizes=[3]\n"
        "%2 = validate %1 : f32[3]\n"
        "%3, _ = MulBackward0 %2  other=$n1_other other_scalar_type=f32 self=$n1_self self_scalar_type=f32 need=[1,0]\n"
        "%4, _ = validate %3, none : f32[3], f32[3]\n"
        "accumulate_grad @x %4\n");
  const TensorMap results = run(result);
  CHECK(close(results, "@x", {4, 5, 6}));
  CHECK(results.count("@y") == 0);
  CHECK(result.bundle.program.outputs.empty());
}

// z = torch.cat([x, c, y]) with x [2], c [1] a constant and y [3]; z.backward(g). torch gives
// CatBackward0 one next edge per list element (c's invalid) and one input: the call has one result
// per element, c's `_`, and one need bit, which is 1 because some element's edge needs a grad.
std::vector<std::pair<std::string, FieldValue>> cat_saved(std::vector<DType> scalar_types) {
  return {{"dim", std::int64_t{0}},
          {"tensors_args_scalartypes", std::move(scalar_types)},
          {"tensors_args_sizes_symint", std::vector<IntList>{{2}, {1}, {3}}}};
}

TEST_CASE("functionalize: a cat of three tensors, one of them a constant, has one result per element") {
  Graph graph;
  const std::vector<DType> three_f32(3, DType::Float32);
  const int cat = add_node(graph, builtin("CatBackward0", 0, {6}, {{1, 0}, {}, {2, 0}}, cat_saved(three_f32)));
  add_leaf(graph, "x", {2});
  add_leaf(graph, "y", {3});
  set_root(graph, cat, f32({1.0F, 2.0F, 3.0F, 4.0F, 5.0F, 6.0F}));

  SUBCASE("the program and its grads") {
    const Functionalized result = functionalize(graph);
    CHECK(code_text(result.bundle.program) ==
          "%0 = validate %g : f32[6]\n"
          "%1, _, %2 = CatBackward0 %0  dim=0 tensors_args_scalartypes=[f32, f32, f32] "
          "tensors_args_sizes_symint=[[2], [1], [3]]\n"
          "%3, _, %4 = validate %1, none, %2 : f32[2], _, f32[3]\n"
          "accumulate_grad @x %3\n"
          "accumulate_grad @y %4\n");
    const TensorMap grads = run(result);
    CHECK(close(grads, "@x", {1.0F, 2.0F}));
    CHECK(close(grads, "@y", {4.0F, 5.0F, 6.0F}));
  }
  SUBCASE("autograd.grad w.r.t. y only: x's element is _, the need bit still 1") {
    FunctionalizeOptions options;
    options.accumulate_grad = false;
    graph.captures.push_back({"y", Edge{2, 0}});
    const Functionalized result = functionalize(graph, options);
    const std::string text = code_text(result.bundle.program);
    CHECK(text.find("_, _, %1 = CatBackward0 %0  dim=0") != std::string::npos);
    CHECK(close(run(result), "^y", {4.0F, 5.0F, 6.0F}));
  }
  SUBCASE("a list length unlike the next edges is an error") {
    graph.nodes[static_cast<std::size_t>(cat)].saved = cat_saved({DType::Float32, DType::Float32});
    CHECK_THROWS_WITH_AS(functionalize(graph),
                         "functionalize: node 0 (CatBackward0) has 3 next edges, but CatBackward0 has 2 list "
                         "elements ('tensors_args_scalartypes')",
                         Error);
  }
}

TEST_CASE("functionalize: a malformed graph is an error, not a crash") {
  Graph graph = mul_sum();
  SUBCASE("an edge to a node that does not exist") {
    graph.nodes[1].next_edges[1] = {7, 0};
    CHECK_THROWS_WITH_AS(functionalize(graph),
                         "functionalize: node 1 (MulBackward0)'s edge 1 points to node 7, but the graph has 4 nodes",
                         Error);
  }
  SUBCASE("an edge to an input a node does not have") {
    graph.nodes[1].next_edges[1] = {3, 1};
    CHECK_THROWS_WITH_AS(functionalize(graph),
                         "functionalize: node 1 (MulBackward0)'s edge 1 points to input 1 of node 3, which has 1 "
                         "(one per input_metadata)",
                         Error);
  }
  SUBCASE("a cycle") {
    graph.nodes[1].next_edges[1] = {0, 0};
    CHECK_THROWS_WITH_AS(functionalize(graph), "functionalize: the graph has a cycle", Error);
  }
}

TEST_CASE("functionalize: CopySlices wraps the in-place node on a view") {
  // b = x.clone(); b[1:3].mul_(2); b.sum().backward()  ->  x.grad = [1, 2, 2, 1].
  Graph graph;
  const int sum = add_node(graph, builtin("SumBackward0", 2, {}, {{1, 0}}, sum_saved(4)));
  GraphNode copy_slices = builtin("MulBackward1", 1, {4}, {{2, 0}},
                                  {{"base", TensorGeometry{{4}, {1}, 0}},
                                   {"view", TensorGeometry{{2}, {1}, 1}},
                                   {"other", Scalar(2)},
                                   {"self_scalar_type", DType::Float32}});
  copy_slices.kind = GraphNode::Kind::CopySlices;
  add_node(graph, std::move(copy_slices));
  add_node(graph, builtin("CloneBackward0", 0, {4}, {{3, 0}}, {}));
  add_leaf(graph, "x", {4});
  set_root(graph, sum, scalar(1.0F));
  const Functionalized result = functionalize(graph);
  CHECK(code_text(result.bundle.program) ==
        "%0 = validate %g : f32[]\n"
        "%1 = SumBackward0 %0  self_sym_sizes=[4]\n"
        "%2 = validate %1 : f32[4]\n"
        "%3 = CopySlices[MulBackward1] %2  base={sizes=[4], strides=[1], storage_offset=0} "
        "view={sizes=[2], strides=[1], storage_offset=1} other=2 self_scalar_type=f32\n"
        "%4 = validate %3 : f32[4]\n"
        "%5 = CloneBackward0 %4\n"
        "%6 = validate %5 : f32[4]\n"
        "accumulate_grad @x %6\n");
  CHECK(close(run(result), "@x", {1, 2, 2, 1}));
}

TEST_CASE("functionalize: a node reached twice from one parent (x * x) waits for both grads") {
  Graph graph;
  const Tensor x = f32({1, 2, 3});
  const int node = add_node(graph, builtin("MulBackward0", 0, {3}, {{1, 0}, {1, 0}}, mul_saved(x, x)));
  add_leaf(graph, "x", {3});
  set_root(graph, node, f32({1, 1, 0.5F}));
  const Functionalized result = functionalize(graph);
  CHECK(code_text(result.bundle.program) ==
        "%0 = validate %g : f32[3]\n"
        "%1, %2 = MulBackward0 %0  other=$n0_other other_scalar_type=f32 self=$n0_self self_scalar_type=f32\n"
        "%3, %4 = validate %1, %2 : f32[3], f32[3]\n"
        "%5 = add %3, %4\n"
        "accumulate_grad @x %5\n");
  CHECK(close(run(result), "@x", {2, 4, 3}));  // 2 * x * g
}

TEST_CASE("functionalize: a retained grad that stays None is not an unused capture") {
  // a, b = x.unbind(0); a.retain_grad(); b.retain_grad(); torch.autograd.grad(a.sum(), [x]):
  // UnbindBackward0 runs with b's slot undefined, so ^b is declared and stays None.
  Graph graph;
  const int sum = add_node(graph, builtin("SumBackward0", 1, {}, {{1, 0}}, sum_saved(2)));
  GraphNode unbind = builtin("UnbindBackward0", 0, {2}, {{2, 0}}, {{"dim", std::int64_t{0}}});
  unbind.input_metadata = {meta({2}), meta({2})};
  unbind.retains_grad = {{0, "a"}, {1, "b"}};
  add_node(graph, std::move(unbind));
  add_leaf(graph, "x", {2, 2});
  set_root(graph, sum, scalar(1.0F));
  graph.captures = {{"gx", {2, 0}}};
  FunctionalizeOptions options;
  options.accumulate_grad = false;
  const Functionalized result = functionalize(graph, options);
  const TensorMap results = run(result);
  CHECK(close(results, "^a", {1, 1}));
  CHECK(results.count("^b") == 0);
  CHECK(close(results, "^gx", {1, 1, 0, 0}));
}
