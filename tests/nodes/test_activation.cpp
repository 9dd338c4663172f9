// Activation nodes: (a) finite differences away from the kinks, (b) need mask
// and undefined grad, (c) errors, (d) against torch, fed a real grad_fn's
// _saved_* values, at the kinks where finite differences cannot decide.
#include <cmath>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

// A Scalar saved by torch and returned as a 0-d tensor: int64 for a Python
// int (F.relu6 saves the ints 0 and 6), float64 for a Python float.
Scalar scalar_of(const Tensor& t) {
  if (t.dtype() == DType::Int64) return Scalar(t.item<std::int64_t>());
  return Scalar(t.item<double>());
}

// (b) for a one-input node: need false and an undefined grad give no grad.
void check_need_and_undefined(const std::string& node, const Saved& saved, const Tensor& g) {
  CHECK_FALSE(call_node(node, {g}, {false}, saved)[0].has_value());
  CHECK_FALSE(call_node(node, {std::nullopt}, {true}, saved)[0].has_value());
  CHECK(call_node(node, {g}, {true}, saved)[0].has_value());
}

// (c) for an elementwise node: a grad whose shape is not the saved tensor's.
void check_shape_mismatch(const std::string& node, const Saved& saved, const std::string& field) {
  const Tensor& kept = std::get<Tensor>(saved.at(field));
  const Tensor wrong = random64({kept.numel() + 1}, 99);
  CHECK_THROWS_WITH_AS(call_node(node, {wrong}, {true}, saved),
                       (node + ": grad has shape " + str(wrong.sizes()) + " but " + field + " has shape " +
                        str(kept.sizes()))
                           .c_str(),
                       Error);
}

// An elementwise node against torch: `forward` is Python code making `out`
// from `x`; `fields` reads the saved values (a tuple of expressions of fn);
// returns (*fields, grad of x).
std::vector<Tensor> torch_elementwise(const std::string& node, const std::string& forward, const std::string& fields,
                                      const Tensor& x, const Tensor& g) {
  return torch_exec("x = a.requires_grad_()\nout = " + forward + "\nfn = out.grad_fn\nassert fn.name() == '" + node +
                        "', fn.name()\nsaved = " + fields + "\nresult = (*saved, *torch.autograd.grad(out, (x,), b))",
                    {x, g});
}

