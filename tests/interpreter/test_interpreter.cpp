// The interpreter (include/refgrad/interpreter.hpp): the example programs
// against the grads written in their comments, stepping against running,
// breakpoints, reset, register liveness, float64 promotion, host calls and
// the messages of run-time errors. Expected values are written by hand.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "refgrad/interpreter.hpp"
#include "refgrad/ops.hpp"

using namespace refgrad;

namespace {

const std::filesystem::path kExamples = std::filesystem::path(REFGRAD_SOURCE_ROOT) / "examples" / "programs";
// programs that tests share, which are not teaching examples
const std::filesystem::path kTestPrograms = std::filesystem::path(REFGRAD_SOURCE_ROOT) / "tests" / "programs";

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

BoundProgram load(std::string_view text) { return bind(assemble(parse_program(text, "test"))); }

BoundProgram load_example(const std::string& name) {
  const std::filesystem::path path = kExamples / (name + ".bwd");
  return bind(assemble(parse_program(read_text(path), path.string())));
}

// Tensors compared by dtype, shape and the bytes of their values.
std::vector<unsigned char> value_bytes(const Tensor& tensor) {
  const Tensor dense = contiguous(tensor);
  const auto* first = static_cast<const unsigned char*>(dense.raw_data());
  return {first, first + dense.numel() * static_cast<std::int64_t>(element_size(dense.dtype()))};
}

bool same_bits(const std::optional<Tensor>& a, const std::optional<Tensor>& b) {
  if (!a || !b) return !a && !b;
  return a->dtype() == b->dtype() && a->sizes() == b->sizes() && value_bytes(*a) == value_bytes(*b);
}

// Exactly these values, as float32.
bool equals_f32(const std::optional<Tensor>& grad, const Tensor& expected) {
  return grad && grad->dtype() == DType::Float32 && grad->sizes() == expected.sizes() &&
         equal(*grad, to(expected, DType::Float32));
}

// leaf_twice.bwd's host: `double` doubles the gradient, `log` records its calls.
struct PostAccGradCall {
  std::string leaf;
  std::optional<Tensor> grad;
};

Host leaf_twice_host(std::vector<PostAccGradCall>& calls) {
  Host host;
  host.tensor_pre_hooks["double"] = [](const Tensor& grad) -> std::optional<Tensor> { return mul(grad, Scalar(2)); };
  host.post_acc_grad_hooks["log"] = [&calls](const std::string& leaf, const std::optional<Tensor>& grad) {
    calls.push_back({leaf, grad});
  };
  return host;
}

// The leaf grads (the outputs, for a program that returns its grads) written in each example's comments.
struct Example {
  std::map<std::string, Tensor> leaf_grads;
  bool needs_host = false;  // leaf_twice's hooks
  bool outputs = false;     // aten_mlp's grads are outputs, as AOTAutograd's graph returns them
};

const std::map<std::string, Example>& examples() {
  static const std::map<std::string, Example> table = {
      {"aten_mlp",
       {{{"b2", tensor({2.0, 2.0})},
         {"W2", tensor({{0.0, 0.0, 5.0, 5.0}, {0.0, 0.0, 5.0, 5.0}})},
         {"b1", tensor({0.0, 0.0, -1.0, 2.0})},
         {"W1", tensor({{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}, {0.0, -1.0, -2.0}, {0.0, 2.0, 4.0}})}},
        false,
        true}},
      {"broadcast_add", {{{"a", tensor({{1.0, 1.0, 1.0}, {1.0, 1.0, 1.0}})}, {"b", tensor({2.0, 2.0, 2.0})}}}},
      {"diamond", {{{"x", tensor({-1.7720644, -3.594969, -3.2918158})}}}},
      {"leaf_twice", {{{"w", tensor({4.5, -1.5, 10.5})}}, true}},
      {"mlp",
       {{{"b2", tensor({2.0, 2.0})},
         {"W2", tensor({{0.0, 0.0, 5.0, 5.0}, {0.0, 0.0, 5.0, 5.0}})},
         {"b1", tensor({0.0, 0.0, -1.0, 2.0})},
         {"W1", tensor({{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}, {0.0, -1.0, -2.0}, {0.0, 2.0, 4.0}})}}}},
      {"mul", {{{"x", tensor({4.0, 5.0, 12.0})}, {"y", tensor({1.0, 2.0, 6.0})}}}},
  };
  return table;
}

std::vector<std::string> example_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kExamples)) {
    if (entry.path().extension() == ".bwd") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The diamond's x.grad is a float32 computation of sin, cos and exp, which
// may differ from torch's in the last bit; the others are exact.
bool close_to(const std::optional<Tensor>& grad, const Tensor& expected) {
  return grad && grad->dtype() == DType::Float32 && grad->sizes() == expected.sizes() &&
         allclose(*grad, to(expected, DType::Float32), /*rtol=*/1e-6, /*atol=*/0.0);
}

// z = g * y, z = x * y's backward, with %g given by the caller (no default).
constexpr const char* kMulWithoutDefault = R"(
program mul
  grad  %g : f32[3]
  saved $x : f32[3] = [1.0, 2.0, 3.0]
  saved $y : f32[3] = [4.0, 5.0, 6.0]
  leaf  @x : f32[3]
  leaf  @y : f32[3]
code
  %0 = validate %g : f32[3]
  %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
  %3, %4 = validate %1, %2 : f32[3], f32[3]
  accumulate_grad @x %3
  accumulate_grad @y %4
)";

// log(x) at x = [1, 0, 0] with incoming grads [1, 1, 0]: grad / x = [1, inf, nan].
constexpr const char* kLogOfZero = R"(
program log_of_zero
  grad  %g : f32[3] = [1.0, 1.0, 0.0]
  saved $x : f32[3] = [1.0, 0.0, 0.0]
  leaf  @x : f32[3]
code
  %0 = validate %g : f32[3]
  %1 = LogBackward0 %0  self=$x
  %2 = validate %1 : f32[3]
  accumulate_grad @x %2
)";

// A chain of n NegBackward0 calls on one-element tensors: x.grad = (-1)^n.
std::string negation_chain(std::size_t n) {
  std::string text = "program chain\n  grad %g : f32[1] = [1.0]\n  leaf @x : f32[1]\ncode\n";
  text += "  %0 = validate %g : f32[1]\n";
  for (std::size_t i = 1; i <= n; ++i) text += fmt::format("  %{} = NegBackward0 %{}\n", i, i - 1);
  text += fmt::format("  accumulate_grad @x %{}\n", n);
  return text;
}

}  // namespace

// ------------------------------------------------------------------ examples ---

TEST_CASE("interpreter: every example program gives the leaf grads its comments give") {
  const std::vector<std::string> names = example_names();
  CHECK(names.size() == examples().size());
  for (const std::string& name : names) {
    CAPTURE(name);
    const auto expected = examples().find(name);
    REQUIRE_MESSAGE(expected != examples().end(), "no expected grads written for ", name, ".bwd");
    std::vector<PostAccGradCall> calls;
    Machine machine(load_example(name), expected->second.needs_host ? leaf_twice_host(calls) : Host{});
    machine.run();
    CHECK(machine.finished());
    for (const auto& entry : expected->second.leaf_grads) {
      const std::string& leaf = entry.first;  // not a structured binding: CAPTURE's lambda takes it
      CAPTURE(leaf);
      const std::optional<Tensor> grad = expected->second.outputs ? machine.output(leaf) : machine.leaf_grad(leaf);
      CHECK(close_to(grad, entry.second));
      if (name != "diamond") CHECK(equals_f32(grad, entry.second));
    }
  }
}

