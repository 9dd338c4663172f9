// The arithmetic nodes: add, sub, rsub, mul, div, neg, pow, addcmul, addcdiv,
// maximum, minimum, atan2, where, clamp, masked_fill, lerp.
#include <cmath>
#include <limits>
#include <string>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A Python number torch returned (int -> int64, float -> float64, bool) as a Scalar.
Scalar scalar_of(const Tensor& number) {
  switch (number.dtype()) {
    case DType::Bool: return Scalar(number.item<bool>());
    case DType::Int64: return Scalar(number.item<std::int64_t>());
    default: return Scalar(number.item<double>());
  }
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("AddBackward1") {
  const Tensor x = random64({2, 3}, 101), g = random64({2, 3}, 102);
  const Saved saved = {{"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "AddBackward1", saved, [](const std::vector<Tensor>& in) { return add(in[0], Scalar(2.0), Scalar(3)); }, {x},
        g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("AddBackward1", g, 1, saved); }
  SUBCASE("against torch") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.ops.aten.add.Scalar(x, 2, alpha=3)
assert out.grad_fn.name() == "AddBackward1"
assert not [n for n in dir(out.grad_fn) if n.startswith("_saved_")]
result = torch.autograd.grad(out, (x,), b)
)", {x, g});
    const Grads out = call_node("AddBackward1", {g}, {true}, saved);
    CHECK_TENSOR(*out[0], r[0]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("AddBackward1", {g}, {true}, Saved{{"self_scalar_type", Scalar(1)}}),
                         "AddBackward1: saved field 'self_scalar_type' expects ScalarType, got Scalar 1", Error);
  }
}

TEST_CASE("SubBackward0") {
  const Tensor x = random64({2, 3}, 103), y = random64({3}, 104), g = random64({2, 3}, 105);
  const Saved saved = {{"alpha", Scalar(2.5)}, {"other_scalar_type", DType::Float64},
                       {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    const Tensor y23 = random64({2, 3}, 106);
    check_all_against_finite_differences(
        "SubBackward0", saved, [](const std::vector<Tensor>& in) { return sub(in[0], in[1], 2.5); }, {x, y23}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("SubBackward0", g, 2, saved); }
  SUBCASE("against torch, alpha 1 and -2, other broadcast") {
    for (const char* alpha : {"1", "-2"}) {
      CAPTURE(alpha);
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.sub(x, y, alpha=)") + alpha + R"()
fn = out.grad_fn
assert fn.name() == "SubBackward0"
result = (fn._saved_alpha, *torch.autograd.grad(out, (x, y), c))
)", {x, y, g});
      const Grads out = call_node("SubBackward0", {g}, {true, true},
                                  {{"alpha", scalar_of(r[0])},
                                   {"other_scalar_type", DType::Float64},
                                   {"self_scalar_type", DType::Float64}});
      CHECK_TENSOR(*out[0], r[1]);
      CHECK_TENSOR(sum_to(*out[1], {3}), r[2]);  // validate sums the broadcast grad
      CHECK(out[1]->sizes() == Shape{2, 3});       // the node itself does not
    }
  }
  SUBCASE("errors") {
    Saved wrong = saved;
    wrong["alpha"] = x;
    CHECK_THROWS_WITH_AS(call_node("SubBackward0", {g}, {true, true}, wrong),
                         "SubBackward0: saved field 'alpha' expects Scalar, got Tensor f64[2,3]", Error);
  }
}

TEST_CASE("SubBackward1") {
  const Tensor x = random64({4}, 107), g = random64({4}, 108);
  const Saved saved = {{"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "SubBackward1", saved, [](const std::vector<Tensor>& in) { return sub(in[0], Scalar(2), Scalar(3)); }, {x},
        g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("SubBackward1", g, 1, saved); }
  SUBCASE("against torch") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.ops.aten.sub.Scalar(x, 2, alpha=3)
assert out.grad_fn.name() == "SubBackward1"
result = torch.autograd.grad(out, (x,), b)
)", {x, g});
    CHECK_TENSOR(*call_node("SubBackward1", {g}, {true}, saved)[0], r[0]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("SubBackward1", {g}, {true}, Saved{}),
                         "SubBackward1: saved field 'self_scalar_type' is missing", Error);
  }
}

TEST_CASE("RsubBackward0") {
  const Tensor x = random64({2, 3}, 109), y = random64({2, 3}, 110), g = random64({2, 3}, 111);
  const Saved saved = {{"alpha", Scalar(2)}, {"other_scalar_type", DType::Float64},
                       {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    // rsub(self, other, alpha) = other - alpha * self
    check_all_against_finite_differences(
        "RsubBackward0", saved, [](const std::vector<Tensor>& in) { return sub(in[1], in[0], 2); }, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("RsubBackward0", g, 2, saved); }
  SUBCASE("against torch") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.rsub(x, y, alpha=2)
fn = out.grad_fn
assert fn.name() == "RsubBackward0"
result = (fn._saved_alpha, *torch.autograd.grad(out, (x, y), c))
)", {x, y, g});
    const Grads out = call_node("RsubBackward0", {g}, {true, true},
                                {{"alpha", scalar_of(r[0])},
                                 {"other_scalar_type", DType::Float64},
                                 {"self_scalar_type", DType::Float64}});
    CHECK_TENSOR(*out[0], r[1]);
    CHECK_TENSOR(*out[1], r[2]);
  }
  SUBCASE("errors") {
    Saved wrong = saved;
    wrong["alpha"] = None{};
    CHECK_THROWS_WITH_AS(call_node("RsubBackward0", {g}, {true, true}, wrong),
                         "RsubBackward0: saved field 'alpha' expects Scalar, got None", Error);
  }
}

