// Elementwise ops: unary math, binary arithmetic, comparisons, logical ops,
// where, clamp, masked_fill, and the whole-tensor allclose and equal.
//
// Each op is checked on hand-worked values and against torch over a common set
// of operands: every dtype pair among bool/int64/float32/float64, Python
// numbers, broadcasting, 0-dim and size-0 tensors, a transposed view, NaN/kInf.
// Where torch raises for an input, refgrad must raise too.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;
using refgrad::testing::torch_run;
using refgrad::testing::TorchResult;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

// A Python literal for a Scalar, of the same kind (2.0, not 2).
std::string py(const Scalar& value) {
  if (value.is_boolean()) return value.to_bool() ? "True" : "False";
  if (value.is_integral()) return std::to_string(value.to_int64());
  const double v = value.to_double();
  if (std::isnan(v)) return "math.nan";
  if (std::isinf(v)) return v > 0 ? "math.inf" : "-math.inf";
  std::ostringstream out;
  out.precision(17);
  out << v;
  std::string text = out.str();
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string describe(const std::vector<Tensor>& inputs) {
  std::string out;
  for (const Tensor& t : inputs) out += (out.empty() ? "" : ", ") + dtype_name(t.dtype()) + str(t.sizes());
  return out;
}

// The transpose of a contiguous 2-d tensor, as a view (not contiguous).
Tensor transposed(const Tensor& t) {
  return Tensor(t.storage(), {t.size(1), t.size(0)}, {t.stride(1), t.stride(0)}, t.storage_offset(), t.dtype());
}

// Every other element of a 1-d contiguous tensor: a view with gaps.
Tensor every_other(const Tensor& t) {
  return Tensor(t.storage(), {(t.size(0) + 1) / 2}, {2 * t.stride(0)}, t.storage_offset(), t.dtype());
}

// refgrad's result (from `actual`) must match torch's value of `expression`
// over `inputs`, or both must raise.
void check_like_torch(const std::string& expression, const std::vector<Tensor>& inputs,
                      const std::function<Tensor()>& actual, double rtol = 1e-6, double atol = 1e-9) {
  INFO(expression, " with ", describe(inputs));
  const TorchResult expected = torch_run(expression, inputs);
  if (!expected.ok) {
    INFO("torch raised ", expected.error);
    CHECK_THROWS_AS(actual(), Error);
    return;
  }
  Tensor result;
  CHECK_NOTHROW(result = actual());
  CHECK_TENSOR(result, expected.outputs.at(0), rtol, atol);
}

// Inputs for unary ops: every dtype, specials, a view, 0-dim and size-0.
std::vector<Tensor> unary_inputs() {
  Generator gen(11);
  return {
      tensor({{-2.5, -1.0, -0.0, 0.0, 0.5}, {1.0, 3.0, kInf, -kInf, kNaN}}),
      tensor({{-100.0, -20.0, -1e-3, 1e-3}, {0.75, 20.0, 100.0, 710.0}}),
      randn({3, 4}, gen, DType::Float64),
      transposed(randn({4, 3}, gen)),
      every_other(randn({7}, gen, DType::Float64)),
      tensor({{-3, -1, 0}, {1, 2, 7}}),
      tensor({{true, false}, {false, true}}),
      tensor(0.7),
      tensor(5),
      zeros({0, 3}),
  };
}

void check_unary(const std::string& torch_op, const std::function<Tensor(const Tensor&)>& op, double rtol = 1e-6,
                 double atol = 1e-9) {
  for (const Tensor& x : unary_inputs())
    check_like_torch(torch_op + "(a)", {x}, [&] { return op(x); }, rtol, atol);
}

// float32 transcendental functions differ from torch's vectorized ones by an ulp or two.
constexpr double kFloatRtol = 4e-6, kFloatAtol = 1e-7;

// Pairs of operands for binary ops.
std::vector<std::pair<Tensor, Tensor>> binary_inputs() {
  Generator gen(5);
  const Tensor f32 = tensor({{-2.5, -1.0, 0.0}, {0.5, 2.0, 3.0}});
  const Tensor f32_other = tensor({{1.5, -1.0, 2.0}, {-0.5, 0.0, 3.0}});
  const Tensor f64_row = tensor({0.25, -2.0, 4.0}, DType::Float64);
  const Tensor i64 = tensor({{-7, -1, 0}, {3, 5, 8}});
  const Tensor i64_col = tensor({{2}, {-3}});
  const Tensor b23 = tensor({{true, false, true}, {false, false, true}});
  const Tensor b3 = tensor({true, false, true});
  return {
      {f32, f32_other},
      {f32, f64_row},                                  // broadcast, float64 wins
      {i64, i64_col},                                  // int64 broadcast
      {i64_col, i64},                                  // negative int exponents for pow
      {i64, tensor(1.5)},                              // 0-dim float32 over int64 tensor: float32
      {tensor(-2.0, DType::Float64), f32},             // 0-dim float64 does not widen float32
      {tensor(3), tensor(-2.0, DType::Float64)},       // both 0-dim: float64
      {tensor(1.5), tensor(4)},                        // both 0-dim: float32
      {b23, b3},                                       // bool
      {b23, i64},                                      // bool and int64
      {i64, b23},
      {transposed(randn({3, 2}, gen)), f32_other},     // a non-contiguous view
      {every_other(tensor({1, 2, 3, 4, 5})), every_other(randn({6}, gen))},  // views with gaps
      {tensor({kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -kInf}), tensor({1.0, kInf, 2.0, kNaN, -0.0, -kInf, -kInf})},
      {zeros({0, 3}, DType::Int64), f64_row},          // size 0
      {tensor({-8, 7, 0, 1}), tensor({3, -2, 1, 0})},  // a zero int divisor
  };
}

std::vector<Tensor> scalar_op_tensors() {
  return {tensor({{-2.5, -1.0, 0.0}, {0.5, 2.0, kNaN}}), tensor({{-7, -1, 0}, {3, 5, 8}}),
          tensor({true, false, true}), tensor({0.25, -2.0, 4.0}, DType::Float64), tensor(3), tensor(1.5),
          zeros({2, 0}, DType::Int64)};
}

std::vector<Scalar> scalar_operands() { return {2, -3, 0, 2.5, -0.5, 0.0, true, false}; }

// op(a, b) for every pair of binary_inputs and op(a, scalar) for the scalar
// operands, against torch.<name>.
void check_binary(const std::string& torch_op, const std::function<Tensor(const Tensor&, const Tensor&)>& op,
                  const std::function<Tensor(const Tensor&, Scalar)>& scalar_op = nullptr, double rtol = 1e-6,
                  double atol = 1e-9) {
  for (const auto& [a, b] : binary_inputs())
    check_like_torch(torch_op + "(a, b)", {a, b}, [&] { return op(a, b); }, rtol, atol);
  if (!scalar_op) return;
  for (const Tensor& a : scalar_op_tensors())
    for (const Scalar& s : scalar_operands())
      check_like_torch(torch_op + "(a, " + py(s) + ")", {a}, [&] { return scalar_op(a, s); }, rtol, atol);
}

}  // namespace

