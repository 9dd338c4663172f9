// The reduction nodes: sum, mean, prod, max/min, amax/amin, median, nanmedian,
// kthvalue, cumsum, linalg_vector_norm, var, std, logsumexp.
#include <cmath>
#include <limits>

#include "node_test.hpp"
#include "torch_node_call.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Runs `forward` in torch on x = a (float64, requiring grad), checks that its
// grad_fn is `node`, and returns the tensors of the Python tuple `saved` (an
// expression over `fn` and `x`), then the random incoming grad g torch used,
// then whether x's grad is None, then x's grad (a 0-d zero when None).
// Saved ints show negative dims as unsigned 64-bit values in Python (2**64 - 1
// for -1): signed() undoes that; ints() and opt_ints() return int lists as
// int64 tensors, opt_ints() with a leading "is None" flag.
std::vector<Tensor> torch_backward(const std::string& node, const std::string& forward, const std::string& saved,
                                   const Tensor& x) {
  const std::string code = R"(
def signed(d): return d - 2**64 if d >= 2**63 else d
def ints(v): return torch.tensor([signed(d) for d in v], dtype=torch.int64)
def opt_ints(v): return (torch.tensor(v is None), ints(() if v is None else v))
def opt_float(v): return (torch.tensor(v is None), torch.tensor(0.0 if v is None else float(v), dtype=torch.float64))
torch.manual_seed(0)
x = a.requires_grad_()
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == ")" + node + R"(", fn.name()
saved = )" + saved + R"(
g = torch.randn(out.shape, dtype=out.dtype)
(gx,) = torch.autograd.grad(out, x, g, allow_unused=True)
result = (*saved, g, torch.tensor(gx is None), torch.zeros(()) if gx is None else gx)
)";
  return torch_exec(code, {x});
}

// torch_backward for a node of two differentiable outputs (var_mean, std_mean, aminmax): `forward`
// returns a pair (out0, out1), and only the outputs use0 and use1 select get an incoming
// grad. Returns the tensors of `saved`, then random g0 and g1 (drawn for both outputs), then x's grad.
std::vector<Tensor> torch_backward2(const std::string& node, const std::string& forward, const std::string& saved,
                                    const Tensor& x, bool use0 = true, bool use1 = true) {
  const std::string use = std::string("(") + (use0 ? "True" : "False") + ", " + (use1 ? "True" : "False") + ")";
  const std::string code = R"(
def signed(d): return d - 2**64 if d >= 2**63 else d
def ints(v): return torch.tensor([signed(d) for d in v], dtype=torch.int64)
def opt_ints(v): return (torch.tensor(v is None), ints(() if v is None else v))
def opt_int(v): return (torch.tensor(v is None), torch.tensor(0 if v is None else signed(v)))
def opt_float(v): return (torch.tensor(v is None), torch.tensor(0.0 if v is None else float(v), dtype=torch.float64))
torch.manual_seed(0)
x = a.requires_grad_()
outs = )" + forward + R"(
fn = outs[0].grad_fn
assert fn.name() == ")" + node + R"(", fn.name()
saved = )" + saved + R"(
gs = [torch.randn(o.shape, dtype=o.dtype) for o in outs]
use = )" + use + R"(
(gx,) = torch.autograd.grad([o for o, u in zip(outs, use) if u], x, [g for g, u in zip(gs, use) if u])
result = (*saved, *gs, gx)
)";
  return torch_exec(code, {x});
}

// The incoming grads of a two-output node: g0 and g1 where use0 and use1 say so, undefined elsewhere.
Grads two_grads(const Tensor& g0, const Tensor& g1, bool use0, bool use1) {
  return Grads{use0 ? OptionalTensor(g0) : std::nullopt, use1 ? OptionalTensor(g1) : std::nullopt};
}

// The float tolerance a dtype's comparison with torch needs (both round at each op).
double rtol_for(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 5e-3;
    case DType::BFloat16: return 3e-2;
    case DType::Float32: case DType::ComplexFloat: return 1e-5;
    default: return 1e-10;
  }
}

// An optional int list from opt_ints()'s two tensors.
FieldValue opt_dims(const Tensor& is_none, const Tensor& values) {
  if (is_none.item<bool>()) return None{};
  return int_list(values);
}

// An optional Scalar from opt_float()'s two tensors.
FieldValue opt_scalar(const Tensor& is_none, const Tensor& value) {
  if (is_none.item<bool>()) return None{};
  return Scalar(value.item<double>());
}

const Tensor& only_grad(const Grads& out) {
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].has_value());
  return *out[0];
}

// (b) for a one-input node: need false and an undefined grad give no output.
void check_need_and_undefined(const std::string& node, const Grads& grads, const Saved& saved) {
  CHECK_FALSE(call_node(node, grads, {false}, saved)[0].has_value());
  Grads undefined(grads.size());
  CHECK_FALSE(call_node(node, undefined, {true}, saved)[0].has_value());
}

// Ties along both dims: row 0's smallest and largest values twice each, row
// 1's largest twice; columns 0, 1 and 3 are ties.
Tensor with_ties() { return tensor({{1.0, 3.0, 1.0, 3.0}, {1.0, 3.0, 2.0, 3.0}}, DType::Float64); }

}  // namespace

TEST_SUITE("nodes") {

// ------------------------------------------------------------------- sum ---

TEST_CASE("SumBackward1") {
  const Tensor x = random64({2, 3, 4}, 20), g = random64({3}, 21);
  const Saved saved = {{"dim", IntList{0, -1}}, {"keepdim", false}, {"self_sym_sizes", IntList{2, 3, 4}}};
  SUBCASE("finite differences") {
    const Grads out = call_node("SumBackward1", {g}, {true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return sum(in[0], {0, -1}, false); };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("SumBackward1", {g}, saved); }
  SUBCASE("against torch: dims, keepdim, None, [] and a 0-d input") {
    const Tensor zero_d = random64({}, 22);
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {x, "x.sum(1)"},
             {x, "x.sum(-1, keepdim=True)"},
             {x, "x.sum((0, -1))"},
             {x, "x.sum((2, 0), keepdim=True)"},
             {x, "torch.sum(x, dim=None)"},
             {x, "x.sum([])"},
             {x, "x.sum([], keepdim=True)"},
             {zero_d, "x.sum(0)"},
             {zero_d, "x.sum(-1, keepdim=True)"}}) {
      CAPTURE(forward);
      const auto r = torch_backward("SumBackward1", forward,
                                    "(*opt_ints(fn._saved_dim), fn._saved_keepdim, ints(fn._saved_self_sym_sizes))",
                                    input);
      const Saved from_torch = {{"dim", opt_dims(r[0], r[1])},
                                {"keepdim", r[2].item<bool>()},
                                {"self_sym_sizes", int_list(r[3])}};
      CHECK_TENSOR(only_grad(call_node("SumBackward1", {r[4]}, {true}, from_torch)), r[6]);
    }
  }
  SUBCASE("errors") {
    Saved repeated = saved;
    repeated["dim"] = IntList{1, -2};
    CHECK_THROWS_WITH_AS(call_node("SumBackward1", {g}, {true}, repeated),
                         doctest::Contains("dim 1 appears multiple times in the list of dims"), Error);
    Saved out_of_range = saved;
    out_of_range["dim"] = IntList{0, 3};
    CHECK_THROWS_WITH_AS(call_node("SumBackward1", {g}, {true}, out_of_range), doctest::Contains("out of range"),
                         Error);
    CHECK_THROWS_WITH_AS(call_node("SumBackward1", {random64({5}, 1)}, {true}, saved), doctest::Contains("expand"),
                         Error);
  }
}

// ------------------------------------------------------------------ mean ---

TEST_CASE("MeanBackward0") {
  const Tensor x = random64({2, 3}, 23), g = random64({}, 24);
  const Saved saved = {{"self_sym_numel", std::int64_t{6}}, {"self_sym_sizes", IntList{2, 3}}};
  SUBCASE("finite differences") {
    const Grads out = call_node("MeanBackward0", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return mean(in[0]); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("MeanBackward0", {g}, saved); }
  SUBCASE("against torch, 0-d and empty inputs included") {
    for (const Tensor& input : {x, random64({}, 25), random64({0, 2}, 26)}) {
      CAPTURE(str(input.sizes()));
      const auto r = torch_backward("MeanBackward0", "x.mean()",
                                    "(fn._saved_self_sym_numel, ints(fn._saved_self_sym_sizes))", input);
      const Saved from_torch = {{"self_sym_numel", r[0].item<std::int64_t>()}, {"self_sym_sizes", int_list(r[1])}};
      CHECK_TENSOR(only_grad(call_node("MeanBackward0", {r[2]}, {true}, from_torch)), r[4]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("MeanBackward0", {random64({4}, 1)}, {true}, saved), doctest::Contains("expand"),
                         Error);
  }
}

TEST_CASE("MeanBackward1") {
  const Tensor x = random64({2, 3, 4}, 27), g = random64({2, 1, 1}, 28);
  const Saved saved = {
      {"dim", IntList{1, 2}}, {"keepdim", true}, {"self_sym_numel", std::int64_t{24}},
      {"self_sym_sizes", IntList{2, 3, 4}}};
  SUBCASE("finite differences") {
    const Grads out = call_node("MeanBackward1", {g}, {true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return mean(in[0], {1, 2}, true); };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("MeanBackward1", {g}, saved); }
  SUBCASE("against torch: the divisor is the reduced count, or numel for None and []") {
    for (const std::string forward :
         {"x.mean(1)", "x.mean((0, -1), keepdim=True)", "x.mean(dim=None)", "x.mean([])", "x.mean(-1)"}) {
      CAPTURE(forward);
      const auto r = torch_backward(
          "MeanBackward1", forward,
          "(*opt_ints(fn._saved_dim), fn._saved_keepdim, fn._saved_self_sym_numel, ints(fn._saved_self_sym_sizes))", x);
      const Saved from_torch = {{"dim", opt_dims(r[0], r[1])},
                                {"keepdim", r[2].item<bool>()},
                                {"self_sym_numel", r[3].item<std::int64_t>()},
                                {"self_sym_sizes", int_list(r[4])}};
      CHECK_TENSOR(only_grad(call_node("MeanBackward1", {r[5]}, {true}, from_torch)), r[7]);
    }
  }
  SUBCASE("errors") {
    Saved bad = saved;
    bad["dim"] = IntList{1, 5};
    CHECK_THROWS_WITH_AS(call_node("MeanBackward1", {g}, {true}, bad), doctest::Contains("out of range"), Error);
    // the count of reduced elements overflows int64
    const Saved huge = {{"dim", IntList{0, 1}}, {"keepdim", true}, {"self_sym_numel", std::int64_t{0}},
                        {"self_sym_sizes", IntList{std::int64_t{1} << 32, std::int64_t{1} << 32}}};
    CHECK_THROWS_WITH_AS(call_node("MeanBackward1", {random64({1, 1}, 1)}, {true}, huge),
                         "MeanBackward1: _safe_size: dims [0,1] of sizes [4294967296,4294967296] have more elements "
                         "than int64 can count",
                         Error);
  }
}

// ------------------------------------------------------------------ prod ---

TEST_CASE("ProdBackward0") {
  const Tensor x = random64({2, 3}, 29), g = random64({}, 30);
  SUBCASE("finite differences") {
    const Grads out = call_node("ProdBackward0", {g}, {true}, Saved{{"self", x}, {"result", prod(x)}});
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return prod(in[0]); }, {x}, g);
  }
  SUBCASE("finite differences with one zero (no division by it)") {
    const Tensor z = tensor({{1.5, 0.0}, {-2.0, 0.5}}, DType::Float64);
    const Grads out = call_node("ProdBackward0", {g}, {true}, Saved{{"self", z}, {"result", prod(z)}});
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return prod(in[0]); }, {z}, g);
  }
  SUBCASE("need mask and undefined grad") {
    check_need_and_undefined("ProdBackward0", {g}, Saved{{"self", x}, {"result", prod(x)}});
  }
  SUBCASE("against torch: no zero, one zero, two zeros, a zero with inf, 0-d") {
    for (const Tensor& input :
         {x, tensor({{1.5, 0.0}, {-2.0, 0.5}}, DType::Float64), tensor({0.0, 3.0, 0.0, 2.0}, DType::Float64),
          tensor({0.0, kInf, 2.0}, DType::Float64), tensor({0.0, kInf, 0.0}, DType::Float64), random64({}, 31)}) {
      CAPTURE(input.repr());
      const auto r = torch_backward("ProdBackward0", "x.prod()", "(fn._saved_self, fn._saved_result)", input);
      const Saved from_torch = {{"self", r[0]}, {"result", r[1]}};
      CHECK_TENSOR(only_grad(call_node("ProdBackward0", {r[2]}, {true}, from_torch)), r[4]);
    }
  }
  SUBCASE("a float32 input with a float64 result: self is cast to the grad's dtype") {
    const auto r = torch_backward("ProdBackward0", "x.float().prod(dtype=torch.float64)",
                                  "(fn._saved_self, fn._saved_result)", tensor({1.5, 0.0, -2.0}, DType::Float64));
    CHECK(r[0].dtype() == DType::Float32);
    const Tensor out = only_grad(call_node("ProdBackward0", {r[2]}, {true}, Saved{{"self", r[0]}, {"result", r[1]}}));
    CHECK(out.dtype() == DType::Float64);
    CHECK_TENSOR(out, r[4]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("ProdBackward0", {g}, {true}, Saved{{"self", None{}}, {"result", g}}),
                         "ProdBackward0: saved field 'self' expects Tensor, got None", Error);
  }
}