TEST_CASE("interpreter: leaf_twice calls its hooks: double on the summed grad, log with the updated leaf") {
  std::vector<PostAccGradCall> calls;
  Host host = leaf_twice_host(calls);
  std::vector<Tensor> doubled;
  host.tensor_pre_hooks["double"] = [&doubled](const Tensor& grad) -> std::optional<Tensor> {
    doubled.push_back(grad);
    return mul(grad, Scalar(2));
  };
  Machine machine(load_example("leaf_twice"), std::move(host));
  machine.run();
  REQUIRE(doubled.size() == 1);
  CHECK(equals_f32(doubled[0], tensor({2.0, -1.0, 5.0})));  // x + 1
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].leaf == "w");
  CHECK(equals_f32(calls[0].grad, tensor({4.5, -1.5, 10.5})));
}

TEST_CASE("interpreter: a hook returning None leaves the gradient unchanged") {
  std::vector<PostAccGradCall> calls;
  Host host = leaf_twice_host(calls);
  host.tensor_pre_hooks["double"] = [](const Tensor&) -> std::optional<Tensor> { return std::nullopt; };
  Machine machine(load_example("leaf_twice"), std::move(host));
  machine.run();
  CHECK(equals_f32(machine.leaf_grad("w"), tensor({2.5, -0.5, 5.5})));  // 0.5 + (x + 1)
}

TEST_CASE("interpreter: a post_acc_grad hook may clear or replace its leaf's .grad, as torch's may") {
  std::vector<PostAccGradCall> calls;
  Host host = leaf_twice_host(calls);
  SUBCASE("param.grad = None, as an optimizer step in backward does") {
    host.post_acc_grad_hooks["log"] = [](const std::string&, std::optional<Tensor>& grad) { grad.reset(); };
    Machine machine(load_example("leaf_twice"), std::move(host));
    machine.run();
    CHECK_FALSE(machine.leaf_grad("w").has_value());
  }
  SUBCASE("a new .grad") {
    host.post_acc_grad_hooks["log"] = [](const std::string&, std::optional<Tensor>& grad) {
      grad = mul(*grad, Scalar(10));
    };
    Machine machine(load_example("leaf_twice"), std::move(host));
    machine.run();
    CHECK(equals_f32(machine.leaf_grad("w"), tensor({45.0, -15.0, 105.0})));  // 10 * (0.5 + 2 (x + 1))
  }
  SUBCASE("a .grad of another shape is refused, naming the hook and the leaf") {
    host.post_acc_grad_hooks["log"] = [](const std::string&, std::optional<Tensor>& grad) {
      grad = tensor({1.0f, 2.0f});
    };
    Machine machine(load_example("leaf_twice"), std::move(host));
    CHECK_THROWS_WITH_AS(machine.run(), doctest::Contains("post_acc_grad hook &log set @w.grad"), Error);
    CHECK(machine.pc() == machine.size() - 1);  // stopped before the hook, .grad as accumulate_grad left it
    CHECK(equals_f32(machine.leaf_grad("w"), tensor({4.5, -1.5, 10.5})));
  }
}

TEST_CASE("interpreter: step by step gives the same bits as run, on every example") {
  for (const std::string& name : example_names()) {
    CAPTURE(name);
    std::vector<PostAccGradCall> calls;
    const bool needs_host = examples().count(name) && examples().at(name).needs_host;
    Machine running(load_example(name), needs_host ? leaf_twice_host(calls) : Host{});
    Machine stepping(load_example(name), needs_host ? leaf_twice_host(calls) : Host{});
    running.run();
    std::size_t steps = 0;
    while (!stepping.finished()) {
      CHECK(stepping.pc() == steps);
      stepping.step();
      ++steps;
    }
    CHECK(steps == stepping.size());
    for (const LeafDecl& leaf : running.program().leaves) {
      CAPTURE(leaf.name);
      CHECK(running.leaf_grad(leaf.name).has_value());
      CHECK(same_bits(running.leaf_grad(leaf.name), stepping.leaf_grad(leaf.name)));
    }
  }
}

TEST_CASE("interpreter: step() at the end raises") {
  Machine machine(load_example("mul"));
  machine.run();
  CHECK_THROWS_WITH_AS(machine.step(), "step: the program has finished (5 instructions); reset() to run it again",
                       Error);
}

TEST_CASE("interpreter: run_program returns leaf grads and outputs by sigiled name") {
  const TensorMap results = run_program(load(kMulWithoutDefault), {{"%g", tensor({2.0f, 2.0f, 2.0f})}});
  REQUIRE(results.size() == 2);
  CHECK(equals_f32(results.at("@x"), tensor({8.0, 10.0, 12.0})));  // g * y
  CHECK(equals_f32(results.at("@y"), tensor({2.0, 4.0, 6.0})));    // g * x
  CHECK_THROWS_WITH_AS(run_program(load(kMulWithoutDefault), {{"g", tensor({2.0f, 2.0f, 2.0f})}}),
                       "run_program: grads are named with their sigil (\"%g0\"), got \"g\"", Error);
}

// ------------------------------------------------------------ other opcodes ---

TEST_CASE("interpreter: CopySlices writes the wrapped node's grad into the view's slice") {
  // x[1:3].mul_(y) on x of shape [4]: the view's old values were [5, 6].
  const char* text = R"(
program copy_slices
  grad  %g : f32[4] = [1.0, 2.0, 3.0, 4.0]
  saved $s : f32[2] = [5.0, 6.0]
  saved $y : f32[2] = [10.0, 100.0]
  leaf  @x : f32[4]
  leaf  @y : f32[2]
code
  %0 = validate %g : f32[4]
  %1, %2 = CopySlices[MulBackward0] %0  base={sizes=[4], strides=[1], storage_offset=0}
      view={sizes=[2], strides=[1], storage_offset=1}
      other=$y other_scalar_type=f32 self=$s self_scalar_type=f32
  %3, %4 = validate %1, %2 : f32[4], f32[2]
  accumulate_grad @x %3
  accumulate_grad @y %4
)";
  Machine machine(load(text));
  CHECK(machine.run_until({Breakpoint::at_node("MulBackward0")}) == StopReason::Breakpoint);
  CHECK(machine.pc() == 1);
  machine.run();
  CHECK(equals_f32(machine.leaf_grad("x"), tensor({1.0, 20.0, 300.0, 4.0})));  // the slice times y
  CHECK(equals_f32(machine.leaf_grad("y"), tensor({10.0, 18.0})));             // the slice times the old values
}

