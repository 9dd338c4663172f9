// Suite "nodes", unary group: elementwise math, zero-grad ops, and copies.
#include <cmath>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

// The tests of one elementwise node, whose formula reads its saved `self`
// and/or `result` (or nothing).
struct Elementwise {
  std::string node;                  // "ExpBackward0"
  std::string torch_forward;         // the forward of x in torch: "torch.exp(x)"
  Tensor (*forward)(const Tensor&);  // the same forward with L0 primitives
  std::vector<std::string> fields;   // the saved tensors, in packing order ("self", "result")
  Tensor smooth;                     // float64 inputs where finite differences decide
  Tensor special;                    // float64 inputs where they cannot: kinks, zeros, poles, ties, overflow
};

Saved saved_from_input(const Elementwise& spec, const Tensor& x) {
  Saved saved;
  for (const std::string& field : spec.fields) saved[field] = field == "self" ? x : spec.forward(x);
  return saved;
}

void check_elementwise_node(const Elementwise& spec) {
  const Tensor g = random64(spec.smooth.sizes(), 21);
  const Saved saved = saved_from_input(spec, spec.smooth);

  SUBCASE("finite differences") {
    const Grads out = call_node(spec.node, {g}, {true}, saved);
    auto forward = spec.forward;
    check_against_finite_differences(
        out, 0, [forward](const std::vector<Tensor>& in) { return forward(in[0]); }, {spec.smooth}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node(spec.node, {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node(spec.node, {std::nullopt}, {true}, saved)[0].has_value());
  }
  if (!spec.fields.empty()) {
    SUBCASE("errors: the grad and the saved tensor disagree in shape") {
      const std::string& checked = spec.fields.back();  // SgnBackward0's grad has result's shape
      CHECK_THROWS_WITH_AS(call_node(spec.node, {random64({3}, 1)}, {true}, saved_from_input(spec, random64({4}, 2))),
                           (spec.node + ": grad has shape [3] but " + checked + " has shape [4]").c_str(), Error);
    }
  }
  SUBCASE("against torch, at special points, in float64 and float32") {
    // clone(): sgn's grad is a ZeroTensor (_efficientzerotensor), which cannot be sent as it is.
    std::string saved_values;
    for (const std::string& field : spec.fields) saved_values += "fn._saved_" + field + ", ";
    const std::string code = "x = a.requires_grad_()\n"
                             "out = " + spec.torch_forward + "\n"
                             "fn = out.grad_fn\n"
                             "assert fn.name() == '" + spec.node + "', fn.name()\n"
                             "result = (" + saved_values +
                             "*(g.clone() for g in torch.autograd.grad(out, (x,), b)),)\n";
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      CAPTURE(dtype_name(dtype));
      const Tensor x = spec.special.to(dtype);
      const Tensor grad = random64(x.sizes(), 22).to(dtype);
      const auto r = torch_exec(code, {x, grad});
      Saved from_torch;
      for (std::size_t i = 0; i < spec.fields.size(); ++i) from_torch[spec.fields[i]] = r[i];
      const Grads out = call_node(spec.node, {grad}, {true}, from_torch);
      const double rtol = dtype == DType::Float64 ? 1e-12 : 1e-5;
      CHECK_TENSOR(*out[0], r[spec.fields.size()], rtol, 1e-30);  // checks the dtype too
    }
  }
}

constexpr double inf = INFINITY;
const double pi = std::acos(-1.0);

Tensor positive64(const Shape& sizes, std::uint64_t seed) { return add(abs(random64(sizes, seed)), 0.5); }

// The piecewise constant forwards, from floor division (L0 has no floor, ceil, round or trunc).
Tensor floor_of(const Tensor& x) { return div(x, 1, "floor"); }

// Inputs of the piecewise constant ops: away from integers and halves (finite
// differences), and at them (torch).
Tensor off_integers() { return tensor({{0.3, -1.7, 2.2}, {-0.2, 5.9, -3.4}}, DType::Float64); }
Tensor at_integers() { return tensor({0.5, 1.5, -0.5, 2.0, -0.0, -3.0}, DType::Float64); }

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("ExpBackward0") {
  check_elementwise_node({"ExpBackward0", "torch.exp(x)", [](const Tensor& x) { return exp(x); }, {"result"},
                          random64({2, 3}, 30), tensor({-800.0, -0.0, 0.0, 1.0, 710.0, -inf}, DType::Float64)});
}

TEST_CASE("Exp2Backward0") {
  check_elementwise_node({"Exp2Backward0", "torch.exp2(x)", [](const Tensor& x) { return pow(Scalar(2.0), x); },
                          {"result"}, random64({2, 3}, 31),
                          tensor({-1100.0, -0.0, 0.0, 1.0, 1030.0, 3.5}, DType::Float64)});
}

TEST_CASE("Expm1Backward0") {
  check_elementwise_node({"Expm1Backward0", "torch.expm1(x)", [](const Tensor& x) { return expm1(x); }, {"result"},
                          random64({2, 3}, 32), tensor({-50.0, -0.0, 1e-10, 3.0, 710.0}, DType::Float64)});
}

TEST_CASE("LogBackward0") {
  check_elementwise_node({"LogBackward0", "torch.log(x)", [](const Tensor& x) { return log(x); }, {"self"},
                          positive64({2, 3}, 33), tensor({0.0, -0.0, 1e-300, -1.0, inf, 2.0}, DType::Float64)});
}

TEST_CASE("Log2Backward0") {
  check_elementwise_node({"Log2Backward0", "torch.log2(x)",
                          [](const Tensor& x) { return div(log(x), std::log(2.0)); }, {"self"},
                          positive64({2, 3}, 34), tensor({0.0, -0.0, 1e-300, -1.0, inf, 2.0}, DType::Float64)});
}

TEST_CASE("Log10Backward0") {
  check_elementwise_node({"Log10Backward0", "torch.log10(x)",
                          [](const Tensor& x) { return div(log(x), std::log(10.0)); }, {"self"},
                          positive64({2, 3}, 35), tensor({0.0, -0.0, 1e-300, -1.0, inf, 2.0}, DType::Float64)});
}

TEST_CASE("Log1PBackward0") {
  check_elementwise_node({"Log1PBackward0", "torch.log1p(x)", [](const Tensor& x) { return log1p(x); }, {"self"},
                          positive64({2, 3}, 36), tensor({-1.0, -0.999, -0.0, 1e-12, 5.0, -2.0}, DType::Float64)});
}

TEST_CASE("SqrtBackward0") {
  // sqrt(-0.0) = -0.0, so its grad is -inf where sqrt(0.0)'s is +inf.
  check_elementwise_node({"SqrtBackward0", "torch.sqrt(x)", [](const Tensor& x) { return sqrt(x); }, {"result"},
                          positive64({2, 3}, 37), tensor({0.0, -0.0, 1e-300, 4.0, -1.0, inf}, DType::Float64)});
}

TEST_CASE("RsqrtBackward0") {
  check_elementwise_node({"RsqrtBackward0", "torch.rsqrt(x)", [](const Tensor& x) { return rsqrt(x); }, {"result"},
                          positive64({2, 3}, 38), tensor({0.0, -0.0, 1e-300, 4.0, -1.0, inf}, DType::Float64)});
}

TEST_CASE("ReciprocalBackward0") {
  check_elementwise_node({"ReciprocalBackward0", "torch.reciprocal(x)", [](const Tensor& x) { return reciprocal(x); },
                          {"result"}, positive64({2, 3}, 39),
                          tensor({0.0, -0.0, 1e300, -2.0, inf, 1e-200}, DType::Float64)});
}

TEST_CASE("SinBackward0") {
  check_elementwise_node({"SinBackward0", "torch.sin(x)", [](const Tensor& x) { return sin(x); }, {"self"},
                          random64({2, 3}, 40), tensor({0.0, -0.0, pi / 2, 1e6, -3.0, inf}, DType::Float64)});
}

TEST_CASE("CosBackward0") {
  check_elementwise_node({"CosBackward0", "torch.cos(x)", [](const Tensor& x) { return cos(x); }, {"self"},
                          random64({2, 3}, 41), tensor({0.0, -0.0, pi, 1e6, -3.0, inf}, DType::Float64)});
}

// Inputs inside (-0.9, 0.9), where asin, acos and atanh are smooth.
Tensor inside_unit64(const Shape& sizes, std::uint64_t seed) { return mul(tanh(random64(sizes, seed)), 0.9); }

TEST_CASE("AsinBackward0") {
  check_elementwise_node({"AsinBackward0", "torch.asin(x)", [](const Tensor& x) { return asin(x); }, {"self"},
                          inside_unit64({2, 3}, 60), tensor({0.0, -0.0, 1.0, -1.0, 2.0, 0.999999}, DType::Float64)});
}

TEST_CASE("AcosBackward0") {
  check_elementwise_node({"AcosBackward0", "torch.acos(x)", [](const Tensor& x) { return acos(x); }, {"self"},
                          inside_unit64({2, 3}, 61), tensor({0.0, -0.0, 1.0, -1.0, 2.0, -0.999999}, DType::Float64)});
}

TEST_CASE("AtanBackward0") {
  check_elementwise_node({"AtanBackward0", "torch.atan(x)", [](const Tensor& x) { return atan(x); }, {"self"},
                          random64({2, 3}, 62), tensor({0.0, -0.0, 1e200, -inf, 1.0, 1e-8}, DType::Float64)});
}

TEST_CASE("SinhBackward0") {
  check_elementwise_node({"SinhBackward0", "torch.sinh(x)", [](const Tensor& x) { return sinh(x); }, {"self"},
                          random64({2, 3}, 63), tensor({0.0, -0.0, 800.0, -800.0, inf, 3.0}, DType::Float64)});
}

TEST_CASE("CoshBackward0") {
  check_elementwise_node({"CoshBackward0", "torch.cosh(x)", [](const Tensor& x) { return cosh(x); }, {"self"},
                          random64({2, 3}, 64), tensor({0.0, -0.0, 800.0, -800.0, -inf, 3.0}, DType::Float64)});
}

TEST_CASE("AsinhBackward0") {
  check_elementwise_node({"AsinhBackward0", "torch.asinh(x)", [](const Tensor& x) { return asinh(x); }, {"self"},
                          random64({2, 3}, 65), tensor({0.0, -0.0, 1e200, -inf, 1.0, 1e-8}, DType::Float64)});
}

TEST_CASE("AcoshBackward0") {
  check_elementwise_node({"AcoshBackward0", "torch.acosh(x)", [](const Tensor& x) { return acosh(x); }, {"self"},
                          add(positive64({2, 3}, 66), 1.0), tensor({1.0, 0.5, -1.0, 1e200, inf, 2.0}, DType::Float64)});
}

TEST_CASE("AtanhBackward0") {
  check_elementwise_node({"AtanhBackward0", "torch.atanh(x)", [](const Tensor& x) { return atanh(x); }, {"self"},
                          inside_unit64({2, 3}, 67), tensor({0.0, -0.0, 1.0, -1.0, 2.0, 0.5}, DType::Float64)});
}

TEST_CASE("ErfcBackward0") {
  check_elementwise_node({"ErfcBackward0", "torch.erfc(x)", [](const Tensor& x) { return erfc(x); }, {"self"},
                          random64({2, 3}, 68), tensor({0.0, -0.0, 30.0, -inf, inf, 1.0}, DType::Float64)});
}

TEST_CASE("TanBackward0") {
  check_elementwise_node({"TanBackward0", "torch.tan(x)", [](const Tensor& x) { return tan(x); }, {"result"},
                          random64({2, 3}, 42), tensor({0.0, -0.0, pi / 2, 1e6, -3.0, 1.5}, DType::Float64)});
}

TEST_CASE("TanhBackward0") {
  check_elementwise_node({"TanhBackward0", "torch.tanh(x)", [](const Tensor& x) { return tanh(x); }, {"result"},
                          random64({2, 3}, 43), tensor({0.0, -0.0, 20.0, -20.0, 1e-8, 400.0}, DType::Float64)});
}

TEST_CASE("SigmoidBackward0") {
  check_elementwise_node({"SigmoidBackward0", "torch.sigmoid(x)", [](const Tensor& x) { return sigmoid(x); },
                          {"result"}, random64({2, 3}, 44),
                          tensor({0.0, 40.0, -40.0, -800.0, 800.0, -inf}, DType::Float64)});
}

TEST_CASE("ErfBackward0") {
  check_elementwise_node({"ErfBackward0", "torch.erf(x)", [](const Tensor& x) { return erf(x); }, {"self"},
                          random64({2, 3}, 45), tensor({0.0, -0.0, 6.0, -30.0, 1e-8, inf}, DType::Float64)});
}

TEST_CASE("AbsBackward0") {
  // abs'(0) = sgn(0) = 0, for 0.0 and -0.0 alike.
  check_elementwise_node({"AbsBackward0", "torch.abs(x)", [](const Tensor& x) { return abs(x); }, {"self"},
                          tensor({{-1.5, -0.3, 0.7}, {2.0, -4.0, 0.1}}, DType::Float64),
                          tensor({-2.0, -0.0, 0.0, 3.0, -inf, 1e-300}, DType::Float64)});
}

TEST_CASE("SgnBackward0") {
  check_elementwise_node({"SgnBackward0", "torch.sgn(x)", [](const Tensor& x) { return sign(x); }, {"self", "result"},
                          tensor({{-1.5, -0.3, 0.7}, {2.0, -4.0, 0.1}}, DType::Float64),
                          tensor({-2.0, -0.0, 0.0, 3.0, -inf, inf}, DType::Float64)});
}

TEST_CASE("SignBackward0") {
  check_elementwise_node({"SignBackward0", "torch.sign(x)", [](const Tensor& x) { return sign(x); }, {},
                          tensor({{-1.5, -0.3, 0.7}, {2.0, -4.0, 0.1}}, DType::Float64),
                          tensor({-2.0, -0.0, 0.0, 3.0, -inf, inf}, DType::Float64)});
}

TEST_CASE("FloorBackward0") {
  check_elementwise_node({"FloorBackward0", "torch.floor(x)", floor_of, {}, off_integers(), at_integers()});
}

TEST_CASE("CeilBackward0") {
  check_elementwise_node({"CeilBackward0", "torch.ceil(x)", [](const Tensor& x) { return neg(floor_of(neg(x))); },
                          {}, off_integers(), at_integers()});
}

TEST_CASE("RoundBackward0") {
  // floor(x + 0.5) is round(x) away from halves, where finite differences look.
  check_elementwise_node({"RoundBackward0", "torch.round(x)", [](const Tensor& x) { return floor_of(add(x, 0.5)); },
                          {}, off_integers(), at_integers()});
}

TEST_CASE("RoundBackward1") {
  // round(x, decimals=1); off_integers * 10 is still away from halves.
  check_elementwise_node({"RoundBackward1", "torch.round(x, decimals=1)",
                          [](const Tensor& x) { return div(floor_of(add(mul(x, 10), 0.5)), 10); }, {},
                          div(off_integers(), 10), div(at_integers(), 10)});
}

TEST_CASE("TruncBackward0") {
  check_elementwise_node({"TruncBackward0", "torch.trunc(x)", [](const Tensor& x) { return div(x, 1, "trunc"); }, {},
                          off_integers(), at_integers()});
}

TEST_CASE("Deg2RadBackward0") {
  check_elementwise_node({"Deg2RadBackward0", "torch.deg2rad(x)", [](const Tensor& x) { return mul(x, pi / 180); }, {},
                          random64({2, 3}, 90), tensor({0.0, -0.0, 180.0, 1e308, -inf, 1.0}, DType::Float64)});
}

TEST_CASE("Rad2DegBackward0") {
  check_elementwise_node({"Rad2DegBackward0", "torch.rad2deg(x)", [](const Tensor& x) { return mul(x, 180 / pi); }, {},
                          random64({2, 3}, 91), tensor({0.0, -0.0, pi, 1e308, -inf, 1.0}, DType::Float64)});
}

TEST_CASE("FracBackward0") {
  // frac(x) = x - trunc(x): the finite differences stay away from the integers
  check_elementwise_node({"FracBackward0", "torch.frac(x)",
                          [](const Tensor& x) { return sub(x, div(x, 1, "trunc")); }, {},
                          add(mul(tanh(random64({2, 3}, 92)), 0.4), 2.5),
                          tensor({0.0, -0.0, 2.0, -1.5, 1e300, 0.25}, DType::Float64)});
}

TEST_CASE("SincBackward0") {
  check_elementwise_node({"SincBackward0", "torch.sinc(x)",
                          [](const Tensor& x) { return div(sin(mul(x, pi)), mul(x, pi)); }, {"self"},
                          positive64({2, 3}, 93), tensor({0.0, -0.0, 1.0, -2.5, 1e-200, inf}, DType::Float64)});
}

TEST_CASE("CloneBackward0") {
  check_elementwise_node({"CloneBackward0", "torch.clone(x)", [](const Tensor& x) { return clone(x); }, {},
                          random64({2, 3}, 46), random64({4}, 47)});
  SUBCASE("the very same grad is passed on") {
    const Tensor g = random64({2}, 48);
    CHECK(call_node("CloneBackward0", {g}, {true}, Saved{})[0]->is_same(g));
  }
}

TEST_CASE("AliasBackward0") {
  check_elementwise_node({"AliasBackward0", "torch.ops.aten.alias(x)", [](const Tensor& x) { return x; }, {},
                          random64({2, 3}, 49), random64({4}, 50)});
  SUBCASE("the very same grad is passed on") {
    const Tensor g = random64({2}, 51);
    CHECK(call_node("AliasBackward0", {g}, {true}, Saved{})[0]->is_same(g));
  }
}

TEST_CASE("ToCopyBackward0") {
  // self.options(), as PyTorch stores it for a CPU tensor of `dtype`.
  auto options_of = [](DType dtype) { return TensorOptions{dtype, Device::CPU, Layout::Strided, std::nullopt}; };
  auto saved_for = [&](DType dtype) { return Saved{{"self_options", options_of(dtype)}}; };

  SUBCASE("finite differences") {
    const Tensor x = random64({2, 3}, 52), g = random64({2, 3}, 53);
    const Grads out = call_node("ToCopyBackward0", {g}, {true}, saved_for(DType::Float64));
    check_against_finite_differences(
        out, 0, [](const std::vector<Tensor>& in) { return to(in[0], DType::Float64); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Tensor g = random64({2}, 54);
    CHECK_FALSE(call_node("ToCopyBackward0", {g}, {false}, saved_for(DType::Float32))[0].has_value());
    CHECK_FALSE(call_node("ToCopyBackward0", {std::nullopt}, {true}, saved_for(DType::Float32))[0].has_value());
  }
  SUBCASE("against torch: the grad is cast back to self's dtype") {
    // float32 -> float64 and float64 -> float32; self_options is hidden, so it
    // is derived from the input as PyTorch does (self.options()).
    for (const std::pair<DType, DType>& cast : {std::pair{DType::Float32, DType::Float64},
                                                 std::pair{DType::Float64, DType::Float32}}) {
      const DType from = cast.first, into = cast.second;
      CAPTURE(dtype_name(from));
      const Tensor x = random64({2, 3}, 55).to(from), g = random64({2, 3}, 56).to(into);
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = x.to(b.dtype)
fn = out.grad_fn
assert fn.name() == "ToCopyBackward0" and not hasattr(fn, "_saved_self_options")
result = torch.autograd.grad(out, (x,), b)
)", {x, g});
      const Grads out = call_node("ToCopyBackward0", {g}, {true}, saved_for(from));
      CHECK_TENSOR(*out[0], r[0], 0.0, 0.0);  // exact, dtype included
    }
  }
  SUBCASE("against torch: a copy to the same dtype passes the grad itself") {
    const Tensor x = random64({3}, 57), g = random64({3}, 58);
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = x.to(torch.float64, copy=True)
assert out.grad_fn.name() == "ToCopyBackward0"
result = torch.autograd.grad(out, (x,), b)
)", {x, g});
    const Grads out = call_node("ToCopyBackward0", {g}, {true}, saved_for(DType::Float64));
    CHECK(out[0]->is_same(g));
    CHECK_TENSOR(*out[0], r[0], 0.0, 0.0);
  }
  SUBCASE("integer self: torch builds no node; the formula still casts with truncation") {
    // An int64 tensor cannot require grad, and a cast to int64 is not
    // differentiable, so torch never makes this node for integers. Given one,
    // refgrad follows the formula: grad.to(int64), as torch's .to casts.
    const Tensor g = tensor({1.7, -2.5, 0.2}, DType::Float64);
    const auto r = torch_exec(R"(
x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
assert torch.arange(3).to(torch.float64).grad_fn is None
assert x.to(torch.int64).grad_fn is None and not x.to(torch.int64).requires_grad
result = a.to(torch.int64)
)", {g});
    CHECK_TENSOR(*call_node("ToCopyBackward0", {g}, {true}, saved_for(DType::Int64))[0], r[0], 0.0, 0.0);
  }
  SUBCASE("options without a dtype keep the grad's; the device is metadata") {
    const Tensor g = random64({2}, 59);
    const Saved no_dtype = {{"self_options", TensorOptions{std::nullopt, Device::CPU, Layout::Strided, std::nullopt}}};
    CHECK(call_node("ToCopyBackward0", {g}, {true}, no_dtype)[0]->is_same(g));
    const Saved cuda = {{"self_options", TensorOptions{DType::Float32, Device::CUDA, Layout::Strided, std::nullopt}}};
    CHECK(call_node("ToCopyBackward0", {g}, {true}, cuda)[0]->dtype() == DType::Float32);
  }
  SUBCASE("errors") {
    const Saved sparse = {{"self_options", TensorOptions{DType::Float32, Device::CPU, Layout::Sparse, std::nullopt}}};
    CHECK_THROWS_WITH_AS(call_node("ToCopyBackward0", {random64({2}, 60)}, {true}, sparse),
                         "ToCopyBackward0: self_options has layout torch.sparse_coo, "
                         "refgrad supports torch.strided only",
                         Error);
  }
}

// ------------------------------------------------------------ gamma functions ---

// Runs `forward` (over x) in torch in float64, checks the node's name, and returns the saved values
// the Python tuple `saved` lists, then torch's grad of x for the random incoming grad b.
std::vector<Tensor> torch_gamma_backward(const std::string& node, const std::string& forward, const std::string& saved,
                                         const Tensor& x, const Tensor& grad) {
  return torch_exec("x = a.requires_grad_()\n"
                    "out = " + forward + "\n"
                    "fn = out.grad_fn\n"
                    "assert fn.name() == '" + node + "', fn.name()\n"
                    "result = (*" + saved + ", *torch.autograd.grad(out, (x,), b))\n",
                    {x, grad});
}

TEST_CASE("PolygammaBackward0") {
  const Tensor x = positive64({2, 3}, 60);
  const Tensor g = random64({2, 3}, 61);
  SUBCASE("finite differences") {
    for (std::int64_t n : {0, 1, 2, 4}) {
      CAPTURE(n);
      const Grads out = call_node("PolygammaBackward0", {g}, {true}, Saved{{"n", n}, {"self", x}});
      check_against_finite_differences(out, 0, [n](const std::vector<Tensor>& in) { return polygamma(n, in[0]); },
                                       {x}, g);
    }
  }
  SUBCASE("against torch's _saved_n and _saved_self, negative x included") {
    const Tensor points = tensor({0.3, 1.7, 12.5, -0.6, -3.25}, DType::Float64);
    const Tensor grad = random64({5}, 62);
    for (std::int64_t n : {0, 1, 2, 4}) {
      CAPTURE(n);
      const auto r = torch_gamma_backward("PolygammaBackward0", "torch.polygamma(" + std::to_string(n) + ", x)",
                                          "(torch.tensor(fn._saved_n), fn._saved_self)", points, grad);
      const Grads out = call_node("PolygammaBackward0", {grad}, {true}, Saved{{"n", r[0].item<std::int64_t>()}, {"self", r[1]}});
      // torch's trigamma (n = 0's backward) is good to ~1e-8; its zeta-based orders to ~1e-15.
      CHECK_TENSOR(*out[0], r[2], n == 0 ? 1e-7 : 1e-12, 0);
    }
  }
  SUBCASE("float32 and float16 against torch") {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      CAPTURE(dtype_name(dtype));
      const Tensor points = tensor({0.75, 1.5, 3.0, 6.5}).to(dtype);
      const Tensor grad = tensor({1.0, -0.5, 2.0, 0.25}).to(dtype);
      const auto r = torch_gamma_backward("PolygammaBackward0", "torch.polygamma(2, x)",
                                          "(torch.tensor(fn._saved_n), fn._saved_self)", points, grad);
      const Grads out = call_node("PolygammaBackward0", {grad}, {true}, Saved{{"n", std::int64_t{2}}, {"self", r[1]}});
      CHECK_TENSOR(*out[0], r[2], dtype == DType::Float32 ? 1e-5 : 1e-2, 0);
    }
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = {{"n", std::int64_t{1}}, {"self", x}};
    CHECK_FALSE(call_node("PolygammaBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("PolygammaBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("PolygammaBackward0", {random64({3}, 1)}, {true}, saved),
                         "PolygammaBackward0: grad has shape [3] but self has shape [2,3]", Error);
    CHECK_THROWS_WITH_AS(call_node("PolygammaBackward0", {g}, {true}, Saved{{"n", std::int64_t{-2}}, {"self", x}}),
                         "PolygammaBackward0: n -2 is not an order polygamma has", Error);
  }
}

TEST_CASE("DigammaBackward0") {
  const Tensor x = positive64({2, 3}, 63);
  const Tensor g = random64({2, 3}, 64);
  SUBCASE("finite differences") {
    const Grads out = call_node("DigammaBackward0", {g}, {true}, Saved{{"self", x}});
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return digamma(in[0]); }, {x}, g);
  }
  SUBCASE("against torch") {
    const Tensor points = tensor({0.3, 1.7, 12.5, -0.6, -3.25}, DType::Float64);
    const Tensor grad = random64({5}, 65);
    const auto r = torch_gamma_backward("DigammaBackward0", "torch.digamma(x)", "(fn._saved_self,)", points, grad);
    CHECK_TENSOR(*call_node("DigammaBackward0", {grad}, {true}, Saved{{"self", r[0]}})[0], r[1], 1e-7, 0);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("DigammaBackward0", {g}, {false}, Saved{{"self", x}})[0].has_value());
    CHECK_FALSE(call_node("DigammaBackward0", {std::nullopt}, {true}, Saved{{"self", x}})[0].has_value());
  }
}