TEST_CASE("ProdBackward1") {
  const Tensor x = random64({2, 3}, 32), g = random64({2}, 33);
  const auto saved_for = [](const Tensor& self, std::int64_t dim, bool keepdim) {
    return Saved{{"dim", dim}, {"keepdim", keepdim}, {"self", self}, {"result", prod(self, dim, keepdim)}};
  };
  auto forward = [](const std::vector<Tensor>& in) { return prod(in[0], -1, false); };
  SUBCASE("finite differences, without and with a zero") {
    check_against_finite_differences(call_node("ProdBackward1", {g}, {true}, saved_for(x, -1, false)), 0, forward,
                                     {x}, g);
    const Tensor z = tensor({{1.5, 0.0, 2.0}, {-2.0, 0.5, 3.0}}, DType::Float64);
    check_against_finite_differences(call_node("ProdBackward1", {g}, {true}, saved_for(z, -1, false)), 0, forward,
                                     {z}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("ProdBackward1", {g}, saved_for(x, 1, false)); }
  SUBCASE("against torch: zeros in one slice, two zeros in a slice, inf, keepdim, 0-d") {
    const Tensor one_zero = tensor({{1.5, 0.0, 2.0}, {-2.0, 0.5, 3.0}}, DType::Float64);
    const Tensor two_zeros = tensor({{0.0, 0.0, 2.0}, {-2.0, 0.5, 3.0}}, DType::Float64);
    const Tensor zero_inf = tensor({{0.0, kInf, 2.0}, {-2.0, 0.5, 3.0}}, DType::Float64);
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {x, "x.prod(1)"},
             {x, "x.prod(0, keepdim=True)"},
             {one_zero, "x.prod(-1)"},
             {one_zero, "x.prod(0)"},
             {two_zeros, "x.prod(1, keepdim=True)"},
             {zero_inf, "x.prod(1)"},
             {random64({}, 34), "x.prod(0)"}}) {
      CAPTURE(forward);
      CAPTURE(input.repr());
      const auto r = torch_backward("ProdBackward1", forward,
                                    "(signed(fn._saved_dim), fn._saved_keepdim, fn._saved_self, fn._saved_result)",
                                    input);
      const Saved from_torch = {
          {"dim", r[0].item<std::int64_t>()}, {"keepdim", r[1].item<bool>()}, {"self", r[2]}, {"result", r[3]}};
      CHECK_TENSOR(only_grad(call_node("ProdBackward1", {r[4]}, {true}, from_torch)), r[6]);
    }
  }
  SUBCASE("errors") {
    Saved bad_dim = saved_for(x, 1, false);
    bad_dim["dim"] = std::int64_t{2};
    CHECK_THROWS_WITH_AS(call_node("ProdBackward1", {g}, {true}, bad_dim), doctest::Contains("out of range"), Error);
  }
}

// ------------------------------------------------ max, min, median (dim) ---