// Inputs away from every kink of the activations here (0, ±3, the bounds).
Tensor smooth_input(std::uint64_t seed) { return add(mul(random64({2, 3}, seed), 2.0), Scalar(0.1)); }

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("ThresholdBackward0") {
  const Tensor x = tensor({-1.5, 0.2, 0.7, 2.0}, DType::Float64), g = random64({4}, 20);
  const Saved saved = {{"self", x}, {"threshold", Scalar(0.5)}};
  SUBCASE("finite differences") {
    const Grads out = call_node("ThresholdBackward0", {g}, {true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return where(le(in[0], Scalar(0.5)), Scalar(-2.0), in[0]); };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("ThresholdBackward0", saved, g); }
  SUBCASE("against torch, at the threshold itself") {
    const Tensor at = tensor({0.4, 0.5, 0.6, -3.0, 0.5000000001}, DType::Float64), g5 = random64({5}, 21);
    const auto r = torch_elementwise("ThresholdBackward0", "F.threshold(x, 0.5, -2.0)",
                                     "(fn._saved_self, fn._saved_threshold)", at, g5);
    CHECK(r[1].item<double>() == 0.5);
    const Grads out =
        call_node("ThresholdBackward0", {g5}, {true}, Saved{{"self", r[0]}, {"threshold", scalar_of(r[1])}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK(out[0]->to_vector<double>()[1] == 0.0);
  }
  SUBCASE("errors") { check_shape_mismatch("ThresholdBackward0", saved, "self"); }
}

TEST_CASE("GeluBackward0") {
  const Tensor x = smooth_input(22), g = random64({2, 3}, 23);
  auto gelu_none = [](const std::vector<Tensor>& in) {
    return mul(mul(in[0], 0.5), add(erf(mul(in[0], M_SQRT1_2)), Scalar(1)));
  };
  auto gelu_tanh = [](const std::vector<Tensor>& in) {
    const Tensor inner = mul(add(in[0], mul(pow(in[0], Scalar(3)), 0.044715)), std::sqrt(2.0 / M_PI));
    return mul(mul(in[0], 0.5), add(tanh(inner), Scalar(1)));
  };
  SUBCASE("finite differences, both approximations") {
    const Grads none =
        call_node("GeluBackward0", {g}, {true}, Saved{{"approximate", std::string("none")}, {"self", x}});
    check_against_finite_differences(none, 0, gelu_none, {x}, g);
    const Grads tanh_ =
        call_node("GeluBackward0", {g}, {true}, Saved{{"approximate", std::string("tanh")}, {"self", x}});
    check_against_finite_differences(tanh_, 0, gelu_tanh, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    check_need_and_undefined("GeluBackward0", Saved{{"approximate", std::string("none")}, {"self", x}}, g);
  }
  SUBCASE("against torch, both approximations") {
    const Tensor wide = tensor({-8.0, -3.0, -0.5, 0.0, 0.5, 3.0, 8.0}, DType::Float64), g7 = random64({7}, 24);
    for (const std::string approximate : {"none", "tanh"}) {
      CAPTURE(approximate);
      const auto r = torch_elementwise("GeluBackward0", "F.gelu(x, approximate='" + approximate + "')",
                                       "(fn._saved_self, fn._saved_approximate == '" + approximate + "')", wide, g7);
      CHECK(r[1].item<bool>());
      const Grads out =
          call_node("GeluBackward0", {g7}, {true}, Saved{{"approximate", approximate}, {"self", r[0]}});
      CHECK_TENSOR(*out[0], r[2]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(
        call_node("GeluBackward0", {g}, {true}, Saved{{"approximate", std::string("erf")}, {"self", x}}),
        "GeluBackward0: approximate argument must be either none or tanh, got 'erf'", Error);
    check_shape_mismatch("GeluBackward0", Saved{{"approximate", std::string("none")}, {"self", x}}, "self");
  }
}

TEST_CASE("SiluBackward0") {
  const Tensor x = smooth_input(25), g = random64({2, 3}, 26);
  const Saved saved = {{"self", x}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) { return mul(in[0], sigmoid(in[0])); };
    check_against_finite_differences(call_node("SiluBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("SiluBackward0", saved, g); }
  SUBCASE("against torch") {
    const Tensor wide = tensor({-40.0, -2.0, 0.0, 1.5, 40.0}, DType::Float64), g5 = random64({5}, 27);
    const auto r = torch_elementwise("SiluBackward0", "F.silu(x)", "(fn._saved_self,)", wide, g5);
    CHECK_TENSOR(*call_node("SiluBackward0", {g5}, {true}, Saved{{"self", r[0]}})[0], r[1]);
  }
  SUBCASE("errors") { check_shape_mismatch("SiluBackward0", saved, "self"); }
}

TEST_CASE("MishBackward0") {
  const Tensor x = smooth_input(28), g = random64({2, 3}, 29);
  const Saved saved = {{"self", x}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) { return mul(in[0], tanh(log1p(exp(in[0])))); };
    check_against_finite_differences(call_node("MishBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("MishBackward0", saved, g); }
  SUBCASE("against torch, large inputs included") {
    const Tensor wide = tensor({-30.0, -1.0, 0.0, 2.5, 30.0}, DType::Float64), g5 = random64({5}, 30);
    const auto r = torch_elementwise("MishBackward0", "F.mish(x)", "(fn._saved_self,)", wide, g5);
    CHECK_TENSOR(*call_node("MishBackward0", {g5}, {true}, Saved{{"self", r[0]}})[0], r[1]);
  }
  SUBCASE("errors") { check_shape_mismatch("MishBackward0", saved, "self"); }
}

void check_shrink_node(const std::string& node, const std::string& torch_op,
                       Tensor (*forward_l0)(const Tensor&)) {
  const Tensor x = tensor({-1.3, -0.2, 0.3, 0.9, 2.0, -0.7}, DType::Float64), g = random64({6}, 36);
  const Saved saved = {{"lambd", Scalar(0.5)}, {"self", x}};
  SUBCASE("finite differences, away from -0.5 and 0.5") {
    check_against_finite_differences(call_node(node, {g}, {true}, saved), 0,
                                     [forward_l0](const std::vector<Tensor>& in) { return forward_l0(in[0]); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined(node, saved, g); }
  SUBCASE("against torch, at the band's edges, inside it, a NaN (its grad is 0), an int lambd") {
    const Tensor at = tensor({-0.5, 0.5, -0.0, 0.49, 0.51, NAN, 1.0, -1.0}, DType::Float64), g8 = random64({8}, 37);
    for (const std::string lambd : {"0.5", "1"}) {
      const auto r = torch_elementwise(node, "F." + torch_op + "(x, " + lambd + ")", "(fn._saved_lambd, fn._saved_self)",
                                       at, g8);
      CHECK_TENSOR(*call_node(node, {g8}, {true}, Saved{{"lambd", scalar_of(r[0])}, {"self", r[1]}})[0], r[2]);
    }
  }
  SUBCASE("errors") { check_shape_mismatch(node, saved, "self"); }
}

Tensor l0_hardshrink(const Tensor& x) { return where(le(abs(x), Scalar(0.5)), Scalar(0), x); }
Tensor l0_softshrink(const Tensor& x) { return where(le(abs(x), Scalar(0.5)), Scalar(0), sub(x, mul(sign(x), 0.5))); }

TEST_CASE("HardshrinkBackward0") { check_shrink_node("HardshrinkBackward0", "hardshrink", l0_hardshrink); }
TEST_CASE("SoftshrinkBackward0") { check_shrink_node("SoftshrinkBackward0", "softshrink", l0_softshrink); }

TEST_CASE("LogSigmoidBackward0") {
  const Tensor x = smooth_input(38), g = random64({2, 3}, 39);
  const Saved saved = {{"self", x}, {"buffer", zeros({0}, DType::Float64)}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) { return log(sigmoid(in[0])); };
    check_against_finite_differences(call_node("LogSigmoidBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("LogSigmoidBackward0", saved, g); }
  SUBCASE("against torch: 0, both tails, infinities") {
    const Tensor at = tensor({0.0, -0.0, 40.0, -40.0, 800.0, -800.0, INFINITY, -INFINITY}, DType::Float64);
    const Tensor g8 = random64({8}, 40);
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      const auto r = torch_elementwise("LogSigmoidBackward0", "F.logsigmoid(x)", "(fn._saved_self, fn._saved_buffer)",
                                       at.to(dtype), g8.to(dtype));
      CHECK_TENSOR(*call_node("LogSigmoidBackward0", {g8.to(dtype)}, {true}, Saved{{"self", r[0]}, {"buffer", r[1]}})[0],
                   r[2], dtype == DType::Float64 ? 1e-12 : 1e-6);
    }
  }
}

TEST_CASE("GluBackward0") {
  const Tensor x = random64({2, 4, 3}, 41), g = random64({2, 2, 3}, 42);
  const Saved saved = {{"dim", std::int64_t{1}}, {"self", x}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) {
      return mul(narrow(in[0], 1, 0, 2), sigmoid(narrow(in[0], 1, 2, 2)));
    };
    check_against_finite_differences(call_node("GluBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("GluBackward0", saved, g); }
  SUBCASE("against torch: the last dim (the default, -1) and a middle one") {
    for (const std::string forward : {"F.glu(x)", "F.glu(x, 1)"}) {
      CAPTURE(forward);
      const Tensor input = random64({2, 4, 6}, 43);
      const auto r = torch_exec("x = a.requires_grad_()\nout = " + forward +
                                    "\nfn = out.grad_fn\nassert fn.name() == 'GluBackward0'\n"
                                    "g = torch.randn(out.shape, dtype=out.dtype)\n"
                                    "d = fn._saved_dim\nd = d - 2**64 if d >= 2**63 else d\n"
                                    "result = (torch.tensor(d), fn._saved_self, g, *torch.autograd.grad(out, (x,), g))",
                                {input});
      const Grads out = call_node("GluBackward0", {r[2]}, {true},
                                  Saved{{"dim", r[0].item<std::int64_t>()}, {"self", r[1]}});
      CHECK_TENSOR(*out[0], r[3]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("GluBackward0", {g}, {true}, Saved{{"dim", std::int64_t{2}}, {"self", x}}),
                         doctest::Contains("is not even"), Error);
    CHECK_THROWS_WITH_AS(call_node("GluBackward0", {x}, {true}, saved), doctest::Contains("grad has shape"), Error);
  }
}

TEST_CASE("HardtanhBackward0") {
  const Tensor x = tensor({-0.9, -0.2, 0.3, 1.1}, DType::Float64), g = random64({4}, 31);
  const Saved saved = {{"max_val", Scalar(0.7)}, {"min_val", Scalar(-0.5)}, {"self", x}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) { return clamp(in[0], Scalar(-0.5), Scalar(0.7)); };
    check_against_finite_differences(call_node("HardtanhBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("HardtanhBackward0", saved, g); }
  SUBCASE("against torch, at both bounds; relu6's int and float bounds") {
    const Tensor at = tensor({-0.6, -0.5, 0.0, 0.7, 0.8, 6.0, 7.0}, DType::Float64), g7 = random64({7}, 32);
    const std::string fields = "(fn._saved_max_val, fn._saved_min_val, fn._saved_self)";
    for (const std::string forward : {"F.hardtanh(x, -0.5, 0.7)", "F.relu6(x)", "torch.nn.ReLU6()(x)"}) {
      CAPTURE(forward);
      const auto r = torch_elementwise("HardtanhBackward0", forward, fields, at, g7);
      const Saved from_torch = {{"max_val", scalar_of(r[0])}, {"min_val", scalar_of(r[1])}, {"self", r[2]}};
      CHECK_TENSOR(*call_node("HardtanhBackward0", {g7}, {true}, from_torch)[0], r[3]);
    }
    // F.relu6 saves the ints 0 and 6, nn.ReLU6 the floats 0.0 and 6.0.
    CHECK(torch_elementwise("HardtanhBackward0", "F.relu6(x)", fields, at, g7)[0].dtype() == DType::Int64);
    CHECK(torch_elementwise("HardtanhBackward0", "torch.nn.ReLU6()(x)", fields, at, g7)[0].dtype() ==
          DType::Float64);
  }
  SUBCASE("errors") { check_shape_mismatch("HardtanhBackward0", saved, "self"); }
}

TEST_CASE("LeakyReluBackward0") {
  const Tensor x = smooth_input(33), g = random64({2, 3}, 34);
  const Saved saved = {{"negative_slope", Scalar(0.2)}, {"self", x}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) { return where(gt(in[0], Scalar(0)), in[0], mul(in[0], 0.2)); };
    check_against_finite_differences(call_node("LeakyReluBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("LeakyReluBackward0", saved, g); }
  SUBCASE("against torch, at 0 and -0.0 (the slope applies)") {
    const Tensor at = tensor({-1.0, -0.0, 0.0, 1e-300, 2.0}, DType::Float64), g5 = random64({5}, 35);
    const auto r = torch_elementwise("LeakyReluBackward0", "F.leaky_relu(x, 0.2)",
                                     "(fn._saved_negative_slope, fn._saved_self)", at, g5);
    const Grads out = call_node("LeakyReluBackward0", {g5}, {true},
                                Saved{{"negative_slope", scalar_of(r[0])}, {"self", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
  }
  SUBCASE("errors") { check_shape_mismatch("LeakyReluBackward0", saved, "self"); }
}

TEST_CASE("SoftplusBackward0") {
  const Tensor x = tensor({-3.0, -0.5, 0.4, 2.0, 7.0}, DType::Float64), g = random64({5}, 36);
  const Saved saved = {{"beta", Scalar(2)}, {"self", x}, {"threshold", Scalar(10)}};
  SUBCASE("finite differences, on both sides of the threshold") {
    auto forward = [](const std::vector<Tensor>& in) {
      const Tensor scaled = mul(in[0], Scalar(2));
      return where(gt(scaled, Scalar(10)), in[0], div(log1p(exp(scaled)), Scalar(2)));
    };
    check_against_finite_differences(call_node("SoftplusBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("SoftplusBackward0", saved, g); }
  SUBCASE("against torch, at beta * x == threshold") {
    const Tensor at = tensor({-4.0, 0.0, 4.9, 5.0, 5.1, 30.0}, DType::Float64), g6 = random64({6}, 37);
    const auto r = torch_elementwise("SoftplusBackward0", "F.softplus(x, 2, 10)",
                                     "(fn._saved_beta, fn._saved_self, fn._saved_threshold)", at, g6);
    const Saved from_torch = {{"beta", scalar_of(r[0])}, {"self", r[1]}, {"threshold", scalar_of(r[2])}};
    CHECK_TENSOR(*call_node("SoftplusBackward0", {g6}, {true}, from_torch)[0], r[3]);
  }
  SUBCASE("errors") { check_shape_mismatch("SoftplusBackward0", saved, "self"); }
}

TEST_CASE("EluBackward0") {
  const Tensor x = smooth_input(38), g = random64({2, 3}, 39);
  const Saved saved = {{"alpha", Scalar(1.5)}, {"input_scale", Scalar(0.5)}, {"scale", Scalar(2.0)}, {"self", x}};
  SUBCASE("finite differences, with every coefficient") {
    auto forward = [](const std::vector<Tensor>& in) {
      const Tensor negative = mul(expm1(mul(in[0], 0.5)), 1.5 * 2.0);
      return where(gt(in[0], Scalar(0)), mul(in[0], 2.0), negative);
    };
    check_against_finite_differences(call_node("EluBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("EluBackward0", saved, g); }
  SUBCASE("against torch, at 0 (the negative branch applies); elu and selu") {
    const Tensor at = tensor({-2.0, -0.0, 0.0, 1.0}, DType::Float64), g4 = random64({4}, 40);
    for (const std::string forward : {"F.elu(x, 1.5)", "F.selu(x)"}) {
      CAPTURE(forward);
      const auto r = torch_elementwise("EluBackward0", forward,
                                       "(fn._saved_alpha, fn._saved_input_scale, fn._saved_scale, fn._saved_self)",
                                       at, g4);
      const Saved from_torch = {{"alpha", scalar_of(r[0])}, {"input_scale", scalar_of(r[1])},
                                {"scale", scalar_of(r[2])}, {"self", r[3]}};
      CHECK_TENSOR(*call_node("EluBackward0", {g4}, {true}, from_torch)[0], r[4]);
    }
  }
  SUBCASE("errors") { check_shape_mismatch("EluBackward0", saved, "self"); }
}

TEST_CASE("CeluBackward0") {
  const Tensor x = smooth_input(41), g = random64({2, 3}, 42);
  const Saved saved = {{"alpha", Scalar(0.7)}, {"self", x}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) {
      return where(gt(in[0], Scalar(0)), in[0], mul(expm1(div(in[0], Scalar(0.7))), 0.7));
    };
    check_against_finite_differences(call_node("CeluBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("CeluBackward0", saved, g); }
  SUBCASE("against torch, at 0") {
    const Tensor at = tensor({-2.0, 0.0, 1.0}, DType::Float64), g3 = random64({3}, 43);
    const auto r = torch_elementwise("CeluBackward0", "F.celu(x, 0.7)", "(fn._saved_alpha, fn._saved_self)", at, g3);
    const Grads out = call_node("CeluBackward0", {g3}, {true}, Saved{{"alpha", scalar_of(r[0])}, {"self", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
  }
  SUBCASE("errors") { check_shape_mismatch("CeluBackward0", saved, "self"); }
}

TEST_CASE("ThresholdBackward1") {
  const Tensor x = tensor({-1.5, 0.2, 0.7, 2.0}, DType::Float64), g = random64({4}, 62);
  const Saved saved = {{"self", x}, {"threshold", Scalar(0.5)}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) { return where(le(in[0], Scalar(0.5)), Scalar(2.0), in[0]); };
    check_against_finite_differences(call_node("ThresholdBackward1", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("ThresholdBackward1", saved, g); }
  SUBCASE("against torch: in place, self is the input before it was overwritten") {
    const Tensor at = tensor({-1.0, 0.1, 0.5, 0.7}, DType::Float64), g4 = random64({4}, 63);
    const auto r = torch_elementwise("ThresholdBackward1", "F.threshold(x * 1, 0.5, 2.0, inplace=True)",
                                     "(fn._saved_self, fn._saved_threshold)", at, g4);
    CHECK_TENSOR(r[0], at);
    const Grads out =
        call_node("ThresholdBackward1", {g4}, {true}, Saved{{"self", r[0]}, {"threshold", scalar_of(r[1])}});
    CHECK_TENSOR(*out[0], r[2]);
  }
  SUBCASE("errors") { check_shape_mismatch("ThresholdBackward1", saved, "self"); }
}

TEST_CASE("LeakyReluBackward1") {
  const Tensor x = smooth_input(64), g = random64({2, 3}, 65);
  auto forward = [](const std::vector<Tensor>& in) { return where(gt(in[0], Scalar(0)), in[0], mul(in[0], 0.2)); };
  const Saved saved = {{"negative_slope", Scalar(0.2)}, {"result", forward({x})}};
  SUBCASE("finite differences, from the result") {
    check_against_finite_differences(call_node("LeakyReluBackward1", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("LeakyReluBackward1", saved, g); }
  SUBCASE("against torch, at 0") {
    const Tensor at = tensor({-1.0, -0.0, 0.0, 2.0}, DType::Float64), g4 = random64({4}, 66);
    const auto r = torch_elementwise("LeakyReluBackward1", "F.leaky_relu(x * 1, 0.2, inplace=True)",
                                     "(fn._saved_negative_slope, fn._saved_result)", at, g4);
    const Grads out = call_node("LeakyReluBackward1", {g4}, {true},
                                Saved{{"negative_slope", scalar_of(r[0])}, {"result", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
  }
  SUBCASE("errors: a negative slope, which torch refuses too") {
    CHECK_THROWS_WITH_AS(
        call_node("LeakyReluBackward1", {g}, {true}, Saved{{"negative_slope", Scalar(-0.5)}, {"result", x}}),
        "LeakyReluBackward1: in-place leaky_relu backward with a negative slope (-0.5) is not supported, as in PyTorch",
        Error);
    CHECK(torch_error("F.leaky_relu(a.requires_grad_() * 1, -0.5, inplace=True).sum().backward()", {x})
              .find("In-place leakyReLu backward calculation is triggered with a negative slope") != std::string::npos);
    check_shape_mismatch("LeakyReluBackward1", saved, "result");
  }
}

TEST_CASE("EluBackward1") {
  const Tensor x = smooth_input(67), g = random64({2, 3}, 68);
  auto forward = [](const std::vector<Tensor>& in) {
    return where(gt(in[0], Scalar(0)), mul(in[0], 2.0), mul(expm1(mul(in[0], 0.5)), 1.5 * 2.0));
  };
  const Saved saved = {{"alpha", Scalar(1.5)}, {"input_scale", Scalar(0.5)}, {"scale", Scalar(2.0)},
                       {"result", forward({x})}};
  SUBCASE("finite differences, from the result") {
    check_against_finite_differences(call_node("EluBackward1", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("EluBackward1", saved, g); }
  SUBCASE("against torch, at 0; elu_ and selu_") {
    const Tensor at = tensor({-2.0, 0.0, 1.0}, DType::Float64), g3 = random64({3}, 69);
    for (const std::string forward_code : {"F.elu(x * 1, 1.5, inplace=True)", "F.selu(x * 1, inplace=True)"}) {
      CAPTURE(forward_code);
      const auto r = torch_elementwise("EluBackward1", forward_code,
                                       "(fn._saved_alpha, fn._saved_input_scale, fn._saved_scale, fn._saved_result)",
                                       at, g3);
      const Saved from_torch = {{"alpha", scalar_of(r[0])}, {"input_scale", scalar_of(r[1])},
                                {"scale", scalar_of(r[2])}, {"result", r[3]}};
      CHECK_TENSOR(*call_node("EluBackward1", {g3}, {true}, from_torch)[0], r[4]);
    }
  }
  SUBCASE("errors: a negative alpha, which torch refuses too") {
    Saved negative = saved;
    negative["alpha"] = Scalar(-0.5);
    CHECK_THROWS_WITH_AS(call_node("EluBackward1", {g}, {true}, negative),
                         "EluBackward1: in-place elu backward with a negative alpha (-0.5) is not supported, "
                         "as in PyTorch",
                         Error);
    check_shape_mismatch("EluBackward1", saved, "result");
  }
}

TEST_CASE("CeluBackward1") {
  const Tensor x = smooth_input(70), g = random64({2, 3}, 71);
  auto forward = [](const std::vector<Tensor>& in) {
    return where(gt(in[0], Scalar(0)), in[0], mul(expm1(div(in[0], Scalar(0.7))), 0.7));
  };
  const Saved saved = {{"alpha", Scalar(0.7)}, {"result", forward({x})}};
  SUBCASE("finite differences, from the result") {
    check_against_finite_differences(call_node("CeluBackward1", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("CeluBackward1", saved, g); }
  SUBCASE("against torch, at 0") {
    const Tensor at = tensor({-2.0, 0.0, 1.0}, DType::Float64), g3 = random64({3}, 72);
    const auto r = torch_elementwise("CeluBackward1", "F.celu(x * 1, 0.7, inplace=True)",
                                     "(fn._saved_alpha, fn._saved_result)", at, g3);
    const Grads out = call_node("CeluBackward1", {g3}, {true}, Saved{{"alpha", scalar_of(r[0])}, {"result", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("CeluBackward1", {g}, {true}, Saved{{"alpha", Scalar(-0.5)}, {"result", x}}),
                         "CeluBackward1: in-place elu backward with a negative alpha (-0.5) is not supported, "
                         "as in PyTorch",
                         Error);
    check_shape_mismatch("CeluBackward1", saved, "result");
  }
}

TEST_CASE("HardsigmoidBackward0") {
  const Tensor x = smooth_input(44), g = random64({2, 3}, 45);
  const Saved saved = {{"self", x}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) {
      return div(clamp(add(in[0], Scalar(3)), Scalar(0), Scalar(6)), Scalar(6));
    };
    // ATen's float constant 1.0f / 6.0f is off from 1/6 by 3e-8 relative, within gradcheck's tolerance.
    check_against_finite_differences(call_node("HardsigmoidBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("HardsigmoidBackward0", saved, g); }
  SUBCASE("against torch, bit for bit, at -3 and 3") {
    const Tensor at = tensor({-4.0, -3.0, -2.9, 0.0, 2.9, 3.0, 4.0}, DType::Float64), g7 = random64({7}, 46);
    const auto r = torch_elementwise("HardsigmoidBackward0", "F.hardsigmoid(x)", "(fn._saved_self,)", at, g7);
    CHECK_TENSOR(*call_node("HardsigmoidBackward0", {g7}, {true}, Saved{{"self", r[0]}})[0], r[1], 0.0, 0.0);
  }
  SUBCASE("errors") { check_shape_mismatch("HardsigmoidBackward0", saved, "self"); }
}

TEST_CASE("HardswishBackward0") {
  const Tensor x = smooth_input(47), g = random64({2, 3}, 48);
  const Saved saved = {{"self", x}};
  SUBCASE("finite differences") {
    auto forward = [](const std::vector<Tensor>& in) {
      return div(mul(in[0], clamp(add(in[0], Scalar(3)), Scalar(0), Scalar(6))), Scalar(6));
    };
    check_against_finite_differences(call_node("HardswishBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("HardswishBackward0", saved, g); }
  SUBCASE("against torch, at -3 (grad 0) and 3 (grad passes)") {
    const Tensor at = tensor({-4.0, -3.0, -2.9, 0.0, 2.9, 3.0, 4.0}, DType::Float64), g7 = random64({7}, 49);
    const auto r = torch_elementwise("HardswishBackward0", "F.hardswish(x)", "(fn._saved_self,)", at, g7);
    const Tensor out = *call_node("HardswishBackward0", {g7}, {true}, Saved{{"self", r[0]}})[0];
    CHECK_TENSOR(out, r[1]);
    CHECK(out.to_vector<double>()[1] == 0.0);
    CHECK(out.to_vector<double>()[5] == g7.to_vector<double>()[5]);
  }
  SUBCASE("errors") { check_shape_mismatch("HardswishBackward0", saved, "self"); }
}

// torch exposes an int64_t field such as _saved_dim as an unsigned number, so
// dim=-1 reads 2**64 - 1; the tests turn it back into the int64 PyTorch stores.
constexpr const char* kSignedDim = "(fn._saved_dim - 2**64 if fn._saved_dim >= 2**63 else fn._saved_dim)";

TEST_CASE("SoftmaxBackward0") {
  const Tensor x = random64({2, 3}, 50), g = random64({2, 3}, 51);
  SUBCASE("finite differences, each dim") {
    for (std::int64_t dim : {0, 1, -1}) {
      CAPTURE(dim);
      const Tensor result = softmax(x, dim);
      const Grads out = call_node("SoftmaxBackward0", {g}, {true},
                                  Saved{{"dim", dim}, {"self_scalar_type", DType::Float64}, {"result", result}});
      check_against_finite_differences(out, 0, [dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); },
                                       {x}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    check_need_and_undefined("SoftmaxBackward0",
                             Saved{{"dim", std::int64_t{1}}, {"self_scalar_type", DType::Float64}, {"result", x}}, g);
  }
  SUBCASE("against torch, dim=-1 as saved, and a 0-d input") {
    for (const auto& [input, grad, forward] :
         {std::tuple{x, g, std::string("F.softmax(x, -1)")}, std::tuple{x, g, std::string("F.softmax(x, 0)")},
          std::tuple{random64({}, 52), random64({}, 53), std::string("F.softmax(x, 0)")}}) {
      CAPTURE(forward);
      const auto r = torch_elementwise("SoftmaxBackward0", forward,
                                       std::string("(") + kSignedDim + ", fn._saved_result)", input, grad);
      const Grads out = call_node("SoftmaxBackward0", {grad}, {true},
                                  Saved{{"dim", r[0].item<std::int64_t>()}, {"self_scalar_type", DType::Float64},
                                        {"result", r[1]}});
      CHECK_TENSOR(*out[0], r[2]);
    }
  }
  SUBCASE("float32 in, float32 out") {
    const Tensor r32 = softmax(x.to(DType::Float32), 1);
    const Grads out = call_node("SoftmaxBackward0", {g.to(DType::Float32)}, {true},
                                Saved{{"dim", std::int64_t{1}}, {"self_scalar_type", DType::Float32}, {"result", r32}});
    CHECK(out[0]->dtype() == DType::Float32);
  }
  SUBCASE("errors") {
    const Saved saved = {{"dim", std::int64_t{1}}, {"self_scalar_type", DType::Float64}, {"result", x}};
    check_shape_mismatch("SoftmaxBackward0", saved, "result");
    CHECK_THROWS_WITH_AS(call_node("SoftmaxBackward0", {g}, {true},
                                   Saved{{"dim", std::int64_t{2}}, {"self_scalar_type", DType::Float64}, {"result", x}}),
                         "SoftmaxBackward0: dim 2 is out of range for result of shape [2,3]", Error);
  }
}

TEST_CASE("SafeSoftmaxBackward0") {
  const Tensor x = random64({2, 3}, 54), g = random64({2, 3}, 55);
  SUBCASE("finite differences") {
    const Grads out = call_node("SafeSoftmaxBackward0", {g}, {true},
                                Saved{{"dim", std::int64_t{1}}, {"self_scalar_type", DType::Float64},
                                      {"result", softmax(x, 1)}});
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return softmax(in[0], 1); }, {x},
                                     g);
  }
  SUBCASE("need mask and undefined grad") {
    check_need_and_undefined("SafeSoftmaxBackward0",
                             Saved{{"dim", std::int64_t{1}}, {"self_scalar_type", DType::Float64}, {"result", x}}, g);
  }
  SUBCASE("against torch, with a row that is all -inf (result 0, grad 0)") {
    const Tensor masked = tensor({{0.5, -1.0, 2.0}, {-INFINITY, -INFINITY, -INFINITY}}, DType::Float64);
    const auto r = torch_elementwise("SafeSoftmaxBackward0", "torch._safe_softmax(x, -1)",
                                     std::string("(") + kSignedDim + ", fn._saved_result)", masked, g);
    const Grads out = call_node("SafeSoftmaxBackward0", {g}, {true},
                                Saved{{"dim", r[0].item<std::int64_t>()}, {"self_scalar_type", DType::Float64},
                                      {"result", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
  }
  SUBCASE("against torch, the node scaled_dot_product_attention's math path makes on CPU (dropout_p > 0)") {
    // The incoming grad and torch's output are caught with a hook on the node.
    const auto r = torch_exec(R"(
q = a.requires_grad_()
out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.3)
todo, node = [out.grad_fn], None
while todo:
    f = todo.pop()
    if f is None: continue
    if f.name() == "SafeSoftmaxBackward0": node = f; break
    todo += [n for n, _ in f.next_functions]
assert node is not None
caught = {}
node.register_hook(lambda grad_inputs, grad_outputs: caught.update(gi=grad_inputs[0], go=grad_outputs[0]))
saved = (node._saved_dim - 2**64 if node._saved_dim >= 2**63 else node._saved_dim, node._saved_result)
torch.autograd.grad(out, (q,), b)
result = (*saved, caught["go"], caught["gi"])
)", {random64({1, 2, 3, 4}, 56), random64({1, 2, 3, 4}, 57)});
    const Grads out = call_node("SafeSoftmaxBackward0", {r[2]}, {true},
                                Saved{{"dim", r[0].item<std::int64_t>()}, {"self_scalar_type", DType::Float64},
                                      {"result", r[1]}});
    CHECK_TENSOR(*out[0], r[3]);
  }
  SUBCASE("errors") {
    const Saved saved = {{"dim", std::int64_t{1}}, {"self_scalar_type", DType::Float64}, {"result", x}};
    check_shape_mismatch("SafeSoftmaxBackward0", saved, "result");
  }
}

TEST_CASE("LogSoftmaxBackward0") {
  const Tensor x = random64({3, 2}, 58), g = random64({3, 2}, 59);
  SUBCASE("finite differences, each dim") {
    for (std::int64_t dim : {0, 1}) {
      CAPTURE(dim);
      const Grads out = call_node("LogSoftmaxBackward0", {g}, {true},
                                  Saved{{"dim", dim}, {"self_scalar_type", DType::Float64},
                                        {"result", log_softmax(x, dim)}});
      check_against_finite_differences(
          out, 0, [dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); }, {x}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    check_need_and_undefined("LogSoftmaxBackward0",
                             Saved{{"dim", std::int64_t{0}}, {"self_scalar_type", DType::Float64}, {"result", x}}, g);
  }
  SUBCASE("against torch, dim=-1 as saved") {
    const auto r = torch_elementwise("LogSoftmaxBackward0", "F.log_softmax(x, -1)",
                                     std::string("(") + kSignedDim + ", fn._saved_result)", x, g);
    CHECK(r[0].item<std::int64_t>() == -1);
    const Grads out = call_node("LogSoftmaxBackward0", {g}, {true},
                                Saved{{"dim", r[0].item<std::int64_t>()}, {"self_scalar_type", DType::Float64},
                                      {"result", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
  }
  SUBCASE("errors") {
    const Saved saved = {{"dim", std::int64_t{0}}, {"self_scalar_type", DType::Float64}, {"result", x}};
    check_shape_mismatch("LogSoftmaxBackward0", saved, "result");
  }
}

TEST_CASE("NativeDropoutBackward0") {
  const Tensor x = random64({2, 3}, 60), g = random64({2, 3}, 61);
  const Tensor mask = tensor({{1.0, 0.0, 1.0}, {1.0, 1.0, 0.0}}, DType::Float64).to(DType::Bool);
  const Saved saved = {{"p", 0.25}, {"train", true}, {"result1", mask}};
  SUBCASE("finite differences, for a fixed mask") {
    auto forward = [&mask](const std::vector<Tensor>& in) { return mul(mul(in[0], mask), 1.0 / 0.75); };
    check_against_finite_differences(call_node("NativeDropoutBackward0", {g}, {true}, saved), 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("NativeDropoutBackward0", saved, g); }
  SUBCASE("against torch: train True, False, None (masks but does not scale), and p = 1") {
    for (const auto& [p, train] : {std::pair{std::string("0.4"), std::string("True")},
                                   std::pair{std::string("0.4"), std::string("False")},
                                   std::pair{std::string("0.4"), std::string("None")},
                                   std::pair{std::string("1.0"), std::string("True")}}) {
      CAPTURE(p);
      CAPTURE(train);
      const auto r = torch_elementwise("NativeDropoutBackward0", "torch.native_dropout(x, " + p + ", " + train + ")[0]",
                                       "(fn._saved_p, fn._saved_result1, hasattr(fn, '_saved_train'))", x, g);
      CHECK_FALSE(r[2].item<bool>());  // train is hidden
      const FieldValue train_value = train == "None" ? FieldValue(None{}) : FieldValue(train == "True");
      const Grads out = call_node("NativeDropoutBackward0", {g}, {true},
                                  Saved{{"p", r[0].item<double>()}, {"train", train_value}, {"result1", r[1]}});
      CHECK_TENSOR(*out[0], r[3]);
    }
  }
  SUBCASE("errors") { check_shape_mismatch("NativeDropoutBackward0", saved, "result1"); }
}

TEST_CASE("SoftmaxBackwardDataBackward0") {
  const Tensor output = softmax(random64({3, 4}, 62), 1), grad_output = random64({3, 4}, 63), g = random64({3, 4}, 64);
  const Saved saved = {{"dim", std::int64_t{1}},
                       {"grad_output", grad_output},
                       {"input_dtype", DType::Float64},
                       {"output", output}};
  SUBCASE("finite differences in grad_output and output") {
    // _softmax_backward_data(grad_output, output, dim) = output * (grad_output - sum(grad_output * output, dim))
    auto forward = [](const std::vector<Tensor>& in) {
      return mul(in[1], sub(in[0], sum(mul(in[0], in[1]), {1}, true)));
    };
    const Grads out = call_node("SoftmaxBackwardDataBackward0", {g}, {true, true}, saved);
    check_against_finite_differences(out, 0, forward, {grad_output, output}, g);
    check_against_finite_differences(out, 1, forward, {grad_output, output}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("SoftmaxBackwardDataBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1].has_value());
    for (const auto& grad : call_node("SoftmaxBackwardDataBackward0", {std::nullopt}, {true, true}, saved))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch: softmax's double backward, each floating dtype, dims 0, 1 and -1 of a 3-d tensor") {
    const Tensor x = random64({2, 3, 4}, 65);
    for (const DType dtype : {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16}) {
      for (const std::int64_t dim : {0, 1, -1}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(dim);
        const auto r = torch_exec("dim = " + std::to_string(dim) + R"(
x = a.requires_grad_()
y = torch.softmax(x, dim)
go = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).to(x.dtype).requires_grad_()
out = torch.autograd.grad(y, x, go, create_graph=True)[0]
fn = out.grad_fn
assert fn.name() == "SoftmaxBackwardDataBackward0", fn.name()
assert not hasattr(fn, "_saved_input_dtype")
g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(out.dtype)
d = fn._saved_dim  # a negative dim reads back unsigned
result = (torch.tensor(d - 2**64 if d >= 2**63 else d), fn._saved_grad_output, fn._saved_output, g, *torch.autograd.grad(out, (go, x), g))
)",
                                  {x.to(dtype)});
        const Saved from_torch = {{"dim", r[0].item<std::int64_t>()},
                                  {"grad_output", r[1]},
                                  {"input_dtype", dtype},
                                  {"output", r[2]}};
        const Grads out = call_node("SoftmaxBackwardDataBackward0", {r[3]}, {true, true}, from_torch);
        const double rtol = dtype == DType::Float64 ? 1e-7 : dtype == DType::Float32 ? 1e-5 : 2e-2;
        CHECK(out[0]->dtype() == dtype);
        CHECK_TENSOR(*out[0], r[4], rtol, rtol * 0.1);
        // the output's grad reaches x through SoftmaxBackward0: compare there, with torch's own node
        const Tensor grad_x = *call_node("SoftmaxBackward0", {*out[1]}, {true},
                                         Saved{{"dim", r[0].item<std::int64_t>()},
                                               {"self_scalar_type", dtype},
                                               {"result", r[2]}})[0];
        CHECK_TENSOR(grad_x, r[5], rtol, rtol * 0.1);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("SoftmaxBackwardDataBackward0", {random64({3, 5}, 1)}, {true, true}, saved),
                         "SoftmaxBackwardDataBackward0: grad has shape [3,5] but output has shape [3,4]", Error);
    Saved bad_dim = saved;
    bad_dim["dim"] = std::int64_t{2};
    CHECK_THROWS_WITH_AS(call_node("SoftmaxBackwardDataBackward0", {g}, {true, true}, bad_dim),
                         "SoftmaxBackwardDataBackward0: dim 2 is out of range for result of shape [3,4]", Error);
    Saved bad_grad_output = saved;
    bad_grad_output["grad_output"] = random64({4, 3}, 1);
    CHECK_THROWS_WITH_AS(call_node("SoftmaxBackwardDataBackward0", {g}, {true, true}, bad_grad_output),
                         "SoftmaxBackwardDataBackward0: grad has shape [4,3] but output has shape [3,4]", Error);
  }
}

TEST_CASE("NativeDropoutBackwardBackward0") {
  const Tensor grad_output = random64({2, 3}, 66), g = random64({2, 3}, 67);
  const Tensor mask = tensor({{1.0, 0.0, 1.0}, {1.0, 1.0, 0.0}}, DType::Float64).to(DType::Bool);
  const Saved saved = {{"grad_output", grad_output}, {"mask", mask}, {"scale", 1.0 / 0.75}};
  SUBCASE("finite differences in grad_output") {
    auto forward = [&mask](const std::vector<Tensor>& in) { return mul(mul(in[0], mask), 1.0 / 0.75); };
    check_against_finite_differences(call_node("NativeDropoutBackwardBackward0", {g}, {true, false}, saved), 0,
                                     forward, {grad_output}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("NativeDropoutBackwardBackward0", {g}, {false, false}, saved)[0].has_value());
    CHECK_FALSE(call_node("NativeDropoutBackwardBackward0", {std::nullopt}, {true, false}, saved)[0].has_value());
  }
  SUBCASE("against torch: native_dropout_backward's backward, each floating dtype") {
    // (autograd's create_graph backward of dropout is a mul, not this node: it is native_dropout_backward's own)
    for (const DType dtype : {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16}) {
      CAPTURE(dtype_name(dtype));
      const auto r = torch_exec(R"(
torch.manual_seed(0)
mask = torch.native_dropout(a, 0.4, True)[1]
go = b.requires_grad_()
out = torch.ops.aten.native_dropout_backward(go, mask, 1 / 0.6)
fn = out.grad_fn
assert fn.name() == "NativeDropoutBackwardBackward0", fn.name()
g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(out.dtype)
result = (fn._saved_grad_output, fn._saved_mask, fn._saved_scale, g, *torch.autograd.grad(out, (go,), g))
)",
                                {random64({4, 5}, 68).to(dtype), random64({4, 5}, 69).to(dtype)});
      const Saved from_torch = {{"grad_output", r[0]}, {"mask", r[1]}, {"scale", r[2].item<double>()}};
      const Tensor grad = *call_node("NativeDropoutBackwardBackward0", {r[3]}, {true, false}, from_torch)[0];
      CHECK(grad.dtype() == dtype);
      CHECK_TENSOR(grad, r[4], dtype == DType::Float64 ? 1e-12 : 1e-2, 0);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("NativeDropoutBackwardBackward0", {g}, {true, true}, saved),
                         "NativeDropoutBackwardBackward0: the derivative for native_dropout_backward's mask is not "
                         "implemented (as in torch)",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("NativeDropoutBackwardBackward0", {random64({3}, 1)}, {true, false}, saved),
                         "NativeDropoutBackwardBackward0: grad has shape [3] but mask has shape [2,3]", Error);
  }
}

TEST_CASE("PreluKernelBackward0") {
  const Tensor x = smooth_input(70), w = random64({1, 3}, 71), g = random64({2, 3}, 72);
  const Saved saved = {{"self", x}, {"weight", w}};
  SUBCASE("finite differences, away from 0") {
    auto forward = [](const std::vector<Tensor>& in) {
      return where(gt(in[0], Scalar(0)), in[0], mul(in[1], in[0]));
    };
    const Grads out = call_node("PreluKernelBackward0", {g}, {true, true}, saved);
    check_against_finite_differences(out, 0, forward, {x, w}, g);
    check_against_finite_differences(out, 1, forward, {x, w}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("PreluKernelBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{1, 3});
    for (const auto& grad : call_node("PreluKernelBackward0", {std::nullopt}, {true, true}, saved))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch: zeros take weight's slope; one weight or one per channel; each floating dtype") {
    const Tensor with_zeros = tensor({{{-1.0, 0.0, 2.0}, {0.0, 3.0, -2.0}}, {{0.5, -0.5, 0.0}, {1.0, 0.0, -3.0}}},
                                     DType::Float64);
    for (const DType dtype : {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16}) {
      for (const std::string weight : {"torch.tensor([0.25])", "torch.tensor([0.25, -1.5])"}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(weight);
        const auto r = torch_exec(R"(
x = a.requires_grad_()
w = )" + weight + R"(.to(x.dtype).requires_grad_()
out = F.prelu(x, w)
fn = out.grad_fn
assert fn.name() == "PreluKernelBackward0", fn.name()
g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(out.dtype)
result = (fn._saved_self, fn._saved_weight, g, *torch.autograd.grad(out, (x, fn._saved_weight), g))
)",
                                  {with_zeros.to(dtype)});
        const Grads out = call_node("PreluKernelBackward0", {r[2]}, {true, true}, Saved{{"self", r[0]}, {"weight", r[1]}});
        const double rtol = dtype == DType::Float64 ? 1e-12 : dtype == DType::Float32 ? 1e-6 : 2e-2;
        CHECK(out[0]->dtype() == dtype);
        CHECK_TENSOR(*out[0], r[3], rtol, 0);
        CHECK(out[1]->sizes() == r[1].sizes());
        CHECK_TENSOR(*out[1], r[4], rtol, rtol * 0.1);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("PreluKernelBackward0", {random64({3, 2}, 1)}, {true, true}, saved),
                         "PreluKernelBackward0: grad has shape [3,2] but self has shape [2,3]", Error);
    CHECK_THROWS_WITH_AS(call_node("PreluKernelBackward0", {g}, {true, true}, Saved{{"self", x}, {"weight", random64({2}, 1)}}),
                         "PreluKernelBackward0: weight [2] does not broadcast to self [2,3]", Error);
  }
}

}  // TEST_SUITE