TEST_CASE("interpreter: add skips an undefined operand and may read one register twice") {
  const char* text = R"(
program add_none
  grad  %g : f32[2] = [1.0, 2.0]
  saved $y : f32[2] = [3.0, 4.0]
  leaf  @x : f32[2]
code
  %0 = validate %g : f32[2]
  %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=none self_scalar_type=f32 need=[1,0]
  %3 = add %2, %1
  %4 = add %3, %3
  accumulate_grad @x %4
)";
  Machine machine(load(text));
  machine.step();
  machine.step();
  const std::optional<Tensor> none = machine.register_value("2");
  REQUIRE(none.has_value());  // it holds a value: the undefined tensor
  CHECK_FALSE(none->defined());
  machine.run();
  CHECK(equals_f32(machine.leaf_grad("x"), tensor({6.0, 16.0})));  // 2 * g * y
}

TEST_CASE("interpreter: zeros makes zeros of the metadata's grad dtype; output stores a value or none") {
  const char* text = R"(
program zeros
  output ^a : f64[2,1]
  output ^b : f32[3]
  output ^c : f32[3]
code
  %0 = zeros : f32[2,1]{grad_dtype=f64}
  %1 = zeros : f32[3]
  output ^a %0
  output ^b %1
  output ^c none
)";
  Machine machine(load(text));
  machine.run();
  const std::optional<Tensor> a = machine.output("a");
  REQUIRE(a.has_value());
  CHECK(a->dtype() == DType::Float64);
  CHECK(equal(*a, zeros({2, 1}, DType::Float64)));
  CHECK(equals_f32(machine.output("b"), zeros({3})));
  REQUIRE(machine.output("c").has_value());  // written: None
  CHECK_FALSE(machine.output("c")->defined());

  const TensorMap results = run_program(load(text));
  CHECK(results.count("^a") == 1);
  CHECK(results.count("^c") == 0);  // None is left out
}

// --------------------------------------------------------------- host calls ---

TEST_CASE("interpreter: pre and post hooks see a node's grads and may replace them") {
  const char* text = R"(
program hooks
  grad  %g : f32[3] = [1.0, 1.0, 2.0]
  saved $x : f32[3] = [1.0, 2.0, 3.0]
  saved $y : f32[3] = [4.0, 5.0, 6.0]
  leaf  @x : f32[3]
  leaf  @y : f32[3]
  hook  &times10 : pre
  hook  &minus_grad_output : post
code
  %0 = validate %g : f32[3]
  %1 = hook &times10 %0
  %2, %3 = MulBackward0 %1  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
  %4, %5 = hook &minus_grad_output %2, %3, %1
  %6, %7 = validate %4, %5 : f32[3], f32[3]
  accumulate_grad @x %6
  accumulate_grad @y %7
)";
  Host host;
  host.pre_hooks["times10"] = [](const Grads& grads) -> std::optional<Grads> {
    return Grads{mul(*grads[0], Scalar(10))};
  };
  std::size_t post_outputs = 0;
  host.post_hooks["minus_grad_output"] = [&](const Grads& inputs, const Grads& outputs) -> std::optional<Grads> {
    post_outputs = outputs.size();
    return Grads{sub(*inputs[0], *outputs[0]), inputs[1]};
  };
  Machine machine(load(text), std::move(host));
  machine.run();
  CHECK(post_outputs == 1);
  CHECK(equals_f32(machine.leaf_grad("x"), tensor({30.0, 40.0, 100.0})));  // 10g * y - 10g
  CHECK(equals_f32(machine.leaf_grad("y"), tensor({10.0, 20.0, 60.0})));   // 10g * x
}

constexpr const char* kFunction = R"(
program function
  grad     %g : f32[2] = [1.0, 2.0]
  saved    $x : f32[2] = [3.0, 4.0]
  function &Scale
  output   ^x : f32[2]
  output   ^unused : f32[2]
code
  %0 = validate %g : f32[2]
  %1 = call_backward &Scale %0  saved=[$x]
  %2 = validate %1 : f32[2]
  output ^x %2
)";

TEST_CASE("interpreter: call_backward calls the host function with its saved tensors; output stores") {
  Host host;
  std::vector<Tensor> seen_saved;
  host.functions["Scale"] = [&](const std::vector<Tensor>& saved, const Need& need, const Grads& grads) {
    seen_saved = saved;
    CHECK(need == Need{true});
    return Grads{mul(*grads[0], saved[0])};
  };
  Machine machine(load(kFunction), std::move(host));
  CHECK_FALSE(machine.output("x").has_value());
  machine.run();
  REQUIRE(seen_saved.size() == 1);
  CHECK(equals_f32(seen_saved[0], tensor({3.0, 4.0})));
  CHECK(equals_f32(machine.output("x"), tensor({3.0, 8.0})));
  CHECK_FALSE(machine.output("unused").has_value());
}

TEST_CASE("interpreter: a host function returning the wrong number of grads is an error") {
  Host host;
  host.functions["Scale"] = [](const std::vector<Tensor>&, const Need&, const Grads& grads) {
    return Grads{grads[0], grads[0]};
  };
  Machine machine(load(kFunction), std::move(host));
  machine.step();
  CHECK_THROWS_WITH_AS(machine.step(),
                       "instruction 1 (%1 = call_backward &Scale %0  saved=[$x]): function Scale returned an "
                       "incorrect number of gradients (expected 1, got 2); operands: f32[2]",
                       Error);
}

// -------------------------------------------------------------- breakpoints ---

TEST_CASE("interpreter: breakpoints at a pc and at a node stop before the instruction, once") {
  // diamond: 7 is SinBackward0, 10 ExpBackward0.
  Machine machine(load_example("diamond"));
  const std::vector<Breakpoint> breakpoints = {Breakpoint::at_node("SinBackward0"), Breakpoint::at_pc(10)};
  CHECK(machine.run_until(breakpoints) == StopReason::Breakpoint);
  CHECK(machine.pc() == 7);
  CHECK_FALSE(machine.register_value("9").has_value());  // SinBackward0's result: not yet
  CHECK(machine.run_until(breakpoints) == StopReason::Breakpoint);
  CHECK(machine.pc() == 10);
  CHECK(machine.run_until(breakpoints) == StopReason::Finished);
  CHECK(machine.finished());

  Machine running(load_example("diamond"));
  running.run();
  CHECK(same_bits(machine.leaf_grad("x"), running.leaf_grad("x")));
}

TEST_CASE("interpreter: a breakpoint at pc 0 stops before anything runs; step() moves past a breakpoint") {
  Machine machine(load_example("mul"));
  CHECK(machine.run_until({Breakpoint::at_pc(0), Breakpoint::at_pc(2)}) == StopReason::Breakpoint);
  CHECK(machine.pc() == 0);
  machine.step();
  CHECK(machine.run_until({Breakpoint::at_pc(0), Breakpoint::at_pc(2)}) == StopReason::Breakpoint);
  CHECK(machine.pc() == 2);
}

TEST_CASE("interpreter: run_until with a condition stops before the instruction where it holds") {
  Machine machine(load_example("diamond"));
  const auto has_11 = [](const Machine& m) { return m.register_value("11").has_value(); };
  CHECK(machine.run_until(has_11) == StopReason::Breakpoint);
  CHECK(machine.pc() == 10);  // `add` (pc 9) made %11
  CHECK(machine.run_until(has_11) == StopReason::Finished);  // resumes: runs pc 10 first
}