// MaxBackward0 and its kin: the grad goes to the element `indices` names.
// `forward_l0` gives (values, indices) for (a); `torch_call` is the start of
// the torch call, "max(" or "kthvalue(1, ", that the dim arguments complete.
void check_value_selecting_node(const std::string& node, const std::string& torch_call,
                                std::pair<Tensor, Tensor> (*forward_l0)(const Tensor&, std::int64_t, bool)) {
  const Tensor x = random64({3, 4}, 35), g = random64({3}, 36);
  const Tensor indices = forward_l0(x, 1, false).second;
  const Saved saved = {
      {"dim", std::int64_t{1}}, {"keepdim", false}, {"self_sym_sizes", IntList{3, 4}}, {"indices", indices}};
  SUBCASE("finite differences, away from ties") {
    const Grads out = call_node(node, {g}, {true}, saved);
    // Near x the selected index does not move, so the forward is a gather of it.
    auto forward = [indices](const std::vector<Tensor>& in) {
      return squeeze(gather(in[0], 1, unsqueeze(indices, 1)), 1);
    };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grads") {
    CHECK_FALSE(call_node(node, {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node(node, {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: ties go to the saved index, keepdim, negative dim, 0-d") {
    for (const auto& [input, call] : std::vector<std::pair<Tensor, std::string>>{
             {with_ties(), "1)"},
             {with_ties(), "0, keepdim=True)"},
             {with_ties(), "-1, keepdim=True)"},
             {random64({2, 3, 2}, 37), "1)"},
             {random64({}, 38), "0)"},
             {random64({}, 39), "-1, keepdim=True)"}}) {
      const std::string forward = "x." + torch_call + call + "[0]";
      CAPTURE(forward);
      const auto r = torch_backward(node, forward,
                                    "(signed(fn._saved_dim), fn._saved_keepdim, ints(fn._saved_self_sym_sizes), "
                                    "fn._saved_indices)",
                                    input);
      const Saved from_torch = {{"dim", r[0].item<std::int64_t>()},
                                {"keepdim", r[1].item<bool>()},
                                {"self_sym_sizes", int_list(r[2])},
                                {"indices", r[3]}};
      CHECK_TENSOR(only_grad(call_node(node, {r[4]}, {true}, from_torch)), r[6]);
    }
  }
  SUBCASE("errors") {
    Saved bad_index = saved;
    bad_index["indices"] = tensor({0, 4, 1});
    CHECK_THROWS_AS(call_node(node, {g}, {true}, bad_index), Error);
    // One incoming grad, the values': torch's node has no input for the indices.
    CHECK_THROWS_WITH_AS(call_node(node, {g, std::nullopt}, {true}, saved),
                         doctest::Contains("expected 1 incoming grad, got 2"), Error);
  }
}

std::pair<Tensor, Tensor> l0_max(const Tensor& x, std::int64_t dim, bool keepdim) { return max(x, dim, keepdim); }
std::pair<Tensor, Tensor> l0_min(const Tensor& x, std::int64_t dim, bool keepdim) { return min(x, dim, keepdim); }
// median and kthvalue have no L0 op; for (a) only the selected indices matter,
// so they come from torch, and the values are gathered with them.
std::pair<Tensor, Tensor> torch_median(const Tensor& x, std::int64_t dim, bool keepdim) {
  const auto r = torch_eval("a.median(" + std::to_string(dim) + ", keepdim=" + (keepdim ? "True" : "False") + ")", {x});
  return {r[0], r[1]};
}
std::pair<Tensor, Tensor> torch_nanmedian(const Tensor& x, std::int64_t dim, bool keepdim) {
  const auto r =
      torch_eval("a.nanmedian(" + std::to_string(dim) + ", keepdim=" + (keepdim ? "True" : "False") + ")", {x});
  return {r[0], r[1]};
}
std::pair<Tensor, Tensor> torch_kthvalue(const Tensor& x, std::int64_t dim, bool keepdim) {
  const auto r =
      torch_eval("a.kthvalue(1, " + std::to_string(dim) + ", keepdim=" + (keepdim ? "True" : "False") + ")", {x});
  return {r[0], r[1]};
}

TEST_CASE("MaxBackward0") { check_value_selecting_node("MaxBackward0", "max(", l0_max); }
TEST_CASE("MinBackward0") { check_value_selecting_node("MinBackward0", "min(", l0_min); }
TEST_CASE("MedianBackward1") { check_value_selecting_node("MedianBackward1", "median(", torch_median); }
TEST_CASE("NanmedianBackward1") { check_value_selecting_node("NanmedianBackward1", "nanmedian(", torch_nanmedian); }
TEST_CASE("KthvalueBackward0") { check_value_selecting_node("KthvalueBackward0", "kthvalue(1, ", torch_kthvalue); }

std::pair<Tensor, Tensor> torch_mode(const Tensor& x, std::int64_t dim, bool keepdim) {
  const auto r = torch_eval("a.mode(" + std::to_string(dim) + ", keepdim=" + (keepdim ? "True" : "False") + ")", {x});
  return {r[0], r[1]};
}

TEST_CASE("ModeBackward0") { check_value_selecting_node("ModeBackward0", "mode(", torch_mode); }

// ----------------------------------------------------------- sort, topk ---

// SortBackward0 and its kin: values keep every dim; each grad element goes back to the
// place `indices` names. `torch_call` is a torch call on x whose [0] is the values and
// whose dim argument `call` completes.
void check_sorting_node(const std::string& node, const std::string& torch_call, std::int64_t kept) {
  const Tensor x = random64({3, 4}, 40);
  const auto sorted = torch_eval("a." + torch_call + "1)", {x});
  const Tensor indices = sorted[1], g = random64({3, kept}, 41);
  const Saved saved = {{"dim", std::int64_t{1}}, {"self_sym_sizes", IntList{3, 4}}, {"indices", indices}};
  SUBCASE("finite differences, away from ties") {
    const Grads out = call_node(node, {g}, {true}, saved);
    // Near x the order does not change, so the forward is a gather of the indices.
    auto forward = [indices](const std::vector<Tensor>& in) { return gather(in[0], 1, indices); };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grads") {
    CHECK_FALSE(call_node(node, {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node(node, {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: ties, a negative dim, 3-d, 0-d") {
    for (const auto& [input, call] : std::vector<std::pair<Tensor, std::string>>{
             {with_ties(), "1)"}, {with_ties(), "-1)"}, {random64({2, 3, 3}, 42), "1)"}, {random64({}, 43), "0)"}}) {
      const std::string forward = "x." + torch_call + call + "[0]";
      CAPTURE(forward);
      const auto r = torch_backward(node, forward, "(signed(fn._saved_dim), ints(fn._saved_self_sym_sizes), fn._saved_indices)",
                                    input);
      const Saved from_torch = {
          {"dim", r[0].item<std::int64_t>()}, {"self_sym_sizes", int_list(r[1])}, {"indices", r[2]}};
      CHECK_TENSOR(only_grad(call_node(node, {r[3]}, {true}, from_torch)), r[5]);
    }
  }
  SUBCASE("errors") {
    Saved bad_index = saved;
    bad_index["indices"] = full({3, kept}, 4, DType::Int64);
    CHECK_THROWS_AS(call_node(node, {g}, {true}, bad_index), Error);
  }
}

TEST_CASE("SortBackward0") { check_sorting_node("SortBackward0", "sort(descending=True, dim=", 4); }
TEST_CASE("SortBackward1") { check_sorting_node("SortBackward1", "sort(stable=True, dim=", 4); }
TEST_CASE("TopkBackward0") { check_sorting_node("TopkBackward0", "topk(1, dim=", 1); }

// ------------------------------------------------- max, min, median (all) ---

// MaxBackward1 and its kin: the grad split evenly among the elements equal
// to the result; on a tie-free input the forward reads the one it selects.
void check_evenly_distributing_node(const std::string& node, const std::string& torch_call,
                                    const std::vector<Tensor>& tie_inputs) {
  const Tensor x = tensor({{0.3, -1.2, 2.5}, {1.1, -0.4, 0.7}}, DType::Float64), g = random64({}, 40);
  const Tensor picked = torch_eval1("a." + torch_call, {x});
  const Saved saved = {{"self", x}, {"result", picked}};
  SUBCASE("finite differences, away from ties") {
    const Grads out = call_node(node, {g}, {true}, saved);
    // Near x the selected element does not change: the forward reads it.
    const Tensor mask = eq(x, picked);
    auto forward = [mask](const std::vector<Tensor>& in) { return sum(where(mask, in[0], Scalar(0.0))); };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined(node, {g}, saved); }
  SUBCASE("against torch: ties split evenly, NaN") {
    for (const Tensor& input : tie_inputs) {
      CAPTURE(input.repr());
      const auto r = torch_backward(node, "x." + torch_call, "(fn._saved_self, fn._saved_result)", input);
      CHECK_TENSOR(only_grad(call_node(node, {r[2]}, {true}, Saved{{"self", r[0]}, {"result", r[1]}})), r[4]);
    }
  }
  SUBCASE("a float32 input keeps its dtype under a float64 grad (new_zeros of self)") {
    const Tensor x32 = x.to(DType::Float32);
    const Saved saved32 = {{"self", x32}, {"result", picked.to(DType::Float32)}};
    const Tensor out = only_grad(call_node(node, {g}, {true}, saved32));
    CHECK(out.dtype() == DType::Float32);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true}, Saved{{"self", x}, {"result", x}}),
                         doctest::Contains("evenly_distribute_backward: expected a one-element result, got shape [2,3]"), Error);
    CHECK_THROWS_WITH_AS(call_node(node, {random64({2}, 1)}, {true}, saved), doctest::Contains("masked_fill"), Error);
  }
}

TEST_CASE("MaxBackward1") {
  check_evenly_distributing_node("MaxBackward1", "max()",
                                 {tensor({{3.0, 1.0}, {3.0, 3.0}}, DType::Float64),
                                  tensor({1.0, kNaN, 2.0, kNaN}, DType::Float64), random64({}, 41)});
}
TEST_CASE("MinBackward1") {
  check_evenly_distributing_node("MinBackward1", "min()",
                                 {tensor({{-3.0, 1.0}, {-3.0, 2.0}}, DType::Float64),
                                  tensor({1.0, kNaN, -kInf, kNaN}, DType::Float64)});
}
TEST_CASE("MedianBackward0") {
  check_evenly_distributing_node("MedianBackward0", "median()",
                                 {tensor({1.0, 2.0, 2.0, 3.0}, DType::Float64),
                                  tensor({1.0, kNaN, 2.0}, DType::Float64)});
}
TEST_CASE("NanmedianBackward0") {
  check_evenly_distributing_node("NanmedianBackward0", "nanmedian()",
                                 {tensor({1.0, kNaN, 2.0, 2.0, 5.0}, DType::Float64),
                                  tensor({kNaN, kNaN}, DType::Float64)});
}

// ------------------------------------------------------------ amax, amin ---

void check_amax_node(const std::string& node, const std::string& torch_op,
                     Tensor (*forward_l0)(const Tensor&, const IntList&, bool)) {
  const Tensor x = random64({2, 3, 4}, 42), g = random64({3}, 43);
  const Saved saved = {
      {"dim", IntList{0, -1}}, {"keepdim", false}, {"self", x}, {"result", forward_l0(x, {0, -1}, false)}};
  SUBCASE("finite differences, away from ties") {
    const Grads out = call_node(node, {g}, {true}, saved);
    auto forward = [forward_l0](const std::vector<Tensor>& in) { return forward_l0(in[0], {0, -1}, false); };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined(node, {g}, saved); }
  SUBCASE("against torch: ties split evenly, all dims, keepdim, 0-d") {
    const Tensor ties3 = tensor({{{1.0, 1.0}, {-1.0, 1.0}}, {{-1.0, -1.0}, {0.0, 0.0}}}, DType::Float64);
    for (const auto& [input, call] : std::vector<std::pair<Tensor, std::string>>{
             {with_ties(), "(1)"},
             {with_ties(), "()"},
             {with_ties(), "((0, 1), keepdim=True)"},
             {with_ties(), "(-2)"},
             {ties3, "((0, 2))"},
             {ties3, "((-1, 1), keepdim=True)"},
             {random64({}, 44), "(0)"}}) {
      const std::string forward = "x." + torch_op + call;
      CAPTURE(forward);
      const auto r = torch_backward(
          node, forward, "(ints(fn._saved_dim), fn._saved_keepdim, fn._saved_self, fn._saved_result)", input);
      const Saved from_torch = {
          {"dim", int_list(r[0])}, {"keepdim", r[1].item<bool>()}, {"self", r[2]}, {"result", r[3]}};
      const Tensor out = only_grad(call_node(node, {r[4]}, {true}, from_torch));
      if (input.dim() == 0) {
        // restore_reduced_dims puts dim 0 back on the 0-d grad, so PyTorch's node
        // returns shape [1] too; validate_outputs then sums it to [].
        CHECK(out.sizes() == Shape{1});
        CHECK_TENSOR(sum_to(out, input.sizes()), r[6]);
      } else {
        CHECK_TENSOR(out, r[6]);
      }
    }
  }
  SUBCASE("errors") {
    Saved repeated = saved;
    repeated["dim"] = IntList{0, -3};
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true}, repeated),
                         doctest::Contains("restore_reduced_dims: dim 0 appears multiple times in the list of dims"), Error);
    Saved out_of_range = saved;
    out_of_range["dim"] = IntList{0, 3};
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true}, out_of_range), doctest::Contains("out of range"), Error);
  }
}

Tensor l0_amax(const Tensor& x, const IntList& dim, bool keepdim) { return amax(x, dim, keepdim); }
Tensor l0_amin(const Tensor& x, const IntList& dim, bool keepdim) { return amin(x, dim, keepdim); }

TEST_CASE("AmaxBackward0") { check_amax_node("AmaxBackward0", "amax", l0_amax); }
TEST_CASE("AminBackward0") { check_amax_node("AminBackward0", "amin", l0_amin); }

// ---------------------------------------------------------------- cumsum ---

TEST_CASE("CumsumBackward0") {
  const Tensor x = random64({3, 4}, 45), g = random64({3, 4}, 46);
  const Saved saved = {{"dim", std::int64_t{1}}, {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences") {
    const Grads out = call_node("CumsumBackward0", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return cumsum(in[0], 1); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("CumsumBackward0", {g}, saved); }
  SUBCASE("against torch: dims, a size-1 dim, 0-d, empty") {
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {x, "x.cumsum(1)"},
             {x, "x.cumsum(-2)"},
             {random64({3, 1}, 47), "x.cumsum(1)"},
             {random64({}, 48), "x.cumsum(0)"},
             {random64({0, 2}, 49), "x.cumsum(1)"}}) {
      CAPTURE(forward);
      const auto r = torch_backward("CumsumBackward0", forward, "(signed(fn._saved_dim),)", input);
      const Saved from_torch = {{"dim", r[0].item<std::int64_t>()}, {"self_scalar_type", DType::Float64}};
      CHECK_TENSOR(only_grad(call_node("CumsumBackward0", {r[1]}, {true}, from_torch)), r[3]);
    }
  }
  SUBCASE("a float32 input summed in float64: the grad is cast back to self's dtype") {
    const auto r = torch_backward("CumsumBackward0", "x.float().cumsum(0, dtype=torch.float64)",
                                  "(signed(fn._saved_dim),)", random64({4}, 50));
    const Tensor out = only_grad(call_node(
        "CumsumBackward0", {r[1]}, {true},
        Saved{{"dim", r[0].item<std::int64_t>()}, {"self_scalar_type", DType::Float32}}));
    CHECK(out.dtype() == DType::Float32);
    CHECK_TENSOR(out, r[3].to(DType::Float32));
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(
        call_node("CumsumBackward0", {g}, {true},
                  Saved{{"dim", std::int64_t{2}}, {"self_scalar_type", DType::Float64}}),
        doctest::Contains("out of range"), Error);
  }
}

// ---------------------------------------------------------------- cumprod ---

// Zeros where cumprod_backward must not divide: none in row 0; one in row 1 (the first element); two
// in row 2 (the grad of everything after the first zero is 0); three in row 3, the last one at the end.
Tensor with_zeros() {
  return tensor({{1.5, -0.5, 2.0, 0.75, -1.25},
                 {0.0, 1.5, -2.0, 0.5, 3.0},
                 {2.0, 0.0, 1.5, 0.0, -0.5},
                 {0.0, 0.0, 1.25, -1.5, 0.0}},
                DType::Float64);
}

TEST_CASE("CumprodBackward0") {
  const Tensor x = random64({3, 4}, 140), g = random64({3, 4}, 141);
  const Saved saved = {{"dim", std::int64_t{1}}, {"self", x}, {"self_scalar_type", DType::Float64},
                       {"result", cumprod(x, 1)}};
  SUBCASE("finite differences, without and with zeros (cumprod is a polynomial: no kink at 0)") {
    const Grads out = call_node("CumprodBackward0", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return cumprod(in[0], 1); }, {x}, g);
    const Tensor z = with_zeros(), gz = random64({4, 5}, 142);
    for (std::int64_t dim : {1, 0}) {
      CAPTURE(dim);
      const Saved zeros_saved = {{"dim", dim}, {"self", z}, {"self_scalar_type", DType::Float64},
                                 {"result", cumprod(z, dim)}};
      const Grads out_z = call_node("CumprodBackward0", {gz}, {true}, zeros_saved);
      check_against_finite_differences(out_z, 0, [dim](const std::vector<Tensor>& in) { return cumprod(in[0], dim); },
                                       {z}, gz);
    }
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("CumprodBackward0", {g}, saved); }
  SUBCASE("against torch's _saved_ values: zeros, dims, a size-1 dim, 0-d, empty") {
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {with_zeros(), "x.cumprod(1)"},
             {with_zeros(), "x.cumprod(-2)"},
             {x, "x.cumprod(0)"},
             {random64({3, 1}, 143), "x.cumprod(1)"},
             {random64({}, 144), "x.cumprod(0)"},
             {random64({0, 2}, 145), "x.cumprod(1)"}}) {
      CAPTURE(forward);
      const auto r = torch_backward("CumprodBackward0", forward,
                                    "(signed(fn._saved_dim), fn._saved_self, fn._saved_result)", input);
      const Saved from_torch = {{"dim", r[0].item<std::int64_t>()}, {"self", r[1]},
                                {"self_scalar_type", DType::Float64}, {"result", r[2]}};
      CHECK_TENSOR(only_grad(call_node("CumprodBackward0", {r[3]}, {true}, from_torch)), r[5], 1e-12, 1e-15);
    }
  }
  SUBCASE("complex128, zeros included: the conjugates of x and y") {
    const Tensor z = complex(with_zeros(), mul(flip(with_zeros(), {1}), 0.5));
    const auto r = torch_backward("CumprodBackward0", "x.cumprod(1)", "(fn._saved_self, fn._saved_result)", z);
    const Saved from_torch = {{"dim", std::int64_t{1}}, {"self", r[0]}, {"self_scalar_type", DType::ComplexDouble},
                              {"result", r[1]}};
    CHECK_TENSOR(only_grad(call_node("CumprodBackward0", {r[2]}, {true}, from_torch)), r[4], 1e-12, 1e-15);
  }
  SUBCASE("a float32 input multiplied in float64: the grad is cast back to self's dtype") {
    const auto r = torch_backward("CumprodBackward0", "x.float().cumprod(1, dtype=torch.float64)",
                                  "(fn._saved_self, fn._saved_result)", with_zeros());
    const Tensor out = only_grad(call_node(
        "CumprodBackward0", {r[2]}, {true},
        Saved{{"dim", std::int64_t{1}}, {"self", r[0]}, {"self_scalar_type", DType::Float32}, {"result", r[1]}}));
    CHECK(out.dtype() == DType::Float32);
    CHECK_TENSOR(out, r[4].to(DType::Float32), 1e-6, 1e-7);
  }
  SUBCASE("errors") {
    Saved bad = saved;
    bad["dim"] = std::int64_t{2};
    CHECK_THROWS_WITH_AS(call_node("CumprodBackward0", {g}, {true}, bad), doctest::Contains("out of range"), Error);
    CHECK_THROWS_WITH_AS(call_node("CumprodBackward0", {random64({4, 3}, 1)}, {true}, saved),
                         "CumprodBackward0: grad [4,3] and result [3,4] must have self's shape [3,4]", Error);
  }
}

