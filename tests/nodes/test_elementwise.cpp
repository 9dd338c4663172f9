// Node tests of src/nodes/elementwise.cpp: remainder, fmod, clamp_min/clamp_max (Tensor bounds),
// copysign, fmax, fmin, ldexp, nextafter, frexp, nan_to_num, logit.
//
// Each node: (a) finite differences of its forward written with L0 primitives (away from the jumps and
// ties, where the derivative exists), (b) torch's own grad_fn, fed the _saved_ values torch stored, at
// the jumps, ties, NaNs and infinities, in float64, float32, float16 and bfloat16 (none of these ops
// has a complex backward in torch but ldexp), and (c) the need mask, an undefined grad and bad input.
#include <cmath>
#include <limits>
#include <string>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const DType kRealDTypes[] = {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16};

// Against torch in `dtype`: float64 to a few ulps; the storage formats to a few of their ulps (refgrad
// rounds at each primitive, as ATen's kernels of these formulas do, so most agree bit for bit).
double rtol_of(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float32: return 1e-6;
    default: return 1e-12;
  }
}

TypeAndSize info_of(const Tensor& t) { return TypeAndSize{t.sizes(), TensorOptions{t.dtype(), std::nullopt, std::nullopt, std::nullopt}}; }

// (b) for a node of self and other: torch runs `forward` (of x and y, both requiring grad; or of x
// alone when y is undefined) on x, y in each real dtype, with a random grad; the node gets torch's
// _saved_<fields> (plus the hidden other_info, made from y), and its grads, summed back to each
// input's shape as validate does, must equal torch's.
void check_against_torch(const std::string& node, const std::string& forward, const std::vector<std::string>& fields,
                         const Tensor& x, const Tensor& y, bool other_info = false,
                         const std::vector<DType>& dtypes = {std::begin(kRealDTypes), std::end(kRealDTypes)}) {
  const bool binary = y.defined();
  std::string saved_values;
  for (const std::string& field : fields) saved_values += "fn._saved_" + field + ", ";
  const std::string code = std::string(binary ? "x = a.requires_grad_(); y = b.requires_grad_()\n"
                                              : "x = a.requires_grad_()\n") +
                           "out = " + forward + "\n"
                           "fn = out.grad_fn\n"
                           "assert fn.name() == '" + node + "', fn.name()\n"
                           "g = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), "
                           "dtype=torch.float64).to(out.dtype)\n"
                           "result = (" + saved_values + "g, *torch.autograd.grad(out, (x, y) if " +
                           (binary ? "True" : "False") + " else (x,), g))\n";
  for (const DType dtype : dtypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor xd = x.to(dtype);
    const Tensor yd = binary ? y.to(dtype) : Tensor();
    const auto r = binary ? torch_exec(code, {xd, yd}) : torch_exec(code, {xd});
    Saved saved;
    for (std::size_t i = 0; i < fields.size(); ++i) saved[fields[i]] = r[i];
    if (other_info) saved["other_info"] = info_of(yd);
    const Tensor& grad = r[fields.size()];
    const std::size_t inputs = binary ? 2 : 1;
    const Grads out = call_node(node, {grad}, Need(inputs, true), saved);
    for (std::size_t k = 0; k < inputs; ++k) {
      CAPTURE(k);
      REQUIRE(out[k].has_value());
      const Tensor& expected = r[fields.size() + 1 + k];
      // validate: the grad summed to the input's shape, in its dtype
      const Tensor got = to(sum_to(*out[k], expected.sizes()), expected.dtype());
      CHECK_TENSOR(got, expected, rtol_of(dtype), 1e-300);
    }
  }
}

// Where remainder and fmod jump (self a multiple of other), ties and signs of zero, NaN and inf.
Tensor jump_self() { return tensor({{4.0, -4.0, 3.0, 0.0, -0.0, 5.5}, {-7.25, 1.0, kNaN, kInf, 2.0, -3.0}}, DType::Float64); }
Tensor jump_other() { return tensor({2.0, 2.0, -1.5, 3.0, -2.0, kInf}, DType::Float64); }

}  // namespace