TEST_CASE("interpreter: a non-finite breakpoint stops after the instruction that made an Inf or NaN") {
  Machine machine(load(kLogOfZero));
  CHECK(machine.run_until({Breakpoint::non_finite()}) == StopReason::NonFinite);
  CHECK(machine.pc() == 2);  // after LogBackward0
  const std::optional<Tensor> made = machine.register_value("1");
  REQUIRE(made.has_value());
  const std::vector<float> values = made->to_vector<float>();
  CHECK(values[0] == 1.0f);
  CHECK(std::isinf(values[1]));
  CHECK(std::isnan(values[2]));
  machine.run();  // without check_finite, running on is allowed
  CHECK(machine.finished());

  Machine finite(load_example("mul"));
  CHECK(finite.run_until({Breakpoint::non_finite()}) == StopReason::Finished);
}

TEST_CASE("interpreter: check_finite raises at the first non-finite value and stays at that instruction") {
  Machine machine(load(kLogOfZero), {}, MachineOptions{.check_finite = true});
  machine.step();
  CHECK_THROWS_WITH_AS(machine.run(),
                       "instruction 1 (%1 = LogBackward0 %0  self=$x): produced a non-finite value in %1 "
                       "(f32[3]: 1 NaN, 1 Inf)",
                       Error);
  CHECK(machine.pc() == 1);
  CHECK_FALSE(machine.register_value("1").has_value());
  CHECK(machine.register_value("0").has_value());

  // A leaf's .grad made non-finite by accumulate_grad is found too.
  const char* text = R"(
program accumulate
  grad %g : f32[1] = [inf]
  leaf @x : f32[1]
code
  accumulate_grad @x %g
)";
  Machine leaf(load(text), {}, MachineOptions{.check_finite = true});
  CHECK_THROWS_WITH_AS(leaf.run(),
                       "instruction 0 (accumulate_grad @x %g): produced a non-finite value in @x "
                       "(f32[1]: 0 NaN, 1 Inf)",
                       Error);
  CHECK_FALSE(leaf.leaf_grad("x").has_value());
}

// ---------------------------------------------------------------------- reset ---

TEST_CASE("interpreter: reset() goes back to pc 0 and the leaves' first .grad, and runs the same again") {
  std::vector<PostAccGradCall> calls;
  Machine machine(load_example("leaf_twice"), leaf_twice_host(calls));
  machine.run();
  const std::optional<Tensor> first = machine.leaf_grad("w");
  machine.reset();
  CHECK(machine.pc() == 0);
  CHECK(equals_f32(machine.leaf_grad("w"), tensor({0.5, 0.5, 0.5})));
  machine.run();
  CHECK(same_bits(machine.leaf_grad("w"), first));
  CHECK(equals_f32(machine.leaf_grad("w"), tensor({4.5, -1.5, 10.5})));
}

// ----------------------------------------------------------------- registers ---

TEST_CASE("interpreter: registers are freed after their last use, unless keep_values") {
  Machine machine(load_example("mul"));
  using Names = std::vector<std::string>;
  CHECK(machine.live_registers() == Names{"g"});
  machine.step();  // %0 = validate %g
  CHECK(machine.live_registers() == Names{"0"});
  machine.step();  // %1, %2 = MulBackward0 %0
  CHECK(machine.live_registers() == Names{"1", "2"});
  machine.step();  // %3, %4 = validate %1, %2
  CHECK(machine.live_registers() == Names{"3", "4"});
  machine.step();  // accumulate_grad @x %3
  CHECK(machine.live_registers() == Names{"4"});
  CHECK_FALSE(machine.register_value("3").has_value());
  machine.step();
  CHECK(machine.live_registers().empty());

  Machine keeping(load_example("mul"), {}, MachineOptions{.keep_values = true});
  keeping.run();
  CHECK(keeping.live_registers() == Names{"g", "0", "1", "2", "3", "4"});
  CHECK(equals_f32(keeping.register_value("2"), tensor({1.0, 2.0, 6.0})));
  CHECK_THROWS_WITH_AS(keeping.register_value("nope"), "the program has no register %nope", Error);
}

TEST_CASE("interpreter: a result nobody reads is freed at once") {
  const char* text = R"(
program unused
  grad %g : f32[2] = [1.0, 2.0]
  leaf @x : f32[2]
code
  %0 = validate %g : f32[2]
  %1 = NegBackward0 %0
  %2 = NegBackward0 %0
  accumulate_grad @x %2
)";
  Machine machine(load(text));
  machine.step();
  machine.step();  // %1: never read
  CHECK(machine.live_registers() == std::vector<std::string>{"0"});
}

TEST_CASE("interpreter: peak register bytes of a long chain stay flat") {
  // Two one-element float32 registers at a time: the one read and the one made.
  Machine short_chain(load(negation_chain(1000)));
  short_chain.run();
  CHECK(short_chain.peak_register_bytes() == 8);
  CHECK(equals_f32(short_chain.leaf_grad("x"), tensor({1.0})));

  Machine long_chain(load(negation_chain(10000)));
  long_chain.run();
  CHECK(long_chain.peak_register_bytes() == 8);

  Machine keeping(load(negation_chain(1000)), {}, MachineOptions{.keep_values = true});
  keeping.run();
  CHECK(keeping.peak_register_bytes() == 4 * 1002);  // %g, %0 ... %1000
}

// --------------------------------------------------------------------- trace ---

TEST_CASE("interpreter: the trace records each instruction's text and its operands' and results' types") {
  Machine machine(load_example("mul"), {}, MachineOptions{.trace = true});
  machine.run();
  const std::vector<TraceEntry>& trace = machine.trace();
  REQUIRE(trace.size() == 5);
  const TraceEntry& call = trace[1];
  CHECK(call.pc == 1);
  CHECK(call.text == "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32");
  const TensorType f32_3{DType::Float32, {3}};
  REQUIRE(call.inputs.size() == 1);
  CHECK((call.inputs[0].defined && call.inputs[0].type == f32_3));
  REQUIRE(call.outputs.size() == 2);
  CHECK((call.outputs[1].defined && call.outputs[1].type == f32_3));
  CHECK(trace[4].text == "accumulate_grad @y %4");
  CHECK(trace[4].outputs.size() == 1);  // the leaf's new .grad

  Machine quiet(load_example("mul"));
  quiet.run();
  CHECK(quiet.trace().empty());
}

// ----------------------------------------------------------------- precision ---

TEST_CASE("interpreter: promote_to_float64 runs mul in float64") {
  const Program program = promote_to_float64(parse_program(read_text(kExamples / "mul.bwd")));
  Machine machine(bind(assemble(program)));
  machine.run();
  const std::optional<Tensor> x = machine.leaf_grad("x");
  REQUIRE(x.has_value());
  CHECK(x->dtype() == DType::Float64);
  CHECK(equal(*x, tensor({4.0, 5.0, 12.0}, DType::Float64)));
  CHECK(machine.leaf_grad("y")->dtype() == DType::Float64);
}

