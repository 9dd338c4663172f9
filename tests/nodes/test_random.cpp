// Node tests of random sampling and rrelu (src/nodes/random.cpp).
#include <string>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

const Grads kNoGrad = {std::nullopt};

const std::vector<DType> kFloatDTypes = {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16};

// torch code that, after the forward `out` and its node `fn`, leaves a seeded grad `g` of out's shape
// and dtype.
constexpr const char* kSeededGrad =
    "\ng = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(out.dtype)\n"
    "T = lambda s: torch.tensor(list(s), dtype=torch.int64)\n";

// A sample is a constant of its inputs: its finite-difference VJP is zero, which is what the node
// must give, in the input's shape.
void check_zero_by_finite_differences(const char* node, std::size_t k, const Grads& out,
                                      const std::vector<Tensor>& inputs, const Shape& output_sizes) {
  const Tensor sample = random64(output_sizes, 90);
  auto constant = [&](const std::vector<Tensor>&) { return sample; };
  CAPTURE(node);
  check_against_finite_differences(out, k, constant, inputs, random64(output_sizes, 91));
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("NormalBackward0") {
  // x.normal_(0.5, 2.0) overwrites x with a sample: self's grad is zero, of the grad's shape and dtype.
  const Tensor x = random64({3, 4}, 1);
  const Grads out = call_node("NormalBackward0", {random64({3, 4}, 2)}, {true}, Saved{});
  check_zero_by_finite_differences("NormalBackward0", 0, out, {x}, {3, 4});
  for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16, DType::ComplexDouble}) {
    CAPTURE(dtype_name(dtype));
    const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = (x * 1).normal_(0.5, 2.0)
fn = out.grad_fn
assert fn.name() == "NormalBackward0", fn.name()
g = torch.ones(out.shape, dtype=out.dtype)
result = (g, *torch.autograd.grad(out, (x,), g))
)"),
                              {dtype == DType::ComplexDouble ? complex(x, x) : x.to(dtype)});
    const Grads grad_self = call_node("NormalBackward0", {r[0]}, {true}, Saved{});
    CHECK(grad_self[0]->dtype() == dtype);
    CHECK_TENSOR(*grad_self[0], r[1], 0, 0);
  }
  CHECK_FALSE(call_node("NormalBackward0", kNoGrad, {true}, Saved{})[0].has_value());
  CHECK_FALSE(call_node("NormalBackward0", {x}, {false}, Saved{})[0].has_value());
}

TEST_CASE("NormalBackward1") {
  // normal(mean, 2.0): mean's grad is zeros of mean_sym_sizes, in the grad's dtype.
  for (const DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = torch.normal(x, 2.0)
fn = out.grad_fn
assert fn.name() == "NormalBackward1", fn.name()
)") + kSeededGrad + "result = (T(fn._saved_mean_sym_sizes), g, *torch.autograd.grad(out, (x,), g))\n",
                              {random64({3, 4}, 3).to(dtype)});
    const Grads out = call_node("NormalBackward1", {r[1]}, {true}, Saved{{"mean_sym_sizes", int_list(r[0])}});
    CHECK(out[0]->dtype() == dtype);
    CHECK_TENSOR(*out[0], r[2], 0, 0);
    if (dtype == DType::Float64)
      check_zero_by_finite_differences("NormalBackward1", 0, out, {random64({3, 4}, 4)}, {3, 4});
  }
  CHECK_FALSE(call_node("NormalBackward1", kNoGrad, {true}, Saved{{"mean_sym_sizes", IntList{2}}})[0].has_value());
  CHECK_THROWS_WITH_AS(call_node("NormalBackward1", {random64({2}, 5)}, {true}, Saved{{"mean_sym_sizes", IntList{-2}}}),
                       "NormalBackward1: mean_sym_sizes [-2] has a negative size", Error);
  CHECK_THROWS_WITH_AS(call_node("NormalBackward1", {random64({2}, 5)}, {true}, Saved{}),
                       "NormalBackward1: saved field 'mean_sym_sizes' is missing", Error);
}

TEST_CASE("NormalBackward2") {
  for (const DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = torch.normal(0.5, x.abs() + 0.1)
fn = out.grad_fn
assert fn.name() == "NormalBackward2", fn.name()
)") + kSeededGrad + "result = (T(fn._saved_std_sym_sizes), g, *torch.autograd.grad(out, (x,), g))\n",
                              {random64({2, 3, 2}, 6).to(dtype)});
    const Grads out = call_node("NormalBackward2", {r[1]}, {true}, Saved{{"std_sym_sizes", int_list(r[0])}});
    CHECK(out[0]->dtype() == dtype);
    CHECK_TENSOR(*out[0], r[2], 0, 0);
    if (dtype == DType::Float64)
      check_zero_by_finite_differences("NormalBackward2", 0, out, {random64({2, 3, 2}, 7)}, {2, 3, 2});
  }
  CHECK_FALSE(call_node("NormalBackward2", {random64({2}, 5)}, {false}, Saved{{"std_sym_sizes", IntList{2}}})[0]);
}