TEST_SUITE("nodes") {

// ------------------------------------------------------------- remainder, fmod ---

static void check_rounded_remainder(const std::string& node, const std::string& op, const char* mode) {
  // x / y well away from integers: the slopes are 1 and -floor(x / y) (or -trunc).
  const Tensor x = tensor({{2.3, -2.3, 7.1}, {-5.6, 0.4, 3.3}}, DType::Float64);
  const Tensor y = tensor({{0.7, 0.7, -2.2}, {1.3, -0.9, 1.0 / 3.0}}, DType::Float64);
  const Tensor g = random64({2, 3}, 801);
  const Saved saved = {{"other", y}, {"self", x}};
  SUBCASE("finite differences, between the jumps") {
    check_all_against_finite_differences(
        node, saved,
        [mode](const std::vector<Tensor>& in) { return sub(in[0], mul(div(in[0], in[1], std::string(mode)), in[1])); },
        {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined(node, g, 2, saved); }
  SUBCASE("against torch: at the jumps, signed zeros, NaN, inf, other broadcast") {
    check_against_torch(node, "torch." + op + "(x, y)", {"other", "self"}, jump_self(), jump_other());
  }
  SUBCASE("by hand: self 7, other 2 and -2") {
    // remainder(7, 2) = 7 - 3 * 2, remainder(7, -2) = 7 - (-4) * (-2); fmod(7, -2) = 7 - (-3) * (-2).
    const Tensor seven = tensor({7.0, 7.0}, DType::Float64), two = tensor({2.0, -2.0}, DType::Float64);
    const Grads out = call_node(node, {tensor({1.0, 1.0}, DType::Float64)}, {true, true},
                                Saved{{"other", two}, {"self", seven}});
    CHECK_TENSOR(*out[0], tensor({1.0, 1.0}, DType::Float64));
    CHECK_TENSOR(*out[1], std::string(mode) == "floor" ? tensor({-3.0, 4.0}, DType::Float64)
                                                       : tensor({-3.0, 3.0}, DType::Float64));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {false, true}, Saved{{"other", None{}}, {"self", x}}),
                         (node + ": other's grad is needed but `other` was not saved").c_str(), Error);
    CHECK_THROWS_WITH_AS(call_node(node, {random64({4}, 1)}, {false, true}, saved),
                         (node + ": grad has shape [4] but self [2,3] and other [2,3] broadcast to another shape").c_str(),
                         Error);
    // self's grad reads nothing saved: torch saves neither when only self requires grad
    const Grads self_only = call_node(node, {g}, {true, false}, Saved{{"other", None{}}, {"self", None{}}});
    CHECK_TENSOR(*self_only[0], g);
  }
}

TEST_CASE("RemainderBackward1") { check_rounded_remainder("RemainderBackward1", "remainder", "floor"); }
TEST_CASE("FmodBackward1") { check_rounded_remainder("FmodBackward1", "fmod", "trunc"); }

static void check_scalar_remainder(const std::string& node, const std::string& forward, const char* mode) {
  const Tensor x = tensor({{2.3, -2.3, 7.1}, {-5.6, 0.4, 3.3}}, DType::Float64), g = random64({2, 3}, 802);
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        node, Saved{},
        [mode](const std::vector<Tensor>& in) {
          return sub(in[0], mul(div(in[0], Scalar(1.5), std::string(mode)), Scalar(1.5)));
        },
        {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined(node, g, 1, Saved{}); }
  SUBCASE("against torch, at the jumps") { check_against_torch(node, forward, {}, jump_self(), Tensor()); }
}

TEST_CASE("RemainderBackward0") { check_scalar_remainder("RemainderBackward0", "x % 1.5", "floor"); }
TEST_CASE("FmodBackward0") { check_scalar_remainder("FmodBackward0", "torch.fmod(x, 1.5)", "trunc"); }

// ------------------------------------------------------------ clamp_min, clamp_max ---

static void check_clamp_tensor(const std::string& node, const std::string& op, const std::string& bound) {
  const bool is_min = bound == "min";
  const Tensor x = tensor({{-2.0, -0.75, 0.1}, {0.3, 1.5, -0.2}}, DType::Float64);
  const Tensor b = tensor({{0.2, -1.0, 0.5}, {0.0, 2.0, -0.1}}, DType::Float64);
  const Tensor g = random64({2, 3}, 803);
  const Saved saved = {{bound, b}, {"self", x}};
  SUBCASE("finite differences, away from ties") {
    check_all_against_finite_differences(
        node, saved,
        [is_min](const std::vector<Tensor>& in) {
          return is_min ? clamp(in[0], OptionalTensor(in[1]), std::nullopt)
                        : clamp(in[0], std::nullopt, OptionalTensor(in[1]));
        },
        {x, b}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined(node, g, 2, saved); }
  SUBCASE("against torch: ties (self takes the grad), -0.0 == 0.0, NaN, inf, both broadcast") {
    const Tensor self = tensor({{1.0, 2.0, -0.0, kNaN, 1.0, kInf}}, DType::Float64);
    const Tensor bounds = tensor({{1.0}, {3.0}, {0.0}, {kNaN}, {-kInf}}, DType::Float64);
    check_against_torch(node, "torch." + op + "(x, y)", {bound, "self"}, self, bounds);
    check_against_torch(node, "torch." + op + "(x, y)", {bound, "self"}, transpose(bounds, 0, 1),
                        transpose(self, 0, 1));
  }
  SUBCASE("by hand: a tie gives self the grad, the bound none") {
    const Tensor one = tensor({1.0}, DType::Float64);
    const Grads out = call_node(node, {tensor({5.0}, DType::Float64)}, {true, true}, Saved{{bound, one}, {"self", one}});
    CHECK_TENSOR(*out[0], tensor({5.0}, DType::Float64));
    CHECK_TENSOR(*out[1], tensor({0.0}, DType::Float64));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true, true}, Saved{{bound, random64({4}, 1)}, {"self", x}}),
                         doctest::Contains("[4]"), Error);
    CHECK_THROWS_WITH_AS(call_node(node, {random64({3, 3}, 2)}, {true, true}, saved),
                         (node + ": grad has shape [3,3] but self [2,3] and " + bound +
                          " [2,3] broadcast to another shape").c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true, true}, Saved{{bound, None{}}, {"self", x}}),
                         (node + ": saved field '" + bound + "' expects Tensor, got None").c_str(), Error);
  }
}