TEST_CASE("interpreter: promote_to_float64 of diamond gives float64 sin, cos and exp's grads") {
  const Program program = promote_to_float64(parse_program(read_text(kExamples / "diamond.bwd")));
  Machine machine(bind(assemble(program)));
  machine.run();
  // By hand, in double: a = exp(x) as saved (float32 values), x.grad = (-sin a + cos a) * a.
  std::vector<double> expected;
  for (float a32 : {1.6487212f, 2.7182817f, 7.389056f}) {
    const double a = a32;
    expected.push_back((-std::sin(a) + std::cos(a)) * a);
  }
  const std::optional<Tensor> x = machine.leaf_grad("x");
  REQUIRE(x.has_value());
  CHECK(x->dtype() == DType::Float64);
  const std::vector<double> got = x->to_vector<double>();
  REQUIRE(got.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-14));
  // float32 would be off by about 1e-7: the f64 run is not a float32 run cast up.
  CHECK(std::abs(got[1] - static_cast<double>(-3.594969f)) > 1e-9);
}

TEST_CASE("interpreter: promote_to_float64 rewrites every f32 a program names, and nothing else") {
  const char* text = R"(
program dtypes
  grad   %g : f32[2] = [0.5, 0.25]
  saved  $i : i64[1] = [0]
  leaf   @a : f32[2] = [1.0, 2.0]
  output ^o : f32[2]
code
  %0 = validate %g : f32[2]{grad_dtype=none}
  %1 = ToCopyBackward0 %0  self_options={dtype=f32, device=cpu, layout=strided, requires_grad=false}
  %2 = CatBackward0 %1  dim=0 tensors_args_scalartypes=[f32, i64] tensors_args_sizes_symint=[[1], [1]]
  %3, %4 = IndexPutBackward0 %0  accumulate=false indices=[$i] values_info={sizes=[1], options={dtype=f32}}
  %5 = zeros : f32[2]
  %6 = validate %5 : f32[2]{device=cuda}
  output ^o %6
)";
  const Program program = parse_program(text);
  const Program promoted = promote_to_float64(program);
  std::string expected = print_program(program);
  for (std::size_t at = expected.find("f32"); at != std::string::npos; at = expected.find("f32", at)) {
    expected.replace(at, 3, "f64");
  }
  CHECK(print_program(promoted) == expected);
  REQUIRE(promoted.grads[0].value.has_value());
  CHECK(promoted.grads[0].value->dtype() == DType::Float64);
  CHECK(equal(*promoted.grads[0].value, tensor({0.5, 0.25}, DType::Float64)));
  CHECK(promoted.saved[0].value->dtype() == DType::Int64);
  CHECK(promoted.leaves[0].grad->dtype() == DType::Float64);
}

TEST_CASE("interpreter: promote_to_float64 of tensors converts float32 only") {
  const TensorMap promoted = promote_to_float64(TensorMap{{"$x", tensor({1.5f})}, {"$i", tensor({3})}});
  CHECK(promoted.at("$x").dtype() == DType::Float64);
  CHECK(equal(promoted.at("$x"), tensor({1.5})));
  CHECK(promoted.at("$i").dtype() == DType::Int64);
}

TEST_CASE("interpreter: perturbed_to_float64 moves each number by up to one rounding of its own dtype") {
  const Tensor x32 = tensor({1.5f, -3.0f, 0.0f, 7.25f}), h = to(tensor({1.0, 2.0, 4.0}), DType::Float16);
  const TensorMap values{{"$x", x32}, {"$h", h}, {"$i", tensor({3, 4})}};
  const TensorMap moved = perturbed_to_float64(values, 7), again = perturbed_to_float64(values, 7);
  const TensorMap other_seed = perturbed_to_float64(values, 8), less = perturbed_to_float64(values, 7, 1.0 / 16);
  CHECK(moved.at("$x").dtype() == DType::Float64);
  CHECK(equal(moved.at("$i"), tensor({3, 4})));  // integers are exact: not moved
  const std::vector<double> x = to(x32, DType::Float64).to_vector<double>(), xm = moved.at("$x").to_vector<double>();
  const std::vector<double> xl = less.at("$x").to_vector<double>();
  int changed = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(std::abs(xm[i] - x[i]) <= std::abs(x[i]) * 0x1p-24);  // float32's unit roundoff
    changed += xm[i] != x[i];
    // the same draw at 1/16 of the move: the step is 16 times smaller
    CHECK((xl[i] - x[i]) * 16 == doctest::Approx(xm[i] - x[i]).epsilon(1e-6));
  }
  CHECK(changed == 3);  // 0 stays 0 (multiplied); the others move
  CHECK(xm[2] == 0.0);
  const std::vector<double> hm = moved.at("$h").to_vector<double>();
  double largest = 0;
  for (std::size_t i = 0; i < hm.size(); ++i) largest = std::max(largest, std::abs(hm[i] / std::pow(2.0, i) - 1));
  CHECK(largest <= 0x1p-11);  // float16's
  CHECK(largest > 0x1p-24);   // far more than a float32 value would move
  CHECK(equal(moved.at("$x"), again.at("$x")));        // the same seed, the same draw
  CHECK_FALSE(equal(moved.at("$x"), other_seed.at("$x")));

  // a program's inline values move too, and its declarations become float64 as promote_to_float64's do
  const Program program = parse_program(read_text(kExamples / "mul.bwd"));
  const Program perturbed = perturbed_to_float64(program, 7);
  CHECK(print_program(perturbed).find("f32") == std::string::npos);
  REQUIRE(perturbed.saved[0].value.has_value());
  CHECK(perturbed.saved[0].value->dtype() == DType::Float64);
  CHECK_FALSE(equal(*perturbed.saved[0].value, *promote_to_float64(program).saved[0].value));
}

TEST_CASE("interpreter: rounding_noise_of gives each instruction the unit roundoff of the dtypes it computes in") {
  // float32 throughout: every instruction rounds as float32 does
  const Program mul = parse_program(read_text(kExamples / "mul.bwd"));
  const RoundingNoise noise = rounding_noise_of(mul, 7, 0.5);
  CHECK(noise.seed == 7);
  CHECK(noise.scale == 0.5);
  CHECK(noise.unit_roundoff == std::vector<double>(mul.code.size(), 0x1p-24));
  // a float16 node beside float32 ones (autocast): each instruction its own dtype's
  const Program mixed = parse_program(R"(program mixed
  grad %g : f32[2]
  saved $a : f16[2] = [1.0, 2.0]
  saved $b : f16[2] = [3.0, 4.0]
  leaf @a : f16[2]
  leaf @b : f16[2]
  leaf @w : f32[2]
code
  %0 = validate %g : f32[2]
  %1, _ = AddBackward0 %0  alpha=1 other_scalar_type=f32 self_scalar_type=f32 need=[1,0]
  %2, _ = validate %1, none : f32[2], _
  accumulate_grad @w %2
  %3 = validate %0 : f16[2]
  %4, %5 = MulBackward0 %3  other=$b other_scalar_type=f16 self=$a self_scalar_type=f16
  %6, %7 = validate %4, %5 : f16[2], f16[2]
  accumulate_grad @a %6
  accumulate_grad @b %7
)");
  const RoundingNoise mixed_noise = rounding_noise_of(mixed, 0);
  REQUIRE(mixed_noise.unit_roundoff.size() == mixed.code.size());
  CHECK(mixed_noise.unit_roundoff[1] == 0x1p-24);  // AddBackward0: validated to f32
  CHECK(mixed_noise.unit_roundoff[3] == 0x1p-24);  // accumulate into the f32 leaf
  CHECK(mixed_noise.unit_roundoff[5] == 0x1p-11);  // MulBackward0 of f16 saved values
  CHECK(mixed_noise.unit_roundoff[8] == 0x1p-11);
}