TEST_CASE("NormalBackward3") {
  // mean [3, 1] and std [4] broadcast to a [3, 4] sample: each grad has its own input's shape.
  for (const DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const auto r = torch_exec(std::string(R"(
m = a.requires_grad_()
s = b.requires_grad_()
out = torch.normal(m, s.abs() + 0.1)
fn = out.grad_fn
assert fn.name() == "NormalBackward3", fn.name()
assert out.shape == (3, 4), out.shape
)") + kSeededGrad + R"(result = (T(fn._saved_mean_sym_sizes), T(fn._saved_std_sym_sizes), g,
          *torch.autograd.grad(out, (m, s), g))
)",
                              {random64({3, 1}, 8).to(dtype), random64({4}, 9).to(dtype)});
    const Saved saved = {{"mean_sym_sizes", int_list(r[0])}, {"std_sym_sizes", int_list(r[1])}};
    const Grads out = call_node("NormalBackward3", {r[2]}, {true, true}, saved);
    CHECK(out[0]->dtype() == dtype);
    CHECK_TENSOR(*out[0], r[3], 0, 0);
    CHECK_TENSOR(*out[1], r[4], 0, 0);
    if (dtype == DType::Float64) {
      const std::vector<Tensor> inputs = {random64({3, 1}, 10), random64({4}, 11)};
      check_zero_by_finite_differences("NormalBackward3", 0, out, inputs, {3, 4});
      check_zero_by_finite_differences("NormalBackward3", 1, out, inputs, {3, 4});
    }
    const Grads only_std = call_node("NormalBackward3", {r[2]}, {false, true}, saved);
    CHECK_FALSE(only_std[0].has_value());
    CHECK(only_std[1].has_value());
  }
  CHECK_FALSE(call_node("NormalBackward3", kNoGrad, {true, true},
                        Saved{{"mean_sym_sizes", IntList{2}}, {"std_sym_sizes", IntList{2}}})[1]
                  .has_value());
}

TEST_CASE("BernoulliBackward0") {
  for (const DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
s = torch.sigmoid(x)
out = torch.bernoulli(s)
fn = out.grad_fn
assert fn.name() == "BernoulliBackward0", fn.name()
)") + kSeededGrad + "result = (g, *torch.autograd.grad(out, (s,), g))\n",
                              {random64({3, 4}, 12).to(dtype)});
    // Against the grad torch's node passes to sigmoid's.
    const Grads out = call_node("BernoulliBackward0", {r[0]}, {true}, Saved{});
    CHECK(out[0]->dtype() == dtype);
    CHECK_TENSOR(*out[0], r[1], 0, 0);
    if (dtype == DType::Float64)
      check_zero_by_finite_differences("BernoulliBackward0", 0, out, {random64({3, 4}, 13)}, {3, 4});
  }
}

TEST_CASE("BernoulliBackward1") {
  // self [3, 4] drawn with p [4] (broadcast), p float32 while self is of each dtype: p's grad has p's
  // shape and dtype (p_info), self's the grad's.
  for (const DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
p = torch.sigmoid(b).requires_grad_()
out = (x * 1).bernoulli_(p)
fn = out.grad_fn
assert fn.name() == "BernoulliBackward1", fn.name()
)") + kSeededGrad + R"(result = (T(p.shape), torch.tensor(0, dtype=p.dtype), g, *torch.autograd.grad(out, (x, p), g))
)",
                              {random64({3, 4}, 13).to(dtype), random64({4}, 14).to(DType::Float32)});
    const Saved saved = {{"p_info", TypeAndSize{int_list(r[0]), TensorOptions{r[1].dtype(), {}, {}, {}}}}};
    const Grads out = call_node("BernoulliBackward1", {r[2]}, {true, true}, saved);
    CHECK(out[0]->dtype() == dtype);
    CHECK_TENSOR(*out[0], r[3], 0, 0);
    CHECK(out[1]->dtype() == DType::Float32);
    CHECK_TENSOR(*out[1], r[4], 0, 0);
    if (dtype == DType::Float64) {
      const std::vector<Tensor> inputs = {random64({3, 4}, 15), random64({4}, 16)};
      const Grads out64 = call_node("BernoulliBackward1", {r[2]}, {true, true},
                                    Saved{{"p_info", TypeAndSize{{4}, TensorOptions{DType::Float64, {}, {}, {}}}}});
      check_zero_by_finite_differences("BernoulliBackward1", 0, out64, inputs, {3, 4});
      check_zero_by_finite_differences("BernoulliBackward1", 1, out64, inputs, {3, 4});
    }
  }
  const Tensor g = random64({3, 4}, 17);
  const Grads only_self =
      call_node("BernoulliBackward1", {g}, {true, false}, Saved{{"p_info", TypeAndSize{{4}, TensorOptions{}}}});
  CHECK_FALSE(only_self[1].has_value());
  // p_info without a dtype: the grad's.
  CHECK(call_node("BernoulliBackward1", {g}, {false, true}, Saved{{"p_info", TypeAndSize{{4}, TensorOptions{}}}})[1]
            ->dtype() == DType::Float64);
  CHECK_THROWS_WITH_AS(
      call_node("BernoulliBackward1", {g}, {false, true}, Saved{{"p_info", TypeAndSize{{-1}, TensorOptions{}}}}),
      "BernoulliBackward1: p_info [-1] has a negative size", Error);
}