TEST_CASE("ClampMinBackward1") { check_clamp_tensor("ClampMinBackward1", "clamp_min", "min"); }
TEST_CASE("ClampMaxBackward1") { check_clamp_tensor("ClampMaxBackward1", "clamp_max", "max"); }

// ------------------------------------------------------------------- copysign ---

TEST_CASE("CopysignBackward0") {
  const Tensor x = tensor({{-2.0, -0.75, 0.1}, {0.3, 1.5, -0.2}}, DType::Float64);
  const Tensor y = tensor({{0.2, -1.0, -0.5}, {3.0, -2.0, -0.1}}, DType::Float64);
  const Tensor g = random64({2, 3}, 804);
  const Tensor result = mul(abs(x), sign(y));
  const Saved saved = {{"other_info", info_of(y)}, {"self", x}, {"result", result}};
  SUBCASE("finite differences (|self| sign(other), other away from 0)") {
    check_all_against_finite_differences(
        "CopysignBackward0", saved, [](const std::vector<Tensor>& in) { return mul(abs(in[0]), sign(in[1])); },
        {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("CopysignBackward0", g, 2, saved); }
  SUBCASE("against torch: self +-0 (grad 0), other +-0 (its sign bit counts), NaN, inf, broadcast") {
    const Tensor self = tensor({{0.0, -0.0, 2.0, -2.0, kNaN, kInf}, {1.5, -1.5, 0.0, 3.0, -kInf, 0.5}}, DType::Float64);
    const Tensor other = tensor({-0.0, 0.0, -0.0, 0.0, -1.0, -kInf}, DType::Float64);
    check_against_torch("CopysignBackward0", "torch.copysign(x, y)", {"self", "result"}, self, other, true);
  }
  SUBCASE("by hand: other's grad is zeros of other_info") {
    const Grads out = call_node("CopysignBackward0", {g}, {false, true},
                                Saved{{"other_info", TypeAndSize{{3}, TensorOptions{DType::Float32}}}, {"self", None{}},
                                      {"result", result}});
    CHECK_TENSOR(*out[1], zeros({3}, DType::Float32));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("CopysignBackward0", {g}, {true, false},
                                   Saved{{"other_info", info_of(y)}, {"self", None{}}, {"result", result}}),
                         "CopysignBackward0: self's grad is needed but `self` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("CopysignBackward0", {random64({3}, 1)}, {true, false}, saved),
                         "CopysignBackward0: grad has shape [3] but result has shape [2,3]", Error);
    CHECK_THROWS_WITH_AS(call_node("CopysignBackward0", {g}, {true, true}, Saved{{"self", x}, {"result", result}}),
                         "CopysignBackward0: saved field 'other_info' is missing", Error);
  }
}

TEST_CASE("CopysignBackward1") {
  const Tensor x = tensor({{-2.0, -0.75, 0.1}, {0.3, 1.5, -0.2}}, DType::Float64);
  const Tensor g = random64({2, 3}, 805);
  const Saved saved = {{"self", x}, {"result", neg(abs(x))}};
  SUBCASE("finite differences (copysign(x, -1) = -|x|)") {
    check_all_against_finite_differences("CopysignBackward1", saved,
                                         [](const std::vector<Tensor>& in) { return neg(abs(in[0])); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("CopysignBackward1", g, 1, saved); }
  SUBCASE("against torch: other -1.0, 2 and -0.0; self +-0, NaN, inf") {
    const Tensor self = tensor({0.0, -0.0, 2.0, -2.0, kNaN, kInf, -kInf}, DType::Float64);
    for (const std::string other : {"-1.0", "2", "-0.0"}) {
      CAPTURE(other);
      check_against_torch("CopysignBackward1", "torch.copysign(x, " + other + ")", {"self", "result"}, self,
                          Tensor());
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("CopysignBackward1", {random64({3}, 1)}, {true}, saved),
                         "CopysignBackward1: grad has shape [3] but result has shape [2,3]", Error);
  }
}

// ------------------------------------------------------------------ fmax, fmin ---

static void check_fmax_fmin(const std::string& node, const std::string& op) {
  const bool is_max = op == "fmax";
  const Tensor x = random64({2, 3}, 806), y = random64({2, 3}, 807), g = random64({2, 3}, 808);
  const Saved saved = {{"other", y}, {"self", x}};
  SUBCASE("finite differences, away from ties") {
    check_all_against_finite_differences(
        node, saved,
        [is_max](const std::vector<Tensor>& in) { return is_max ? maximum(in[0], in[1]) : minimum(in[0], in[1]); },
        {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined(node, g, 2, saved); }
  SUBCASE("against torch: ties (self takes it all), NaN on either side or both, inf, broadcast") {
    const Tensor self = tensor({{1.0, 2.0, 3.0, kNaN, 1.0, -0.0, kNaN}, {0.5, 0.5, -1.0, 2.0, kNaN, kInf, 4.0}},
                               DType::Float64);
    const Tensor other = tensor({1.0, 2.0, 1.0, 0.0, kNaN, 0.0, kNaN}, DType::Float64);
    check_against_torch(node, "torch." + op + "(x, y)", {"other", "self"}, self, other);
  }
  SUBCASE("by hand: NaN self loses, NaN other loses, a tie goes to self") {
    const Tensor self = tensor({kNaN, 1.0, 2.0}, DType::Float64), other = tensor({1.0, kNaN, 2.0}, DType::Float64);
    const Grads out = call_node(node, {tensor({1.0, 2.0, 3.0}, DType::Float64)}, {true, true},
                                Saved{{"other", other}, {"self", self}});
    CHECK_TENSOR(*out[0], tensor({0.0, 2.0, 3.0}, DType::Float64));
    CHECK_TENSOR(*out[1], tensor({1.0, 0.0, 0.0}, DType::Float64));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true, true}, Saved{{"other", random64({4}, 1)}, {"self", x}}),
                         doctest::Contains("[4]"), Error);
  }
}

TEST_CASE("FmaxBackward0") { check_fmax_fmin("FmaxBackward0", "fmax"); }
TEST_CASE("FminBackward0") { check_fmax_fmin("FminBackward0", "fmin"); }

// ---------------------------------------------------------------------- ldexp ---

TEST_CASE("LdexpBackward0") {
  const Tensor x = random64({2, 3}, 809), y = random64({2, 3}, 810), g = random64({2, 3}, 811);
  const auto ldexp = [](const std::vector<Tensor>& in) { return mul(in[0], pow(Scalar(2.0), in[1])); };
  const Saved saved = {{"other", y}, {"result", ldexp({x, y})}};
  SUBCASE("finite differences (self * 2^other, other float64)") {
    check_all_against_finite_differences("LdexpBackward0", saved, ldexp, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("LdexpBackward0", g, 2, saved); }
  SUBCASE("against torch: a floating other, with inf and NaN") {
    const Tensor self = tensor({{1.5, -2.0, 0.0, kInf}, {3.0, kNaN, -0.5, 1.0}}, DType::Float64);
    const Tensor other = tensor({0.5, -3.0, 2.0, 1.0}, DType::Float64);
    check_against_torch("LdexpBackward0", "torch.ldexp(x, y)", {"other", "result"}, self, other);
  }
  SUBCASE("against torch: an integer other (self's grad 0 where it is negative, as torch's integer pow)") {
    const Tensor self = tensor({1.5, -2.0, 3.0, 0.7, 5.0}, DType::Float64);
    const Tensor grad = tensor({1.0, -1.0, 2.0, 0.5, 1.0}, DType::Float64);
    for (const DType int_dtype : {DType::Int64, DType::Int32}) {
      for (const DType dtype : kRealDTypes) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(dtype_name(int_dtype));
        const Tensor other = tensor({1.0, 2.0, -3.0, 0.0, -1.0}).to(int_dtype);
        const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.ldexp(x, b)
fn = out.grad_fn
assert fn.name() == "LdexpBackward0"
result = (fn._saved_other, fn._saved_result, *torch.autograd.grad(out, (x,), c))
)", {self.to(dtype), other, grad.to(dtype)});
        const Grads out = call_node("LdexpBackward0", {grad.to(dtype)}, {true, false},
                                    Saved{{"other", r[0]}, {"result", r[1]}});
        CHECK_TENSOR(to(*out[0], dtype), r[2], rtol_of(dtype), 0);
        if (dtype == DType::Float64) CHECK_TENSOR(*out[0], tensor({2.0, -4.0, 0.0, 0.5, 0.0}, DType::Float64));
      }
    }
  }
  SUBCASE("against torch: complex128 and complex64 (the conjugates)") {
    const Tensor self = complex(random64({2, 3}, 812), random64({2, 3}, 813));
    const Tensor other = complex(random64({2, 3}, 814), random64({2, 3}, 815));
    for (const DType dtype : {DType::ComplexDouble, DType::ComplexFloat}) {
      CAPTURE(dtype_name(dtype));
      const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.ldexp(x, y)
fn = out.grad_fn
g = torch.complex(torch.randn(out.shape, dtype=torch.float64), torch.randn(out.shape, dtype=torch.float64)).to(out.dtype)
result = (fn._saved_other, fn._saved_result, g, *torch.autograd.grad(out, (x, y), g))
)", {self.to(dtype), other.to(dtype)});
      const Grads out = call_node("LdexpBackward0", {r[2]}, {true, true}, Saved{{"other", r[0]}, {"result", r[1]}});
      const double rtol = dtype == DType::ComplexDouble ? 1e-12 : 1e-5;
      CHECK_TENSOR(*out[0], r[3], rtol, 1e-300);
      CHECK_TENSOR(*out[1], r[4], rtol, 1e-300);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("LdexpBackward0", {g}, {true, false}, Saved{{"other", None{}}, {"result", x}}),
                         "LdexpBackward0: self's grad is needed but `other` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("LdexpBackward0", {random64({3}, 1)}, {false, true}, saved),
                         "LdexpBackward0: grad has shape [3] but result has shape [2,3]", Error);
  }
}

