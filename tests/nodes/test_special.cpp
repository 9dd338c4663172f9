// Node tests of the special functions (src/nodes/special.cpp): erfinv, i0, i0e, i1, i1e, erfcx, ndtri,
// log_ndtr, entr and xlog1py.
#include <cmath>
#include <string>
#include <vector>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

constexpr double inf = INFINITY;
constexpr double kNaN = NAN;

// One elementwise node whose formula reads its saved `self` and/or `result`.
struct SpecialNode {
  std::string node;                  // "I0Backward0"
  std::string torch_forward;         // the forward of x in torch: "torch.i0(x)"
  Tensor (*forward)(const Tensor&);  // the same forward with L0 primitives
  std::vector<std::string> fields;   // the saved tensors, in Functions.h's order ("self", "result")
  Tensor smooth;                     // float64 inputs where finite differences decide
  Tensor special;                    // float64 inputs where they cannot: zeros, tails, overflow, outside the domain
  bool low_precision;                // torch has float16/bfloat16 kernels for the forward and the backward
};

Saved saved_from_input(const SpecialNode& spec, const Tensor& x) {
  Saved saved;
  for (const std::string& field : spec.fields) saved[field] = field == "self" ? x : spec.forward(x);
  return saved;
}

// rtol against torch's gradient in each dtype. float32 (and float16/bfloat16, computed in float32 by
// both) differ where refgrad's primitives round a float64 value once and torch's float kernels carry
// a few ulps of their own, which the derivative's exp(x^2)-like factors amplify.
double rtol_of(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 2e-5;
    case DType::Float16: return 1e-2;
    default: return 4e-2;  // bfloat16
  }
}