TEST_CASE("BernoulliBackward2") {
  for (const DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = (x * 1).bernoulli_(0.3)
fn = out.grad_fn
assert fn.name() == "BernoulliBackward2", fn.name()
)") + kSeededGrad + "result = (g, *torch.autograd.grad(out, (x,), g))\n",
                              {random64({2, 5}, 18).to(dtype)});
    const Grads out = call_node("BernoulliBackward2", {r[0]}, {true}, Saved{});
    CHECK(out[0]->dtype() == dtype);
    CHECK_TENSOR(*out[0], r[1], 0, 0);
    if (dtype == DType::Float64)
      check_zero_by_finite_differences("BernoulliBackward2", 0, out, {random64({2, 5}, 19)}, {2, 5});
  }
}

// rrelu: in training each element's slope is the noise torch drew and saved (1 for x > 0); in eval it is
// (lower + upper) / 2. Inputs include exact zeros, where the slope applies (x > 0 is false).
TEST_CASE("RreluWithNoiseBackward0") {
  Tensor x = random64({3, 5}, 20);
  x = where(lt(abs(x), Scalar(0.3)), Scalar(0.0), x);
  SUBCASE("finite differences (off the kink at 0)") {
    const Tensor smooth = random64({3, 5}, 21);
    const Tensor noise = where(gt(smooth, Scalar(0)), Scalar(1.0), full({3, 5}, Scalar(0.2), DType::Float64));
    const Tensor g = random64({3, 5}, 22);
    auto train = [&](const std::vector<Tensor>& in) { return mul(in[0], noise); };
    const Saved saved = {{"lower", Scalar(0.1)}, {"noise", noise}, {"self", smooth}, {"training", true},
                         {"upper", Scalar(0.3)}};
    check_against_finite_differences(call_node("RreluWithNoiseBackward0", {g}, {true}, saved), 0, train, {smooth}, g);
    auto eval = [&](const std::vector<Tensor>& in) { return where(gt(in[0], Scalar(0)), in[0], mul(in[0], 0.2)); };
    Saved eval_saved = saved;
    eval_saved["training"] = false;
    eval_saved["noise"] = zeros({3, 5}, DType::Float64);  // eval leaves noise as it was: not read
    check_against_finite_differences(call_node("RreluWithNoiseBackward0", {g}, {true}, eval_saved), 0, eval, {smooth},
                                     g);
  }
  SUBCASE("against torch") {
    for (const char* forward : {"F.rrelu(x, training=True)", "F.rrelu(x, 0.05, 0.4, training=True)",
                                "F.rrelu(x, training=False)", "F.rrelu(x, 0.2, 0.2, training=True)",
                                "F.rrelu(x, -0.5, -0.1, training=False)"}) {
      for (const DType dtype : {DType::Float64, DType::Float32, DType::BFloat16}) {  // no float16 rrelu on CPU
        const std::string forward_text = forward;
        CAPTURE(forward_text);
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = )") + forward + R"(
fn = out.grad_fn
assert fn.name() == "RreluWithNoiseBackward0", fn.name()
)" + kSeededGrad + R"(result = (fn._saved_noise, fn._saved_self, torch.tensor(fn._saved_lower, dtype=torch.float64),
          torch.tensor(fn._saved_upper, dtype=torch.float64), torch.tensor(fn._saved_training), g,
          *torch.autograd.grad(out, (x,), g))
)",
                                  {x.to(dtype)});
        const Saved saved = {{"lower", Scalar(r[2].item<double>())}, {"noise", r[0]}, {"self", r[1]},
                             {"training", r[4].item<bool>()}, {"upper", Scalar(r[3].item<double>())}};
        const Grads out = call_node("RreluWithNoiseBackward0", {r[5]}, {true}, saved);
        CHECK(out[0]->dtype() == dtype);
        CHECK_TENSOR(*out[0], r[6], 0, 0);
      }
    }
  }
  SUBCASE("need mask, undefined grad, errors") {
    const Saved saved = {{"lower", Scalar(0.1)}, {"noise", ones({3, 5}, DType::Float64)}, {"self", x},
                         {"training", true}, {"upper", Scalar(0.3)}};
    CHECK_FALSE(call_node("RreluWithNoiseBackward0", kNoGrad, {true}, saved)[0].has_value());
    CHECK_FALSE(call_node("RreluWithNoiseBackward0", {x}, {false}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("RreluWithNoiseBackward0", {random64({5, 3}, 23)}, {true}, saved),
                         "RreluWithNoiseBackward0: grad has shape [5,3] but self has shape [3,5]", Error);
    Saved short_noise = saved;
    short_noise["noise"] = ones({5}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("RreluWithNoiseBackward0", {x}, {true}, short_noise),
                         "RreluWithNoiseBackward0: grad has shape [3,5] but noise has shape [5]", Error);
  }
}