// ----------------------------------------------------------------- nansum ---

TEST_CASE("NansumBackward0") {
  const Tensor x = tensor({{{1.0, kNaN, 2.0}, {-0.5, 3.0, kNaN}}, {{kNaN, 0.25, 1.5}, {2.0, -kInf, 0.0}}},
                          DType::Float64);
  const Tensor g = random64({2}, 150);
  const Saved saved = {{"dim", IntList{1, 2}}, {"keepdim", false}, {"self", x}, {"self_scalar_type", DType::Float64}};
  SUBCASE("finite differences: NaN elements were skipped, so their grad is 0") {
    const Tensor y = tensor({{{1.0, kNaN, 2.0}, {-0.5, 3.0, kNaN}}, {{kNaN, 0.25, 1.5}, {2.0, -1.0, 0.0}}},
                            DType::Float64);
    Saved finite = saved;
    finite["self"] = y;
    const Grads out = call_node("NansumBackward0", {g}, {true}, finite);
    auto forward = [](const std::vector<Tensor>& in) {
      return sum(where(ne(in[0], in[0]), Scalar(0), in[0]), {1, 2}, false);
    };
    check_against_finite_differences(out, 0, forward, {y}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("NansumBackward0", {g}, saved); }
  SUBCASE("against torch: dims, keepdim, None, 0-d") {
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {x, "x.nansum()"},
             {x, "x.nansum(1)"},
             {x, "x.nansum((0, -1), keepdim=True)"},
             {tensor(kNaN, DType::Float64), "x.nansum()"},
             {x, "x.float().nansum(2, dtype=torch.float64)"}}) {
      CAPTURE(forward);
      const auto r = torch_backward("NansumBackward0", forward,
                                    "(*opt_ints(fn._saved_dim), fn._saved_keepdim, fn._saved_self)", input);
      const DType self_dtype = r[3].dtype();
      const Saved from_torch = {{"dim", opt_dims(r[0], r[1])},
                                {"keepdim", r[2].item<bool>()},
                                {"self", r[3]},
                                {"self_scalar_type", self_dtype}};
      const Tensor out = only_grad(call_node("NansumBackward0", {r[4]}, {true}, from_torch));
      CHECK(out.dtype() == self_dtype);
      CHECK_TENSOR(out, r[6].to(self_dtype));
    }
  }
}

// ----------------------------------------------------------------- norms ---

TEST_CASE("LinalgVectorNormBackward0") {
  const Tensor x = random64({3, 4}, 51), g = random64({3}, 52);
  const auto saved_for = [&](double ord) {
    return Saved{{"dim", IntList{1}}, {"keepdim", false}, {"ord", Scalar(ord)}, {"self", x},
                 {"result", linalg_vector_norm(x, ord, {1}, false)}};
  };
  SUBCASE("finite differences for ord 2, 1, 3, 1.5, 0.5, -1, inf") {
    for (const double ord : {2.0, 1.0, 3.0, 1.5, 0.5, -1.0, kInf}) {
      CAPTURE(ord);
      const Grads out = call_node("LinalgVectorNormBackward0", {g}, {true}, saved_for(ord));
      auto forward = [ord](const std::vector<Tensor>& in) { return linalg_vector_norm(in[0], ord, {1}, false); };
      check_against_finite_differences(out, 0, forward, {x}, g);
    }
  }
  SUBCASE("need mask and undefined grad; ord 0 has no grad") {
    check_need_and_undefined("LinalgVectorNormBackward0", {g}, saved_for(2));
    CHECK_FALSE(call_node("LinalgVectorNormBackward0", {g}, {true}, saved_for(0))[0].has_value());
  }
  SUBCASE("against torch: every ord at zero vectors, zeros, ties; None, keepdim, 0-d") {
    const Tensor zeros_and_ties = tensor({{0.0, 0.0, 0.0}, {3.0, -3.0, 1.0}, {0.0, 2.0, -1.0}}, DType::Float64);
    for (const std::string ord : {"2", "1", "float('inf')", "float('-inf')", "0", "3", "1.5", "0.5", "-1"}) {
      for (const auto& [input, args] : std::vector<std::pair<Tensor, std::string>>{
               {zeros_and_ties, "dim=1"},
               {zeros_and_ties, "dim=(0, -1), keepdim=True"},
               {zeros_and_ties, "dim=None"},
               {x, "dim=-2"},
               {random64({}, 53), "dim=None"},
               {random64({}, 54), "dim=0, keepdim=True"}}) {
        const std::string forward = "torch.linalg.vector_norm(x, ord=" + ord + ", " + args + ")";
        CAPTURE(forward);
        const auto r = torch_backward("LinalgVectorNormBackward0", forward,
                                      "(*opt_ints(fn._saved_dim), fn._saved_keepdim, float(fn._saved_ord), "
                                      "fn._saved_self, fn._saved_result)",
                                      input);
        const Saved from_torch = {{"dim", opt_dims(r[0], r[1])},
                                  {"keepdim", r[2].item<bool>()},
                                  {"ord", Scalar(r[3].item<double>())},
                                  {"self", r[4]},
                                  {"result", r[5]}};
        const Grads out = call_node("LinalgVectorNormBackward0", {r[6]}, {true}, from_torch);
        CHECK(out[0].has_value() == !r[7].item<bool>());
        if (out[0]) CHECK_TENSOR(*out[0], r[8]);
      }
    }
  }
  SUBCASE("errors") {
    Saved bad = saved_for(2);
    bad["dim"] = IntList{2};
    CHECK_THROWS_WITH_AS(call_node("LinalgVectorNormBackward0", {g}, {true}, bad), doctest::Contains("out of range"),
                         Error);
    CHECK_THROWS_WITH_AS(call_node("LinalgVectorNormBackward0", {random64({4}, 1)}, {true}, saved_for(2)),
                         doctest::Contains("[3,4]"), Error);
  }
}

// -------------------------------------------------------------- var, std ---