TEST_CASE("RsubBackward1") {
  const Tensor x = random64({3}, 112), g = random64({3}, 113);
  const Saved saved = {{"alpha", Scalar(3)}, {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    // rsub(self, 2, alpha=3) = 2 - 3 * self
    check_all_against_finite_differences(
        "RsubBackward1", saved,
        [](const std::vector<Tensor>& in) { return add(mul(in[0], Scalar(-3)), Scalar(2)); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("RsubBackward1", g, 1, saved); }
  SUBCASE("against torch, 2 - x and rsub with alpha") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out1 = 2 - x
out2 = torch.rsub(x, 2, alpha=3)
assert out1.grad_fn.name() == "RsubBackward1" and out2.grad_fn.name() == "RsubBackward1"
result = (out1.grad_fn._saved_alpha, out2.grad_fn._saved_alpha, *torch.autograd.grad(out1, (x,), b),
          *torch.autograd.grad(out2, (x,), b))
)", {x, g});
    CHECK_TENSOR(*call_node("RsubBackward1", {g}, {true},
                            Saved{{"alpha", scalar_of(r[0])}, {"self_scalar_type", DType::Float64}})[0],
                 r[2]);
    CHECK_TENSOR(*call_node("RsubBackward1", {g}, {true},
                            Saved{{"alpha", scalar_of(r[1])}, {"self_scalar_type", DType::Float64}})[0],
                 r[3]);
  }
  SUBCASE("errors") {
    Saved wrong = saved;
    wrong["alpha"] = std::string("3");
    CHECK_THROWS_WITH_AS(call_node("RsubBackward1", {g}, {true}, wrong),
                         "RsubBackward1: saved field 'alpha' expects Scalar, got str '3'", Error);
  }
}

TEST_CASE("MulBackward1") {
  const Tensor x = random64({2, 2}, 114), g = random64({2, 2}, 115);
  const Saved saved = {{"other", Scalar(2.5)}, {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "MulBackward1", saved, [](const std::vector<Tensor>& in) { return mul(in[0], Scalar(2.5)); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("MulBackward1", g, 1, saved); }
  SUBCASE("against torch, a float32 grad stays float32") {
    const auto r = torch_exec(R"(
x = a.float().requires_grad_()
out = torch.ops.aten.mul.Scalar(x, 2.5)
fn = out.grad_fn
assert fn.name() == "MulBackward1"
result = (fn._saved_other, *torch.autograd.grad(out, (x,), b.float()))
)", {x, g});
    const Grads out = call_node("MulBackward1", {g.to(DType::Float32)}, {true},
                                {{"other", scalar_of(r[0])}, {"self_scalar_type", DType::Float32}});
    CHECK_TENSOR(*out[0], r[1]);  // dtype checked too
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("MulBackward1", {g}, {true},
                                   Saved{{"other", x}, {"self_scalar_type", DType::Float64}}),
                         "MulBackward1: saved field 'other' expects Scalar, got Tensor f64[2,2]", Error);
  }
}

TEST_CASE("DivBackward0") {
  const Tensor x = random64({2, 3}, 116), y = add(abs(random64({2, 3}, 117)), Scalar(0.5)), g = random64({2, 3}, 118);
  const Saved saved = {{"other", y}, {"self", x}, {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "DivBackward0", saved, [](const std::vector<Tensor>& in) { return div(in[0], in[1]); }, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("DivBackward0", g, 2, saved); }
  SUBCASE("against torch, dividing by zero") {
    const Tensor num = tensor({1.0, -2.0, 0.0, 3.0, -0.0}, DType::Float64);
    const Tensor den = tensor({0.0, -0.0, 0.0, 2.0, 4.0}, DType::Float64);
    const Tensor g5 = tensor({1.0, 2.0, -1.0, 0.5, 1.0}, DType::Float64);
    const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = x / y
fn = out.grad_fn
assert fn.name() == "DivBackward0"
result = (fn._saved_self, fn._saved_other, *torch.autograd.grad(out, (x, y), c))
)", {num, den, g5});
    const Grads out = call_node("DivBackward0", {g5}, {true, true},
                                {{"other", r[1]}, {"self", r[0]}, {"self_scalar_type", DType::Float64}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK_TENSOR(*out[1], r[3]);
  }
  SUBCASE("against torch, x / 2: self is not saved, other is a 0-dim tensor") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = x / 2
fn = out.grad_fn
assert fn.name() == "DivBackward0"
result = (fn._saved_self is None, fn._saved_other, *torch.autograd.grad(out, (x,), b))
)", {x, g});
    CHECK(r[0].item<bool>());
    const Saved from_torch = {{"other", r[1]}, {"self", None{}}, {"self_scalar_type", DType::Float64}};
    CHECK_TENSOR(*call_node("DivBackward0", {g}, {true, false}, from_torch)[0], r[2]);
    CHECK_THROWS_WITH_AS(call_node("DivBackward0", {g}, {false, true}, from_torch),
                         "DivBackward0: other's grad is needed but `self` was not saved", Error);
  }
  SUBCASE("errors") {
    Saved no_other = saved;
    no_other["other"] = None{};
    CHECK_THROWS_WITH_AS(call_node("DivBackward0", {g}, {true, false}, no_other),
                         "DivBackward0: self's grad is needed but `other` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("DivBackward0", {random64({4}, 1)}, {true, false}, saved),
                         doctest::Contains("[4]"), Error);
  }
}

TEST_CASE("DivBackward1") {
  const Tensor x = random64({3}, 119), g = random64({3}, 120);
  const Saved saved = {{"other", Scalar(2.5)}, {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "DivBackward1", saved, [](const std::vector<Tensor>& in) { return div(in[0], Scalar(2.5)); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("DivBackward1", g, 1, saved); }
  SUBCASE("against torch, an int divisor and zero") {
    for (const char* other : {"4", "2.5", "0.0"}) {
      CAPTURE(other);
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = torch.ops.aten.div.Scalar(x, )") + other + R"()
fn = out.grad_fn
assert fn.name() == "DivBackward1"
result = (fn._saved_other, *torch.autograd.grad(out, (x,), b))
)", {x, g});
      CHECK_TENSOR(*call_node("DivBackward1", {g}, {true},
                              Saved{{"other", scalar_of(r[0])}, {"self_scalar_type", DType::Float64}})[0],
                   r[1]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("DivBackward1", {g}, {true},
                                   Saved{{"other", None{}}, {"self_scalar_type", DType::Float64}}),
                         "DivBackward1: saved field 'other' expects Scalar, got None", Error);
  }
}

TEST_CASE("DivBackward2") {
  const Tensor x = random64({2, 3}, 121), y = add(abs(random64({2, 3}, 122)), Scalar(0.5)), g = random64({2, 3}, 123);
  const Saved true_division = {{"other", y}, {"rounding_mode", None{}}, {"self", x},
                               {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences, true division") {
    check_all_against_finite_differences(
        "DivBackward2", true_division, [](const std::vector<Tensor>& in) { return div(in[0], in[1]); }, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") {
    check_need_mask_and_undefined("DivBackward2", g, 2, true_division);
    Saved floor = true_division;
    floor["rounding_mode"] = std::string("floor");
    check_need_mask_and_undefined("DivBackward2", g, 2, floor);
  }
  SUBCASE("against torch: floor, trunc and None") {
    for (const char* mode : {"'floor'", "'trunc'", "None"}) {
      CAPTURE(mode);
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.div(x, y, rounding_mode=)") + mode + R"()
fn = out.grad_fn
assert fn.name() == "DivBackward2"
assert fn._saved_rounding_mode == )" + mode + R"(
result = (fn._saved_self, fn._saved_other, *torch.autograd.grad(out, (x, y), c))
)", {x, y, g});
      const std::string name(mode);
      const FieldValue rounding_mode =
          name == "None" ? FieldValue{None{}} : FieldValue{name.substr(1, name.size() - 2)};
      const Grads out = call_node("DivBackward2", {g}, {true, true},
                                  {{"other", r[1]}, {"rounding_mode", rounding_mode}, {"self", r[0]},
                                   {"self_scalar_type", DType::Float64}});
      CHECK_TENSOR(*out[0], r[2]);
      CHECK_TENSOR(*out[1], r[3]);
    }
  }
  SUBCASE("rounding: zeros of self's and other's dtypes") {
    const Saved mixed = {{"other", y.to(DType::Float32)}, {"rounding_mode", std::string("trunc")}, {"self", x},
                         {"self_scalar_type", DType::Float64}};
    const Grads out = call_node("DivBackward2", {g}, {true, true}, mixed);
    CHECK_TENSOR(*out[0], zeros({2, 3}, DType::Float64));
    CHECK_TENSOR(*out[1], zeros({2, 3}, DType::Float32));
  }
  SUBCASE("errors") {
    Saved no_self = true_division;
    no_self["self"] = None{};
    CHECK_THROWS_WITH_AS(call_node("DivBackward2", {g}, {false, true}, no_self),
                         "DivBackward2: other's grad is needed but `self` was not saved", Error);
    Saved no_other = true_division;
    no_other["other"] = None{};
    CHECK_THROWS_WITH_AS(call_node("DivBackward2", {g}, {true, false}, no_other),
                         "DivBackward2: self's grad is needed but `other` was not saved", Error);
  }
}

TEST_CASE("DivBackward3") {
  const Tensor x = random64({3}, 124), g = random64({3}, 125);
  const Saved saved = {{"other", Scalar(2.5)}, {"rounding_mode", None{}}, {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences, true division") {
    check_all_against_finite_differences(
        "DivBackward3", saved, [](const std::vector<Tensor>& in) { return div(in[0], Scalar(2.5)); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("DivBackward3", g, 1, saved); }
  SUBCASE("against torch: floor and None") {
    for (const char* mode : {"'floor'", "None"}) {
      CAPTURE(mode);
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = torch.ops.aten.div.Scalar_mode(x, 2.5, rounding_mode=)") + mode + R"()
fn = out.grad_fn
assert fn.name() == "DivBackward3"
assert fn._saved_rounding_mode == )" + mode + R"(
result = (fn._saved_other, *torch.autograd.grad(out, (x,), b))
)", {x, g});
      const std::string name(mode);
      const FieldValue rounding_mode =
          name == "None" ? FieldValue{None{}} : FieldValue{name.substr(1, name.size() - 2)};
      CHECK_TENSOR(*call_node("DivBackward3", {g}, {true},
                              {{"other", scalar_of(r[0])}, {"rounding_mode", rounding_mode},
                               {"self_scalar_type", DType::Float64}})[0],
                   r[1]);
    }
  }
  SUBCASE("errors") {
    Saved wrong = saved;
    wrong["rounding_mode"] = Scalar(1);
    CHECK_THROWS_WITH_AS(call_node("DivBackward3", {g}, {true}, wrong),
                         "DivBackward3: saved field 'rounding_mode' expects str?, got Scalar 1", Error);
  }
}

TEST_CASE("NegBackward0") {
  const Tensor x = random64({2, 2}, 126), g = random64({2, 2}, 127);
  SUBCASE("finite differences") {
    check_all_against_finite_differences("NegBackward0", Saved{},
                                         [](const std::vector<Tensor>& in) { return neg(in[0]); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("NegBackward0", g, 1, Saved{}); }
  SUBCASE("against torch") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = -x
assert out.grad_fn.name() == "NegBackward0"
result = torch.autograd.grad(out, (x,), b)
)", {x, g});
    CHECK_TENSOR(*call_node("NegBackward0", {g}, {true}, Saved{})[0], r[0]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("NegBackward0", {g}, {true}, Saved{{"self", x}}),
                         "NegBackward0: has no saved field 'self'", Error);
  }
}

TEST_CASE("PowBackward0") {
  const Tensor x = add(abs(random64({2, 3}, 128)), Scalar(0.25)), g = random64({2, 3}, 129);
  SUBCASE("finite differences") {
    for (const Scalar& exponent : {Scalar(3), Scalar(2.5), Scalar(-1.5), Scalar(0)}) {
      CAPTURE(exponent.repr());
      check_all_against_finite_differences(
          "PowBackward0", Saved{{"exponent", exponent}, {"self", x}},
          [exponent](const std::vector<Tensor>& in) { return pow(in[0], exponent); }, {x}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    check_need_mask_and_undefined("PowBackward0", g, 1, Saved{{"exponent", Scalar(2)}, {"self", x}});
  }
  SUBCASE("against torch, at 0 and at negative bases, torch.square too") {
    const Tensor base = tensor({0.0, -0.0, -1.5, 2.0, -2.0, 0.5}, DType::Float64);
    const Tensor g6 = tensor({1.0, -1.0, 0.5, 2.0, 1.0, -3.0}, DType::Float64);
    for (const char* forward : {"x ** 0", "x ** 0.0", "x ** 1", "x ** 2", "x ** 2.5", "x ** 0.5", "x ** -1",
                                "x ** -0.5", "x ** 3.0", "torch.square(x)"}) {
      CAPTURE(forward);
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = )") + forward + R"(
fn = out.grad_fn
assert fn.name() == "PowBackward0"
result = (fn._saved_exponent, fn._saved_self, *torch.autograd.grad(out, (x,), b))
)", {base, g6});
      const Grads out =
          call_node("PowBackward0", {g6}, {true}, Saved{{"exponent", scalar_of(r[0])}, {"self", r[1]}});
      CHECK_TENSOR(*out[0], r[2]);
    }
  }
  SUBCASE("exponent 0: zeros of self's dtype") {
    const Grads out =
        call_node("PowBackward0", {g}, {true}, Saved{{"exponent", Scalar(0.0)}, {"self", x.to(DType::Float32)}});
    CHECK_TENSOR(*out[0], zeros({2, 3}, DType::Float32));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("PowBackward0", {g}, {true}, Saved{{"exponent", Scalar(2)}, {"self", None{}}}),
                         "PowBackward0: saved field 'self' expects Tensor, got None", Error);
    CHECK_THROWS_WITH_AS(call_node("PowBackward0", {random64({4}, 1)}, {true},
                                   Saved{{"exponent", Scalar(2)}, {"self", x}}),
                         doctest::Contains("[4]"), Error);
  }
}

TEST_CASE("PowBackward1") {
  const Tensor x = add(abs(random64({2, 3}, 130)), Scalar(0.25)), y = random64({2, 3}, 131), g = random64({2, 3}, 132);
  const Saved saved = {{"exponent", y}, {"self", x}, {"result", pow(x, y)}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "PowBackward1", saved, [](const std::vector<Tensor>& in) { return pow(in[0], in[1]); }, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("PowBackward1", g, 2, saved); }
  SUBCASE("against torch, at 0 and at negative bases") {
    const Tensor base = tensor({0.0, 0.0, 0.0, 0.0, -2.0, -2.0, 2.0, 1.5, -0.0}, DType::Float64);
    const Tensor exponent = tensor({0.0, 2.0, -1.0, 0.5, 2.0, 0.5, 0.0, 1.5, 3.0}, DType::Float64);
    const Tensor g9 = tensor({1.0, -1.0, 0.5, 2.0, 1.0, -3.0, 0.25, 1.0, 2.0}, DType::Float64);
    const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = x ** y
fn = out.grad_fn
assert fn.name() == "PowBackward1"
result = (fn._saved_self, fn._saved_exponent, fn._saved_result, *torch.autograd.grad(out, (x, y), c))
)", {base, exponent, g9});
    const Grads out = call_node("PowBackward1", {g9}, {true, true},
                                {{"exponent", r[1]}, {"self", r[0]}, {"result", r[2]}});
    CHECK_TENSOR(*out[0], r[3]);
    CHECK_TENSOR(*out[1], r[4]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("PowBackward1", {g}, {true, true}, Saved{{"exponent", y}, {"self", x}}),
                         "PowBackward1: saved field 'result' is missing", Error);
  }
}

TEST_CASE("PowBackward2") {
  const Tensor y = random64({2, 3}, 133), g = random64({2, 3}, 134);
  const Saved saved = {{"exponent", y}, {"self", Scalar(2.5)}, {"result", pow(Scalar(2.5), y)}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "PowBackward2", saved, [](const std::vector<Tensor>& in) { return pow(Scalar(2.5), in[0]); }, {y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("PowBackward2", g, 1, saved); }
  SUBCASE("against torch, bases 0, negative, int and float") {
    const Tensor exponent = tensor({-1.0, 0.0, 1.5, 2.0, -0.0}, DType::Float64);
    const Tensor g5 = tensor({1.0, -1.0, 0.5, 2.0, 1.0}, DType::Float64);
    for (const char* base : {"2", "0", "0.0", "-2", "0.5", "1"}) {
      CAPTURE(base);
      const auto r = torch_exec(std::string(R"(
y = a.requires_grad_()
out = ()") + base + R"() ** y
fn = out.grad_fn
assert fn.name() == "PowBackward2"
result = (fn._saved_self, fn._saved_exponent, fn._saved_result, *torch.autograd.grad(out, (y,), b))
)", {exponent, g5});
      const Grads out = call_node("PowBackward2", {g5}, {true},
                                  {{"exponent", r[1]}, {"self", scalar_of(r[0])}, {"result", r[2]}});
      CHECK_TENSOR(*out[0], r[3]);
    }
  }
  SUBCASE("errors") {
    Saved wrong = saved;
    wrong["self"] = y;
    CHECK_THROWS_WITH_AS(call_node("PowBackward2", {g}, {true}, wrong),
                         "PowBackward2: saved field 'self' expects Scalar, got Tensor f64[2,3]", Error);
  }
}

TEST_CASE("AddcmulBackward0") {
  const Tensor x = random64({2, 3}, 135), t1 = random64({2, 3}, 136), t2 = random64({2, 3}, 137),
               g = random64({2, 3}, 138);
  const Saved saved = {{"self_scalar_type", DType::Float64}, {"tensor1", t1}, {"tensor1_scalar_type", DType::Float64},
                       {"tensor2", t2}, {"tensor2_scalar_type", DType::Float64}, {"value", Scalar(-1.5)}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "AddcmulBackward0", saved,
        [](const std::vector<Tensor>& in) { return add(in[0], mul(mul(in[1], in[2]), Scalar(-1.5))); }, {x, t1, t2},
        g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("AddcmulBackward0", g, 3, saved); }
  SUBCASE("against torch") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); t1 = b.requires_grad_(); t2 = c.requires_grad_()
out = torch.addcmul(x, t1, t2, value=2)
fn = out.grad_fn
assert fn.name() == "AddcmulBackward0"
result = (fn._saved_tensor1, fn._saved_tensor2, fn._saved_value, *torch.autograd.grad(out, (x, t1, t2), d))
)", {x, t1, t2, g});
    const Grads out = call_node("AddcmulBackward0", {g}, {true, true, true},
                                {{"self_scalar_type", DType::Float64}, {"tensor1", r[0]},
                                 {"tensor1_scalar_type", DType::Float64}, {"tensor2", r[1]},
                                 {"tensor2_scalar_type", DType::Float64}, {"value", scalar_of(r[2])}});
    CHECK_TENSOR(*out[0], r[3]);
    CHECK_TENSOR(*out[1], r[4]);
    CHECK_TENSOR(*out[2], r[5]);
  }
  SUBCASE("against torch, only tensor1 needs grad: tensor1 is not saved") {
    const auto r = torch_exec(R"(
t1 = b.requires_grad_()
out = torch.addcmul(a, t1, c)
fn = out.grad_fn
result = (fn._saved_tensor1 is None, fn._saved_tensor2, fn._saved_value, *torch.autograd.grad(out, (t1,), d))
)", {x, t1, t2, g});
    CHECK(r[0].item<bool>());
    const Saved from_torch = {{"self_scalar_type", DType::Float64}, {"tensor1", None{}},
                              {"tensor1_scalar_type", DType::Float64}, {"tensor2", r[1]},
                              {"tensor2_scalar_type", DType::Float64}, {"value", scalar_of(r[2])}};
    CHECK_TENSOR(*call_node("AddcmulBackward0", {g}, {false, true, false}, from_torch)[1], r[3]);
    CHECK_THROWS_WITH_AS(call_node("AddcmulBackward0", {g}, {false, false, true}, from_torch),
                         "AddcmulBackward0: tensor2's grad is needed but `tensor1` was not saved", Error);
  }
  SUBCASE("errors") {
    Saved no_tensor2 = saved;
    no_tensor2["tensor2"] = None{};
    CHECK_THROWS_WITH_AS(call_node("AddcmulBackward0", {g}, {false, true, false}, no_tensor2),
                         "AddcmulBackward0: tensor1's grad is needed but `tensor2` was not saved", Error);
  }
}

TEST_CASE("AddcdivBackward0") {
  const Tensor x = random64({2, 3}, 139), t1 = random64({2, 3}, 140), t2 = add(abs(random64({2, 3}, 141)), Scalar(0.5)),
               g = random64({2, 3}, 142);
  const Saved saved = {{"self_scalar_type", DType::Float64}, {"tensor1", t1}, {"tensor1_scalar_type", DType::Float64},
                       {"tensor2", t2}, {"tensor2_scalar_type", DType::Float64}, {"value", Scalar(0.75)}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "AddcdivBackward0", saved,
        [](const std::vector<Tensor>& in) { return add(in[0], mul(div(in[1], in[2]), Scalar(0.75))); }, {x, t1, t2},
        g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("AddcdivBackward0", g, 3, saved); }
  SUBCASE("against torch, a zero divisor included") {
    const Tensor divisor = tensor({{0.5, -1.0, 0.0}, {2.0, 0.0, 3.0}}, DType::Float64);
    const auto r = torch_exec(R"(
x = a.requires_grad_(); t1 = b.requires_grad_(); t2 = c.requires_grad_()
out = torch.addcdiv(x, t1, t2, value=-0.5)
fn = out.grad_fn
assert fn.name() == "AddcdivBackward0"
result = (fn._saved_tensor1, fn._saved_tensor2, fn._saved_value, *torch.autograd.grad(out, (x, t1, t2), d))
)", {x, t1, divisor, g});
    const Grads out = call_node("AddcdivBackward0", {g}, {true, true, true},
                                {{"self_scalar_type", DType::Float64}, {"tensor1", r[0]},
                                 {"tensor1_scalar_type", DType::Float64}, {"tensor2", r[1]},
                                 {"tensor2_scalar_type", DType::Float64}, {"value", scalar_of(r[2])}});
    CHECK_TENSOR(*out[0], r[3]);
    CHECK_TENSOR(*out[1], r[4]);
    CHECK_TENSOR(*out[2], r[5]);
  }
  SUBCASE("float32 tensors: value / tensor2 in float32") {
    const Tensor t1f = t1.to(DType::Float32), t2f = t2.to(DType::Float32), gf = g.to(DType::Float32);
    const auto r = torch_exec(R"(
t1 = b.requires_grad_(); t2 = c.requires_grad_()
out = torch.addcdiv(a, t1, t2, value=0.1)
result = torch.autograd.grad(out, (t1, t2), d)
)", {x.to(DType::Float32), t1f, t2f, gf});
    const Grads out = call_node("AddcdivBackward0", {gf}, {false, true, true},
                                {{"self_scalar_type", DType::Float32}, {"tensor1", t1f},
                                 {"tensor1_scalar_type", DType::Float32}, {"tensor2", t2f},
                                 {"tensor2_scalar_type", DType::Float32}, {"value", Scalar(0.1)}});
    CHECK_TENSOR(*out[1], r[0], 0.0, 0.0);  // bitwise
    CHECK_TENSOR(*out[2], r[1], 0.0, 0.0);
  }
  SUBCASE("errors") {
    Saved no_tensor1 = saved;
    no_tensor1["tensor1"] = None{};
    CHECK_THROWS_WITH_AS(call_node("AddcdivBackward0", {g}, {false, false, true}, no_tensor1),
                         "AddcdivBackward0: tensor2's grad is needed but `tensor1` was not saved", Error);
    Saved no_tensor2 = saved;
    no_tensor2["tensor2"] = None{};
    CHECK_THROWS_WITH_AS(call_node("AddcdivBackward0", {g}, {false, true, false}, no_tensor2),
                         "AddcdivBackward0: tensor1's grad is needed but `tensor2` was not saved", Error);
  }
}

// maximum and minimum: ties split the grad in half; NaN passes it to both.
static void check_maximum_minimum(const std::string& node, const std::string& op) {
  const Tensor x = random64({2, 3}, 143), y = random64({2, 3}, 144), g = random64({2, 3}, 145);
  const Saved saved = {{"other", y}, {"self", x}};
  SUBCASE("finite differences, away from ties") {
    check_all_against_finite_differences(
        node, saved,
        [op](const std::vector<Tensor>& in) { return op == "maximum" ? maximum(in[0], in[1]) : minimum(in[0], in[1]); },
        {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined(node, g, 2, saved); }
  SUBCASE("against torch, with ties, -0.0 == 0.0, NaN and broadcasting") {
    const Tensor a = tensor({{1.0, 2.0, 3.0, kNaN, 1.0, -0.0}, {0.5, 0.5, -1.0, 2.0, kNaN, kInf}}, DType::Float64);
    const Tensor b = tensor({2.0, 2.0, 1.0, 0.0, kNaN, 0.0}, DType::Float64);
    const Tensor g26 = random64({2, 6}, 146);
    const auto r = torch_exec("x = a.requires_grad_(); y = b.requires_grad_()\nout = torch." + op + R"((x, y)
fn = out.grad_fn
assert fn.name() == ")" + node + R"("
result = (fn._saved_self, fn._saved_other, *torch.autograd.grad(out, (x, y), c))
)", {a, b, g26});
    const Grads out = call_node(node, {g26}, {true, true}, {{"other", r[1]}, {"self", r[0]}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK_TENSOR(sum_to(*out[1], {6}), r[3]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true, true}, {{"other", random64({4}, 1)}, {"self", x}}),
                         doctest::Contains("[4]"), Error);
  }
}

TEST_CASE("MaximumBackward0") { check_maximum_minimum("MaximumBackward0", "maximum"); }
TEST_CASE("MinimumBackward0") { check_maximum_minimum("MinimumBackward0", "minimum"); }

TEST_CASE("Atan2Backward0") {
  const Tensor x = random64({2, 3}, 147), y = random64({2, 3}, 148), g = random64({2, 3}, 149);
  const Saved saved = {{"other", y}, {"self", x}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "Atan2Backward0", saved, [](const std::vector<Tensor>& in) { return atan2(in[0], in[1]); }, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("Atan2Backward0", g, 2, saved); }
  SUBCASE("against torch, at the origin and on the axes") {
    const Tensor a = tensor({0.0, 0.0, 1.0, -1.0, -0.0, 3.0}, DType::Float64);
    const Tensor b = tensor({0.0, 1.0, 0.0, -0.0, -2.0, 4.0}, DType::Float64);
    const Tensor g6 = tensor({1.0, 2.0, -1.0, 0.5, 1.0, -2.0}, DType::Float64);
    const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.atan2(x, y)
fn = out.grad_fn
assert fn.name() == "Atan2Backward0"
result = (fn._saved_self, fn._saved_other, *torch.autograd.grad(out, (x, y), c))
)", {a, b, g6});
    const Grads out = call_node("Atan2Backward0", {g6}, {true, true}, {{"other", r[1]}, {"self", r[0]}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK_TENSOR(*out[1], r[3]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("Atan2Backward0", {g}, {true, false}, {{"other", y}}),
                         "Atan2Backward0: saved field 'self' is missing", Error);
  }
}

// A two-input node against torch's grad_fn, fed its saved fields (`fields`, read as fn._saved_<field>),
// at special points a and b (same shape), in float64.
void check_binary_against_torch(const std::string& node, const std::string& torch_call,
                                const std::vector<std::string>& fields, const Tensor& a, const Tensor& b) {
  std::string saved_values;
  for (const std::string& field : fields) saved_values += "fn._saved_" + field + ", ";
  const Tensor g = random64(a.sizes(), 150);
  const auto r = torch_exec("x = a.requires_grad_(); y = b.requires_grad_()\n"
                            "out = " + torch_call + "\n"
                            "fn = out.grad_fn\n"
                            "assert fn.name() == '" + node + "', fn.name()\n"
                            "result = (" + saved_values + "*torch.autograd.grad(out, (x, y), c))\n",
                            {a, b, g});
  Saved from_torch;
  for (std::size_t i = 0; i < fields.size(); ++i) from_torch[fields[i]] = r[i];
  const Grads out = call_node(node, {g}, {true, true}, from_torch);
  CHECK_TENSOR(*out[0], r[fields.size()]);
  CHECK_TENSOR(*out[1], r[fields.size() + 1]);
}

TEST_CASE("LogaddexpBackward0") {
  const Tensor x = random64({2, 3}, 151), y = random64({2, 3}, 152), g = random64({2, 3}, 153);
  const Saved saved = {{"other", y}, {"self", x}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "LogaddexpBackward0", saved, [](const std::vector<Tensor>& in) { return log(add(exp(in[0]), exp(in[1]))); },
        {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("LogaddexpBackward0", g, 2, saved); }
  SUBCASE("against torch: equal inputs, far apart, infinities") {
    check_binary_against_torch("LogaddexpBackward0", "torch.logaddexp(x, y)", {"self", "other"},
                               tensor({0.0, 800.0, -800.0, 1.0, -INFINITY, 3.0}, DType::Float64),
                               tensor({0.0, -800.0, 800.0, 1.0, 2.0, INFINITY}, DType::Float64));
  }
}

TEST_CASE("Logaddexp2Backward0") {
  const Tensor x = random64({2, 3}, 154), y = random64({2, 3}, 155), g = random64({2, 3}, 156);
  const Saved saved = {{"other", y}, {"self", x}};
  SUBCASE("finite differences") {
    const double ln2 = std::log(2.0);
    check_all_against_finite_differences(
        "Logaddexp2Backward0", saved,
        [ln2](const std::vector<Tensor>& in) {
          return div(log(add(pow(Scalar(2), in[0]), pow(Scalar(2), in[1]))), ln2);
        },
        {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("Logaddexp2Backward0", g, 2, saved); }
  SUBCASE("against torch: equal inputs, far apart, infinities") {
    check_binary_against_torch("Logaddexp2Backward0", "torch.logaddexp2(x, y)", {"self", "other"},
                               tensor({0.0, 1100.0, -1100.0, 1.0, -INFINITY, 3.0}, DType::Float64),
                               tensor({0.0, -1100.0, 1100.0, 1.0, 2.0, INFINITY}, DType::Float64));
  }
}

TEST_CASE("HypotBackward0") {
  const Tensor x = random64({2, 3}, 157), y = random64({2, 3}, 158), g = random64({2, 3}, 159);
  const Tensor result = sqrt(add(mul(x, x), mul(y, y)));
  const Saved saved = {{"other", y}, {"self", x}, {"result", result}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "HypotBackward0", saved,
        [](const std::vector<Tensor>& in) { return sqrt(add(mul(in[0], in[0]), mul(in[1], in[1]))); }, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("HypotBackward0", g, 2, saved); }
  SUBCASE("against torch: the origin (0/0), an axis, huge values") {
    check_binary_against_torch("HypotBackward0", "torch.hypot(x, y)", {"self", "other", "result"},
                               tensor({0.0, 0.0, 3.0, 1e300, -2.0, 1e-300}, DType::Float64),
                               tensor({0.0, 1.0, 4.0, 1e300, 0.0, 1e-300}, DType::Float64));
  }
}

TEST_CASE("XlogyBackward0") {
  const Tensor x = random64({2, 3}, 160), y = add(abs(random64({2, 3}, 161)), 0.5), g = random64({2, 3}, 162);
  const Saved saved = {{"other", y}, {"self", x}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "XlogyBackward0", saved, [](const std::vector<Tensor>& in) { return mul(in[0], log(in[1])); }, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("XlogyBackward0", g, 2, saved); }
  SUBCASE("against torch: self 0 with other 0 or negative, other NaN, other 0") {
    check_binary_against_torch("XlogyBackward0", "torch.xlogy(x, y)", {"self", "other"},
                               tensor({0.0, 0.0, 0.0, 2.0, 1.0, 0.0}, DType::Float64),
                               tensor({0.0, -1.0, NAN, 0.0, 3.0, 2.0}, DType::Float64));
  }
  SUBCASE("by hand: self = 0, other = 2: d/dself = g * log 2, d/dother = 0") {
    const Grads out = call_node("XlogyBackward0", {tensor({3.0}, DType::Float64)}, {true, true},
                                {{"other", tensor({2.0}, DType::Float64)}, {"self", tensor({0.0}, DType::Float64)}});
    CHECK_TENSOR(*out[0], tensor({3.0 * std::log(2.0)}, DType::Float64));
    CHECK_TENSOR(*out[1], tensor({0.0}, DType::Float64));
  }
}

TEST_CASE("WhereBackward0") {
  const Tensor cond = tensor({{true, false, true}, {false, false, true}}, DType::Bool);
  const Tensor x = random64({2, 3}, 150), y = random64({2, 3}, 151), g = random64({2, 3}, 152);
  const Saved saved = {{"condition", cond}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "WhereBackward0", saved, [cond](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {x, y},
        g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("WhereBackward0", g, 2, saved); }
  SUBCASE("against torch, a broadcast condition and a Python-number other") {
    const Tensor row = tensor({true, false, true}, DType::Bool);
    const auto r = torch_exec(R"(
x = b.requires_grad_(); y = c.requires_grad_()
out1 = torch.where(a, x, y)
out2 = torch.where(a, x, 0.0)
assert out1.grad_fn.name() == "WhereBackward0" and out2.grad_fn.name() == "WhereBackward0"
result = (out1.grad_fn._saved_condition, out2.grad_fn._saved_condition, *torch.autograd.grad(out1, (x, y), d),
          *torch.autograd.grad(out2, (x,), d))
)", {row, x, y, g});
    const Grads out1 = call_node("WhereBackward0", {g}, {true, true}, Saved{{"condition", r[0]}});
    CHECK_TENSOR(*out1[0], r[2]);
    CHECK_TENSOR(*out1[1], r[3]);
    const Grads out2 = call_node("WhereBackward0", {g}, {true, false}, Saved{{"condition", r[1]}});
    CHECK_TENSOR(*out2[0], r[4]);
    CHECK_FALSE(out2[1].has_value());
  }
  SUBCASE("float32 grad stays float32") {
    CHECK(call_node("WhereBackward0", {g.to(DType::Float32)}, {true, true}, saved)[1]->dtype() == DType::Float32);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("WhereBackward0", {g}, {true, true}, Saved{{"condition", random64({4}, 1)}}),
                         doctest::Contains("where"), Error);
  }
}

TEST_CASE("ClampBackward1") {
  const Tensor x = tensor({-2.0, -0.75, 0.1, 0.3, 1.5}, DType::Float64), g = random64({5}, 153);
  const Saved saved = {{"max", Scalar(1.0)}, {"min", Scalar(-0.5)}, {"self", x}};
  SUBCASE("finite differences, away from the bounds") {
    check_all_against_finite_differences(
        "ClampBackward1", saved,
        [](const std::vector<Tensor>& in) {
          return clamp(in[0], std::optional<Scalar>(-0.5), std::optional<Scalar>(1.0));
        },
        {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("ClampBackward1", g, 1, saved); }
  SUBCASE("against torch, at the bounds, NaN, one bound only, min > max") {
    const Tensor at_bounds = tensor({-1.0, -0.5, 0.0, 0.5, 1.0, kNaN, 0.5, -kInf}, DType::Float64);
    const Tensor g8 = random64({8}, 154);
    for (const char* bounds : {"min=-0.5, max=0.5", "min=-0.5", "max=0.5", "min=1, max=-1", "min=0, max=0"}) {
      CAPTURE(bounds);
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = torch.clamp(x, )") + bounds + R"()
fn = out.grad_fn
assert fn.name() == "ClampBackward1"
as_saved = lambda v: torch.tensor([]) if v is None else v
result = (fn._saved_min is None, as_saved(fn._saved_min), fn._saved_max is None, as_saved(fn._saved_max),
          fn._saved_self, *torch.autograd.grad(out, (x,), b))
)", {at_bounds, g8});
      const FieldValue min = r[0].item<bool>() ? FieldValue{None{}} : FieldValue{scalar_of(r[1])};
      const FieldValue max = r[2].item<bool>() ? FieldValue{None{}} : FieldValue{scalar_of(r[3])};
      const Grads out = call_node("ClampBackward1", {g8}, {true}, {{"max", max}, {"min", min}, {"self", r[4]}});
      CHECK_TENSOR(*out[0], r[5]);
    }
  }
  SUBCASE("no bounds passes the grad on") {
    CHECK(call_node("ClampBackward1", {g}, {true}, {{"max", None{}}, {"min", None{}}, {"self", x}})[0]->is_same(g));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("ClampBackward1", {g}, {true}, {{"max", x}, {"min", None{}}, {"self", x}}),
                         "ClampBackward1: saved field 'max' expects Scalar?, got Tensor f64[5]", Error);
  }
}

TEST_CASE("ClampBackward0") {
  const Tensor x = tensor({-2.0, -0.75, 0.1, 0.3, 1.5}, DType::Float64);
  const Tensor lo = tensor({-1.0, -1.0, 0.0, 0.5, 0.0}, DType::Float64);
  const Tensor hi = tensor({0.5, 1.0, 1.0, 1.0, 1.0}, DType::Float64);
  const Tensor g = random64({5}, 155);
  const Saved saved = {{"max", hi}, {"min", lo}, {"self", x}};
  SUBCASE("finite differences, away from the bounds") {
    check_all_against_finite_differences(
        "ClampBackward0", saved,
        [](const std::vector<Tensor>& in) { return clamp(in[0], OptionalTensor(in[1]), OptionalTensor(in[2])); },
        {x, lo, hi}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("ClampBackward0", g, 3, saved); }
  SUBCASE("against torch, at the bounds, min > max, NaN") {
    const Tensor self = tensor({-1.0, 1.0, 0.0, 2.0, -3.0, 0.5, kNaN, 0.0}, DType::Float64);
    const Tensor min = tensor({-1.0, 0.0, 1.0, 1.0, 1.0, 0.5, 0.0, kNaN}, DType::Float64);
    const Tensor max = tensor({1.0, 1.0, -1.0, -1.0, -1.0, 0.5, 1.0, 1.0}, DType::Float64);
    const Tensor g8 = random64({8}, 156);
    const auto r = torch_exec(R"(
x = a.requires_grad_(); lo = b.requires_grad_(); hi = c.requires_grad_()
out = torch.clamp(x, lo, hi)
fn = out.grad_fn
assert fn.name() == "ClampBackward0"
result = (fn._saved_self, fn._saved_min, fn._saved_max, *torch.autograd.grad(out, (x, lo, hi), d))
)", {self, min, max, g8});
    const Grads out = call_node("ClampBackward0", {g8}, {true, true, true},
                                {{"max", r[2]}, {"min", r[1]}, {"self", r[0]}});
    CHECK_TENSOR(*out[0], r[3]);
    CHECK_TENSOR(*out[1], r[4]);
    CHECK_TENSOR(*out[2], r[5]);
  }
  SUBCASE("against torch, one bound only") {
    for (const char* bound : {"min", "max"}) {
      CAPTURE(bound);
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_(); bound = b.requires_grad_()
out = torch.clamp(x, )") + bound + R"(=bound)
fn = out.grad_fn
assert fn.name() == "ClampBackward0"
assert (fn._saved_min is None) != (fn._saved_max is None)
result = (fn._saved_self, getattr(fn, "_saved_" + ")" + bound + R"("), *torch.autograd.grad(out, (x, bound), c))
)", {x, lo, g});
      const bool is_min = std::string(bound) == "min";
      const Saved from_torch = {{"max", is_min ? FieldValue{None{}} : FieldValue{r[1]}},
                                {"min", is_min ? FieldValue{r[1]} : FieldValue{None{}}},
                                {"self", r[0]}};
      const Grads out = call_node("ClampBackward0", {g}, {true, is_min, !is_min}, from_torch);
      CHECK_TENSOR(*out[0], r[2]);
      CHECK_TENSOR(*out[is_min ? 1 : 2], r[3]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("ClampBackward0", {g}, {false, true, false},
                                   {{"max", hi}, {"min", None{}}, {"self", x}}),
                         "ClampBackward0: min's grad is needed but `min` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("ClampBackward0", {g}, {false, false, true},
                                   {{"max", None{}}, {"min", lo}, {"self", x}}),
                         "ClampBackward0: max's grad is needed but `max` was not saved", Error);
  }
}

// clamp_min and clamp_max: the grad passes at the bound itself.
static void check_clamp_min_max(const std::string& node, const std::string& op, const std::string& bound) {
  const Tensor x = tensor({-2.0, -0.75, 0.1, 0.3, 1.5}, DType::Float64), g = random64({5}, 157);
  const Saved saved = {{bound, Scalar(0.2)}, {"self", x}};
  SUBCASE("finite differences, away from the bound") {
    check_all_against_finite_differences(
        node, saved,
        [bound](const std::vector<Tensor>& in) {
          return bound == "min" ? clamp(in[0], std::optional<Scalar>(0.2), std::nullopt)
                                : clamp(in[0], std::nullopt, std::optional<Scalar>(0.2));
        },
        {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined(node, g, 1, saved); }
  SUBCASE("against torch, at the bound, NaN, an int bound") {
    const Tensor at_bound = tensor({-1.0, 0.5, 0.0, 1.0, kNaN, kInf}, DType::Float64);
    const Tensor g6 = random64({6}, 158);
    for (const char* value : {"0.5", "1", "0.0"}) {
      CAPTURE(value);
      const auto r = torch_exec("x = a.requires_grad_()\nout = torch." + op + "(x, " + value + R"()
fn = out.grad_fn
assert fn.name() == ")" + node + R"("
result = (fn._saved_)" + bound + R"(, fn._saved_self, *torch.autograd.grad(out, (x,), b))
)", {at_bound, g6});
      const Grads out = call_node(node, {g6}, {true}, {{bound, scalar_of(r[0])}, {"self", r[1]}});
      CHECK_TENSOR(*out[0], r[2]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true}, {{bound, None{}}, {"self", x}}),
                         (node + ": saved field '" + bound + "' expects Scalar, got None").c_str(), Error);
  }
}

TEST_CASE("ClampMinBackward0") { check_clamp_min_max("ClampMinBackward0", "clamp_min", "min"); }
TEST_CASE("ClampMaxBackward0") { check_clamp_min_max("ClampMaxBackward0", "clamp_max", "max"); }

TEST_CASE("MaskedFillBackward0") {
  const Tensor mask = tensor({{true, false, true}, {false, false, true}}, DType::Bool);
  const Tensor x = random64({2, 3}, 159), g = random64({2, 3}, 160);
  const Saved saved = {{"mask", mask}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "MaskedFillBackward0", saved,
        [mask](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, Scalar(7.0)); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("MaskedFillBackward0", g, 1, saved); }
  SUBCASE("against torch, a broadcast mask") {
    const Tensor row = tensor({false, true, true}, DType::Bool);
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = x.masked_fill(b, 1.5)
fn = out.grad_fn
assert fn.name() == "MaskedFillBackward0"
result = (fn._saved_mask, *torch.autograd.grad(out, (x,), c))
)", {x, row, g});
    CHECK_TENSOR(*call_node("MaskedFillBackward0", {g}, {true}, Saved{{"mask", r[0]}})[0], r[1]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("MaskedFillBackward0", {g}, {true},
                                   Saved{{"mask", tensor({true, false}, DType::Bool)}}),
                         doctest::Contains("[2]"), Error);
  }
}

TEST_CASE("MaskedFillBackward1") {
  const Tensor mask = tensor({{true, false, true}, {false, false, true}}, DType::Bool);
  const Tensor x = random64({2, 3}, 161), v = random64({}, 162), g = random64({2, 3}, 163);
  const Saved saved = {{"mask", mask}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "MaskedFillBackward1", saved,
        [mask](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, in[1]); }, {x, v}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("MaskedFillBackward1", g, 2, saved); }
  SUBCASE("against torch, an all-false mask included") {
    for (const Tensor& m : {mask, zeros({2, 3}, DType::Bool)}) {
      const auto r = torch_exec(R"(
x = a.requires_grad_(); v = b.requires_grad_()
out = x.masked_fill(c, v)
fn = out.grad_fn
assert fn.name() == "MaskedFillBackward1"
result = (fn._saved_mask, *torch.autograd.grad(out, (x, v), d))
)", {x, v, m, g});
      const Grads out = call_node("MaskedFillBackward1", {g}, {true, true}, Saved{{"mask", r[0]}});
      CHECK_TENSOR(*out[0], r[1]);
      CHECK_TENSOR(*out[1], r[2]);  // 0-dim, the sum of grad where mask
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("MaskedFillBackward1", {g}, {false, true},
                                   Saved{{"mask", tensor({true, false}, DType::Bool)}}),
                         doctest::Contains("[2]"), Error);
  }
}

TEST_CASE("LerpBackward0") {
  const Tensor x = random64({2, 3}, 164), y = random64({2, 3}, 165), g = random64({2, 3}, 166);
  const Saved saved = {{"weight", Scalar(0.3)}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "LerpBackward0", saved,
        [](const std::vector<Tensor>& in) { return add(in[0], mul(sub(in[1], in[0]), Scalar(0.3))); }, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("LerpBackward0", g, 2, saved); }
  SUBCASE("against torch, float and int weights") {
    for (const char* weight : {"0.3", "2", "-0.7"}) {
      CAPTURE(weight);
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.lerp(x, y, )") + weight + R"()
fn = out.grad_fn
assert fn.name() == "LerpBackward0"
result = (fn._saved_weight, *torch.autograd.grad(out, (x, y), c))
)", {x, y, g});
      const Grads out = call_node("LerpBackward0", {g}, {true, true}, Saved{{"weight", scalar_of(r[0])}});
      CHECK_TENSOR(*out[0], r[1]);
      CHECK_TENSOR(*out[1], r[2]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("LerpBackward0", {g}, {true, true}, Saved{{"weight", x}}),
                         "LerpBackward0: saved field 'weight' expects Scalar, got Tensor f64[2,3]", Error);
  }
}

TEST_CASE("LerpBackward1") {
  const Tensor x = random64({2, 3}, 167), y = random64({2, 3}, 168), w = random64({2, 3}, 169),
               g = random64({2, 3}, 170);
  const Saved saved = {{"end", y}, {"self", x}, {"weight", w}};
  SUBCASE("finite differences") {
    check_all_against_finite_differences(
        "LerpBackward1", saved,
        [](const std::vector<Tensor>& in) { return add(in[0], mul(in[2], sub(in[1], in[0]))); }, {x, y, w}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_mask_and_undefined("LerpBackward1", g, 3, saved); }
  SUBCASE("against torch") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_(); w = c.requires_grad_()
out = torch.lerp(x, y, w)
fn = out.grad_fn
assert fn.name() == "LerpBackward1"
result = (fn._saved_self, fn._saved_end, fn._saved_weight, *torch.autograd.grad(out, (x, y, w), d))
)", {x, y, w, g});
    const Grads out = call_node("LerpBackward1", {g}, {true, true, true},
                                {{"end", r[1]}, {"self", r[0]}, {"weight", r[2]}});
    CHECK_TENSOR(*out[0], r[3], 0.0, 0.0);  // 1 - weight computed exactly as torch does
    CHECK_TENSOR(*out[1], r[4]);
    CHECK_TENSOR(*out[2], r[5]);
  }
  SUBCASE("against torch, only self needs grad: self and end are not saved") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.lerp(x, b, c)
fn = out.grad_fn
result = (fn._saved_self is None and fn._saved_end is None, fn._saved_weight, *torch.autograd.grad(out, (x,), d))
)", {x, y, w, g});
    CHECK(r[0].item<bool>());
    const Saved from_torch = {{"end", None{}}, {"self", None{}}, {"weight", r[1]}};
    CHECK_TENSOR(*call_node("LerpBackward1", {g}, {true, false, false}, from_torch)[0], r[2]);
    CHECK_THROWS_WITH_AS(call_node("LerpBackward1", {g}, {false, false, true}, from_torch),
                         "LerpBackward1: weight's grad is needed but `end` was not saved", Error);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("LerpBackward1", {g}, {false, true, false},
                                   {{"end", y}, {"self", x}, {"weight", None{}}}),
                         "LerpBackward1: end's grad is needed but `weight` was not saved", Error);
  }
}

}  // TEST_SUITE