TEST_CASE("interpreter: rounding noise rounds the results of a validate that narrows them as captured") {
  // tests/programs/cast_to_float16.bwd: two paths that cancel, one through a validate to float16
  const std::filesystem::path path = kTestPrograms / "cast_to_float16.bwd";
  const Program program = parse_program(read_text(path), path.string());
  Machine as_captured(bind(assemble(program)), {}, {.trace = true});
  as_captured.run();
  const RoundingNoise noise = rounding_noise_of(program, 3, 1.0, as_captured.trace());
  REQUIRE(noise.casts.size() == 1);  // the validate to f16 alone: the others keep their dtype
  CHECK(noise.casts.at(2) == std::vector<std::optional<DType>>{DType::Float16});
  CHECK(rounding_noise_of(program, 3).casts.empty());  // without a trace, no cast is known
  const auto w_grad = [&](std::optional<RoundingNoise> rounding) {
    Machine machine(bind(assemble(promote_to_float64(program))), {}, {.rounding_noise = std::move(rounding)});
    machine.run();
    return machine.leaf_grad("w")->to_vector<double>()[0];
  };
  CHECK(w_grad(std::nullopt) == 0.0);
  CHECK(w_grad(rounding_noise_of(program, 3)) == 0.0);  // each path's noise is relative to its 0
  const double moved = w_grad(noise), moved_less = w_grad(rounding_noise_of(program, 3, 1.0 / 16, as_captured.trace()));
  CHECK(moved != 0.0);
  CHECK(std::abs(moved) <= 0x1p-25);  // float16's rounding near 0: half its smallest subnormal
  CHECK(moved_less * 16 == doctest::Approx(moved));
}

TEST_CASE("interpreter: a machine with rounding noise moves each result by up to its dtype's rounding") {
  const Program mul = parse_program(read_text(kExamples / "mul.bwd"));
  const auto x_grad = [&](std::optional<RoundingNoise> noise) {
    Machine machine(bind(assemble(promote_to_float64(mul))), {}, MachineOptions{.rounding_noise = std::move(noise)});
    machine.run();
    return machine.leaf_grad("x")->to_vector<double>();
  };
  const std::vector<double> exact = x_grad(std::nullopt), moved = x_grad(rounding_noise_of(mul, 3));
  const std::vector<double> moved_less = x_grad(rounding_noise_of(mul, 3, 1.0 / 16)), again = x_grad(rounding_noise_of(mul, 3));
  CHECK(exact == std::vector<double>{4.0, 5.0, 12.0});
  CHECK(moved == again);  // the same seed, the same draws
  for (std::size_t i = 0; i < exact.size(); ++i) {
    CHECK(moved[i] != exact[i]);
    CHECK(std::abs(moved[i] - exact[i]) <= 3 * 0x1p-24 * exact[i]);  // a few float32 roundings at most
    CHECK((moved_less[i] - exact[i]) * 16 == doctest::Approx(moved[i] - exact[i]).epsilon(1e-3));
  }
  // made for another program: refused when the machine is made
  RoundingNoise wrong = rounding_noise_of(mul, 3);
  wrong.unit_roundoff.pop_back();
  CHECK_THROWS_WITH_AS(Machine(bind(assemble(promote_to_float64(mul))), {}, MachineOptions{.rounding_noise = wrong}),
                       doctest::Contains("the rounding noise has 4 unit roundoffs for a program of 5 instructions"),
                       Error);
}

TEST_CASE("interpreter: linear_sensitivity keeps the moves that are linear in the perturbation") {
  const Tensor exact = tensor({0.0, 1.0, 2.0, 5.0}, DType::Float64);
  // element 0 and 1: 16 times less move, 16 times less step (linear); element 2: a jump, the same at both
  // scales (a tie broken); element 3: a step only at the larger move (a boundary crossed by it alone)
  const Tensor moved = tensor({1e-7, 1.0 + 3e-6, 3.0, 5.5}, DType::Float64);
  const Tensor moved_less = tensor({1e-7 / 16, 1.0 + 3e-6 / 16, 3.0, 5.0}, DType::Float64);
  CHECK(linear_sensitivity(exact, moved, moved_less, 16.0) == doctest::Approx(3e-6).epsilon(1e-6));
  CHECK(linear_sensitivity(exact, exact, exact, 16.0) == 0.0);
  const Tensor complex_exact = tensor({1.0, 0.0}, DType::Float64), complex_moved = tensor({1.0, 32e-8}, DType::Float64);
  const Tensor complex_less = tensor({1.0, 2e-8}, DType::Float64);
  CHECK(linear_sensitivity(view_as_complex(complex_exact), view_as_complex(complex_moved),
                           view_as_complex(complex_less), 16.0) == doctest::Approx(32e-8));  // parts apart
  CHECK_THROWS_AS(linear_sensitivity(exact, tensor({1.0}), tensor({1.0}), 16.0), Error);
}

TEST_CASE("interpreter: linear_sensitivity keeps the moves that grow like the square of the perturbation") {
  // A gradient whose first derivative is 0 by structure (layer_norm's over equal values, x_hat = 0) moves at
  // second order: 16 times less move, 256 times less step (refgrad.fuzz cases 124954 and 117447). Element 1
  // does so; element 2 grows 64 times, neither linearly nor quadratically, and is left out.
  const Tensor exact = tensor({0.0, 0.0, 0.0}, DType::Float64);
  const Tensor moved = tensor({0.0, 2.56e-4, 6.4e-3}, DType::Float64);
  const Tensor moved_less = tensor({0.0, 1e-6, 1e-4}, DType::Float64);
  CHECK(linear_sensitivity(exact, moved, moved_less, 16.0) == doctest::Approx(2.56e-4));
}