TEST_CASE("LgammaBackward0") {
  const Tensor x = positive64({2, 3}, 66);
  const Tensor g = random64({2, 3}, 67);
  SUBCASE("finite differences") {
    const Grads out = call_node("LgammaBackward0", {g}, {true}, Saved{{"self", x}});
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return lgamma(in[0]); }, {x}, g);
  }
  SUBCASE("against torch") {
    const Tensor points = tensor({0.3, 1.7, 12.5, -0.6, -3.25}, DType::Float64);
    const Tensor grad = random64({5}, 68);
    const auto r = torch_gamma_backward("LgammaBackward0", "torch.lgamma(x)", "(fn._saved_self,)", points, grad);
    CHECK_TENSOR(*call_node("LgammaBackward0", {grad}, {true}, Saved{{"self", r[0]}})[0], r[1], 1e-12, 0);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("LgammaBackward0", {g}, {false}, Saved{{"self", x}})[0].has_value());
    CHECK_FALSE(call_node("LgammaBackward0", {std::nullopt}, {true}, Saved{{"self", x}})[0].has_value());
  }
}

TEST_CASE("MvlgammaBackward0") {
  // mvlgamma(x, p) is defined for x > (p - 1) / 2.
  const Tensor x = add(positive64({2, 3}, 69), 2.0);
  const Tensor g = random64({2, 3}, 70);
  SUBCASE("finite differences: the sum of lgamma(x - j/2) (the constant term has no grad)") {
    for (std::int64_t p : {1, 3, 5}) {
      CAPTURE(p);
      const Grads out = call_node("MvlgammaBackward0", {g}, {true}, Saved{{"p", p}, {"self", x}});
      auto forward = [p](const std::vector<Tensor>& in) {
        Tensor total = zeros_like(in[0]);
        for (std::int64_t j = 0; j < p; ++j) total = add(total, lgamma(sub(in[0], 0.5 * static_cast<double>(j))));
        return total;
      };
      check_against_finite_differences(out, 0, forward, {x}, g);
    }
  }
  SUBCASE("against torch's _saved_p and _saved_self") {
    for (std::int64_t p : {1, 3, 5}) {
      CAPTURE(p);
      const auto r = torch_gamma_backward("MvlgammaBackward0", "torch.mvlgamma(x, " + std::to_string(p) + ")",
                                          "(torch.tensor(fn._saved_p), fn._saved_self)", x, g);
      const Grads out = call_node("MvlgammaBackward0", {g}, {true}, Saved{{"p", r[0].item<std::int64_t>()}, {"self", r[1]}});
      CHECK_TENSOR(*out[0], r[2], 1e-12, 0);
    }
  }
  SUBCASE("float16 against torch") {
    const Tensor h = tensor({2.5, 3.0, 4.75}).to(DType::Float16), gh = tensor({1.0, -2.0, 0.5}).to(DType::Float16);
    const auto r = torch_gamma_backward("MvlgammaBackward0", "torch.mvlgamma(x, 3)", "(fn._saved_self,)", h, gh);
    CHECK_TENSOR(*call_node("MvlgammaBackward0", {gh}, {true}, Saved{{"p", std::int64_t{3}}, {"self", r[0]}})[0], r[1], 1e-2, 0);
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = {{"p", std::int64_t{2}}, {"self", x}};
    CHECK_FALSE(call_node("MvlgammaBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("MvlgammaBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("MvlgammaBackward0", {g}, {true}, Saved{{"p", std::int64_t{0}}, {"self", x}}),
                         "MvlgammaBackward0: p must be at least 1, got 0", Error);
    CHECK_THROWS_WITH_AS(call_node("MvlgammaBackward0", {random64({4}, 1)}, {true}, saved),
                         "MvlgammaBackward0: grad has shape [4] but self has shape [2,3]", Error);
  }
}

}  // TEST_SUITE
