// Node tests of the pairwise distances (src/nodes/distance.cpp): CdistBackward0,
// EuclideanDistBackward0, PdistBackward0.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "node_test.hpp"
#include "torch_node_call.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The forwards with L0 primitives: every pair's difference, then its p-norm over the coordinates.
Tensor cdist_reference(const Tensor& x1, const Tensor& x2, double p) {
  return linalg_vector_norm(sub(unsqueeze(x1, -2), unsqueeze(x2, -3)), p, {-1});
}

Tensor pdist_reference(const Tensor& x, double p) {
  TensorList pairs;
  for (std::int64_t i = 0; i < x.size(0); ++i)
    for (std::int64_t j = i + 1; j < x.size(0); ++j) pairs.push_back(sub(select(x, 0, i), select(x, 0, j)));
  return linalg_vector_norm(stack(pairs), p, {-1});
}

std::string p_text(double p) { return std::isinf(p) ? "float('inf')" : std::to_string(p); }

double rtol_of(DType dtype) { return dtype == DType::Float32 ? 2e-5 : 1e-10; }

// Rows with zero distances (row 0 of x1 equals row 1 of x2), ties in |diff| (for p = inf) and equal
// coordinates (diff = 0, for p < 1).
Tensor x1_with_edges() { return tensor({{1.0, 2.0, 3.0}, {0.0, -1.0, 1.0}, {2.0, 2.0, -2.0}}, DType::Float64); }
Tensor x2_with_edges() {
  return tensor({{0.0, 0.0, 0.0}, {1.0, 2.0, 3.0}, {1.0, -3.0, 1.0}, {4.0, 2.0, 0.0}}, DType::Float64);
}