TEST_CASE("interpreter: saved_values_broken_by_moving names the node a move broke, and held keeps it still") {
  // amax sends the grad where its saved input equals its saved result; moved one by one, the two come apart,
  // no number is equal, and it divides 0 by 0. The mul after it is broken only through its operand.
  const Program program = parse_program(R"(program amax_then_mul
  grad %g : f32[1]
  saved $self : f32[3] = [0.5, 2.0, -1.0]
  saved $result : f32[1] = [2.0]
  saved $other : f32[3] = [3.0, 4.0, 5.0]
  leaf @x : f32[3]
  leaf @y : f32[3]
code
  %0 = validate %g : f32[1]
  %1 = AmaxBackward0 %0  dim=[0] keepdim=true self=$self result=$result
  %2 = validate %1 : f32[3]
  %3, %4 = MulBackward0 %2  other=$other other_scalar_type=f32 self=$other self_scalar_type=f32
  %5, %6 = validate %3, %4 : f32[3], f32[3]
  accumulate_grad @x %5
  accumulate_grad @y %6
)");
  const auto run = [](const Program& start) {
    Machine machine(bind(assemble(start)), {}, {.keep_values = true});
    machine.set_grad("g", tensor({1.0}, DType::Float64));
    machine.run();
    return machine;
  };
  const Machine exact = run(promote_to_float64(program));
  const Machine moved = run(perturbed_to_float64(program, 5));
  REQUIRE(not_finite_where_finite(*moved.leaf_grad("x"), *exact.leaf_grad("x")));
  CHECK(saved_values_broken_by_moving(exact, moved) == std::set<std::string>{"$self", "$result"});
  CHECK(saved_values_broken_by_moving(exact, exact).empty());
  // held: amax's values are not moved (the run is finite again); $other still is
  const Program held = perturbed_to_float64(program, 5, 1.0, {"$self", "$result"});
  CHECK(equal(*held.saved[0].value, *promote_to_float64(program).saved[0].value));
  CHECK(equal(*held.saved[1].value, *promote_to_float64(program).saved[1].value));
  CHECK(equal(*held.saved[2].value, *perturbed_to_float64(program, 5).saved[2].value));
  CHECK_FALSE(equal(*held.saved[2].value, *promote_to_float64(program).saved[2].value));
  const Machine mended = run(held);
  CHECK_FALSE(not_finite_where_finite(*mended.leaf_grad("x"), *exact.leaf_grad("x")));
  CHECK(saved_values_broken_by_moving(exact, mended).empty());
  // the tensor map's values alike, by their sigiled names
  const TensorMap values{{"$self", tensor({0.5f, 2.0f})}, {"$other", tensor({3.0f})}};
  const TensorMap held_values = perturbed_to_float64(values, 5, 1.0, {"$self"});
  CHECK(equal(held_values.at("$self"), tensor({0.5, 2.0}, DType::Float64)));
  CHECK_FALSE(equal(held_values.at("$other"), tensor({3.0}, DType::Float64)));
  // complex numbers count as their two parts; other shapes and integers say nothing
  CHECK(not_finite_where_finite(view_as_complex(tensor({1.0, NAN}, DType::Float64)),
                                view_as_complex(tensor({1.0, 2.0}, DType::Float64))));
  CHECK_FALSE(not_finite_where_finite(tensor({NAN}, DType::Float64), tensor({1.0, 2.0}, DType::Float64)));
  CHECK_FALSE(not_finite_where_finite(tensor({NAN}, DType::Float64), tensor({NAN}, DType::Float64)));
}

// -------------------------------------------------------------------- inputs ---

TEST_CASE("interpreter: set_grad gives a grad input; its type is checked") {
  Machine machine(load(kMulWithoutDefault));
  CHECK_THROWS_WITH_AS(machine.set_grad("g", tensor({1.0f, 2.0f})),
                       "set_grad: grad %g is declared f32[3] but the value is f32[2]", Error);
  CHECK_THROWS_WITH_AS(machine.set_grad("g", tensor({1.0, 2.0, 3.0}, DType::Float64)),
                       "set_grad: grad %g is declared f32[3] but the value is f64[3]", Error);
  CHECK_THROWS_WITH_AS(machine.set_grad("h", tensor({1.0f, 2.0f, 3.0f})), "the program declares no grad %h", Error);
  machine.set_grad("g", tensor({1.0f, 1.0f, 1.0f}));
  machine.run();
  CHECK(equals_f32(machine.leaf_grad("x"), tensor({4.0, 5.0, 6.0})));
  CHECK_THROWS_WITH_AS(machine.set_grad("g", tensor({1.0f, 1.0f, 1.0f})),
                       "set_grad: the machine has run up to instruction 5; reset() it first", Error);
}

TEST_CASE("interpreter: set_leaf_grad gives a leaf's .grad before the run") {
  Machine machine(load_example("mul"));
  CHECK_THROWS_WITH_AS(machine.set_leaf_grad("x", tensor({1.0f})),
                       "set_leaf_grad: leaf @x is declared f32[3] but the value is f32[1]", Error);
  machine.set_leaf_grad("x", tensor({1.0f, 1.0f, 1.0f}));
  machine.run();
  CHECK(equals_f32(machine.leaf_grad("x"), tensor({5.0, 6.0, 13.0})));
  CHECK(equals_f32(machine.leaf_grad("y"), tensor({1.0, 2.0, 6.0})));
}

// -------------------------------------------------------------------- errors ---

TEST_CASE("interpreter: a grad with no value raises at the first instruction that reads it") {
  Machine machine(load(kMulWithoutDefault));
  CHECK_THROWS_WITH_AS(machine.run(),
                       "instruction 0 (%0 = validate %g : f32[3]): grad %g has no value: give it with set_grad "
                       "(refgrad run: --grad), or a default value in its declaration; operands: no value",
                       Error);
  CHECK(machine.pc() == 0);
}

TEST_CASE("interpreter: a hook the host does not have raises, naming the hook, at its instruction") {
  Machine machine(load_example("leaf_twice"));
  CHECK_THROWS_WITH_AS(machine.run(),
                       "instruction 8 (%10 = hook &double %9): the host has no tensor_pre hook &double "
                       "(Host::tensor_pre_hooks); operands: f32[3]",
                       Error);
  CHECK(machine.pc() == 8);
  CHECK(machine.register_value("9").has_value());  // not freed: the instruction did not run
  CHECK_THROWS_WITH_AS(machine.step(), doctest::Contains("the host has no tensor_pre hook &double"), Error);
}

TEST_CASE("interpreter: a shape error inside a node names the instruction, the node and the shapes") {
  const char* text = R"(
program bad_shape
  grad  %g : f32[2,3] = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
  saved $x : f32[3] = [1.0, 2.0, 3.0]
  leaf  @x : f32[3]
code
  %0 = validate %g : f32[2,3]
  %1 = LogBackward0 %0  self=$x
  %2 = validate %1 : f32[3]
  accumulate_grad @x %2
)";
  Machine machine(load(text));
  CHECK_THROWS_WITH_AS(machine.run(),
                       "instruction 1 (%1 = LogBackward0 %0  self=$x): LogBackward0: grad has shape [2,3] but self "
                       "has shape [3]; operands: f32[2,3]",
                       Error);
  CHECK(machine.pc() == 1);
}

TEST_CASE("interpreter: validate's errors name the node that made its operands, or none for the roots") {
  const char* roots = R"(
program roots
  grad %g : f32[2,3] = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
  leaf @x : f32[3,2]
code
  %0 = validate %g : f32[3,2]
  accumulate_grad @x %0
)";
  CHECK_THROWS_WITH_AS(Machine(load(roots)).run(),
                       "instruction 0 (%0 = validate %g : f32[3,2]): invalid gradient at index 0 - got [2, 3] but "
                       "expected shape compatible with [3, 2]; operands: f32[2,3]",
                       Error);

  // Through a post hook, and past an undefined first operand, to MulBackward0.
  const char* node = R"(