TEST_SUITE("tensor") {

// ------------------------------------------------------------------ unary ---

TEST_CASE("neg") {
  CHECK_TENSOR(neg(tensor({1.5, -2.0})), tensor({-1.5, 2.0}));
  CHECK_TENSOR(neg(tensor({3, -4})), tensor({-3, 4}));
  CHECK_TENSOR(neg(tensor({int64_min})), tensor({int64_min}));  // wraps, as in torch
  CHECK_THROWS_WITH_AS(neg(tensor({true})),
                       "neg: negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                       "invert a mask, use the `~` or `logical_not()` operator instead.",
                       Error);
  CHECK_THROWS_WITH_AS(neg(Tensor()), "neg: tensor is undefined", Error);
  check_unary("torch.neg", [](const Tensor& x) { return neg(x); });
}

TEST_CASE("abs") {
  CHECK_TENSOR(abs(tensor({-1.5, 2.0, -0.0})), tensor({1.5, 2.0, 0.0}));
  CHECK_TENSOR(abs(tensor({-3, 4, int64_min})), tensor({3, 4, int64_min}));
  CHECK_THROWS_WITH_AS(abs(tensor({true})), "abs: not implemented for bool", Error);
  check_unary("torch.abs", [](const Tensor& x) { return abs(x); });
}

TEST_CASE("sign") {
  CHECK_TENSOR(sign(tensor({-2.5, 0.0, 3.0, kNaN})), tensor({-1.0, 0.0, 1.0, 0.0}));
  CHECK_TENSOR(sign(tensor({-7, 0, 9})), tensor({-1, 0, 1}));
  CHECK_TENSOR(sign(tensor({true, false})), tensor({true, false}));
  check_unary("torch.sign", [](const Tensor& x) { return sign(x); });
}

TEST_CASE("relu") {
  CHECK_TENSOR(relu(tensor({-1.0, 0.0, 2.0, kNaN})), tensor({0.0, 0.0, 2.0, kNaN}));
  CHECK_TENSOR(relu(tensor({-3, 4})), tensor({0, 4}));
  CHECK_THROWS_WITH_AS(relu(tensor({true})), "relu: Boolean inputs not supported for relu", Error);
  check_unary("torch.relu", [](const Tensor& x) { return relu(x); });
}

TEST_CASE("square") {
  CHECK_TENSOR(square(tensor({-1.5, 3.0})), tensor({2.25, 9.0}));
  CHECK_TENSOR(square(tensor({-3, 4})), tensor({9, 16}));
  CHECK_TENSOR(square(tensor({true, false})), tensor({1, 0}));  // pow(bool, 2) is int64
  check_unary("torch.square", [](const Tensor& x) { return square(x); });
}

TEST_CASE("exp") {
  CHECK_TENSOR(exp(tensor({0.0, 1.0, -kInf})), tensor({1.0, std::exp(1.0), 0.0}));
  CHECK_TENSOR(exp(tensor({0, 1})), tensor({1.0, std::exp(1.0)}));  // int64 computes in float32
  CHECK_TENSOR(exp(tensor({true})), tensor({std::exp(1.0)}));
  CHECK_THROWS_WITH_AS(exp(Tensor()), "exp: tensor is undefined", Error);
  check_unary("torch.exp", [](const Tensor& x) { return exp(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("log") {
  CHECK_TENSOR(log(tensor({1.0, 0.0, -1.0}, DType::Float64)), tensor({0.0, -kInf, kNaN}, DType::Float64));
  CHECK_TENSOR(log(tensor({true, false})), tensor({0.0, -kInf}));
  check_unary("torch.log", [](const Tensor& x) { return log(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("log1p") {
  CHECK_TENSOR(log1p(tensor({0.0, -1.0, 1e-10}, DType::Float64)), tensor({0.0, -kInf, 1e-10}, DType::Float64));
  check_unary("torch.log1p", [](const Tensor& x) { return log1p(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("expm1") {
  CHECK_TENSOR(expm1(tensor({0.0, -kInf, 1e-10}, DType::Float64)), tensor({0.0, -1.0, 1e-10}, DType::Float64));
  check_unary("torch.expm1", [](const Tensor& x) { return expm1(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("sqrt") {
  CHECK_TENSOR(sqrt(tensor({4.0, 0.0, -1.0, kInf})), tensor({2.0, 0.0, kNaN, kInf}));
  CHECK_TENSOR(sqrt(tensor({9})), tensor({3.0}));
  check_unary("torch.sqrt", [](const Tensor& x) { return sqrt(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("rsqrt") {
  CHECK_TENSOR(rsqrt(tensor({4.0, 0.0, -1.0, kInf})), tensor({0.5, kInf, kNaN, 0.0}));
  check_unary("torch.rsqrt", [](const Tensor& x) { return rsqrt(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("sin") {
  CHECK_TENSOR(sin(tensor({0.0, M_PI / 2}, DType::Float64)), tensor({0.0, 1.0}, DType::Float64));
  check_unary("torch.sin", [](const Tensor& x) { return sin(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("cos") {
  CHECK_TENSOR(cos(tensor({0.0, M_PI}, DType::Float64)), tensor({1.0, -1.0}, DType::Float64));
  check_unary("torch.cos", [](const Tensor& x) { return cos(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("tan") {
  CHECK_TENSOR(tan(tensor({0.0, M_PI / 4}, DType::Float64)), tensor({0.0, 1.0}, DType::Float64), 1e-12);
  check_unary("torch.tan", [](const Tensor& x) { return tan(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("asin, acos, atan") {
  CHECK_TENSOR(asin(tensor({0.0, 1.0, 2.0}, DType::Float64)), tensor({0.0, M_PI / 2, kNaN}, DType::Float64), 1e-15);
  CHECK_TENSOR(acos(tensor({1.0, 0.0, -1.0}, DType::Float64)), tensor({0.0, M_PI / 2, M_PI}, DType::Float64), 1e-15);
  CHECK_TENSOR(atan(tensor({0.0, 1.0, kInf}, DType::Float64)), tensor({0.0, M_PI / 4, M_PI / 2}, DType::Float64), 1e-15);
  check_unary("torch.asin", [](const Tensor& x) { return asin(x); }, kFloatRtol, kFloatAtol);
  check_unary("torch.acos", [](const Tensor& x) { return acos(x); }, kFloatRtol, kFloatAtol);
  check_unary("torch.atan", [](const Tensor& x) { return atan(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("sinh, cosh, asinh, acosh, atanh") {
  CHECK_TENSOR(sinh(tensor({0.0, 1.0}, DType::Float64)), tensor({0.0, 1.1752011936438014}, DType::Float64), 1e-15);
  CHECK_TENSOR(cosh(tensor({0.0, 1.0}, DType::Float64)), tensor({1.0, 1.5430806348152437}, DType::Float64), 1e-15);
  CHECK_TENSOR(asinh(tensor({0.0, 1.1752011936438014}, DType::Float64)), tensor({0.0, 1.0}, DType::Float64), 1e-15);
  CHECK_TENSOR(acosh(tensor({1.0, 0.5}, DType::Float64)), tensor({0.0, kNaN}, DType::Float64), 1e-15);
  CHECK_TENSOR(atanh(tensor({0.0, 1.0, 2.0}, DType::Float64)), tensor({0.0, kInf, kNaN}, DType::Float64), 1e-15);
  check_unary("torch.sinh", [](const Tensor& x) { return sinh(x); }, kFloatRtol, kFloatAtol);
  check_unary("torch.cosh", [](const Tensor& x) { return cosh(x); }, kFloatRtol, kFloatAtol);
  check_unary("torch.asinh", [](const Tensor& x) { return asinh(x); }, kFloatRtol, kFloatAtol);
  check_unary("torch.acosh", [](const Tensor& x) { return acosh(x); }, kFloatRtol, kFloatAtol);
  check_unary("torch.atanh", [](const Tensor& x) { return atanh(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("tanh") {
  CHECK_TENSOR(tanh(tensor({0.0, kInf, -kInf})), tensor({0.0, 1.0, -1.0}));
  check_unary("torch.tanh", [](const Tensor& x) { return tanh(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("sigmoid") {
  // 1 / (1 + e^-x): no NaN at the extremes.
  CHECK_TENSOR(sigmoid(tensor({0.0, -1000.0, 1000.0, -kInf, kInf}, DType::Float64)),
               tensor({0.5, 0.0, 1.0, 0.0, 1.0}, DType::Float64));
  CHECK_TENSOR(sigmoid(tensor({0})), tensor({0.5}));
  check_unary("torch.sigmoid", [](const Tensor& x) { return sigmoid(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("erf") {
  CHECK_TENSOR(erf(tensor({0.0, kInf, -kInf})), tensor({0.0, 1.0, -1.0}));
  check_unary("torch.erf", [](const Tensor& x) { return erf(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("erfc") {
  // erfc(30) is about 2.6e-393, below the smallest double: 0, not 1 - erf(30) computed in two steps.
  CHECK_TENSOR(erfc(tensor({0.0, kInf, -kInf, 30.0}, DType::Float64)), tensor({1.0, 0.0, 2.0, 0.0}, DType::Float64));
  check_unary("torch.erfc", [](const Tensor& x) { return erfc(x); }, kFloatRtol, kFloatAtol);
}

TEST_CASE("reciprocal") {
  CHECK_TENSOR(reciprocal(tensor({2.0, 0.0, -0.0, kInf})), tensor({0.5, kInf, -kInf, 0.0}));
  CHECK_TENSOR(reciprocal(tensor({4, 0})), tensor({0.25, kInf}));
  check_unary("torch.reciprocal", [](const Tensor& x) { return reciprocal(x); }, kFloatRtol, kFloatAtol);
}

// ----------------------------------------------------------------- binary ---

TEST_CASE("add") {
  CHECK_TENSOR(add(tensor({1.0, 2.0}), tensor({0.5, -1.0})), tensor({1.5, 1.0}));
  CHECK_TENSOR(add(tensor({1.0, 2.0}), tensor({0.5, -1.0}), 2), tensor({2.0, 0.0}));
  CHECK_TENSOR(add(tensor({{1}, {2}}), tensor({10, 20, 30})), tensor({{11, 21, 31}, {12, 22, 32}}));
  CHECK_TENSOR(add(tensor({int64_max}), 1), tensor({int64_min}));  // wraps
  CHECK_TENSOR(add(tensor({true, false}), tensor({true, false})), tensor({true, false}));
  CHECK_TENSOR(add(tensor({true, false}), 1), tensor({2, 1}));
  // Three tiers of promotion.
  CHECK_TENSOR(add(tensor({1, 2}), 2.5), tensor({3.5, 4.5}));                            // float32
  CHECK_TENSOR(add(tensor({1, 2}), 2), tensor({3, 4}));                                  // int64
  CHECK_TENSOR(add(tensor({1.0, 2.0}), tensor(1.0, DType::Float64)), tensor({2.0, 3.0}));  // float32
  CHECK_TENSOR(add(tensor(1.0), tensor({1.0, 2.0}, DType::Float64)), tensor({2.0, 3.0}, DType::Float64));
  CHECK_TENSOR(add(tensor({1.0}), 1e300), tensor({kInf}));  // a wrapped number is not range-checked

  // A contiguous float32 sum takes the flat path; check it on a larger tensor.
  Generator gen(3);
  const Tensor x = randn({64, 33}, gen), y = randn({64, 33}, gen);
  check_like_torch("torch.add(a, b)", {x, y}, [&] { return add(x, y); });
  check_like_torch("torch.add(a, b, alpha=0.3)", {x, y}, [&] { return add(x, y, 0.3); });

  check_binary("torch.add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
               [](const Tensor& a, Scalar s) { return add(a, s); });
  for (const auto& [a, b] : binary_inputs())
    for (Scalar alpha : {Scalar(3), Scalar(-1.5), Scalar(true), Scalar(0)})
      check_like_torch("torch.add(a, b, alpha=" + py(alpha) + ")", {a, b}, [&] { return add(a, b, alpha); });
  for (const Tensor& a : scalar_op_tensors())
    check_like_torch("torch.add(a, 2.5, alpha=2)", {a}, [&] { return add(a, 2.5, 2); });

  CHECK_THROWS_WITH_AS(add(tensor({1, 2}), tensor({3, 4}), 2.5),
                       "add: for integral input tensors, argument alpha must not be a floating point number "
                       "(alpha=2.5, result int64)",
                       Error);
  CHECK_THROWS_WITH_AS(add(tensor({true}), 1, 0.5), doctest::Contains("argument alpha must not be a floating"),
                       Error);
  CHECK_THROWS_WITH_AS(add(tensor({1, 2}), tensor({3, 4}), true),
                       "add: Boolean alpha only supported for Boolean results (the result is int64)", Error);
  CHECK_THROWS_WITH_AS(add(tensor({1.0}), 1, 1e300),
                       doctest::Contains("add: value 1e+300 cannot be converted to type float32"),
                       Error);
  CHECK_THROWS_WITH_AS(add(zeros({2}), zeros({3})),
                       "add: broadcast: shapes [2] and [3] are not broadcastable (size 2 vs 3 at dim 0)", Error);
  CHECK_THROWS_WITH_AS(add(Tensor(), zeros({3})), "add: tensor is undefined", Error);
}

TEST_CASE("sub") {
  CHECK_TENSOR(sub(tensor({1.0, 2.0}), tensor({0.5, -1.0})), tensor({0.5, 3.0}));
  CHECK_TENSOR(sub(tensor({1.0, 2.0}), tensor({0.5, -1.0}), 2), tensor({0.0, 4.0}));
  CHECK_TENSOR(sub(tensor({5, 6}), 1, 3), tensor({2, 3}));
  CHECK_TENSOR(sub(tensor({int64_min}), 1), tensor({int64_max}));  // wraps
  CHECK_TENSOR(sub(tensor({1, 2}), 0.5), tensor({0.5, 1.5}));

  check_binary("torch.sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
               [](const Tensor& a, Scalar s) { return sub(a, s); });
  for (const auto& [a, b] : binary_inputs())
    for (Scalar alpha : {Scalar(3), Scalar(-1.5)})
      check_like_torch("torch.sub(a, b, alpha=" + py(alpha) + ")", {a, b}, [&] { return sub(a, b, alpha); });

  const std::string two_bools =
      "sub: subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` "
      "operator instead.";
  const std::string one_bool =
      "sub: subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask, "
      "use the `~` or `logical_not()` operator instead.";
  CHECK_THROWS_WITH_AS(sub(tensor({true}), tensor({false})), two_bools.c_str(), Error);
  CHECK_THROWS_WITH_AS(sub(tensor({true}), true), two_bools.c_str(), Error);
  CHECK_THROWS_WITH_AS(sub(tensor({true}), 1), one_bool.c_str(), Error);
  CHECK_THROWS_WITH_AS(sub(tensor({1}), tensor({true})), one_bool.c_str(), Error);
  CHECK_THROWS_WITH_AS(sub(tensor({1}), tensor({2}), 0.5), doctest::Contains("sub: for integral input tensors"), Error);
}

TEST_CASE("mul") {
  CHECK_TENSOR(mul(tensor({1.5, -2.0}), tensor({2.0, 3.0})), tensor({3.0, -6.0}));
  CHECK_TENSOR(mul(tensor({true, true}), tensor({true, false})), tensor({true, false}));
  CHECK_TENSOR(mul(tensor({2, 3}), 2), tensor({4, 6}));      // int64 * int stays int64
  CHECK_TENSOR(mul(tensor({2, 3}), 0.5), tensor({1.0, 1.5}));  // int64 * float is float32
  CHECK_TENSOR(mul(tensor({int64_max}), 3), tensor({int64_max - 2}));  // wraps
  CHECK_TENSOR(mul(tensor({1.0}), 1e300), tensor({kInf}));
  check_binary("torch.mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
               [](const Tensor& a, Scalar s) { return mul(a, s); });
}

TEST_CASE("div") {
  // True division: integers divide in float32.
  CHECK_TENSOR(div(tensor({7, -7}), tensor({2, 2})), tensor({3.5, -3.5}));
  CHECK_TENSOR(div(tensor({1.0, -1.0, 0.0}), 0), tensor({kInf, -kInf, kNaN}));
  CHECK_TENSOR(div(tensor({1, -1, 0}), 0), tensor({kInf, -kInf, kNaN}));
  // Floor division of ints follows Python; trunc rounds toward zero.
  CHECK_TENSOR(div(tensor({7, -7, 7, -7}), tensor({2, 2, -2, -2}), "floor"), tensor({3, -4, -4, 3}));
  CHECK_TENSOR(div(tensor({7, -7, 7, -7}), tensor({2, 2, -2, -2}), "trunc"), tensor({3, -3, -3, 3}));
  CHECK_TENSOR(div(tensor({int64_min}), -1, "floor"), tensor({int64_min}));  // wraps, no trap
  CHECK_TENSOR(div(tensor({int64_min}), -1, "trunc"), tensor({int64_min}));
  CHECK_TENSOR(div(tensor({7.0, -7.0, 1.0, -1.0, 0.0}), tensor({2.0, 2.0, 0.0, 0.0, 0.0}), "floor"),
               tensor({3.0, -4.0, kInf, -kInf, kNaN}));
  CHECK_TENSOR(div(tensor({5.0, -0.5}), tensor({-kInf, 1.0}), "floor"), tensor({-1.0, -1.0}));
  CHECK_TENSOR(div(tensor({-7.5}), 2, "trunc"), tensor({-3.0}));
  CHECK_TENSOR(div(tensor({7}), 2.5, "floor"), tensor({2.0}));  // promoted to float32
  CHECK_TENSOR(div(zeros({0}, DType::Int64), 0, "floor"), zeros({0}, DType::Int64));  // nothing is divided

  for (const char* mode : {"trunc", "floor"}) {
    check_binary(std::string("(lambda x, y: torch.div(x, y, rounding_mode='") + mode + "'))",
                 [mode](const Tensor& a, const Tensor& b) { return div(a, b, mode); },
                 [mode](const Tensor& a, Scalar s) { return div(a, s, mode); });
  }
  check_binary("torch.div", [](const Tensor& a, const Tensor& b) { return div(a, b); },
               [](const Tensor& a, Scalar s) { return div(a, s); });
  Generator gen(9);
  const Tensor x = randn({40}, gen, DType::Float64), y = randn({40}, gen, DType::Float64);
  check_like_torch("torch.div(a, b, rounding_mode='floor')", {x, y}, [&] { return div(x, y, "floor"); });

  CHECK_THROWS_WITH_AS(div(tensor({1, 2}), tensor({1, 0}), "floor"),
                       "div: ZeroDivisionError: integer division by zero (rounding_mode='floor')", Error);
  CHECK_THROWS_WITH_AS(div(tensor({1, 2}), 0, "trunc"),
                       "div: ZeroDivisionError: integer division by zero (rounding_mode='trunc')", Error);
  CHECK_THROWS_WITH_AS(div(tensor({1}), false, "trunc"), doctest::Contains("ZeroDivisionError"), Error);
  CHECK_THROWS_WITH_AS(div(tensor({1}), tensor({2}), "round"),
                       "div: expected rounding_mode to be one of None, 'trunc', or 'floor' but found 'round'", Error);
  CHECK_THROWS_WITH_AS(div(tensor({true}), tensor({true}), "trunc"),
                       "div: rounding_mode='trunc' is not implemented for bool", Error);
}

TEST_CASE("pow") {
  CHECK_TENSOR(pow(tensor({2.0, -3.0}), tensor({3.0, 2.0})), tensor({8.0, 9.0}));
  CHECK_TENSOR(pow(tensor({2, -3, 3}), tensor({10, 3, 70})), tensor({1024, -27, 2293070008301402073}));  // wraps
  // Negative int exponents from a tensor: 0 except for bases 1 and -1.
  CHECK_TENSOR(pow(tensor({2, 0, 1, -1, -1}), tensor({-1, -1, -5, -3, -4})), tensor({0, 0, 1, -1, 1}));
  CHECK_TENSOR(pow(tensor({2, 3}), 2), tensor({4, 9}));
  CHECK_TENSOR(pow(tensor({4, 9}), 0.5), tensor({2.0, 3.0}));
  CHECK_TENSOR(pow(tensor({kNaN, 2.0}), 0), tensor({1.0, 1.0}));
  CHECK_TENSOR(pow(tensor({true, false}), false), tensor({true, true}));
  CHECK_TENSOR(pow(tensor({true, false}), true), tensor({true, false}));
  CHECK_TENSOR(pow(tensor({-0.0, -kInf}), 0.5), tensor({-0.0, kNaN}));  // sqrt, as ATen
  CHECK_TENSOR(pow(tensor({-0.0, -kInf}), tensor(0.5)), tensor({0.0, kInf}));  // std::pow
  CHECK_TENSOR(pow(2, tensor({3, 0, -1})), tensor({8, 1, 0}));
  CHECK_TENSOR(pow(2.5, tensor({1.0}, DType::Float64)), tensor({2.5}, DType::Float64));
  CHECK_TENSOR(pow(1, tensor({kNaN, 2.0})), tensor({1.0, 1.0}));

  check_binary("torch.pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
               [](const Tensor& a, Scalar s) { return pow(a, s); }, kFloatRtol, kFloatAtol);
  const Tensor specials = tensor({{-2.0, -0.0, 0.0, 0.5}, {2.0, kInf, -kInf, kNaN}});
  for (double e : {0.5, -0.5, -1.0, 2.0, 3.0, -2.0, 1.5, -3.0, kInf, -kInf, kNaN, 1.0, 0.0})
    check_like_torch("torch.pow(a, " + py(e) + ")", {specials}, [&] { return pow(specials, e); });
  for (const Tensor& exponent : scalar_op_tensors()) {
    for (Scalar base : {Scalar(2), Scalar(-2), Scalar(1), Scalar(2.5), Scalar(true), Scalar(false), Scalar(0)})
      check_like_torch("torch.pow(" + py(base) + ", a)", {exponent}, [&] { return pow(base, exponent); },
                       kFloatRtol, kFloatAtol);
  }

  CHECK_THROWS_WITH_AS(pow(tensor({2, 3}), -1),
                       "pow: Integers to negative integer powers are not allowed (int64 tensor to the power -1)",
                       Error);
  CHECK_THROWS_WITH_AS(pow(tensor({true}), -2), doctest::Contains("Integers to negative integer powers"), Error);
  CHECK_THROWS_WITH_AS(pow(tensor({true}), tensor({true})), "pow: not implemented for bool (base bool, exponent bool)",
                       Error);
  CHECK_THROWS_WITH_AS(pow(true, tensor({true})), "pow: not implemented for bool (base bool, exponent bool)", Error);
}

TEST_CASE("maximum") {
  CHECK_TENSOR(maximum(tensor({1.0, kNaN, 3.0}), tensor({2.0, 0.0, kNaN})), tensor({2.0, kNaN, kNaN}));
  CHECK_TENSOR(maximum(tensor({1, 5}), tensor({true, false})), tensor({1, 5}));
  CHECK_TENSOR(maximum(tensor({{1}, {4}}), tensor({2, 3})), tensor({{2, 3}, {4, 4}}));
  check_binary("torch.maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
}

TEST_CASE("minimum") {
  CHECK_TENSOR(minimum(tensor({1.0, kNaN, 3.0}), tensor({2.0, 0.0, kNaN})), tensor({1.0, kNaN, kNaN}));
  CHECK_TENSOR(minimum(tensor({true, false}), tensor({true, true})), tensor({true, false}));
  check_binary("torch.minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
}

TEST_CASE("atan2") {
  CHECK_TENSOR(atan2(tensor({1.0, 0.0, -1.0}, DType::Float64), tensor({1.0, -1.0, 0.0}, DType::Float64)),
               tensor({M_PI / 4, M_PI, -M_PI / 2}, DType::Float64));
  CHECK_TENSOR(atan2(tensor({1}), tensor({0})), tensor({float(M_PI / 2)}));  // int64 computes in float32
  check_binary("torch.atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }, nullptr, kFloatRtol,
               kFloatAtol);
}

// ------------------------------------------------------------ comparisons ---

TEST_CASE("eq") {
  CHECK_TENSOR(eq(tensor({1.0, kNaN, 2.0}), tensor({1.0, kNaN, 3.0})), tensor({true, false, false}));
  CHECK_TENSOR(eq(tensor({7, 8}), 7.0), tensor({true, false}));
  // Computed in the promoted dtype: 0.1 as float32 both times here...
  CHECK_TENSOR(eq(tensor({0.1}), 0.1), tensor({true}));
  CHECK_TENSOR(eq(tensor({0.1}), tensor(0.1, DType::Float64)), tensor({true}));
  // ...but float32(0.1) != float64(0.1) when both have dims.
  CHECK_TENSOR(eq(tensor({0.1}), tensor({0.1}, DType::Float64)), tensor({false}));
  check_binary("torch.eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
               [](const Tensor& a, Scalar s) { return eq(a, s); });
}

TEST_CASE("ne") {
  CHECK_TENSOR(ne(tensor({1.0, kNaN}), tensor({1.0, kNaN})), tensor({false, true}));
  CHECK_TENSOR(ne(tensor({true, false}), 1), tensor({false, true}));
  check_binary("torch.ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
               [](const Tensor& a, Scalar s) { return ne(a, s); });
}

TEST_CASE("lt") {
  CHECK_TENSOR(lt(tensor({3, 4}), 3.5), tensor({true, false}));
  CHECK_TENSOR(lt(tensor({true, false}), 0.5), tensor({false, true}));
  CHECK_TENSOR(lt(tensor({kNaN, -kInf}), tensor({1.0, 0.0})), tensor({false, true}));
  check_binary("torch.lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
               [](const Tensor& a, Scalar s) { return lt(a, s); });
}

TEST_CASE("le") {
  CHECK_TENSOR(le(tensor({{1}, {2}}), tensor({1, 2})), tensor({{true, true}, {false, true}}));
  check_binary("torch.le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
               [](const Tensor& a, Scalar s) { return le(a, s); });
}

TEST_CASE("gt") {
  CHECK_TENSOR(gt(tensor({true, false}), -1), tensor({true, true}));
  CHECK_TENSOR(gt(tensor(2.0), tensor({1, 3})), tensor({true, false}));
  check_binary("torch.gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
               [](const Tensor& a, Scalar s) { return gt(a, s); });
}

TEST_CASE("ge") {
  CHECK_TENSOR(ge(tensor({1.0, 2.0, kNaN}), 2), tensor({false, true, false}));
  check_binary("torch.ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
               [](const Tensor& a, Scalar s) { return ge(a, s); });
}

TEST_CASE("logical_and") {
  CHECK_TENSOR(logical_and(tensor({1.0, kNaN, 0.0}), tensor({2, 3, 4})), tensor({true, true, false}));
  CHECK_TENSOR(logical_and(tensor({{true}, {false}}), tensor({true, false})), tensor({{true, false}, {false, false}}));
  check_binary("torch.logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); });
}

TEST_CASE("logical_or") {
  CHECK_TENSOR(logical_or(tensor({0.0, kNaN, 0.0}), tensor({0, 0, 4})), tensor({false, true, true}));
  check_binary("torch.logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); });
}

TEST_CASE("logical_not") {
  CHECK_TENSOR(logical_not(tensor({0.0, kNaN, -2.0})), tensor({true, false, false}));
  CHECK_TENSOR(logical_not(tensor({0, 3})), tensor({true, false}));
  check_unary("torch.logical_not", [](const Tensor& x) { return logical_not(x); });
}

// ------------------------------------------------- where, clamp, masked_fill ---

TEST_CASE("where") {
  const Tensor cond = tensor({true, false, true});
  CHECK_TENSOR(where(cond, tensor({1.0, 2.0, 3.0}), tensor({-1.0, -2.0, -3.0})), tensor({1.0, -2.0, 3.0}));
  CHECK_TENSOR(where(cond, tensor({1, 2, 3}), 2.5), tensor({1.0, 2.5, 3.0}));  // float32
  CHECK_TENSOR(where(cond, tensor({1, 2, 3}), 0), tensor({1, 0, 3}));          // int64
  CHECK_TENSOR(where(cond, true, tensor({1, 2, 3})), tensor({1, 2, 1}));
  CHECK_TENSOR(where(tensor({{true}, {false}}), tensor({1, 2}), tensor(0)), tensor({{1, 2}, {0, 0}}));

  const std::vector<Tensor> conditions = {tensor({{true, false, true}, {false, true, false}}),
                                          tensor({false, true, true}),
                                          tensor(true), zeros({0, 1}, DType::Bool)};
  for (const Tensor& c : conditions) {
    for (const auto& [a, b] : binary_inputs())
      check_like_torch("torch.where(a, b, c)", {c, a, b}, [&] { return where(c, a, b); });
    for (const Tensor& a : scalar_op_tensors()) {
      for (Scalar s : {Scalar(2), Scalar(-0.5), Scalar(true)}) {
        check_like_torch("torch.where(a, b, " + py(s) + ")", {c, a}, [&] { return where(c, a, s); });
        check_like_torch("torch.where(a, " + py(s) + ", b)", {c, a}, [&] { return where(c, s, a); });
      }
    }
  }

  CHECK_THROWS_WITH_AS(where(tensor({1, 0}), tensor({1, 2}), tensor({3, 4})),
                       "where: expected condition to be a boolean tensor, but got a tensor with dtype int64", Error);
  CHECK_THROWS_WITH_AS(where(cond, tensor({1.0, 2.0, 3.0}), 1e300),
                       doctest::Contains("where: value 1e+300 cannot be converted to type float32 "
                                         "without overflow"),
                       Error);
  CHECK_THROWS_WITH_AS(where(cond, zeros({2}), 1.0), doctest::Contains("where: broadcast: shapes"), Error);
}

TEST_CASE("clamp") {
  using Bound = std::optional<Scalar>;
  const Tensor x = tensor({1.5, -2.0, kNaN, 0.5});
  CHECK_TENSOR(clamp(x, Bound(0), Bound(1)), tensor({1.0, 0.0, kNaN, 0.5}));
  CHECK_TENSOR(clamp(x, Bound(2), Bound(1)), tensor({1.0, 1.0, kNaN, 1.0}));  // min > max gives max
  CHECK_TENSOR(clamp(x, Bound(kNaN), Bound(1)), tensor({kNaN, kNaN, kNaN, kNaN}));
  CHECK_TENSOR(clamp(tensor({7, -7, 0}), Bound(0), Bound(5)), tensor({5, 0, 0}));
  CHECK_TENSOR(clamp(tensor({7, -7, 0}), Bound(0.5), std::nullopt), tensor({7.0, 0.5, 0.5}));  // float32
  CHECK_TENSOR(clamp(tensor({7, -7, 0}), std::nullopt, Bound(2)), tensor({2, -7, 0}));
  CHECK_TENSOR(clamp(tensor({true, false}), Bound(2), std::nullopt), tensor({2, 2}));
  CHECK_TENSOR(clamp(tensor({1, 5}), OptionalTensor(tensor({{2}, {6}})), std::nullopt), tensor({{2, 5}, {6, 6}}));
  CHECK_TENSOR(clamp(tensor({1.0, 2.0, 3.0}), OptionalTensor(tensor({2.0, 2.0, kNaN})),
                     OptionalTensor(tensor({1.0, kNaN, 4.0}))),
               tensor({1.0, kNaN, kNaN}));
  CHECK_TENSOR(clamp(tensor({true, false}), OptionalTensor(tensor({true, true})), std::nullopt), tensor({true, true}));

  const std::vector<Bound> bounds = {std::nullopt, Bound(0), Bound(2), Bound(-1.5), Bound(0.5), Bound(kNaN),
                                     Bound(true)};
  for (const Tensor& t : scalar_op_tensors())
    for (const Bound& lo : bounds)
      for (const Bound& hi : bounds)
        check_like_torch("torch.clamp(a, " + (lo ? py(*lo) : "None") + ", " + (hi ? py(*hi) : "None") + ")", {t},
                         [&] { return clamp(t, lo, hi); });

  Generator gen(4);
  const Tensor values = transposed(randn({4, 3}, gen));
  const std::vector<OptionalTensor> tensor_bounds = {
      std::nullopt, tensor(-0.5), tensor({-1.0, kNaN, 0.0}), tensor({{0}, {1}, {-1}}),
      tensor({0.5, 0.5, 0.5}, DType::Float64),
      tensor(true)};
  for (const Tensor& t : {values, tensor({{-7, -1, 0}, {3, 5, 8}}), tensor({true, false, true})})
    for (const OptionalTensor& lo : tensor_bounds)
      for (const OptionalTensor& hi : tensor_bounds) {
        // The bounds present are b (and c), in order.
        std::vector<Tensor> inputs = {t};
        if (lo) inputs.push_back(*lo);
        if (hi) inputs.push_back(*hi);
        const std::string expression = "torch.clamp(a, " + std::string(lo ? "b" : "None") + ", " +
                                       std::string(hi ? (lo ? "c" : "b") : "None") + ")";
        check_like_torch(expression, inputs, [&] { return clamp(t, lo, hi); });
      }

  CHECK_THROWS_WITH_AS(clamp(x, Bound(), Bound()), "clamp: At least one of 'min' or 'max' must not be None", Error);
  CHECK_THROWS_WITH_AS(clamp(x, OptionalTensor(), OptionalTensor()),
                       "clamp: At least one of 'min' or 'max' must not be None", Error);
  CHECK_THROWS_WITH_AS(clamp(tensor({true}), Bound(false), Bound(true)),
                       "clamp: not implemented for bool with Scalar bounds", Error);
  CHECK_THROWS_WITH_AS(clamp(tensor({true}), OptionalTensor(tensor(false)), OptionalTensor(tensor(true))),
                       "clamp: not implemented for bool with both min and max tensors", Error);
  CHECK_THROWS_WITH_AS(clamp(tensor({1.0}), Bound(1e300), std::nullopt),
                       doctest::Contains("clamp: value 1e+300 cannot be converted to type float32"),
                       Error);
  CHECK_THROWS_WITH_AS(clamp(zeros({2}), OptionalTensor(zeros({3})), std::nullopt),
                       doctest::Contains("clamp: broadcast: shapes [2] and [3]"), Error);
}

TEST_CASE("masked_fill") {
  const Tensor mask = tensor({true, false, true});
  CHECK_TENSOR(masked_fill(tensor({1.0, 2.0, 3.0}), mask, -1.5), tensor({-1.5, 2.0, -1.5}));
  CHECK_TENSOR(masked_fill(tensor({7, -7, 0}), mask, 2.5), tensor({2, -7, 2}));  // self's dtype
  CHECK_TENSOR(masked_fill(tensor({true, false, false}), mask, 0.0), tensor({false, false, false}));
  CHECK_TENSOR(masked_fill(tensor({1.0, 2.0, 3.0}), mask, tensor(kInf, DType::Float64)), tensor({kInf, 2.0, kInf}));
  CHECK_TENSOR(masked_fill(tensor({{1, 2}, {3, 4}}), tensor({true, false}), 0), tensor({{0, 2}, {0, 4}}));
  // The out-of-place op broadcasts self with the mask, as torch.masked_fill does.
  CHECK_TENSOR(masked_fill(tensor({7}), tensor({true, false}), 2), tensor({2, 7}));

  Generator gen(8);
  const std::vector<Tensor> selves = {transposed(randn({3, 2}, gen)), tensor({{-7, -1, 0}, {3, 5, 8}}),
                                      tensor({{true, false, true}, {false, false, true}}), tensor(1.5, DType::Float64),
                                      zeros({0, 3})};
  const std::vector<Tensor> masks = {tensor({{true, false, true}, {false, true, false}}), tensor({false, true, true}),
                                     tensor(true), tensor({{true}, {false}})};
  for (const Tensor& self : selves)
    for (const Tensor& m : masks) {
      for (Scalar value : {Scalar(2), Scalar(-0.5), Scalar(true), Scalar(kInf), Scalar(kNaN), Scalar(1e30)})
        check_like_torch("torch.masked_fill(a, b, " + py(value) + ")", {self, m},
                         [&] { return masked_fill(self, m, value); });
      for (const Tensor& value : {tensor(3), tensor(-2.5, DType::Float64), tensor(false), tensor({1.0})})
        check_like_torch("torch.masked_fill(a, b, c)", {self, m, value}, [&] { return masked_fill(self, m, value); });
    }

  CHECK_THROWS_WITH_AS(masked_fill(tensor({1.0}), tensor({1}), 0.0),
                       "masked_fill: only supports boolean masks, but got mask with dtype int64", Error);
  CHECK_THROWS_WITH_AS(masked_fill(tensor({1.0}), tensor({true}), tensor({2.0})),
                       "masked_fill: only supports a 0-dimensional value tensor, but got tensor with 1 dimension(s)",
                       Error);
  // c10 lets 2^63 through to int64 (INT64_MAX rounds up to it as a double), as INT64_MIN.
  CHECK_TENSOR(masked_fill(tensor({1, 2}), tensor({true, false}), 0x1p63),
               torch_eval1("torch.masked_fill(a, b, 2.0**63)", {tensor({1, 2}), tensor({true, false})}));
  CHECK_THROWS_WITH_AS(masked_fill(tensor({1}), tensor({true}), kInf),
                       "masked_fill: value inf cannot be converted to type int64 without overflow", Error);
  CHECK_THROWS_WITH_AS(masked_fill(tensor({1}), tensor({true}), tensor(kNaN)),
                       "masked_fill: value nan cannot be converted to type int64 without overflow", Error);
  CHECK_THROWS_WITH_AS(masked_fill(tensor({1.0}), tensor({true}), 1e300),
                       doctest::Contains("cannot be converted to type float32 without overflow"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(zeros({2}), tensor({true, false, true}), 0.0),
                       doctest::Contains("masked_fill: broadcast: shapes [2] and [3]"), Error);
}

// ------------------------------------------------------------- comparison ---

TEST_CASE("allclose") {
  CHECK(allclose(tensor({1.0, 2.0}), tensor({1.0, 2.0 + 1e-6})));
  CHECK_FALSE(allclose(tensor({1.0}), tensor({1.001})));
  CHECK(allclose(tensor({1.0, 1.0}), tensor({{1.0}, {1.0}})));  // broadcasts
  CHECK_FALSE(allclose(tensor({1.0, 2.0}), tensor(1.0)));
  CHECK(allclose(tensor({kInf, -kInf}), tensor({kInf, -kInf})));
  CHECK_FALSE(allclose(tensor({kInf}), tensor({-kInf})));
  CHECK_FALSE(allclose(tensor({1.0}), tensor({kInf}), 0, kInf));  // |a - b| must be finite
  CHECK_FALSE(allclose(tensor({kNaN}), tensor({kNaN})));
  CHECK(allclose(tensor({kNaN}), tensor({kNaN}), 1e-5, 1e-8, true));
  CHECK(allclose(zeros({0}), zeros({0})));
  CHECK(allclose(tensor({1}), tensor({2}), 0.6));  // |1 - 2| <= 0.6 * |2|
  CHECK_FALSE(allclose(tensor({2}), tensor({1}), 0.6));
  // Zero tolerances compare exactly, even past float precision.
  CHECK_FALSE(allclose(tensor({std::int64_t{9007199254740993}}), tensor({std::int64_t{9007199254740992}}), 0, 0));

  const std::vector<std::pair<Tensor, Tensor>> pairs = {
      {tensor({1.0, 2.0, 3.0}), tensor({1.0, 2.00001, 3.0})},
      {tensor({1.0, kNaN}, DType::Float64), tensor({1.0 + 1e-9, kNaN}, DType::Float64)},
      {tensor({{1, 2}, {3, 4}}), tensor({1, 2})},
      {tensor({true, false}), tensor({false, false})},
      {tensor({100000001.0}), tensor({100000000.0})},
      {tensor({std::int64_t{9007199254740993}}), tensor({std::int64_t{9007199254740992}})},
      {zeros({0, 2}), zeros({2})},
  };
  for (const auto& [a, b] : pairs)
    for (double rtol : {0.0, 1e-5, 0.5})
      for (double atol : {0.0, 1e-8, 1.0})
        for (bool equal_nan : {false, true}) {
          const std::string expression = "torch.allclose(a, b, rtol=" + py(rtol) + ", atol=" + py(atol) +
                                         ", equal_nan=" + py(equal_nan) + ")";
          INFO(expression, " with ", describe({a, b}));
          CHECK(allclose(a, b, rtol, atol, equal_nan) == torch_eval1(expression, {a, b}).item<bool>());
        }

  CHECK_THROWS_WITH_AS(allclose(tensor({1.0}), tensor({1})), "allclose: dtype float32 did not match int64", Error);
  CHECK_THROWS_WITH_AS(allclose(tensor({1.0}), tensor({1.0}), -1),
                       "allclose: rtol must be greater than or equal to zero, but got -1", Error);
  CHECK_THROWS_WITH_AS(allclose(tensor({1.0}), tensor({1.0}), 0, -1),
                       "allclose: atol must be greater than or equal to zero, but got -1", Error);
  CHECK_THROWS_WITH_AS(allclose(zeros({2}), zeros({3})), doctest::Contains("allclose: broadcast: shapes [2] and [3]"),
                       Error);
}

TEST_CASE("equal") {
  CHECK(equal(tensor({1.0, 2.0}), tensor({1.0, 2.0})));
  CHECK(equal(tensor({1.0}), tensor({1})));  // compared after promotion
  CHECK_FALSE(equal(tensor({0.1}), tensor({0.1}, DType::Float64)));
  CHECK_FALSE(equal(tensor({1.0, 1.0}), tensor({1.0})));  // no broadcasting
  CHECK_FALSE(equal(tensor({1.0}), tensor(1.0)));
  CHECK_FALSE(equal(tensor({kNaN}), tensor({kNaN})));
  CHECK(equal(tensor({-0.0}), tensor({0.0})));
  CHECK(equal(zeros({0}), zeros({0}, DType::Int64)));
  CHECK_FALSE(equal(zeros({0, 2}), zeros({2, 0})));
  const Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(equal(transposed(x), tensor({{1, 4}, {2, 5}, {3, 6}})));  // a view
  CHECK_FALSE(equal(transposed(x), tensor({{1, 4}, {2, 5}, {3, 7}})));

  const std::vector<std::pair<Tensor, Tensor>> pairs = {
      {tensor({true, false}), tensor({1, 0})}, {tensor({true, false}), tensor({1.0, 0.5})}, {tensor(2), tensor(2.0)},
      {tensor({1.0, kNaN}), tensor({1.0, kNaN})}, {transposed(x), transposed(x)}};
  for (const auto& [a, b] : pairs) {
    INFO("torch.equal with ", describe({a, b}));
    CHECK(equal(a, b) == torch_eval1("torch.equal(a, b)", {a, b}).item<bool>());
  }
  CHECK_THROWS_WITH_AS(equal(Tensor(), x), "equal: tensor is undefined", Error);
}

// ------------------------------------------------------ digamma, polygamma ---

// psi^(n) at x by mpmath at 40 digits: an independent truth, more accurate than torch's float64
// kernels (torch's trigamma is a six-step recurrence and four asymptotic terms, ~1e-8 relative).
Tensor mpmath_polygamma(std::int64_t n, const Tensor& x) {
  return refgrad::testing::torch_exec(
             "import mpmath\n"
             "mpmath.mp.dps = 40\n"
             "n = int(b.item())\n"
             "result = torch.tensor([float(mpmath.psi(n, mpmath.mpf(v))) for v in a.tolist()], dtype=torch.float64)\n",
             {x, tensor(n)})
      .at(0);
}

TEST_CASE("polygamma") {
  // Around the root of digamma (1.4616...), near and far from 0, large, and negative non-integers.
  const Tensor x = tensor({1e-3, 0.1, 0.5, 1.0, 1.4616321449683622, 2.5, 7.3, 9.99, 10.0, 15.0, 123.25, 1e5, -0.5,
                           -1.3, -7.75, -20.1},
                          DType::Float64);
  SUBCASE("against mpmath, in float64") {
    for (std::int64_t n : {0, 1, 2, 3, 4, 5, 10}) {
      CAPTURE(n);
      // Relative to each value, and absolute only at digamma's root, where the value is ~1e-17.
      CHECK_TENSOR(polygamma(n, x), mpmath_polygamma(n, x), 1e-13, 1e-15);
    }
    CHECK_TENSOR(digamma(x), mpmath_polygamma(0, x), 1e-13, 1e-15);
    CHECK_TENSOR(lgamma(x), torch_eval1("torch.lgamma(a)", {x}), 1e-14, 1e-15);  // both the C library's
  }
  SUBCASE("against torch: dtypes, and the poles") {
    for (std::int64_t n : {0, 1, 2, 3}) {
      CAPTURE(n);
      const std::string expr = "torch.polygamma(" + std::to_string(n) + ", a)";
      // torch's float64 is less accurate; an absolute term for digamma's root, where the value is ~1e-16.
      CHECK_TENSOR(polygamma(n, x), torch_eval1(expr, {x}), 1e-7, 1e-14);
      const Tensor x32 = x.to(DType::Float32);
      CHECK_TENSOR(polygamma(n, x32), torch_eval1(expr, {x32}), 1e-4, 1e-6);
      const Tensor x16 = tensor({0.25, 1.5, 3.0, 6.5}).to(DType::Float16);
      CHECK_TENSOR(polygamma(n, x16), torch_eval1(expr, {x16}), 1e-2, 0);
      const Tensor ints = tensor({1, 2, 5});  // int64 computes in float32
      CHECK_TENSOR(polygamma(n, ints), torch_eval1(expr, {ints}), 1e-5, 0);
    }
    // digamma: -inf at +0, +inf at -0, NaN at the negative integers; polygamma(n >= 1) is infinite at
    // 0 (torch's trigamma gives a huge finite value at -1, -2, ... where sin(pi x) is not exactly 0:
    // refgrad gives the pole's infinity there too).
    const Tensor poles = tensor({0.0, -0.0, -1.0, -2.0}, DType::Float64);
    CHECK_TENSOR(digamma(poles), torch_eval1("torch.digamma(a)", {poles}));
    CHECK_TENSOR(polygamma(1, tensor({0.0, -1.0, -2.0}, DType::Float64)), tensor({INFINITY, INFINITY, INFINITY}, DType::Float64));
    CHECK_TENSOR(polygamma(2, tensor({0.0, -3.0}, DType::Float64)), tensor({-INFINITY, -INFINITY}, DType::Float64));
    CHECK_TENSOR(polygamma(1, tensor({INFINITY, NAN}, DType::Float64)), tensor({0.0, NAN}, DType::Float64));
    CHECK_TENSOR(digamma(tensor({INFINITY, NAN}, DType::Float64)), tensor({INFINITY, NAN}, DType::Float64));
  }
  SUBCASE("a huge order ends at once (a fuzzer's hang: one term per unit step up to n)") {
    // n! is infinite past 170 and zeta(n + 1, x) underflows to 0 for x > 1: torch gives NaN there, -inf
    // below 1 (where zeta overflows). n = 2^40 would sum 2^40 terms before the sum stopped at the first
    // underflow (the fuzzer's 20 s timeout found it).
    const Tensor x = tensor({2.27, 7.45, 0.5, 1e-30}, DType::Float64);
    CHECK_TENSOR(polygamma(1200, x), torch_eval1("torch.polygamma(1200, a)", {x}));
    const Tensor huge = polygamma(std::int64_t{1} << 40, tensor({0.5, 1e-30}, DType::Float64));
    CHECK_TENSOR(huge, tensor({-INFINITY, -INFINITY}, DType::Float64));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(polygamma(-1, x), "polygamma: polygamma(n, x) does not support negative n, got n=-1", Error);
    CHECK_THROWS_WITH_AS(digamma(tensor({1.0}).to(DType::ComplexDouble)), "digamma: not implemented for complex128",
                         Error);
    CHECK_THROWS_WITH_AS(polygamma(2, tensor({-2e7}, DType::Float64)),
                         doctest::Contains("is below -1e+07, where refgrad's Hurwitz zeta sum would take too long"),
                         Error);
  }
}

}  // TEST_SUITE