TEST_CASE("VarBackward0") {
  const Tensor x = random64({2, 3, 4}, 55), g = random64({3}, 56);
  const Saved saved = {{"correction", Scalar(0.5)}, {"dim", IntList{0, 2}}, {"keepdim", false}, {"self", x}};
  SUBCASE("finite differences") {
    const Grads out = call_node("VarBackward0", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return var(in[0], {0, 2}, 0.5); },
                                     {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("VarBackward0", {g}, saved); }
  SUBCASE("against torch: corrections, dims, None, [] (N counted as 1), N <= correction, 0-d") {
    const Tensor equal = tensor({2.0, 2.0, 2.0}, DType::Float64);
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {x, "x.var(1)"},
             {x, "x.var((0, -1), correction=0, keepdim=True)"},
             {x, "x.var(dim=None, correction=1.5)"},
             {x, "x.var()"},
             {x, "x.var(-1, unbiased=False)"},
             {x, "x.var(dim=[])"},
             {equal, "x.var(correction=3)"},
             {tensor({2.0, -3.0, 2.0}, DType::Float64), "x.var(correction=5)"},
             {equal, "x.var(0)"},
             {random64({}, 57), "x.var(0, correction=0)"},
             {random64({}, 58), "x.var()"}}) {
      CAPTURE(forward);
      const auto r = torch_backward("VarBackward0", forward,
                                    "(*opt_float(fn._saved_correction), *opt_ints(fn._saved_dim), fn._saved_keepdim, "
                                    "fn._saved_self)",
                                    input);
      const Saved from_torch = {{"correction", opt_scalar(r[0], r[1])},
                                {"dim", opt_dims(r[2], r[3])},
                                {"keepdim", r[4].item<bool>()},
                                {"self", r[5]}};
      // With N <= correction the factor is float32 (see var_backward); its inf and NaN are exact.
      CHECK_TENSOR(only_grad(call_node("VarBackward0", {r[6]}, {true}, from_torch)), r[8], 1e-6, 1e-9, false);
    }
  }
  SUBCASE("output dtype: the grad's, or float32 where at::where(cond, nan, inf) makes the factor") {
    const Tensor equal = tensor({2.0, 2.0, 2.0}, DType::Float64);
    const Tensor g0 = random64({}, 59);
    const Saved none_dim = {{"correction", Scalar(3)}, {"dim", None{}}, {"keepdim", false}, {"self", equal}};
    const Tensor torch_dtype =
        torch_eval1("(b * torch.where(a == a.mean(), float('nan'), float('inf'))).dtype", {equal, g0});
    CHECK(only_grad(call_node("VarBackward0", {g0}, {true}, none_dim)).dtype() == torch_dtype.dtype());
    CHECK(only_grad(call_node("VarBackward0", {g}, {true}, saved)).dtype() == DType::Float64);
  }
  SUBCASE("errors") {
    Saved bad = saved;
    bad["dim"] = IntList{0, 0};
    CHECK_THROWS_WITH_AS(call_node("VarBackward0", {g}, {true}, bad),
                         doctest::Contains("dim 0 appears multiple times in the list of dims"), Error);
    Saved bad_kind = saved;
    bad_kind["correction"] = x;
    CHECK_THROWS_WITH_AS(call_node("VarBackward0", {g}, {true}, bad_kind),
                         doctest::Contains("'correction' expects Scalar?"), Error);
  }
}

TEST_CASE("StdBackward0") {
  const Tensor x = random64({3, 4}, 60), g = random64({3}, 61);
  const Saved saved = {{"correction", None{}}, {"dim", IntList{1}}, {"keepdim", false}, {"self", x},
                       {"result", sqrt(var(x, {1}))}};
  SUBCASE("finite differences") {
    const Grads out = call_node("StdBackward0", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return sqrt(var(in[0], {1})); }, {x},
                                     g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("StdBackward0", {g}, saved); }
  SUBCASE("against torch: std 0 gives 0, corrections, dims, None, N <= correction, 0-d") {
    const Tensor equal_row = tensor({{2.0, 2.0, 2.0}, {1.0, -1.0, 0.5}}, DType::Float64);
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {x, "x.std(1)"},
             {x, "x.std(0, correction=0, keepdim=True)"},
             {x, "x.std()"},
             {equal_row, "x.std(1)"},
             {equal_row, "x.std(dim=None, correction=6)"},
             {tensor({2.0, 2.0}, DType::Float64), "x.std()"},
             {random64({}, 62), "x.std(0, correction=0)"}}) {
      CAPTURE(forward);
      const auto r = torch_backward("StdBackward0", forward,
                                    "(*opt_float(fn._saved_correction), *opt_ints(fn._saved_dim), fn._saved_keepdim, "
                                    "fn._saved_self, fn._saved_result)",
                                    input);
      const Saved from_torch = {{"correction", opt_scalar(r[0], r[1])},
                                {"dim", opt_dims(r[2], r[3])},
                                {"keepdim", r[4].item<bool>()},
                                {"self", r[5]},
                                {"result", r[6]}};
      CHECK_TENSOR(only_grad(call_node("StdBackward0", {r[7]}, {true}, from_torch)), r[9], 1e-6, 1e-9, false);
    }
  }
  SUBCASE("errors") {
    Saved bad = saved;
    bad["result"] = random64({5}, 1);
    CHECK_THROWS_WITH_AS(call_node("StdBackward0", {g}, {true}, bad), doctest::Contains("[3]"), Error);
  }
}

// ------------------------------------------------------------- logsumexp ---

TEST_CASE("LogsumexpBackward0") {
  const Tensor x = random64({2, 3, 4}, 63), g = random64({2}, 64);
  const Saved saved = {{"dim", IntList{1, -1}}, {"keepdim", false}, {"self", x}, {"result", logsumexp(x, {1, -1})}};
  SUBCASE("finite differences") {
    const Grads out = call_node("LogsumexpBackward0", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return logsumexp(in[0], {1, -1}); },
                                     {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("LogsumexpBackward0", {g}, saved); }
  SUBCASE("against torch: dims, keepdim, -inf rows, 0-d") {
    const Tensor infs = tensor({{-kInf, -kInf}, {-kInf, 0.0}, {kInf, 1.0}}, DType::Float64);
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {x, "x.logsumexp(1)"},
             {x, "x.logsumexp((0, -1), keepdim=True)"},
             {x, "x.logsumexp(-1)"},
             {infs, "x.logsumexp(1)"},
             {random64({}, 65), "x.logsumexp(0)"}}) {
      CAPTURE(forward);
      const auto r = torch_backward("LogsumexpBackward0", forward,
                                    "(ints(fn._saved_dim), fn._saved_keepdim, fn._saved_self, fn._saved_result)",
                                    input);
      const Saved from_torch = {
          {"dim", int_list(r[0])}, {"keepdim", r[1].item<bool>()}, {"self", r[2]}, {"result", r[3]}};
      CHECK_TENSOR(only_grad(call_node("LogsumexpBackward0", {r[4]}, {true}, from_torch)), r[6]);
    }
  }
  SUBCASE("errors") {
    Saved bad = saved;
    bad["dim"] = IntList{1, 1};
    CHECK_THROWS_WITH_AS(call_node("LogsumexpBackward0", {g}, {true}, bad),
                         doctest::Contains("dim 1 appears multiple times in the list of dims"), Error);
  }
}

TEST_CASE("NormBackward1") {
  const Tensor x = random64({3, 4}, 160), g = random64({3}, 161);
  const Saved saved = {{"dim", IntList{1}}, {"keepdim", false}, {"p", Scalar(3.0)}, {"self", x},
                       {"result", norm(x, 3.0, {1}, false)}};
  SUBCASE("finite differences") {
    const Grads out = call_node("NormBackward1", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return norm(in[0], 3.0, {1}); },
                                     {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined("NormBackward1", {g}, saved); }
  SUBCASE("against torch's norm.ScalarOpt_dim: each kind of p, None, keepdim, zeros and ties") {
    const Tensor zero_row = tensor({{0.0, 0.0, 0.0}, {1.0, -3.0, 3.0}}, DType::Float64);
    for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
             {x, "torch.ops.aten.norm.ScalarOpt_dim(x, 2, [1])"},
             {x, "torch.ops.aten.norm.ScalarOpt_dim(x, None, [0], True)"},
             {x, "torch.ops.aten.norm.ScalarOpt_dim(x, 1, [0, 1])"},
             {x, "torch.ops.aten.norm.ScalarOpt_dim(x, 0.5, [-1])"},
             {x, "torch.ops.aten.norm.ScalarOpt_dim(x, 1.5, [1], True)"},
             {x, "torch.ops.aten.norm.ScalarOpt_dim(x, 4, [0])"},
             {zero_row, "torch.ops.aten.norm.ScalarOpt_dim(x, 2, [1])"},
             {zero_row, "torch.ops.aten.norm.ScalarOpt_dim(x, float('inf'), [1])"},
             {zero_row, "torch.ops.aten.norm.ScalarOpt_dim(x, 3, [1])"}}) {
      CAPTURE(forward);
      const auto r = torch_backward(
          "NormBackward1", forward,
          "(ints(fn._saved_dim), fn._saved_keepdim, *opt_float(fn._saved_p), fn._saved_self, fn._saved_result)",
          input);
      const Saved from_torch = {{"dim", int_list(r[0])}, {"keepdim", r[1].item<bool>()}, {"p", opt_scalar(r[2], r[3])},
                                {"self", r[4]}, {"result", r[5]}};
      CHECK_TENSOR(only_grad(call_node("NormBackward1", {r[6]}, {true}, from_torch)), r[8], 1e-12, 1e-15);
    }
  }
  SUBCASE("p = 0: no grad, as torch") {
    const auto r = torch_backward("NormBackward1", "torch.ops.aten.norm.ScalarOpt_dim(x, 0, [1])",
                                  "(fn._saved_self, fn._saved_result)", x);
    CHECK(r[3].item<bool>());  // torch's grad is None
    Saved p0 = saved;
    p0["p"] = Scalar(0.0);
    p0["result"] = r[1];
    CHECK_FALSE(call_node("NormBackward1", {r[2]}, {true}, p0)[0].has_value());
  }
  SUBCASE("complex128: the grad is sgn(x) times the real scale") {
    const Tensor z = complex(random64({2, 3}, 162), random64({2, 3}, 163));
    for (const std::string p : {"2", "1", "3"}) {
      CAPTURE(p);
      const auto r = torch_backward("NormBackward1", "torch.ops.aten.norm.ScalarOpt_dim(x, " + p + ", [1])",
                                    "(fn._saved_self, fn._saved_result)", z);
      const Saved from_torch = {{"dim", IntList{1}}, {"keepdim", false}, {"p", Scalar(std::stod(p))}, {"self", r[0]},
                                {"result", r[1]}};
      CHECK_TENSOR(only_grad(call_node("NormBackward1", {r[2]}, {true}, from_torch)), r[4], 1e-12, 1e-15);
    }
  }
}


// -------------------------------------------------------- var_mean, std_mean ---