// ------------------------------------------------------------------ nextafter ---

TEST_CASE("NextafterBackward0") {
  const Tensor x = random64({2, 3}, 816), y = random64({2, 3}, 817), g = random64({2, 3}, 818);
  const Saved saved = {{"other", y}, {"other_info", info_of(y)}, {"self", x}};
  SUBCASE("finite differences (nextafter(x, y) is x to within one ulp: slopes 1 and 0)") {
    check_all_against_finite_differences(
        "NextafterBackward0", saved, [](const std::vector<Tensor>& in) { return add(in[0], mul(in[1], Scalar(0.0))); },
        {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("NextafterBackward0", g, 2, saved); }
  SUBCASE("against torch: self == other (grad 0), +-0, NaN, inf, broadcast") {
    const Tensor self = tensor({{1.0, 2.0, 0.0, -0.0, kNaN, kInf}, {3.0, 2.0, 1.0, 0.5, 1.0, 1.0}}, DType::Float64);
    const Tensor other = tensor({1.0, 1.0, -0.0, 0.0, kNaN, kInf}, DType::Float64);
    check_against_torch("NextafterBackward0", "torch.nextafter(x, y)", {"other", "self"}, self, other, true);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(
        call_node("NextafterBackward0", {g}, {true, false}, Saved{{"other", None{}}, {"other_info", info_of(y)}, {"self", None{}}}),
        "NextafterBackward0: self's grad is needed but `self` was not saved", Error);
    const Grads other_only = call_node("NextafterBackward0", {g}, {false, true},
                                       Saved{{"other", None{}}, {"other_info", info_of(y)}, {"self", None{}}});
    CHECK_TENSOR(*other_only[1], zeros({2, 3}, DType::Float64));
    CHECK_THROWS_WITH_AS(call_node("NextafterBackward0", {g}, {false, true},
                                   Saved{{"other", y}, {"other_info", TypeAndSize{{-1}, {}}}, {"self", x}}),
                         "NextafterBackward0: other_info [-1] has a negative size", Error);
  }
}

// ---------------------------------------------------------------------- frexp ---

TEST_CASE("FrexpBackward0") {
  const Tensor x = tensor({{0.3, -1.7, 2.2}, {-0.2, 5.9, -3.4}}, DType::Float64);  // off powers of two
  const Tensor g = random64({2, 3}, 819);
  // The exponent e with |x| in [2^(e-1), 2^e), from L0's log; the mantissa x / 2^e.
  const auto exponent_of = [](const Tensor& v) {
    return add(div(div(log(abs(v)), Scalar(std::log(2.0))), Scalar(1), std::string("floor")), Scalar(1));
  };
  const auto mantissa = [exponent_of](const std::vector<Tensor>& in) {
    return div(in[0], pow(Scalar(2.0), exponent_of(in[0])));
  };
  const Tensor exponent = to(exponent_of(x), DType::Int32);
  const Saved saved = {{"exponent", exponent}};
  SUBCASE("finite differences of the mantissa") {
    CHECK_TENSOR(exponent, torch_eval1("torch.frexp(a)[1]", {x}));
    check_all_against_finite_differences("FrexpBackward0", saved, mantissa, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("FrexpBackward0", g, 1, saved); }
  SUBCASE("against torch: powers of two, 0, inf, NaN, subnormals") {
    const Tensor self = tensor({1.0, 0.5, -4.0, 0.0, -0.0, kInf, kNaN, 3.0, 1e-310, 6.5e4}, DType::Float64);
    const std::string code = R"(
x = a.requires_grad_()
m, e = torch.frexp(x)
fn = m.grad_fn
assert fn.name() == "FrexpBackward0" and e.grad_fn is None and len(fn._input_metadata) == 1
g = torch.randn(m.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(m.dtype)
result = (fn._saved_exponent, g, *torch.autograd.grad(m, (x,), g))
)";
    for (const DType dtype : kRealDTypes) {
      CAPTURE(dtype_name(dtype));
      const auto r = torch_exec(code, {self.to(dtype)});
      CHECK(r[0].dtype() == DType::Int32);
      const Grads out = call_node("FrexpBackward0", {r[1]}, {true}, Saved{{"exponent", r[0]}});
      CHECK_TENSOR(to(*out[0], dtype), r[2], rtol_of(dtype), 1e-300);
    }
  }
  SUBCASE("against torch: float64 beyond float32's exponents (torch's exp2 is float32's: grad 0 or inf)") {
    const Tensor self = tensor({1e300, 1e-300, 3.0}, DType::Float64);
    const auto r = torch_exec(R"(
x = a.requires_grad_()
m, e = torch.frexp(x)
result = (m.grad_fn._saved_exponent, *torch.autograd.grad(m, (x,), torch.ones_like(m)))
)", {self});
    const Grads out = call_node("FrexpBackward0", {full({3}, Scalar(1.0), DType::Float64)}, {true},
                                Saved{{"exponent", r[0]}});
    CHECK_TENSOR(*out[0], r[1]);
    CHECK_TENSOR(*out[0], tensor({0.0, kInf, 0.25}, DType::Float64));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("FrexpBackward0", {random64({3}, 1)}, {true}, saved),
                         "FrexpBackward0: grad has shape [3] but exponent has shape [2,3]", Error);
    CHECK_THROWS_WITH_AS(call_node("FrexpBackward0", {g}, {true}, Saved{{"exponent", x}}),
                         "FrexpBackward0: exponent must be an integer tensor (frexp's int32 exponent), got float64",
                         Error);
  }
}

// ----------------------------------------------------------------- nan_to_num ---

TEST_CASE("NanToNumBackward0") {
  const Tensor x = random64({2, 3}, 820), g = random64({2, 3}, 821);
  const Saved saved = {{"self", x}};
  SUBCASE("finite differences (the identity on finite values)") {
    check_all_against_finite_differences(
        "NanToNumBackward0", saved,
        [](const std::vector<Tensor>& in) { return where(ne(in[0], in[0]), Scalar(0.0), in[0]); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("NanToNumBackward0", g, 1, saved); }
  SUBCASE("against torch: NaN and +-inf replaced, with and without the replacement values") {
    const Tensor self = tensor({1.0, kNaN, kInf, -kInf, -0.0, 1e308, -2.5}, DType::Float64);
    for (const std::string forward : {"torch.nan_to_num(x)", "torch.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0)"}) {
      CAPTURE(forward);
      check_against_torch("NanToNumBackward0", forward, {"self"}, self, Tensor());
    }
  }
  SUBCASE("by hand: a NaN grad at a replaced element stays NaN (grad * 0)") {
    const Grads out = call_node("NanToNumBackward0", {tensor({kNaN, kNaN, 2.0}, DType::Float64)}, {true},
                                Saved{{"self", tensor({kNaN, 1.0, kInf}, DType::Float64)}});
    CHECK_TENSOR(*out[0], tensor({kNaN, kNaN, 0.0}, DType::Float64));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("NanToNumBackward0", {random64({3}, 1)}, {true}, saved),
                         "NanToNumBackward0: grad has shape [3] but self has shape [2,3]", Error);
  }
}

// ---------------------------------------------------------------------- logit ---

TEST_CASE("LogitBackward0") {
  const Tensor x = tensor({{0.1, 0.3, 0.5}, {0.62, 0.85, 0.95}}, DType::Float64), g = random64({2, 3}, 822);
  const auto logit = [](const Tensor& v) { return log(div(v, add(neg(v), Scalar(1)))); };
  SUBCASE("finite differences, no eps") {
    check_all_against_finite_differences("LogitBackward0", Saved{{"eps", None{}}, {"self", x}},
                                         [logit](const std::vector<Tensor>& in) { return logit(in[0]); }, {x}, g);
  }
  SUBCASE("finite differences, eps 0.2: 0 where x is clamped") {
    check_all_against_finite_differences(
        "LogitBackward0", Saved{{"eps", 0.2}, {"self", x}},
        [logit](const std::vector<Tensor>& in) {
          return logit(clamp(in[0], std::optional<Scalar>(0.2), std::optional<Scalar>(0.8)));
        },
        {x.to(DType::Float64)}, g);
  }
  SUBCASE("need mask and undefined grad") {
    check_need_mask_and_undefined("LogitBackward0", g, 1, Saved{{"eps", None{}}, {"self", x}});
  }
  SUBCASE("against torch: outside [0, 1], at 0, -0.0 and 1, at the eps bounds, NaN; a negative eps is none") {
    const Tensor self = tensor({-0.5, 0.0, -0.0, 0.25, 0.5, 0.75, 1.0, 1.5, kNaN, 0.1, 0.9}, DType::Float64);
    // grads of both signs and zero at the ends (grad * inf there: NaN for 0)
    const Tensor grad = tensor({1.0, -1.0, 2.0, 1.0, -3.0, 1.0, 0.0, 1.0, 1.0, 0.5, -0.5}, DType::Float64);
    for (const std::string eps : {"None", "0.25", "0.0", "1e-6", "-0.5"}) {
      for (const DType dtype : kRealDTypes) {
        CAPTURE(eps);
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.logit(x, )" + eps + R"()
fn = out.grad_fn
assert fn.name() == "LogitBackward0"
result = (torch.tensor(float('nan') if fn._saved_eps is None else fn._saved_eps, dtype=torch.float64), fn._saved_self,
          *torch.autograd.grad(out, (x,), b))
)", {self.to(dtype), grad.to(dtype)});
        const double saved_eps = r[0].item<double>();
        const FieldValue eps_value = std::isnan(saved_eps) ? FieldValue(None{}) : FieldValue(saved_eps);
        const Grads out = call_node("LogitBackward0", {grad.to(dtype)}, {true}, Saved{{"eps", eps_value}, {"self", r[1]}});
        CHECK_TENSOR(*out[0], r[2], rtol_of(dtype), 1e-300);
      }
    }
  }
  SUBCASE("by hand: no eps, eps 0 and eps 0.25") {
    const Tensor self = tensor({-0.5, 0.0, -0.0, 0.5, 1.0, 1.0, 0.2}, DType::Float64);
    const Tensor grad = tensor({1.0, -1.0, 1.0, 1.0, 0.0, 2.0, 0.16}, DType::Float64);
    CHECK_TENSOR(*call_node("LogitBackward0", {grad}, {true}, Saved{{"eps", None{}}, {"self", self}})[0],
                 tensor({kNaN, -kInf, kInf, 4.0, kNaN, kInf, 1.0}, DType::Float64));
    CHECK_TENSOR(*call_node("LogitBackward0", {grad}, {true}, Saved{{"eps", 0.0}, {"self", self}})[0],
                 tensor({0.0, -kInf, kInf, 4.0, kNaN, kInf, 1.0}, DType::Float64));
    CHECK_TENSOR(*call_node("LogitBackward0", {grad}, {true}, Saved{{"eps", 0.25}, {"self", self}})[0],
                 tensor({0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0}, DType::Float64));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("LogitBackward0", {random64({3}, 1)}, {true}, Saved{{"eps", None{}}, {"self", x}}),
                         "LogitBackward0: grad has shape [3] but self has shape [2,3]", Error);
    CHECK_THROWS_WITH_AS(call_node("LogitBackward0", {g}, {true}, Saved{{"eps", Scalar(0.1)}, {"self", x}}),
                         "LogitBackward0: saved field 'eps' expects float?, got Scalar 0.1", Error);
  }
}

}  // TEST_SUITE