program node
  grad  %g : f32[3] = [1.0, 1.0, 2.0]
  saved $x : f32[3] = [1.0, 2.0, 3.0]
  saved $y : f32[3] = [4.0, 5.0, 6.0]
  leaf  @x : f32[3]
  leaf  @y : f32[3]
  hook  &same : post
code
  %0 = validate %g : f32[3]
  %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
  %3, %4 = hook &same %1, %2, %0
  %5, %6 = validate none, %4 : f32[3], f32[2]
  accumulate_grad @y %6
)";
  Host host;
  host.post_hooks["same"] = [](const Grads&, const Grads&) -> std::optional<Grads> { return std::nullopt; };
  Machine machine(load(node), std::move(host));
  CHECK_THROWS_WITH_AS(machine.run(),
                       "instruction 3 (%5, %6 = validate none, %4 : f32[3], f32[2]): Function MulBackward0 returned "
                       "an invalid gradient at index 1 - got [3] but expected shape compatible with [2]; operands: "
                       "none, f32[3]",
                       Error);
}

// z = torch.cat([a, b, c]) with a [2], b [1], c [3]: CatBackward0 has one
// result per list element, each the grad's slice at that element's offset.
TEST_CASE("interpreter: CatBackward0 gives each of its three list elements its slice of the grad") {
  const std::string head = R"(
program cat
  grad  %g : f32[6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
  leaf  @a : f32[2]
  leaf  @b : f32[1]
  leaf  @c : f32[3]
code
  %0 = validate %g : f32[6]
)";
  const std::string fields =
      "  dim=0 tensors_args_scalartypes=[f32, f32, f32] tensors_args_sizes_symint=[[2], [1], [3]]\n";
  SUBCASE("three leaves") {
    Machine machine(load(head + "  %1, %2, %3 = CatBackward0 %0" + fields + R"(
  %4, %5, %6 = validate %1, %2, %3 : f32[2], f32[1], f32[3]
  accumulate_grad @a %4
  accumulate_grad @b %5
  accumulate_grad @c %6
)"));
    machine.run();
    CHECK(equals_f32(machine.leaf_grad("a"), tensor({1.0, 2.0})));
    CHECK(equals_f32(machine.leaf_grad("b"), tensor({3.0})));
    CHECK(equals_f32(machine.leaf_grad("c"), tensor({4.0, 5.0, 6.0})));
  }
  SUBCASE("b a constant: its element is _") {
    Machine machine(load(head + "  %1, _, %3 = CatBackward0 %0" + fields + R"(
  %4, %6 = validate %1, %3 : f32[2], f32[3]
  accumulate_grad @a %4
  accumulate_grad @c %6
)"));
    machine.run();
    CHECK(equals_f32(machine.leaf_grad("a"), tensor({1.0, 2.0})));
    CHECK_FALSE(machine.leaf_grad("b").has_value());
    CHECK(equals_f32(machine.leaf_grad("c"), tensor({4.0, 5.0, 6.0})));
  }
  SUBCASE("as many results as list elements, or the program is refused") {
    Program program = parse_program(head + "  %1, %2, %3 = CatBackward0 %0" + fields);
    program.code[1].results.pop_back();
    CHECK_THROWS_WITH_AS(Machine(bind(assemble(program))),
                         "instruction 1 (%1, %2 = CatBackward0 %0  dim=0 tensors_args_scalartypes=[f32, f32, f32] "
                         "tensors_args_sizes_symint=[[2], [1], [3]]): CatBackward0 has 3 list elements, so 3 "
                         "results, got 2",
                         Error);
  }
}

TEST_CASE("interpreter: a program whose instructions do not fit their opcode is refused when the machine is made") {
  Program program = parse_program(kMulWithoutDefault);
  program.code[1].results.pop_back();  // MulBackward0 has two inputs, so two results
  CHECK_THROWS_WITH_AS(Machine(bind(assemble(program))),
                       "instruction 1 (%1 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
                       "self_scalar_type=f32): MulBackward0 has 2 inputs, so 2 results, got 1",
                       Error);
}

TEST_CASE("interpreter: x.squeeze(0) of a 0-d x runs as torch runs it (x.grad = 1)") {
  // What torch 2.13 records for x.squeeze(0) on a 0-d x; refgrad used to die on it with SIGSEGV.
  const char* text = R"(
program sq
  grad %g : f64[] = 1.0
  leaf @x : f64[]
code
  %0 = validate %g : f64[]
  %1 = SqueezeBackward1 %0  dim=0 self_sym_sizes=[]
  %2 = validate %1 : f64[]
  accumulate_grad @x %2
)";
  CHECK(check_program(parse_program(text)).empty());
  Machine machine(load(text));
  machine.run();
  REQUIRE(machine.leaf_grad("x").has_value());
  CHECK(machine.leaf_grad("x")->sizes() == Shape{});
  CHECK(machine.leaf_grad("x")->item<double>() == 1.0);
}

TEST_CASE("interpreter: a tensor over the memory limit stops the run, naming the instruction and the shape") {
  const char* text = R"(
program big
  grad %g : f32[] = 1.0
  leaf @x : f32[1000,1000]
code
  %0 = validate %g : f32[]
  %1 = SumBackward0 %0  self_sym_sizes=[1000,1000]
  %2 = validate %1 : f32[1000,1000]
  accumulate_grad @x %2
)";
  Machine limited(load(text), {}, MachineOptions{.memory_limit = std::size_t{1} << 20});
  CHECK_THROWS_WITH_AS(limited.run(),
                       "instruction 1 (%1 = SumBackward0 %0  self_sym_sizes=[1000,1000]): a float32 tensor of shape "
                       "[1000,1000] would need 4000000 bytes (3.8 MiB), more than the memory limit of 1048576 bytes "
                       "(1.0 MiB); operands: f32[]",
                       Error);
  CHECK(limited.pc() == 1);
  CHECK(memory_limit() == default_memory_limit());  // the machine's limit held only while it ran
  Machine unlimited(load(text), {}, MachineOptions{.memory_limit = std::size_t{8} << 20});
  unlimited.run();
  CHECK(sum(*unlimited.leaf_grad("x")).item<double>() == 1e6);
}

TEST_CASE("interpreter: reading unknown names raises") {
  Machine machine(load_example("mul"));
  CHECK_THROWS_WITH_AS(machine.leaf_grad("z"), "the program declares no leaf @z", Error);
  CHECK_THROWS_WITH_AS(machine.saved_value("z"), "the program declares no saved $z", Error);
  CHECK_THROWS_WITH_AS(machine.output("z"), "the program declares no output ^z", Error);
  CHECK(equals_f32(machine.saved_value("y"), tensor({4.0, 5.0, 6.0})));
  CHECK(machine.instruction_text(3) == "accumulate_grad @x %3");
  CHECK_THROWS_WITH_AS(machine.instruction_text(5), "instruction_text: pc 5 is past the end (5 instructions)", Error);
}