// var_mean and std_mean: var's (std's) grad plus mean's, each where its incoming grad is defined.
void check_var_std_mean(const std::string& node, const std::string& op, bool is_std) {
  const Tensor x = random64({3, 4}, 170), gv = random64({4}, 171), gm = random64({4}, 172);
  const Tensor spread = is_std ? sqrt(var(x, {0}, 0.5)) : var(x, {0}, 0.5);
  Saved saved = {{"correction", Scalar(0.5)}, {"dim", IntList{0}}, {"keepdim", false}, {"self", x}};
  if (is_std) saved["result0"] = spread;
  const std::string saved_fields = std::string("(*opt_float(fn._saved_correction), *opt_ints(fn._saved_dim), ") +
                                   "fn._saved_keepdim, fn._saved_self" + (is_std ? ", fn._saved_result0)" : ",)");
  const std::size_t n_saved = is_std ? 7 : 6;
  SUBCASE("finite differences: both grads, then each alone") {
    auto spread_of = [is_std](const Tensor& t) { return is_std ? sqrt(var(t, {0}, 0.5)) : var(t, {0}, 0.5); };
    for (const auto& [use_var, use_mean] : std::vector<std::pair<bool, bool>>{{true, true}, {true, false}, {false, true}}) {
      CAPTURE(use_var);
      CAPTURE(use_mean);
      const Grads out = call_node(node, two_grads(gv, gm, use_var, use_mean), {true}, saved);
      // One scalar output whose VJP with grad 1 is the sum of the two outputs' VJPs.
      auto forward = [&, use_var = use_var, use_mean = use_mean](const std::vector<Tensor>& in) {
        Tensor total = zeros({}, DType::Float64);
        if (use_var) total = add(total, sum(mul(spread_of(in[0]), gv)));
        if (use_mean) total = add(total, sum(mul(mean(in[0], {0}), gm)));
        return total;
      };
      check_against_finite_differences(out, 0, forward, {x}, ones({}, DType::Float64));
    }
  }
  SUBCASE("need mask and no grads") {
    CHECK_FALSE(call_node(node, {gv, gm}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node(node, {std::nullopt, std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: dims, keepdim, None, corrections, 0-d, equal values, one grad undefined") {
    const Tensor equal_row = tensor({{2.0, 2.0, 2.0}, {1.0, -1.0, 0.5}}, DType::Float64);
    for (const auto& [input, forward, use0, use1] : std::vector<std::tuple<Tensor, std::string, bool, bool>>{
             {x, "(x, 1)", true, true},
             {x, "(x, (0, -1), correction=0, keepdim=True)", true, true},
             {x, "(x,)", true, true},
             {x, "(x, None, correction=2)", false, true},
             {x, "(x, 0, keepdim=True)", true, false},
             {equal_row, "(x, 1)", true, true},
             {random64({}, 173), "(x, 0, correction=0)", true, true},
             {random64({}, 174), "(x,)", true, true}}) {
      CAPTURE(forward);
      CAPTURE(use0);
      CAPTURE(use1);
      const auto r = torch_backward2(node, "torch." + op + forward, saved_fields, input, use0, use1);
      Saved from_torch = {{"correction", opt_scalar(r[0], r[1])},
                          {"dim", opt_dims(r[2], r[3])},
                          {"keepdim", r[4].item<bool>()},
                          {"self", r[5]}};
      if (is_std) from_torch["result0"] = r[6];
      const Grads grads = two_grads(r[n_saved], r[n_saved + 1], use0, use1);
      CHECK_TENSOR(only_grad(call_node(node, grads, {true}, from_torch)), r[n_saved + 2], 1e-10, 1e-12, false);
    }
  }
  SUBCASE("float32, float16, bfloat16 and complex against torch") {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::ComplexDouble, DType::ComplexFloat}) {
      CAPTURE(dtype_name(dtype));
      const Tensor input = is_complex(dtype) ? complex(x, random64({3, 4}, 175)).to(dtype) : x.to(dtype);
      const auto r = torch_backward2(node, "torch." + op + "(x, 1, correction=0)", saved_fields, input);
      Saved from_torch = {{"correction", opt_scalar(r[0], r[1])}, {"dim", opt_dims(r[2], r[3])},
                          {"keepdim", r[4].item<bool>()}, {"self", r[5]}};
      if (is_std) from_torch["result0"] = r[6];
      const Tensor out = only_grad(call_node(node, {r[n_saved], r[n_saved + 1]}, {true}, from_torch));
      CHECK(out.dtype() == dtype);
      CHECK_TENSOR(out, r[n_saved + 2], rtol_for(dtype), rtol_for(dtype));
    }
  }
  SUBCASE("errors") {
    Saved bad = saved;
    bad["dim"] = IntList{0, 0};
    CHECK_THROWS_WITH_AS(call_node(node, {gv, gm}, {true}, bad),
                         doctest::Contains("dim 0 appears multiple times in the list of dims"), Error);
    CHECK_THROWS_WITH_AS(call_node(node, {gv}, {true}, saved), doctest::Contains("expected 2 incoming grads"), Error);
  }
}

TEST_CASE("VarMeanBackward0") { check_var_std_mean("VarMeanBackward0", "var_mean", false); }
TEST_CASE("StdMeanBackward0") { check_var_std_mean("StdMeanBackward0", "std_mean", true); }

// ---------------------------------------------------------------- aminmax ---

TEST_CASE("AminmaxBackward0") {
  const Tensor x = random64({3, 4}, 180), gmin = random64({3}, 181), gmax = random64({3}, 182);
  const Saved saved = {{"dim", std::int64_t{1}}, {"keepdim", false}, {"self", x}, {"max", amax(x, {1})},
                       {"min", amin(x, {1})}};
  const std::string saved_fields =
      "(*opt_int(fn._saved_dim), fn._saved_keepdim, fn._saved_self, fn._saved_max, fn._saved_min)";
  auto from_torch = [](const std::vector<Tensor>& r) {
    return Saved{{"dim", r[0].item<bool>() ? FieldValue(None{}) : FieldValue(r[1].item<std::int64_t>())},
                 {"keepdim", r[2].item<bool>()}, {"self", r[3]}, {"max", r[4]}, {"min", r[5]}};
  };
  SUBCASE("finite differences: both grads, then each alone") {
    for (const auto& [use_min, use_max] : std::vector<std::pair<bool, bool>>{{true, true}, {true, false}, {false, true}}) {
      CAPTURE(use_min);
      CAPTURE(use_max);
      const Grads out = call_node("AminmaxBackward0", two_grads(gmin, gmax, use_min, use_max), {true}, saved);
      auto forward = [&, use_min = use_min, use_max = use_max](const std::vector<Tensor>& in) {
        Tensor total = zeros({}, DType::Float64);
        if (use_min) total = add(total, sum(mul(amin(in[0], {1}), gmin)));
        if (use_max) total = add(total, sum(mul(amax(in[0], {1}), gmax)));
        return total;
      };
      check_against_finite_differences(out, 0, forward, {x}, ones({}, DType::Float64));
    }
  }
  SUBCASE("need mask and no grads") {
    CHECK_FALSE(call_node("AminmaxBackward0", {gmin, gmax}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("AminmaxBackward0", {std::nullopt, std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: ties split evenly, dim None, keepdim, 0-d, a constant row, one grad undefined") {
    const Tensor constant = tensor({{2.0, 2.0, 2.0}, {1.0, -1.0, 1.0}}, DType::Float64);
    for (const auto& [input, forward, use0, use1] : std::vector<std::tuple<Tensor, std::string, bool, bool>>{
             {x, "torch.aminmax(x, dim=1)", true, true},
             {x, "torch.aminmax(x, dim=-2, keepdim=True)", true, true},
             {x, "torch.aminmax(x)", true, true},
             {x, "torch.aminmax(x, keepdim=True)", true, false},
             {with_ties(), "torch.aminmax(x, dim=1)", true, true},
             {with_ties(), "torch.aminmax(x, dim=0)", false, true},
             {with_ties(), "torch.aminmax(x)", true, true},
             {constant, "torch.aminmax(x, dim=1)", true, true},
             {random64({}, 183), "torch.aminmax(x)", true, true},
             {random64({}, 184), "torch.aminmax(x, dim=0, keepdim=True)", true, true}}) {
      CAPTURE(forward);
      CAPTURE(input.repr());
      const auto r = torch_backward2("AminmaxBackward0", forward, saved_fields, input, use0, use1);
      const Grads grads = two_grads(r[6], r[7], use0, use1);
      CHECK_TENSOR(only_grad(call_node("AminmaxBackward0", grads, {true}, from_torch(r))), r[8]);
    }
  }
  SUBCASE("float32, float16 and bfloat16 against torch, with ties") {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      CAPTURE(dtype_name(dtype));
      const auto r = torch_backward2("AminmaxBackward0", "torch.aminmax(x, dim=1)", saved_fields, with_ties().to(dtype));
      const Tensor out = only_grad(call_node("AminmaxBackward0", {r[6], r[7]}, {true}, from_torch(r)));
      CHECK(out.dtype() == dtype);
      CHECK_TENSOR(out, r[8], rtol_for(dtype), rtol_for(dtype));
    }
  }
  SUBCASE("errors") {
    Saved bad = saved;
    bad["dim"] = std::int64_t{2};
    CHECK_THROWS_WITH_AS(call_node("AminmaxBackward0", {gmin, gmax}, {true}, bad), doctest::Contains("out of range"),
                         Error);
  }
}

// ---------------------------------------------------------- cummax, cummin ---

void check_cummaxmin_node(const std::string& node, const std::string& op) {
  const Tensor x = random64({3, 5}, 190), g = random64({3, 5}, 191);
  const auto indices_of = [&](const Tensor& t, std::int64_t dim) {
    return torch_eval("torch." + op + "(a, " + std::to_string(dim) + ").indices", {t})[0];
  };
  const Saved saved = {{"dim", std::int64_t{1}}, {"self", x}, {"indices", indices_of(x, 1)}};
  SUBCASE("finite differences") {
    const Grads out = call_node(node, {g}, {true}, saved);
    // The running extreme as a gather of the saved indices: its derivative is the scatter_add.
    const Tensor indices = indices_of(x, 1);
    auto forward = [&](const std::vector<Tensor>& in) { return gather(in[0], 1, indices); };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") { check_need_and_undefined(node, {g}, saved); }
  SUBCASE("against torch: dims, ties (the later index wins), NaN, 0-d and empty inputs") {
    const Tensor ties = tensor({{1.0, 1.0, 3.0, 3.0, 0.0}, {2.0, -1.0, 2.0, kNaN, 5.0}}, DType::Float64);
    for (const auto& [input, dim] : std::vector<std::pair<Tensor, std::int64_t>>{
             {x, 1}, {x, 0}, {x, -1}, {ties, 1}, {ties, 0}, {random64({}, 192), 0}, {random64({2, 0}, 193), 1}}) {
      CAPTURE(input.repr());
      CAPTURE(dim);
      const auto r = torch_backward(node, "torch." + op + "(x, " + std::to_string(dim) + ").values",
                                    "(torch.tensor(signed(fn._saved_dim)), fn._saved_self, fn._saved_indices)", input);
      const Saved from_torch = {{"dim", r[0].item<std::int64_t>()}, {"self", r[1]}, {"indices", r[2]}};
      CHECK_TENSOR(only_grad(call_node(node, {r[3]}, {true}, from_torch)), r[5]);
    }
  }
  SUBCASE("float32, float16 and bfloat16 against torch") {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      CAPTURE(dtype_name(dtype));
      const auto r = torch_backward(node, "torch." + op + "(x, 1).values",
                                    "(torch.tensor(signed(fn._saved_dim)), fn._saved_self, fn._saved_indices)",
                                    x.to(dtype));
      const Tensor out = only_grad(
          call_node(node, {r[3]}, {true}, Saved{{"dim", r[0].item<std::int64_t>()}, {"self", r[1]}, {"indices", r[2]}}));
      CHECK(out.dtype() == dtype);
      CHECK_TENSOR(out, r[5], rtol_for(dtype), rtol_for(dtype));
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {random64({3, 4}, 1)}, {true}, saved),
                         (node + ": grad [3,4] and indices [3,5] must have self's shape [3,5]").c_str(), Error);
  }
}

TEST_CASE("CummaxBackward0") { check_cummaxmin_node("CummaxBackward0", "cummax"); }
TEST_CASE("CumminBackward0") { check_cummaxmin_node("CumminBackward0", "cummin"); }

}  // TEST_SUITE

// ------------------------------------------- renorm, dist, logcumsumexp, segment_reduce ---

namespace {

const std::vector<DType> kFloatAndComplex = {DType::Float64,  DType::Float32,       DType::Float16,
                                             DType::BFloat16, DType::ComplexDouble, DType::ComplexFloat};

std::string number_text(double v) { return std::isinf(v) ? (v > 0 ? "float('inf')" : "-float('inf')") : std::to_string(v); }

// value in `dtype`; for a complex dtype with an imaginary part drawn from `seed`.
Tensor in_dtype(const Tensor& value, DType dtype, std::uint64_t seed) {
  if (!is_complex(dtype)) return value.to(dtype);
  return complex(value, random64(value.sizes(), seed)).to(dtype);
}

// renorm with L0 primitives: the slices along dim whose p-norm exceeds maxnorm scaled by maxnorm / (norm + 1e-7).
Tensor renorm_reference(const Tensor& x, double p, std::int64_t dim, double maxnorm) {
  IntList others;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) others.push_back(d);
  const Tensor norm = linalg_vector_norm(x, p, others, true);
  return mul(x, where(gt(norm, maxnorm), div(scalar_tensor(maxnorm, DType::Float64), add(norm, 1e-7)), 1.0));
}

// Node outputs against torch's own node outputs (fn(g)), in the dtype's tolerance.
void check_outputs(const Grads& out, const std::vector<Tensor>& torch_outputs, DType dtype) {
  REQUIRE(out.size() == torch_outputs.size());
  for (std::size_t k = 0; k < out.size(); ++k) {
    CAPTURE(k);
    if (is_undefined_output(torch_outputs[k])) {
      CHECK_FALSE(out[k].has_value());
      continue;
    }
    REQUIRE(out[k].has_value());
    CHECK(out[k]->dtype() == torch_outputs[k].dtype());
    CHECK_TENSOR(*out[k], torch_outputs[k], rtol_for(dtype), rtol_for(dtype) * 1e-2);
  }
}

// segment_reduce along dim 0 with L0 primitives, one segment at a time: initial joins every
// reduction (an empty segment is initial, or 0).
Tensor segment_reduce_reference(const Tensor& data, const std::string& reduce, const IntList& lengths,
                                std::optional<double> initial) {
  TensorList outs;
  std::int64_t start = 0;
  Shape row = data.sizes();
  row.erase(row.begin());
  for (const std::int64_t length : lengths) {
    const Tensor seg = narrow(data, 0, start, length);
    start += length;
    if (length == 0) {
      outs.push_back(full(row, initial.value_or(0.0), DType::Float64));
      continue;
    }
    Tensor r;
    if (reduce == "sum" || reduce == "mean") {
      r = sum(seg, {0});
      if (initial) r = add(r, *initial);
      if (reduce == "mean") r = div(r, static_cast<double>(length));
    } else if (reduce == "prod") {
      r = prod(seg, 0);
      if (initial) r = mul(r, *initial);
    } else {
      r = reduce == "max" ? amax(seg, {0}) : amin(seg, {0});
      if (initial) r = reduce == "max" ? maximum(r, full(row, *initial, DType::Float64))
                                       : minimum(r, full(row, *initial, DType::Float64));
    }
    outs.push_back(r);
  }
  return stack(outs, 0);
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("RenormBackward0") {
  // Rows of norm about 2: maxnorm 1.5 scales some and leaves others.
  const Tensor x = random64({4, 3}, 700), g = random64({4, 3}, 701);
  SUBCASE("finite differences, each kind of p, either dim") {
    for (const double p : {2.0, 1.0, 3.0, 0.5, kInf}) {
      for (const std::int64_t dim : {0, 1}) {
        CAPTURE(p);
        CAPTURE(dim);
        const Saved saved = {{"dim", dim}, {"maxnorm", Scalar(1.5)}, {"p", Scalar(p)}, {"self", x}};
        check_against_finite_differences(
            call_node("RenormBackward0", {g}, {true}, saved), 0,
            [&](const std::vector<Tensor>& in) { return renorm_reference(in[0], p, dim, 1.5); }, {x}, g);
      }
    }
  }
  SUBCASE("against torch: every dtype, p, dim; a zero slice; all or no slices scaled") {
    const Tensor with_zero = tensor({{0.0, 0.0, 0.0}, {3.0, -4.0, 1.0}, {0.5, 0.1, -0.2}}, DType::Float64);
    const Tensor three_d = random64({2, 3, 2}, 702);
    std::uint64_t seed = 710;
    for (const DType dtype : kFloatAndComplex) {
      for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
               {x, "torch.renorm(x, 2, 0, 1.5)"},
               {x, "torch.renorm(x, 1, -1, 1.0)"},
               {x, "torch.renorm(x, 3, 0, 0.1)"},
               {x, "torch.renorm(x, 0.5, 1, 100.0)"},
               {x, "torch.renorm(x, float('inf'), 0, 1.0)"},
               {with_zero, "torch.renorm(x, 2, 0, 1.0)"},
               {three_d, "torch.renorm(x, 2, 1, 1.0)"}}) {
        CAPTURE(forward);
        CAPTURE(dtype_name(dtype));
        const auto r = torch_node_call(
            "RenormBackward0", "x = a.requires_grad_()\nout = " + forward, "fn._saved_self",
            "(torch.tensor(signed(fn._saved_dim)), torch.tensor(float(fn._saved_maxnorm), dtype=torch.float64), "
            "torch.tensor(float(fn._saved_p), dtype=torch.float64), fn._saved_self)",
            {in_dtype(input, dtype, ++seed)});
        const Saved saved = {{"dim", r[0].item<std::int64_t>()}, {"maxnorm", Scalar(r[1].item<double>())},
                             {"p", Scalar(r[2].item<double>())}, {"self", r[3]}};
        if (dtype == DType::ComplexFloat && std::isinf(r[2].item<double>())) {
          // torch's inf-norm backward compares |self| (complex64) with the norm taken in complex128: no
          // element matches and its grad of the scaled slices is 0/0. refgrad marks the largest |self|.
          // Checked instead against torch's complex128 node on the same values.
          CHECK(std::isnan(real(r[5]).to(DType::Float64).to_vector<double>()[0]));
          const auto r128 = torch_node_call("RenormBackward0", "x = a.requires_grad_()\nout = " + forward,
                                            "fn._saved_self", "()", {r[3].to(DType::ComplexDouble)});
          CHECK_TENSOR(call_node("RenormBackward0", {r[4]}, {true}, saved)[0]->to(DType::ComplexDouble), r128[1],
                       1e-5, 1e-7);
          continue;
        }
        check_outputs(call_node("RenormBackward0", {r[4]}, {true}, saved), {r[5]}, dtype);
      }
    }
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = {{"dim", std::int64_t{0}}, {"maxnorm", Scalar(1.5)}, {"p", Scalar(2.0)}, {"self", x}};
    check_need_and_undefined("RenormBackward0", {g}, saved);
    Saved bad = saved;
    bad["dim"] = std::int64_t{2};
    CHECK_THROWS_WITH_AS(call_node("RenormBackward0", {g}, {true}, bad),
                         "RenormBackward0: dim 2 is out of range for self [4,3] (expected a dim in [-2, 1])", Error);
    CHECK_THROWS_WITH_AS(call_node("RenormBackward0", {random64({3, 4}, 703)}, {true}, saved),
                         "RenormBackward0: grad has shape [3,4] but self has shape [4,3]", Error);
  }
}

TEST_CASE("DistBackward0") {
  const Tensor x = random64({3, 4}, 720), y = random64({3, 4}, 721), g = random64({}, 722);
  SUBCASE("finite differences, each kind of p, both inputs") {
    for (const double p : {2.0, 1.0, 3.0, 0.5, 1.5, kInf}) {
      CAPTURE(p);
      const Saved saved = {{"other", y}, {"p", Scalar(p)}, {"self", x}, {"result", linalg_vector_norm(sub(x, y), p)}};
      const Grads out = call_node("DistBackward0", {g}, {true, true}, saved);
      auto forward = [p](const std::vector<Tensor>& in) { return linalg_vector_norm(sub(in[0], in[1]), p); };
      check_against_finite_differences(out, 0, forward, {x, y}, g);
      check_against_finite_differences(out, 1, forward, {x, y}, g);
    }
  }
  SUBCASE("against torch: every dtype, p, broadcasting; equal inputs; ties for inf") {
    const Tensor row = random64({4}, 723);
    const Tensor ties = tensor({{1.0, -3.0}, {3.0, 0.0}}, DType::Float64);
    std::uint64_t seed = 730;
    for (const DType dtype : kFloatAndComplex) {
      for (const double p : {2.0, 1.0, 3.0, 0.5, 1.5, kInf}) {
        for (const auto& [a, b] : std::vector<std::pair<Tensor, Tensor>>{{x, y}, {x, row}, {x, x}, {ties, zeros({2, 2}, DType::Float64)}}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(p);
          CAPTURE(b.sizes());
          const auto r = torch_node_call(
              "DistBackward0",
              "x = a.requires_grad_(); y = b.requires_grad_()\nout = torch.dist(x, y, " + number_text(p) + ")",
              "fn._saved_result",
              "(fn._saved_other, torch.tensor(float(fn._saved_p), dtype=torch.float64), fn._saved_self, fn._saved_result)",
              {in_dtype(a, dtype, ++seed), in_dtype(b, dtype, ++seed)});
          const Saved saved = {{"other", r[0]}, {"p", Scalar(r[1].item<double>())}, {"self", r[2]}, {"result", r[3]}};
          check_outputs(call_node("DistBackward0", {r[4]}, {true, true}, saved), {r[5], r[6]}, dtype);
        }
      }
    }
  }
  SUBCASE("against torch: p = 0 (no grad: torch's node returns None) and mixed dtypes") {
    const auto r = torch_node_call(
        "DistBackward0", "x = a.requires_grad_(); y = b\nout = torch.dist(x, y, 0)", "fn._saved_result",
        "(fn._saved_other, fn._saved_self, fn._saved_result)", {x, y});
    const Saved saved = {{"other", r[0]}, {"p", Scalar(0.0)}, {"self", r[1]}, {"result", r[2]}};
    const Grads out = call_node("DistBackward0", {r[3]}, {true, false}, saved);
    CHECK(is_undefined_output(r[4]));
    CHECK_FALSE(out[0].has_value());
    CHECK_FALSE(call_node("DistBackward0", {r[3]}, {true, true}, saved)[1].has_value());
    const auto m = torch_node_call(
        "DistBackward0", "x = a.requires_grad_(); y = b.requires_grad_()\nout = torch.dist(x, y, 3)",
        "fn._saved_result", "(fn._saved_other, fn._saved_self, fn._saved_result)", {x.to(DType::Float32), y});
    const Saved mixed = {{"other", m[0]}, {"p", Scalar(3.0)}, {"self", m[1]}, {"result", m[2]}};
    check_outputs(call_node("DistBackward0", {m[3]}, {true, true}, mixed), {m[4], m[5]}, DType::Float32);
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = {{"other", y}, {"p", Scalar(2.0)}, {"self", x}, {"result", linalg_vector_norm(sub(x, y), 2.0)}};
    const Grads only_other = call_node("DistBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(only_other[0].has_value());
    CHECK(only_other[1].has_value());
    CHECK_FALSE(call_node("DistBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
    CHECK_THROWS_WITH_AS(call_node("DistBackward0", {x}, {true, true}, saved),
                         "DistBackward0: grad [3,4] and result [] must be 0-d", Error);
  }
}

TEST_CASE("LogcumsumexpBackward0") {
  const Tensor x = random64({3, 4}, 740), g = random64({3, 4}, 741);
  SUBCASE("finite differences, either dim") {
    for (const std::int64_t dim : {0, 1}) {
      CAPTURE(dim);
      const Saved saved = {{"dim", dim}, {"self", x}, {"result", log(cumsum(exp(x), dim))}};
      check_against_finite_differences(
          call_node("LogcumsumexpBackward0", {g}, {true}, saved), 0,
          [dim](const std::vector<Tensor>& in) { return log(cumsum(exp(in[0]), dim)); }, {x}, g);
    }
  }
  SUBCASE("against torch: every dtype; -inf, large values, 0-d, a negative dim") {
    const Tensor minus_inf = tensor({{-kInf, 0.0, -kInf, 1.0}, {-kInf, -kInf, 2.0, -kInf}}, DType::Float64);
    const Tensor large = tensor({{1000.0, 0.0, -1000.0, 1001.0}, {-50.0, 30.0, 30.0, -20.0}}, DType::Float64);
    std::uint64_t seed = 750;
    for (const DType dtype : kFloatAndComplex) {
      for (const auto& [input, forward] : std::vector<std::pair<Tensor, std::string>>{
               {x, "torch.logcumsumexp(x, 1)"},
               {x, "torch.logcumsumexp(x, -2)"},
               {minus_inf, "torch.logcumsumexp(x, 1)"},
               {large, "torch.logcumsumexp(x, 1)"},
               {random64({}, 742), "torch.logcumsumexp(x, 0)"},
               {zeros({0, 3}, DType::Float64), "torch.logcumsumexp(x, 0)"}}) {
        CAPTURE(forward);
        CAPTURE(dtype_name(dtype));
        CAPTURE(input.sizes());
        const auto r = torch_node_call("LogcumsumexpBackward0", "x = a.requires_grad_()\nout = " + forward,
                                       "fn._saved_result",
                                       "(torch.tensor(signed(fn._saved_dim)), fn._saved_self, fn._saved_result)",
                                       {in_dtype(input, dtype, ++seed)});
        const Saved saved = {{"dim", r[0].item<std::int64_t>()}, {"self", r[1]}, {"result", r[2]}};
        check_outputs(call_node("LogcumsumexpBackward0", {r[3]}, {true}, saved), {r[4]}, dtype);
      }
    }
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = {{"dim", std::int64_t{1}}, {"self", x}, {"result", log(cumsum(exp(x), 1))}};
    check_need_and_undefined("LogcumsumexpBackward0", {g}, saved);
    Saved bad = saved;
    bad["dim"] = std::int64_t{-3};
    CHECK_THROWS_WITH_AS(call_node("LogcumsumexpBackward0", {g}, {true}, bad),
                         "LogcumsumexpBackward0: dim -3 is out of range for self [3,4] (expected a dim in [-2, 1])",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("LogcumsumexpBackward0", {random64({4}, 743)}, {true}, saved),
                         "LogcumsumexpBackward0: grad has shape [4] but self has shape [3,4]", Error);
  }
}

TEST_CASE("SegmentReduceBackward0") {
  const Tensor data = random64({6, 2}, 760);
  const IntList lengths = {2, 0, 3, 1};
  auto saved_for = [&](const Tensor& d, const std::string& reduce, std::optional<double> initial) {
    return Saved{{"axis", std::int64_t{0}},
                 {"data", d},
                 {"initial", initial ? FieldValue(Scalar(*initial)) : FieldValue(None{})},
                 {"lengths", from_vector(lengths, {4})},
                 {"offsets", None{}},
                 {"reduce", reduce},
                 {"result", segment_reduce_reference(d, reduce, lengths, initial)}};
  };
  SUBCASE("finite differences, each reduction, with and without initial") {
    const Tensor g = random64({4, 2}, 761);
    for (const std::string reduce : {"sum", "mean", "max", "min", "prod"}) {
      for (const std::optional<double> initial : {std::optional<double>{}, std::optional<double>{-0.5}}) {
        CAPTURE(reduce);
        CAPTURE(initial.has_value());
        check_against_finite_differences(
            call_node("SegmentReduceBackward0", {g}, {true}, saved_for(data, reduce, initial)), 0,
            [&](const std::vector<Tensor>& in) { return segment_reduce_reference(in[0], reduce, lengths, initial); },
            {data}, g);
      }
    }
  }
  SUBCASE("against torch: lengths and offsets, axis 0 and 1, every reduction and dtype; ties, zeros, NaN") {
    // Ties of the max and min (in both signs of grad), zeros and a NaN for prod, an empty segment.
    const Tensor special = tensor({{1.0, 0.0}, {3.0, 0.0}, {3.0, 2.0}, {-1.0, kNaN}, {-1.0, 5.0}, {0.0, 5.0}},
                                  DType::Float64);
    const Tensor three_d = random64({2, 5, 3}, 762);
    for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      for (const std::string reduce : {"sum", "mean", "max", "min", "prod"}) {
        for (const auto& [input, args] : std::vector<std::pair<Tensor, std::string>>{
                 {data, "lengths=torch.tensor([2, 0, 3, 1])"},
                 {data, "lengths=torch.tensor([2, 0, 3]), unsafe=True, initial=1.0"},  // row 5 in no segment
                 {data, "offsets=torch.tensor([0, 2, 2, 5, 6]), initial=2.0"},
                 {special, "lengths=torch.tensor([3, 2, 0, 1], dtype=torch.int32)"},
                 {special, "lengths=torch.tensor([3, 3]), initial=-1.5"},
                 {three_d, "lengths=torch.tensor([[2, 0, 3], [1, 4, 0]]), axis=1"},
                 {three_d, "offsets=torch.tensor([[0, 5], [0, 5]]), axis=-2, initial=0.5"}}) {
          CAPTURE(reduce);
          CAPTURE(args);
          CAPTURE(dtype_name(dtype));
          const auto r = torch_node_call(
              "SegmentReduceBackward0",
              "x = a.requires_grad_()\nout = torch.segment_reduce(x, '" + reduce + "', " + args + ")",
              "fn._saved_result",
              "(torch.tensor(signed(fn._saved_axis)), fn._saved_data, torch.tensor(fn._saved_initial is None), "
              "torch.tensor(0.0 if fn._saved_initial is None else float(fn._saved_initial), dtype=torch.float64), "
              "torch.tensor(fn._saved_lengths is None), fn._saved_lengths if fn._saved_offsets is None else fn._saved_offsets, "
              "torch.tensor(fn._saved_reduce == '" + reduce + "'), fn._saved_result)",
              {input.to(dtype)});
          CHECK(r[6].item<bool>());
          const bool by_offsets = r[4].item<bool>();
          const Saved saved = {{"axis", r[0].item<std::int64_t>()},
                               {"data", r[1]},
                               {"initial", r[2].item<bool>() ? FieldValue(None{}) : FieldValue(Scalar(r[3].item<double>()))},
                               {"lengths", by_offsets ? FieldValue(None{}) : FieldValue(r[5])},
                               {"offsets", by_offsets ? FieldValue(r[5]) : FieldValue(None{})},
                               {"reduce", reduce},
                               {"result", r[7]}};
          check_outputs(call_node("SegmentReduceBackward0", {r[8]}, {true}, saved), {r[9]}, dtype);
        }
      }
    }
  }
  SUBCASE("by hand: ties split only a positive grad (ATen's kernel), prod's zeros and initial") {
    const Tensor d = tensor({1.0, 3.0, 3.0, 2.0, 0.0, 0.0, 4.0, 0.0}, DType::Float64);
    const Saved max_saved = {{"axis", std::int64_t{0}}, {"data", d}, {"initial", None{}},
                             {"lengths", from_vector(IntList{4, 3, 1}, {3})}, {"offsets", None{}},
                             {"reduce", std::string("max")}, {"result", tensor({3.0, 4.0, 0.0}, DType::Float64)}};
    CHECK_TENSOR(*call_node("SegmentReduceBackward0", {tensor({2.0, 1.0, -1.0}, DType::Float64)}, {true}, max_saved)[0],
                 tensor({0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, -1.0}, DType::Float64));
    CHECK_TENSOR(*call_node("SegmentReduceBackward0", {tensor({-2.0, 1.0, 1.0}, DType::Float64)}, {true}, max_saved)[0],
                 tensor({0.0, -2.0, -2.0, 0.0, 0.0, 0.0, 1.0, 1.0}, DType::Float64));
    // prod with initial 2: [1, 3, 3, 2] -> 36; [0, 0, 4] -> 0 (two zeros: each zero's grad is 0, 4's is 0);
    // [0] -> 0, its grad initial * (no other element) = 2.
    Saved prod_saved = max_saved;
    prod_saved["reduce"] = std::string("prod");
    prod_saved["initial"] = Scalar(2.0);
    prod_saved["result"] = tensor({36.0, 0.0, 0.0}, DType::Float64);
    CHECK_TENSOR(*call_node("SegmentReduceBackward0", {tensor({1.0, 1.0, 3.0}, DType::Float64)}, {true}, prod_saved)[0],
                 tensor({36.0, 12.0, 12.0, 18.0, 0.0, 0.0, 0.0, 6.0}, DType::Float64));
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = saved_for(data, "sum", std::nullopt);
    const Tensor g = random64({4, 2}, 763);
    check_need_and_undefined("SegmentReduceBackward0", {g}, saved);
    Saved bad = saved;
    bad["lengths"] = from_vector(IntList{2, 0, 3, 2}, {4});
    CHECK_THROWS_WITH_AS(call_node("SegmentReduceBackward0", {g}, {true}, bad),
                         "SegmentReduceBackward0: lengths must be non-negative and add up to at most data's size 6 along axis 0",
                         Error);
    bad = saved;
    bad["offsets"] = from_vector(IntList{0, 6}, {2});
    CHECK_THROWS_WITH_AS(call_node("SegmentReduceBackward0", {g}, {true}, bad),
                         "SegmentReduceBackward0: exactly one of lengths and offsets must be saved", Error);
    bad = saved;
    bad["reduce"] = std::string("median");
    CHECK_THROWS_WITH_AS(call_node("SegmentReduceBackward0", {g}, {true}, bad),
                         "SegmentReduceBackward0: reduce must be sum, mean, max, min or prod, got 'median'", Error);
    CHECK_THROWS_WITH_AS(call_node("SegmentReduceBackward0", {random64({3, 2}, 764)}, {true}, saved),
                         doctest::Contains("grad [3,2] and result [4,2] data's shape with the segments along axis"),
                         Error);
  }
}

}  // TEST_SUITE