void check_special_node(const SpecialNode& spec) {
  const Tensor g = random64(spec.smooth.sizes(), 21);
  const Saved saved = saved_from_input(spec, spec.smooth);

  SUBCASE("finite differences") {
    const Grads out = call_node(spec.node, {g}, {true}, saved);
    auto forward = spec.forward;
    check_against_finite_differences(
        out, 0, [forward](const std::vector<Tensor>& in) { return forward(in[0]); }, {spec.smooth}, g);
  }
  SUBCASE("need mask, undefined grad and errors") {
    CHECK_FALSE(call_node(spec.node, {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node(spec.node, {std::nullopt}, {true}, saved)[0].has_value());
    const std::string& first = spec.fields.front();
    CHECK_THROWS_WITH_AS(call_node(spec.node, {random64({3}, 1)}, {true}, saved_from_input(spec, random64({4}, 2))),
                         (spec.node + ": grad has shape [3] but " + first + " has shape [4]").c_str(), Error);
    Saved missing = saved;
    missing.erase(first);
    CHECK_THROWS_WITH_AS(call_node(spec.node, {g}, {true}, missing),
                         (spec.node + ": saved field '" + first + "' is missing").c_str(), Error);
  }
  SUBCASE("against torch's saved values, at special points") {
    std::string saved_values;
    for (const std::string& field : spec.fields) saved_values += "fn._saved_" + field + ", ";
    const std::string code = "x = a.requires_grad_()\n"
                             "out = " + spec.torch_forward + "\n"
                             "fn = out.grad_fn\n"
                             "assert fn.name() == '" + spec.node + "', fn.name()\n"
                             "result = (" + saved_values + "*torch.autograd.grad(out, (x,), b))\n";
    std::vector<DType> dtypes = {DType::Float64, DType::Float32};
    if (spec.low_precision) dtypes.insert(dtypes.end(), {DType::Float16, DType::BFloat16});
    for (const DType dtype : dtypes) {
      CAPTURE(dtype_name(dtype));
      // float16 and bfloat16 take the smooth points: the special ones overflow their range.
      const bool storage_format = dtype == DType::Float16 || dtype == DType::BFloat16;
      const Tensor x = (storage_format ? spec.smooth : spec.special).to(dtype);
      const Tensor grad = random64(x.sizes(), 22).to(dtype);
      const auto r = torch_exec(code, {x, grad});
      Saved from_torch;
      for (std::size_t i = 0; i < spec.fields.size(); ++i) from_torch[spec.fields[i]] = r[i];
      const Grads out = call_node(spec.node, {grad}, {true}, from_torch);
      CHECK_TENSOR(*out[0], r[spec.fields.size()], rtol_of(dtype), 1e-300);  // checks the dtype too
    }
  }
}

Tensor positive64(const Shape& sizes, std::uint64_t seed) { return add(abs(random64(sizes, seed)), 0.25); }
// Inputs inside (-0.9, 0.9) and inside (0.05, 0.95).
Tensor inside_unit64(const Shape& sizes, std::uint64_t seed) { return mul(tanh(random64(sizes, seed)), 0.9); }
Tensor probabilities64(const Shape& sizes, std::uint64_t seed) { return add(mul(sigmoid(random64(sizes, seed)), 0.9), 0.05); }

// special_entr(x) = -x log x, 0 at 0, -inf below; the finite-difference points are positive.
Tensor entr_forward(const Tensor& x) { return neg(mul(x, log(x))); }

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("ErfinvBackward0") {
  // +-1 give an infinite grad; |y| > 1 NaN; near 1 the grad is large.
  check_special_node({"ErfinvBackward0", "torch.erfinv(x)", erfinv, {"self"}, inside_unit64({2, 3}, 80),
                      tensor({0.0, -0.0, 0.5, -0.999999, 1.0, -1.0, 1.5, 1e-300}, DType::Float64), true});
}

TEST_CASE("I0Backward0") {
  // The grad I1(x) is odd, 0 at 0, and overflows past x ~ 714. (Between 709.8 and 714 torch's I1
  // overflows early, as e^x does, and at +-inf it gives NaN: refgrad's finite values and -inf
  // are the true ones, so those points are left out.)
  check_special_node({"I0Backward0", "torch.i0(x)", i0, {"self"}, random64({2, 3}, 81),
                      tensor({0.0, -0.0, -3.0, 50.0, 700.0, -709.0, 720.0, 1e4}, DType::Float64), true});
}

TEST_CASE("SpecialI0EBackward0") {
  // At 0, sgn(0) = 0 gives the grad i1e(0) = 0 (the two one-sided derivatives are -+1); far out both
  // terms tend to 1/sqrt(2 pi x) and cancel.
  check_special_node({"SpecialI0EBackward0", "torch.special.i0e(x)", special_i0e, {"self", "result"},
                      random64({2, 3}, 82),
                      tensor({0.0, -1e-20, 3.0, -40.0, 499.0, -60.0, 650.0, inf}, DType::Float64), true});
}

TEST_CASE("SpecialI1Backward0") {
  // |x| <= eps (2.2e-16 in float64, 1.2e-7 in float32) takes the limit 1/2; just above it the formula
  // I0(x) - I1(x)/x does.
  check_special_node({"SpecialI1Backward0", "torch.special.i1(x)", special_i1, {"self", "result"},
                      random64({2, 3}, 83),
                      tensor({0.0, 1e-17, -2.220446049250313e-16, 1e-7, -1e-6, 3.0, -40.0, 700.0}, DType::Float64),
                      false});
}

TEST_CASE("SpecialI1EBackward0") {
  check_special_node({"SpecialI1EBackward0", "torch.special.i1e(x)", special_i1e, {"self", "result"},
                      random64({2, 3}, 84),
                      tensor({0.0, 1e-17, -2.220446049250313e-16, 1e-7, -1e-6, 3.0, -40.0, 1e4}, DType::Float64),
                      false});
}

TEST_CASE("SpecialErfcxBackward0") {
  // erfcx(-26) ~ 2e293 (its grad -1e295 stays finite); far out 2 x erfcx(x) -> 2/sqrt(pi) and the grad
  // is a small difference.
  check_special_node({"SpecialErfcxBackward0", "torch.special.erfcx(x)", special_erfcx, {"self", "result"},
                      random64({2, 3}, 85), tensor({0.0, -3.0, 5.0, 30.0, -26.0, 1e10, inf}, DType::Float64), false});
}

TEST_CASE("SpecialNdtriBackward0") {
  // p = 0 and 1 give infinite results and an infinite grad; far tails a huge one.
  check_special_node({"SpecialNdtriBackward0", "torch.special.ndtri(x)", special_ndtri, {"result"},
                      probabilities64({2, 3}, 86),
                      tensor({1e-300, 1e-10, 0.5, 0.999, 1 - 1e-15, 0.0, 1.0, 2.0}, DType::Float64), false});
}

TEST_CASE("SpecialLogNdtrBackward0") {
  // In the far left tail the grad tends to -x (the exponent's two terms cancel); far right to 0.
  check_special_node({"SpecialLogNdtrBackward0", "torch.special.log_ndtr(x)", special_log_ndtr, {"self", "result"},
                      mul(random64({2, 3}, 87), 3.0),
                      tensor({-40.0, -5.0, -1.0, 0.0, 3.0, 30.0, -1e5, inf}, DType::Float64), false});
}

TEST_CASE("SpecialEntrBackward0") {
  // x = 0: -(1 + log 0) = inf; x = 1: -1; x < 0: NaN.
  check_special_node({"SpecialEntrBackward0", "torch.special.entr(x)", entr_forward, {"self"}, positive64({2, 3}, 88),
                      tensor({0.0, 1.0, 0.5, 2.0, -1.0, 1e-300, inf}, DType::Float64), true});
}

TEST_CASE("SpecialXlog1PyBackward0") {
  // xlog1py(x, y) = x log1p(y), written with L0 primitives; other > -1 at the finite-difference points.
  auto forward = [](const std::vector<Tensor>& in) { return mul(in[0], log1p(in[1])); };
  const Tensor self = random64({2, 3}, 90), other = positive64({3}, 91), g = random64({2, 3}, 92);
  const Saved saved = {{"other", other}, {"self", self}};
  SUBCASE("finite differences, both inputs, other broadcast") {
    const Grads out = call_node("SpecialXlog1PyBackward0", {g}, {true, true}, saved);
    check_against_finite_differences(out, 0, forward, {self, other}, g);
    // The node gives other's grad at the broadcast shape; validate sums it to [3].
    const Tensor other_grad = sum(*out[1], IntList{0});
    CHECK_TENSOR(other_grad, numerical_vjp(forward, {self, other}, 1, g), kGradcheckRtol, kGradcheckAtol);
  }
  SUBCASE("against torch's saved values, at the edges") {
    // (0, -1) and (0, -2): self's grad is masked to 0; (1, -1): log1p(-1) = -inf, other's grad 1/0;
    // (0, NaN): NaN stays; (2, -3): NaN.
    const Tensor x = tensor({0.0, 0.0, 1.0, 0.0, 2.0, -1.5, 0.0, 3.0}, DType::Float64);
    const Tensor y = tensor({-1.0, -2.0, -1.0, kNaN, -3.0, 0.5, 4.0, 1e-20}, DType::Float64);
    for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      CAPTURE(dtype_name(dtype));
      const Tensor grad = random64({8}, 93).to(dtype);
      const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.special.xlog1py(x, y)
fn = out.grad_fn
assert fn.name() == 'SpecialXlog1PyBackward0', fn.name()
result = (fn._saved_other, fn._saved_self, *torch.autograd.grad(out, (x, y), c))
)",
                                {x.to(dtype), y.to(dtype), grad});
      const Grads out = call_node("SpecialXlog1PyBackward0", {grad}, {true, true}, Saved{{"other", r[0]}, {"self", r[1]}});
      CHECK_TENSOR(*out[0], r[2], rtol_of(dtype), 1e-300);
      CHECK_TENSOR(*out[1], r[3], rtol_of(dtype), 1e-300);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Grads only_other = call_node("SpecialXlog1PyBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(only_other[0].has_value());
    CHECK(only_other[1].has_value());
    const Grads none = call_node("SpecialXlog1PyBackward0", {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(none[0].has_value());
    CHECK_FALSE(none[1].has_value());
    CHECK_THROWS_WITH_AS(call_node("SpecialXlog1PyBackward0", {g}, {true, true}, Saved{{"self", self}}),
                         "SpecialXlog1PyBackward0: saved field 'other' is missing", Error);
  }
}

TEST_CASE("SpecialXlog1PyBackward1") {
  // xlog1py(Scalar self, Tensor other): only other's grad, self * g / (1 + other).
  const Tensor other = positive64({2, 3}, 94), g = random64({2, 3}, 95);
  SUBCASE("finite differences") {
    for (const double self : {2.5, 0.0, -1.0}) {
      CAPTURE(self);
      const Grads out = call_node("SpecialXlog1PyBackward1", {g}, {true}, Saved{{"other", other}, {"self", Scalar(self)}});
      check_against_finite_differences(
          out, 0, [self](const std::vector<Tensor>& in) { return mul(log1p(in[0]), self); }, {other}, g);
    }
  }
  SUBCASE("against torch's saved values") {
    const Tensor y = tensor({-1.0, -2.0, 0.0, 3.0, kNaN, 1e10}, DType::Float64);
    for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      for (const std::string self : {"2.5", "0.0", "-3"}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(self);
        const Tensor grad = random64({6}, 96).to(dtype);
        const auto r = torch_exec("y = a.requires_grad_()\n"
                                  "out = torch.special.xlog1py(" + self + ", y)\n"
                                  "fn = out.grad_fn\n"
                                  "assert fn.name() == 'SpecialXlog1PyBackward1', fn.name()\n"
                                  "result = (fn._saved_other, torch.tensor(float(fn._saved_self), dtype=torch.float64),"
                                  " *torch.autograd.grad(out, (y,), b))\n",
                                  {y.to(dtype), grad});
        const Grads out = call_node("SpecialXlog1PyBackward1", {grad}, {true},
                                    Saved{{"other", r[0]}, {"self", Scalar(r[1].item<double>())}});
        CHECK_TENSOR(*out[0], r[2], rtol_of(dtype), 1e-300);
      }
    }
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = {{"other", other}, {"self", Scalar(2.0)}};
    CHECK_FALSE(call_node("SpecialXlog1PyBackward1", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("SpecialXlog1PyBackward1", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("SpecialXlog1PyBackward1", {random64({3}, 1)}, {true}, saved),
                         "SpecialXlog1PyBackward1: grad has shape [3] but other has shape [2,3]", Error);
  }
}

TEST_CASE("SpecialXlog1PyBackward2") {
  // xlog1py(Tensor self, Scalar other): self's grad g log1p(other), masked to 0 at self == 0 only when
  // other <= -1.
  const Tensor self = random64({2, 3}, 97), g = random64({2, 3}, 98);
  SUBCASE("finite differences") {
    for (const double other : {0.5, 3.0, -0.75}) {
      CAPTURE(other);
      const Grads out = call_node("SpecialXlog1PyBackward2", {g}, {true}, Saved{{"other", Scalar(other)}, {"self", self}});
      check_against_finite_differences(
          out, 0, [other](const std::vector<Tensor>& in) { return mul(in[0], std::log1p(other)); }, {self}, g);
    }
  }
  SUBCASE("against torch's saved values") {
    const Tensor x = tensor({0.0, -0.0, 1.5, -2.0, kNaN, 0.0}, DType::Float64);
    for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      for (const std::string other : {"2.5", "-1.0", "-2.0", "0.0", "float('nan')"}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(other);
        // A zero in the grad: xlog1py(0, other) is 0 wherever other is a number.
        const Tensor grad = mul(random64({6}, 99), tensor({1.0, 1.0, 1.0, 1.0, 1.0, 0.0}, DType::Float64)).to(dtype);
        const auto r = torch_exec("x = a.requires_grad_()\n"
                                  "out = torch.special.xlog1py(x, " + other + ")\n"
                                  "fn = out.grad_fn\n"
                                  "assert fn.name() == 'SpecialXlog1PyBackward2', fn.name()\n"
                                  "result = (torch.tensor(float(fn._saved_other), dtype=torch.float64), fn._saved_self,"
                                  " *torch.autograd.grad(out, (x,), b))\n",
                                  {x.to(dtype), grad});
        const Grads out = call_node("SpecialXlog1PyBackward2", {grad}, {true},
                                    Saved{{"other", Scalar(r[0].item<double>())}, {"self", r[1]}});
        CHECK_TENSOR(*out[0], r[2], rtol_of(dtype), 1e-300);
      }
    }
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = {{"other", Scalar(2.0)}, {"self", self}};
    CHECK_FALSE(call_node("SpecialXlog1PyBackward2", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("SpecialXlog1PyBackward2", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("SpecialXlog1PyBackward2", {random64({3}, 1)}, {true}, saved),
                         "SpecialXlog1PyBackward2: grad has shape [3] but self has shape [2,3]", Error);
  }
}

}  // TEST_SUITE