// CdistBackward0 or EuclideanDistBackward0 against torch's node, fed its saved x1, x2, result (and p).
void check_cdist_against_torch(const char* node, const std::string& call, const Tensor& x1, const Tensor& x2,
                               DType dtype) {
  CAPTURE(call);
  CAPTURE(dtype_name(dtype));
  const bool has_p = std::string(node) == "CdistBackward0";
  const auto r = torch_node_call(
      node, "x = a.requires_grad_(); y = b.requires_grad_()\nout = " + call, "fn._saved_result",
      has_p ? "(fn._saved_x1, fn._saved_x2, fn._saved_result, torch.tensor(fn._saved_p, dtype=torch.float64))"
            : "(fn._saved_x1, fn._saved_x2, fn._saved_result)",
      {x1.to(dtype), x2.to(dtype)});
  Saved saved = {{"x1", r[0]}, {"x2", r[1]}, {"result", r[2]}};
  if (has_p) saved["p"] = r[3].item<double>();
  const std::size_t g = has_p ? 4 : 3;
  const Grads out = call_node(node, {r[g]}, {true, true}, saved);
  for (std::size_t k = 0; k < 2; ++k) {
    CAPTURE(k);
    REQUIRE(out[k].has_value());
    CHECK(out[k]->dtype() == dtype);
    CHECK_TENSOR(*out[k], r[g + 1 + k], rtol_of(dtype), rtol_of(dtype) * 1e-2);
  }
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("CdistBackward0") {
  const Tensor x1 = random64({2, 3, 4}, 900), x2 = random64({2, 5, 4}, 901), g = random64({2, 3, 5}, 902);
  SUBCASE("finite differences, each kind of p, both inputs") {
    for (const double p : {1.0, 0.5, 1.5, 2.0, 3.0, kInf}) {
      CAPTURE(p);
      const Saved saved = {{"p", p}, {"x1", x1}, {"x2", x2}, {"result", cdist_reference(x1, x2, p)}};
      const Grads out = call_node("CdistBackward0", {g}, {true, true}, saved);
      auto forward = [p](const std::vector<Tensor>& in) { return cdist_reference(in[0], in[1], p); };
      check_against_finite_differences(out, 0, forward, {x1, x2}, g);
      check_against_finite_differences(out, 1, forward, {x1, x2}, g);
    }
  }
  SUBCASE("against torch: p = 0, 1, 2, inf, fractional; zero distances, ties, equal coordinates") {
    for (const double p : {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, kInf}) {
      for (const DType dtype : {DType::Float64, DType::Float32}) {
        // compute_mode keeps p = 2 on _cdist_forward (the default would too, with so few rows).
        const std::string call = "torch.cdist(x, y, p=" + p_text(p) + ", compute_mode='donot_use_mm_for_euclid_dist')";
        check_cdist_against_torch("CdistBackward0", call, x1_with_edges(), x2_with_edges(), dtype);
        check_cdist_against_torch("CdistBackward0", call, x1, x2, dtype);
      }
    }
  }
  SUBCASE("against torch: broadcast batch dims (the grads keep them: validate sums them back)") {
    const Tensor a = random64({2, 1, 3, 2}, 903), b = random64({4, 5, 2}, 904);
    for (const double p : {1.0, 2.0, kInf})
      check_cdist_against_torch("CdistBackward0", "torch.cdist(x, y, p=" + p_text(p) + ")", a, b, DType::Float64);
    const Grads out = call_node("CdistBackward0", {random64({2, 4, 3, 5}, 905)}, {true, true},
                                Saved{{"p", 2.0}, {"x1", a}, {"x2", b}, {"result", cdist_reference(a, b, 2.0)}});
    CHECK(out[0]->sizes() == Shape{2, 4, 3, 2});
    CHECK(out[1]->sizes() == Shape{2, 4, 5, 2});
  }
  SUBCASE("which node torch.cdist records") {
    // p = 2 takes the matrix-product form (_euclidean_dist) when asked, or by default with more than
    // 25 rows in x1 or x2; everything else is _cdist_forward.
    const std::string code = R"(
def node(r1, r2, p, mode):
    x = torch.randn(r1, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(r2, 3, dtype=torch.float64, requires_grad=True)
    out = torch.cdist(x, y, p=p, compute_mode=mode)
    fn = out.grad_fn
    return fn.name() if fn.name() != 'ViewBackward0' else fn.next_functions[0][0].name()
mm = 'use_mm_for_euclid_dist_if_necessary'
result = ' '.join([node(3, 4, 2.0, mm), node(26, 4, 2.0, mm), node(3, 26, 2.0, mm), node(30, 30, 1.0, mm),
                   node(3, 4, 2.0, 'use_mm_for_euclid_dist'), node(30, 4, 2.0, 'donot_use_mm_for_euclid_dist')])
)";
    CHECK(torch_exec_text(code) ==
          "CdistBackward0 EuclideanDistBackward0 EuclideanDistBackward0 CdistBackward0 EuclideanDistBackward0 "
          "CdistBackward0");
  }
  SUBCASE("by hand: p = inf gives every tie the whole grad, a zero distance nothing") {
    // x1 = [[0, 0]], x2 = [[1, -1], [0, 0]]: the first pair ties |diff| = 1 in both coordinates.
    const Tensor a = tensor({{0.0, 0.0}}, DType::Float64), b = tensor({{1.0, -1.0}, {0.0, 0.0}}, DType::Float64);
    const Grads out = call_node("CdistBackward0", {tensor({{2.0, 5.0}}, DType::Float64)}, {true, true},
                                Saved{{"p", kInf}, {"x1", a}, {"x2", b}, {"result", cdist_reference(a, b, kInf)}});
    CHECK_TENSOR(*out[0], tensor({{-2.0, 2.0}}, DType::Float64));
    CHECK_TENSOR(*out[1], tensor({{2.0, -2.0}, {0.0, 0.0}}, DType::Float64));
  }
  SUBCASE("need mask, undefined grad, empty inputs") {
    const Saved saved = {{"p", 2.0}, {"x1", x1}, {"x2", x2}, {"result", cdist_reference(x1, x2, 2.0)}};
    const Grads only_x2 = call_node("CdistBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(only_x2[0].has_value());
    CHECK(only_x2[1].has_value());
    const Grads none = call_node("CdistBackward0", {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(none[0].has_value());
    CHECK_FALSE(none[1].has_value());
    const Tensor empty = zeros({2, 0, 4}, DType::Float64);
    const Grads out = call_node("CdistBackward0", {zeros({2, 3, 0}, DType::Float64)}, {true, true},
                                Saved{{"p", 2.0}, {"x1", x1}, {"x2", empty}, {"result", zeros({2, 3, 0}, DType::Float64)}});
    CHECK_TENSOR(*out[0], zeros({2, 3, 4}, DType::Float64));
    CHECK(out[1]->sizes() == Shape{2, 0, 4});
  }
  SUBCASE("errors") {
    const Saved saved = {{"p", 2.0}, {"x1", x1}, {"x2", x2}, {"result", cdist_reference(x1, x2, 2.0)}};
    CHECK_THROWS_WITH_AS(call_node("CdistBackward0", {x1}, {true, true}, saved),
                         "CdistBackward0: grad [2,3,4] and result [2,3,5] must be [2,3,5] for x1 [2,3,4] and x2 [2,5,4]",
                         Error);
    Saved bad = saved;
    bad["x2"] = random64({2, 5, 3}, 906);
    CHECK_THROWS_WITH_AS(call_node("CdistBackward0", {g}, {true, true}, bad),
                         "CdistBackward0: x1 [2,3,4] and x2 [2,5,3] must be [..., rows, m] with the same m", Error);
    bad = saved;
    bad["x2"] = random64({3, 5, 4}, 907);
    CHECK_THROWS_WITH_AS(call_node("CdistBackward0", {g}, {true, true}, bad),
                         doctest::Contains("are not broadcastable"), Error);
  }
}

TEST_CASE("EuclideanDistBackward0") {
  const Tensor x1 = random64({3, 4}, 910), x2 = random64({5, 4}, 911), g = random64({3, 5}, 912);
  SUBCASE("finite differences, both inputs") {
    const Saved saved = {{"x1", x1}, {"x2", x2}, {"result", cdist_reference(x1, x2, 2.0)}};
    const Grads out = call_node("EuclideanDistBackward0", {g}, {true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return cdist_reference(in[0], in[1], 2.0); };
    check_against_finite_differences(out, 0, forward, {x1, x2}, g);
    check_against_finite_differences(out, 1, forward, {x1, x2}, g);
  }
  SUBCASE("against torch: cdist's matrix-product path, batched and not, with zero distances") {
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      const std::string mm = "torch.cdist(x, y, compute_mode='use_mm_for_euclid_dist')";
      check_cdist_against_torch("EuclideanDistBackward0", mm, x1_with_edges(), x2_with_edges(), dtype);
      check_cdist_against_torch("EuclideanDistBackward0", mm, random64({2, 3, 4}, 913), random64({2, 5, 4}, 914),
                                dtype);
      // more than 25 rows: the default compute mode takes this path too
      check_cdist_against_torch("EuclideanDistBackward0", "torch.cdist(x, y)", random64({27, 3}, 915),
                                random64({4, 3}, 916), dtype);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"x1", x1}, {"x2", x2}, {"result", cdist_reference(x1, x2, 2.0)}};
    const Grads only_x1 = call_node("EuclideanDistBackward0", {g}, {true, false}, saved);
    CHECK(only_x1[0].has_value());
    CHECK_FALSE(only_x1[1].has_value());
    CHECK_FALSE(call_node("EuclideanDistBackward0", {std::nullopt}, {true, true}, saved)[0].has_value());
  }
  SUBCASE("errors") {
    const Saved saved = {{"x1", x1}, {"x2", random64({5}, 917)}, {"result", cdist_reference(x1, x2, 2.0)}};
    CHECK_THROWS_WITH_AS(call_node("EuclideanDistBackward0", {g}, {true, true}, saved),
                         "EuclideanDistBackward0: x1 [3,4] and x2 [5] must be [..., rows, m] with the same m", Error);
  }
}

TEST_CASE("PdistBackward0") {
  const Tensor x = random64({5, 3}, 920), g = random64({10}, 921);
  SUBCASE("finite differences, each kind of p") {
    for (const double p : {1.0, 0.5, 1.5, 2.0, 3.0, kInf}) {
      CAPTURE(p);
      const Grads out = call_node("PdistBackward0", {g}, {true},
                                  Saved{{"p", p}, {"self", x}, {"result", pdist_reference(x, p)}});
      check_against_finite_differences(out, 0, [p](const std::vector<Tensor>& in) { return pdist_reference(in[0], p); },
                                       {x}, g);
    }
  }
  SUBCASE("against torch: p = 0, 1, 2, inf, fractional; equal rows, ties, equal coordinates") {
    const Tensor edges = cat({x1_with_edges(), x2_with_edges()}, 0);  // rows 0 and 4 are equal
    for (const double p : {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, kInf}) {
      for (const DType dtype : {DType::Float64, DType::Float32}) {
        for (const Tensor& input : {x, edges, random64({1, 3}, 922), random64({2, 1}, 923)}) {
          CAPTURE(p);
          CAPTURE(dtype_name(dtype));
          CAPTURE(input.sizes());
          const auto r = torch_node_call(
              "PdistBackward0", "x = a.requires_grad_()\nout = F.pdist(x, p=" + p_text(p) + ")", "fn._saved_result",
              "(fn._saved_self, fn._saved_result, torch.tensor(fn._saved_p, dtype=torch.float64))", {input.to(dtype)});
          const Grads out = call_node("PdistBackward0", {r[3]}, {true},
                                      Saved{{"p", r[2].item<double>()}, {"self", r[0]}, {"result", r[1]}});
          REQUIRE(out[0].has_value());
          CHECK(out[0]->dtype() == dtype);
          CHECK_TENSOR(*out[0], r[4], rtol_of(dtype), rtol_of(dtype) * 1e-2);
        }
      }
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"p", 2.0}, {"self", x}, {"result", pdist_reference(x, 2.0)}};
    CHECK_FALSE(call_node("PdistBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("PdistBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("errors") {
    const Saved saved = {{"p", 2.0}, {"self", x}, {"result", pdist_reference(x, 2.0)}};
    CHECK_THROWS_WITH_AS(call_node("PdistBackward0", {random64({9}, 924)}, {true}, saved),
                         "PdistBackward0: grad [9] and result [10] must be [10] (one per pair of the 5 rows of self [5,3])",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("PdistBackward0", {g}, {true}, Saved{{"p", 2.0}, {"self", random64({10}, 925)},
                                                                         {"result", pdist_reference(x, 2.0)}}),
                         "PdistBackward0: self must be [n, m], got [10]", Error);
  }
}

}  // TEST_SUITE