TEST_CASE("RreluWithNoiseBackward1") {
  // The in-place form saves the result; its sign is the input's for slopes >= 0.
  Tensor x = random64({4, 3}, 24);
  x = where(lt(abs(x), Scalar(0.3)), Scalar(0.0), x);
  SUBCASE("finite differences (off the kink at 0)") {
    const Tensor smooth = random64({4, 3}, 25);
    const Tensor noise = where(gt(smooth, Scalar(0)), Scalar(1.0), full({4, 3}, Scalar(0.25), DType::Float64));
    const Tensor g = random64({4, 3}, 26);
    auto train = [&](const std::vector<Tensor>& in) { return mul(in[0], noise); };
    const Saved saved = {{"lower", Scalar(0.2)}, {"noise", noise}, {"training", true}, {"upper", Scalar(0.3)},
                         {"result", mul(smooth, noise)}};
    check_against_finite_differences(call_node("RreluWithNoiseBackward1", {g}, {true}, saved), 0, train, {smooth}, g);
    auto eval = [&](const std::vector<Tensor>& in) { return where(gt(in[0], Scalar(0)), in[0], mul(in[0], 0.25)); };
    Saved eval_saved = saved;
    eval_saved["training"] = false;
    check_against_finite_differences(call_node("RreluWithNoiseBackward1", {g}, {true}, eval_saved), 0, eval, {smooth},
                                     g);
  }
  SUBCASE("against torch") {
    for (const char* forward : {"F.rrelu(x.clone(), training=True, inplace=True)",
                                "F.rrelu(x.clone(), 0.05, 0.4, training=True, inplace=True)",
                                "F.rrelu(x.clone(), training=False, inplace=True)"}) {
      for (const DType dtype : {DType::Float64, DType::Float32, DType::BFloat16}) {
        const std::string forward_text = forward;
        CAPTURE(forward_text);
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = )") + forward + R"(
fn = out.grad_fn
assert fn.name() == "RreluWithNoiseBackward1", fn.name()
)" + kSeededGrad + R"(result = (fn._saved_noise, fn._saved_result, torch.tensor(fn._saved_lower, dtype=torch.float64),
          torch.tensor(fn._saved_upper, dtype=torch.float64), torch.tensor(fn._saved_training), g,
          *torch.autograd.grad(out, (x,), g))
)",
                                  {x.to(dtype)});
        const Saved saved = {{"lower", Scalar(r[2].item<double>())}, {"noise", r[0]},
                             {"training", r[4].item<bool>()}, {"upper", Scalar(r[3].item<double>())},
                             {"result", r[1]}};
        const Grads out = call_node("RreluWithNoiseBackward1", {r[5]}, {true}, saved);
        CHECK(out[0]->dtype() == dtype);
        CHECK_TENSOR(*out[0], r[6], 0, 0);
      }
    }
  }
  SUBCASE("a negative mean slope from the result is refused, as torch refuses it") {
    const std::string torch_message = torch_error(
        "torch.autograd.grad(F.rrelu(a.requires_grad_() * 1, -0.5, -0.1, training=False, inplace=True).sum(), a)",
        {x});
    CHECK(torch_message.find("negative slope") != std::string::npos);
    const Saved saved = {{"lower", Scalar(-0.5)}, {"noise", ones({4, 3}, DType::Float64)}, {"training", false},
                         {"upper", Scalar(-0.1)}, {"result", x}};
    CHECK_THROWS_WITH_AS(call_node("RreluWithNoiseBackward1", {x}, {true}, saved),
                         "RreluWithNoiseBackward1: in-place rrelu backward with a negative slope (-0.3) is not "
                         "supported, as in PyTorch's leaky_relu_backward",
                         Error);
    CHECK_FALSE(call_node("RreluWithNoiseBackward1", kNoGrad, {true}, saved)[0].has_value());
  }
}

}  // TEST_SUITE
