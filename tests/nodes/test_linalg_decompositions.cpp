// Suite "nodes", the linalg decompositions: svd, inv, pinv, qr, lu, solve, cholesky, eigh, eig, det,
// slogdet, the triangular and LU solves, cross.
//
// Each case runs a forward in torch (tests/nodes/linalg_cases.py) on float64 or complex128 leaves and
// feeds the node the `_saved_*` values of the real grad_fn and the grads that reach it; the node's
// grads are checked against torch's own and against finite differences of torch's forward (the
// independent truth). A decomposition defined up to signs or phases is normalized before the loss.
#include <functional>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

struct TorchCase {
  std::vector<Tensor> saved;               // the requested fields, in order
  Grads grads;                             // what reaches the node (undefined where the loss reads no output)
  std::vector<Tensor> torch_grads;         // torch's grads of the loss, one per leaf
  std::vector<Tensor> finite_differences;  // the loss's, one per leaf
};

// `call` is Python that sets `result = case(...)` (linalg_cases.case), after `setup`.
TorchCase torch_case(const std::string& setup, const std::string& call, std::size_t num_fields,
                     std::size_t num_outputs, std::size_t num_inputs) {
  const std::vector<Tensor> r =
      torch_exec("from nodes.linalg_cases import *\ntorch.manual_seed(0)\n" + setup + "\nresult = " + call);
  REQUIRE(r.size() == num_fields + 1 + num_outputs + 2 * num_inputs);
  TorchCase c;
  c.saved.assign(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(num_fields));
  const std::vector<bool> used = r[num_fields].to_vector<bool>();
  for (std::size_t o = 0; o < num_outputs; ++o)
    c.grads.push_back(used[o] ? OptionalTensor(r[num_fields + 1 + o]) : std::nullopt);
  const std::size_t first_grad = num_fields + 1 + num_outputs;
  c.torch_grads.assign(r.begin() + static_cast<std::ptrdiff_t>(first_grad),
                       r.begin() + static_cast<std::ptrdiff_t>(first_grad + num_inputs));
  c.finite_differences.assign(r.begin() + static_cast<std::ptrdiff_t>(first_grad + num_inputs), r.end());
  return c;
}

using Project = std::function<Tensor(std::size_t input, const Tensor& grad)>;

// The node's grads (summed back to each leaf's shape, as validate does, and projected where the forward
// read only part of an input) against torch's and against the finite differences.
void check_case(const char* node, const TorchCase& c, const Saved& saved, const Need& need,
                const Project& project = nullptr) {
  const Grads out = call_node(node, c.grads, need, saved);
  REQUIRE(out.size() == need.size());
  for (std::size_t k = 0; k < need.size(); ++k) {
    INFO("k = ", k);
    if (!need[k]) {
      CHECK_FALSE(out[k].has_value());
      continue;
    }
    REQUIRE(out[k].has_value());
    Tensor got = sum_to(*out[k], c.torch_grads[k].sizes());
    if (project) got = project(k, got);
    CHECK_TENSOR(got, c.torch_grads[k], 1e-6, 1e-8);
    CHECK_TENSOR(got, c.finite_differences[k], kGradcheckRtol, kGradcheckAtol);
  }
}

bool flag(const Tensor& t) { return t.item<bool>(); }
std::int64_t integer(const Tensor& t) { return t.item<std::int64_t>(); }

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("LinalgSvdBackward0") {
  struct Case {
    const char* A;
    bool full_matrices;
    const char* used;
  };
  const Case cases[] = {
      {"torch.randn(3, 3, dtype=torch.float64)", false, "None"},
      {"torch.randn(2, 4, 3, dtype=torch.float64)", false, "None"},             // tall, batched
      {"torch.randn(3, 5, dtype=torch.float64)", false, "[True, True, False]"},  // wide, no grad_Vh
      {"torch.randn(3, 5, dtype=torch.float64)", false, "[False, False, True]"}, // wide, grad_Vh only
      {"torch.randn(5, 3, dtype=torch.float64)", false, "[True, False, False]"}, // tall, grad_U only
      {"torch.randn(4, 3, dtype=torch.float64)", true, "None"},
      {"torch.randn(3, 4, dtype=torch.float64)", true, "None"},
      {"torch.randn(2, 3, 4, dtype=torch.float64)", false, "[False, True, False]"},  // svdvals
      {"torch.randn(3, 3, dtype=torch.complex128)", false, "None"},
      {"torch.randn(3, 4, dtype=torch.complex128)", true, "None"},
      {"torch.randn(4, 2, dtype=torch.complex128)", false, "[True, True, False]"},
  };
  for (const Case& k : cases) {
    INFO("k.A = ", k.A);
    INFO("k.used = ", k.used);
    const std::string full = k.full_matrices ? "True" : "False";
    const TorchCase c = torch_case(std::string("A = ") + k.A,
                                   "case(lambda A: torch.linalg.svd(A, full_matrices=" + full + "), [A], "
                                   "'LinalgSvdBackward0', ['full_matrices', 'S', 'S_sym_argsize_minus_1', 'U', 'Vh'], "
                                   "used=" + k.used + ", normalize=fix_svd)",
                                   5, 3, 1);
    CHECK(flag(c.saved[0]) == k.full_matrices);
    const Saved saved = {{"full_matrices", flag(c.saved[0])}, {"S", c.saved[1]},
                         {"S_sym_argsize_minus_1", integer(c.saved[2])}, {"U", c.saved[3]}, {"Vh", c.saved[4]}};
    check_case("LinalgSvdBackward0", c, saved, {true});
  }
  SUBCASE("no grad reaches it, or none is needed") {
    const Tensor A = random64({3, 3}, 1);
    const auto r = torch_eval("torch.linalg.svd(a)", {A});
    const Saved saved = {{"full_matrices", false}, {"S", r[1]}, {"S_sym_argsize_minus_1", std::int64_t{3}},
                         {"U", r[0]}, {"Vh", r[2]}};
    CHECK_FALSE(call_node("LinalgSvdBackward0", {std::nullopt, std::nullopt, std::nullopt}, {true}, saved)[0]);
    CHECK_FALSE(call_node("LinalgSvdBackward0", {r[0], r[1], r[2]}, {false}, saved)[0]);
  }
  SUBCASE("errors: a phase-dependent complex loss, grads of the wrong shape") {
    const Tensor A = to(random64({3, 3}, 2), DType::ComplexDouble);
    const auto r = torch_eval("torch.linalg.svd(a)", {A});
    const Saved saved = {{"full_matrices", false}, {"S", r[1]}, {"S_sym_argsize_minus_1", std::int64_t{3}},
                         {"U", r[0]}, {"Vh", r[2]}};
    // grad_U = i U changes with the phases of U's columns: torch refuses it, and so does refgrad.
    const Tensor gU = complex(neg(imag(r[0])), real(r[0]));
    CHECK_THROWS_WITH_AS(call_node("LinalgSvdBackward0", {gU, std::nullopt, std::nullopt}, {true}, saved),
                         doctest::Contains("specified up to multiplication by e^{i phi}"), Error);
    CHECK_THROWS_WITH_AS(call_node("LinalgSvdBackward0", {std::nullopt, random64({2}, 3), std::nullopt}, {true},
                                   saved),
                         doctest::Contains("LinalgSvdBackward0: grad_S has shape [2] but S has shape [3]"), Error);
  }
}

TEST_CASE("LinalgInvExBackward0") {
  for (const char* A : {"torch.randn(3, 3, dtype=torch.float64) + 3 * torch.eye(3)",
                        "torch.randn(2, 4, 4, dtype=torch.float64) + 4 * torch.eye(4)",
                        "torch.randn(3, 3, dtype=torch.complex128) + 3 * torch.eye(3)"}) {
    INFO("A = ", A);
    const TorchCase c = torch_case(std::string("A = ") + A,
                                   "case(lambda A: torch.linalg.inv_ex(A).inverse, [A], 'LinalgInvExBackward0', "
                                   "['inverse'])",
                                   1, 1, 1);
    check_case("LinalgInvExBackward0", c, {{"inverse", c.saved[0]}}, {true});
  }
  CHECK_THROWS_WITH_AS(call_node("LinalgInvExBackward0", {random64({2, 2}, 1)}, {true},
                                 Saved{{"inverse", random64({3, 3}, 2)}}),
                       "LinalgInvExBackward0: grad has shape [2,2] but inverse has shape [3,3]", Error);
}

TEST_CASE("LinalgPinvBackward0") {
  for (const char* A : {"torch.randn(3, 5, dtype=torch.float64)", "torch.randn(2, 5, 3, dtype=torch.float64)",
                        "torch.randn(4, 4, dtype=torch.float64)", "torch.randn(3, 4, dtype=torch.complex128)",
                        "torch.randn(4, 2, dtype=torch.complex128)"}) {
    INFO("A = ", A);
    const TorchCase c = torch_case(std::string("A = ") + A,
                                   "case(lambda A: torch.linalg.pinv(A), [A], 'LinalgPinvBackward0', ['self', 'result'])",
                                   2, 1, 1);
    check_case("LinalgPinvBackward0", c, {{"self", c.saved[0]}, {"result", c.saved[1]}}, {true});
  }
}

TEST_CASE("LinalgQrBackward0") {
  struct Case {
    const char* A;
    const char* mode;
    const char* used;
  };
  const Case cases[] = {
      {"torch.randn(5, 3, dtype=torch.float64)", "reduced", "None"},
      {"torch.randn(2, 3, 3, dtype=torch.float64)", "reduced", "[True, False]"},
      {"torch.randn(4, 3, dtype=torch.float64)", "reduced", "[False, True]"},
      {"torch.randn(3, 5, dtype=torch.float64)", "reduced", "None"},  // wide
      {"torch.randn(3, 5, dtype=torch.float64)", "complete", "[True, False]"},
      {"torch.randn(3, 5, dtype=torch.float64)", "reduced", "[False, True]"},
      {"torch.randn(4, 3, dtype=torch.complex128)", "reduced", "None"},
      {"torch.randn(2, 4, dtype=torch.complex128)", "reduced", "None"},
  };
  for (const Case& k : cases) {
    INFO("k.A = ", k.A);
    INFO("k.mode = ", k.mode);
    INFO("k.used = ", k.used);
    const TorchCase c = torch_case(std::string("A = ") + k.A,
                                   std::string("case(lambda A: torch.linalg.qr(A, mode='") + k.mode +
                                       "'), [A], 'LinalgQrBackward0', ['Q', 'R'], used=" + k.used + ")",
                                   2, 2, 1);
    check_case("LinalgQrBackward0", c, {{"mode", std::string(k.mode)}, {"Q", c.saved[0]}, {"R", c.saved[1]}}, {true});
  }
  SUBCASE("modes it cannot differentiate") {
    const auto r = torch_eval("torch.linalg.qr(a, mode='complete')", {random64({4, 3}, 1)});
    CHECK_THROWS_WITH_AS(call_node("LinalgQrBackward0", {r[0], std::nullopt}, {true},
                                   Saved{{"mode", std::string("complete")}, {"Q", r[0]}, {"R", r[1]}}),
                         doctest::Contains("not differentiable when mode='complete' and nrows > ncols"), Error);
    CHECK_THROWS_WITH_AS(call_node("LinalgQrBackward0", {std::nullopt, r[1]}, {true},
                                   Saved{{"mode", std::string("r")}, {"Q", r[0]}, {"R", r[1]}}),
                         doctest::Contains("which is not computed when mode='r'"), Error);
  }
}

TEST_CASE("LinalgLuFactorExBackward0") {
  for (const char* A : {"torch.randn(3, 3, dtype=torch.float64)", "torch.randn(2, 5, 3, dtype=torch.float64)",
                        "torch.randn(3, 5, dtype=torch.float64)", "torch.randn(3, 3, dtype=torch.complex128)",
                        "torch.randn(4, 2, dtype=torch.complex128)"}) {
    INFO("A = ", A);
    const TorchCase c = torch_case(std::string("A = ") + A,
                                   "case(lambda A: torch.linalg.lu_factor_ex(A).LU, [A], 'LinalgLuFactorExBackward0', "
                                   "['pivot', 'LU', 'pivots'])",
                                   3, 1, 1);
    check_case("LinalgLuFactorExBackward0", c,
               {{"pivot", flag(c.saved[0])}, {"LU", c.saved[1]}, {"pivots", c.saved[2]}}, {true});
  }
}

TEST_CASE("LinalgLuBackward0") {
  struct Case {
    const char* A;
    const char* used;
  };
  const Case cases[] = {{"torch.randn(3, 3, dtype=torch.float64)", "None"},
                        {"torch.randn(2, 5, 3, dtype=torch.float64)", "[False, True, True]"},
                        {"torch.randn(3, 5, dtype=torch.float64)", "[False, True, True]"},
                        {"torch.randn(5, 3, dtype=torch.float64)", "[False, False, True]"},
                        {"torch.randn(3, 5, dtype=torch.float64)", "[False, True, False]"},
                        {"torch.randn(3, 4, dtype=torch.complex128)", "None"}};
  for (const Case& k : cases) {
    INFO("k.A = ", k.A);
    INFO("k.used = ", k.used);
    // P is not differentiable: the loss's weight on it never reaches the node.
    const TorchCase c = torch_case(std::string("A = ") + k.A,
                                   std::string("case(lambda A: torch.linalg.lu(A)[1:], [A], 'LinalgLuBackward0', "
                                               "['pivot', 'L', 'P', 'U'], used=") + k.used + "[1:] if " + k.used +
                                       " else None)",
                                   4, 2, 1);
    check_case("LinalgLuBackward0", c,
               {{"pivot", flag(c.saved[0])}, {"L", c.saved[1]}, {"P", c.saved[2]}, {"U", c.saved[3]}}, {true});
  }
}

TEST_CASE("LinalgSolveExBackward0") {
  struct Case {
    const char* setup;
    const char* forward;
  };
  const Case cases[] = {
      {"A = torch.randn(3, 3, dtype=torch.float64); B = torch.randn(3, 2, dtype=torch.float64)",
       "lambda A, B: torch.linalg.solve(A, B)"},
      {"A = torch.randn(3, 3, dtype=torch.float64); B = torch.randn(3, dtype=torch.float64)",
       "lambda A, B: torch.linalg.solve(A, B)"},  // a vector B
      {"A = torch.randn(3, 3, dtype=torch.float64); B = torch.randn(2, 3, dtype=torch.float64)",
       "lambda A, B: torch.linalg.solve(A, B, left=False)"},
      {"A = torch.randn(2, 3, 3, dtype=torch.float64); B = torch.randn(3, 4, dtype=torch.float64)",
       "lambda A, B: torch.linalg.solve(A, B)"},  // B broadcast over A's batch
      {"A = torch.randn(3, 3, dtype=torch.float64); B = torch.randn(3, 2, dtype=torch.float64)",
       "lambda A, B: torch.linalg.solve(A.mT, B)"},  // a transposed A: torch factors A itself, not A^T
      {"A = torch.randn(3, 3, dtype=torch.complex128); B = torch.randn(3, 2, dtype=torch.complex128)",
       "lambda A, B: torch.linalg.solve(A, B)"},
  };
  for (const Case& k : cases) {
    INFO("k.setup = ", k.setup);
    INFO("k.forward = ", k.forward);
    const TorchCase c = torch_case(k.setup,
                                   std::string("case(") + k.forward + ", [A, B], 'LinalgSolveExBackward0', "
                                   "['A', 'left', 'LU', 'pivots', 'result'])",
                                   5, 1, 2);
    const Saved saved = {{"A", c.saved[0]}, {"left", flag(c.saved[1])}, {"LU", c.saved[2]}, {"pivots", c.saved[3]},
                         {"result", c.saved[4]}};
    const Project transposed = [&](std::size_t k_input, const Tensor& g) {  // the leaf is A^T's
      return std::string(k.forward).find("A.mT") != std::string::npos && k_input == 0 ? transpose(g, -2, -1) : g;
    };
    check_case("LinalgSolveExBackward0", c, saved, {true, true}, transposed);
    check_case("LinalgSolveExBackward0", c, saved, {false, true}, transposed);
  }
}

TEST_CASE("LinalgCholeskyExBackward0") {
  // cholesky reads one triangle; the forward symmetrizes its input so that the loss is a function of every
  // entry (and the grad of A, Hermitian, equals the grad of the leaf).
  for (const char* upper : {"False", "True"})
    for (const char* dtype : {"torch.float64", "torch.complex128"}) {
      INFO("upper = ", upper);
      INFO("dtype = ", dtype);
      const TorchCase c = torch_case(std::string("X = torch.randn(2, 3, 3, dtype=") + dtype +
                                         "); A = X @ X.mH + 3 * torch.eye(3)",
                                     std::string("case(lambda A: torch.linalg.cholesky_ex((A + A.mH) / 2, upper=") +
                                         upper + ").L, [A], 'LinalgCholeskyExBackward0', ['upper', 'L'])",
                                     2, 1, 1);
      check_case("LinalgCholeskyExBackward0", c, {{"upper", flag(c.saved[0])}, {"L", c.saved[1]}}, {true});
    }
}

TEST_CASE("CholeskyBackward0") {
  const TorchCase c = torch_case("X = torch.randn(3, 3, dtype=torch.float64); A = X @ X.mT + 3 * torch.eye(3)",
                                 "case(lambda A: torch.cholesky((A + A.mT) / 2, upper=True), [A], "
                                 "'CholeskyBackward0', ['upper', 'result'])",
                                 2, 1, 1);
  check_case("CholeskyBackward0", c, {{"upper", flag(c.saved[0])}, {"result", c.saved[1]}}, {true});
}

TEST_CASE("LinalgEighBackward0") {
  for (const char* dtype : {"torch.float64", "torch.complex128"})
    for (const char* used : {"None", "[True, False]", "[False, True]"}) {
      INFO("dtype = ", dtype);
      INFO("used = ", used);
      const TorchCase c = torch_case(std::string("A = torch.randn(2, 4, 4, dtype=") + dtype + ")",
                                     std::string("case(lambda A: torch.linalg.eigh((A + A.mH) / 2), [A], "
                                                 "'LinalgEighBackward0', ['eigenvalues', 'eigenvectors'], used=") +
                                         used + ", normalize=fix_eig)",
                                     2, 2, 1);
      check_case("LinalgEighBackward0", c, {{"eigenvalues", c.saved[0]}, {"eigenvectors", c.saved[1]}}, {true});
    }
}

TEST_CASE("LinalgEigBackward0") {
  for (const char* dtype : {"torch.float64", "torch.complex128"})
    for (const char* used : {"None", "[True, False]"}) {
      INFO("dtype = ", dtype);
      INFO("used = ", used);
      const TorchCase c = torch_case(std::string("A = torch.randn(3, 3, dtype=") + dtype + ")",
                                     std::string("case(lambda A: torch.linalg.eig(A), [A], 'LinalgEigBackward0', "
                                                 "['eigenvalues', 'eigenvectors'], used=") +
                                         used + ", normalize=fix_eig)",
                                     2, 2, 1);
      const DType self_dtype = std::string(dtype) == "torch.float64" ? DType::Float64 : DType::ComplexDouble;
      check_case("LinalgEigBackward0", c,
                 {{"self_scalar_type", self_dtype}, {"eigenvalues", c.saved[0]}, {"eigenvectors", c.saved[1]}},
                 {true});
    }
}

TEST_CASE("LinalgSlogdetBackward0") {
  for (const char* forward : {"lambda A: torch.linalg.slogdet(A)", "lambda A: torch.linalg.slogdet(A.mT)"})
    for (const char* dtype : {"torch.float64", "torch.complex128"}) {
      INFO("forward = ", forward);
      INFO("dtype = ", dtype);
      const TorchCase c = torch_case(std::string("A = torch.randn(2, 3, 3, dtype=") + dtype + ")",
                                     std::string("case(") + forward + ", [A], 'LinalgSlogdetBackward0', "
                                     "['A', 'LU', 'pivots', 'sign'])",
                                     4, 2, 1);
      const Project transposed = [&](std::size_t, const Tensor& g) {
        return std::string(forward).find("A.mT") != std::string::npos ? transpose(g, -2, -1) : g;
      };
      check_case("LinalgSlogdetBackward0", c,
                 {{"A", c.saved[0]}, {"LU", c.saved[1]}, {"pivots", c.saved[2]}, {"sign", c.saved[3]}}, {true},
                 transposed);
    }
}

TEST_CASE("LinalgDetBackward0") {
  for (const char* A : {"torch.randn(3, 3, dtype=torch.float64)", "torch.randn(2, 4, 4, dtype=torch.float64)",
                        "torch.randn(3, 3, dtype=torch.complex128)"}) {
    INFO("A = ", A);
    const TorchCase c = torch_case(std::string("A = ") + A,
                                   "case(lambda A: torch.linalg.det(A), [A], 'LinalgDetBackward0', "
                                   "['A', 'LU', 'pivots', 'result'])",
                                   4, 1, 1);
    check_case("LinalgDetBackward0", c,
               {{"A", c.saved[0]}, {"LU", c.saved[1]}, {"pivots", c.saved[2]}, {"result", c.saved[3]}}, {true});
  }
  SUBCASE("a singular matrix: torch's eps in U's zero pivot") {
    // det is 0, so torch's grad is 0 too: conj(det) grad A^{-H}, with U's zero replaced by eps.
    const auto r = torch_exec(R"(
A = torch.tensor([[1., 2., 3.], [2., 4., 6.], [1., 0., 1.]], dtype=torch.float64, requires_grad=True)
d = torch.linalg.det(A)
fn = d.grad_fn
result = (fn._saved_A, fn._saved_LU, fn._saved_pivots, fn._saved_result, *torch.autograd.grad(d, A, torch.tensor(2.0, dtype=torch.float64)))
)");
    const Grads out = call_node("LinalgDetBackward0", {full({}, 2.0, DType::Float64)}, {true},
                                Saved{{"A", r[0]}, {"LU", r[1]}, {"pivots", r[2]}, {"result", r[3]}});
    CHECK_TENSOR(*out[0], r[4], 1e-6, 1e-12);
  }
  SUBCASE("an LU that factors neither A nor A^T is refused, not given an orientation") {
    const auto r = torch_exec(R"(
A = torch.tensor([[4., 1., 2.], [0., 3., 1.], [2., 5., 6.]], dtype=torch.float64, requires_grad=True)
d = torch.linalg.det(A)
fn = d.grad_fn
other = torch.linalg.lu_factor(torch.tensor([[1., 7., 2.], [3., 3., 9.], [8., 5., 6.]], dtype=torch.float64))
result = (fn._saved_A, other.LU, other.pivots, fn._saved_result)
)");
    CHECK_THROWS_WITH_AS(call_node("LinalgDetBackward0", {full({}, 1.0, DType::Float64)}, {true},
                                   Saved{{"A", r[0]}, {"LU", r[1]}, {"pivots", r[2]}, {"result", r[3]}}),
                         doctest::Contains("the saved LU and pivots factor neither A nor A^T"), Error);
  }
}

TEST_CASE("LinalgLuSolveBackward0") {
  for (const char* left : {"True", "False"})
    for (const char* adjoint : {"False", "True"})
      for (const char* dtype : {"torch.float64", "torch.complex128"}) {
        INFO("left = ", left);
        INFO("adjoint = ", adjoint);
        INFO("dtype = ", dtype);
        const std::string B_shape = std::string(left) == "True" ? "(3, 2)" : "(2, 3)";
        const TorchCase c = torch_case(std::string("LU, pivots = torch.linalg.lu_factor(torch.randn(3, 3, dtype=") +
                                           dtype + ")); B = torch.randn" + B_shape + ".to(" + dtype + ")",
                                       std::string("case(lambda LU, B: torch.linalg.lu_solve(LU, pivots, B, left=") +
                                           left + ", adjoint=" + adjoint + "), [LU, B], 'LinalgLuSolveBackward0', "
                                           "['LU', 'adjoint', 'left', 'pivots', 'result'])",
                                       5, 1, 2);
        const Saved saved = {{"LU", c.saved[0]}, {"adjoint", flag(c.saved[1])}, {"left", flag(c.saved[2])},
                             {"pivots", c.saved[3]}, {"result", c.saved[4]}};
        check_case("LinalgLuSolveBackward0", c, saved, {true, true});
        check_case("LinalgLuSolveBackward0", c, saved, {false, true});
      }
}

TEST_CASE("LuUnpackBackward0") {
  struct Case {
    const char* shape;
    const char* used;
  };
  const Case cases[] = {{"3, 3", "None"}, {"2, 5, 3", "None"}, {"3, 5", "None"}, {"5, 3", "[True, False]"},
                        {"3, 5", "[True, False]"}, {"5, 3", "[False, True]"}, {"3, 5", "[False, True]"}};
  for (const Case& k : cases) {
    INFO("k.shape = ", k.shape);
    INFO("k.used = ", k.used);
    const TorchCase c = torch_case(std::string("LU, pivots = torch.linalg.lu_factor(torch.randn(") + k.shape +
                                       ", dtype=torch.float64))",
                                   std::string("case(lambda LU: torch.lu_unpack(LU, pivots)[1:], [LU], "
                                               "'LuUnpackBackward0', ['LU_data_sym_argsize_minus_1', "
                                               "'LU_data_sym_argsize_minus_2'], used=") + k.used + ")",
                                   2, 2, 1);
    check_case("LuUnpackBackward0", c,
               {{"LU_data_sym_argsize_minus_1", integer(c.saved[0])},
                {"LU_data_sym_argsize_minus_2", integer(c.saved[1])}},
               {true});
  }
}

TEST_CASE("LinalgSolveTriangularBackward0") {
  for (const char* upper : {"True", "False"})
    for (const char* left : {"True", "False"})
      for (const char* unitriangular : {"False", "True"}) {
        INFO("upper = ", upper);
        INFO("left = ", left);
        INFO("unitriangular = ", unitriangular);
        const std::string B_shape = std::string(left) == "True" ? "(3, 2)" : "(2, 3)";
        const TorchCase c = torch_case(
            "A = torch.randn(3, 3, dtype=torch.complex128) + 3 * torch.eye(3); B = torch.randn" + B_shape +
                ".to(torch.complex128)",
            std::string("case(lambda A, B: torch.linalg.solve_triangular(A, B, upper=") + upper + ", left=" + left +
                ", unitriangular=" + unitriangular + "), [A, B], 'LinalgSolveTriangularBackward0', "
                "['left', 'self', 'unitriangular', 'upper', 'result'])",
            5, 1, 2);
        const Saved saved = {{"left", flag(c.saved[0])}, {"self", c.saved[1]},
                             {"unitriangular", flag(c.saved[2])}, {"upper", flag(c.saved[3])},
                             {"result", c.saved[4]}};
        check_case("LinalgSolveTriangularBackward0", c, saved, {true, true});
        check_case("LinalgSolveTriangularBackward0", c, saved, {true, false});
      }
}

TEST_CASE("TriangularSolveBackward0") {
  for (const char* upper : {"True", "False"})
    for (const char* transpose : {"False", "True"})
      for (const char* used : {"None", "[True, False]", "[False, True]"}) {
        INFO("upper = ", upper);
        INFO("transpose = ", transpose);
        INFO("used = ", used);
        const TorchCase c = torch_case(
            "A = torch.randn(2, 3, 3, dtype=torch.complex128) + 3 * torch.eye(3); "
            "B = torch.randn(2, 3, 2, dtype=torch.complex128)",
            std::string("case(lambda B, A: torch.triangular_solve(B, A, upper=") + upper + ", transpose=" + transpose +
                "), [B, A], 'TriangularSolveBackward0', ['A', 'self', 'transpose', 'unitriangular', 'upper', "
                "'solution'], used=" + used + ")",
            6, 2, 2);
        const Saved saved = {{"A", c.saved[0]}, {"self", c.saved[1]}, {"transpose", flag(c.saved[2])},
                             {"unitriangular", flag(c.saved[3])}, {"upper", flag(c.saved[4])},
                             {"solution", c.saved[5]}};
        check_case("TriangularSolveBackward0", c, saved, {true, true});
      }
}

TEST_CASE("CholeskySolveBackward0") {
  // cholesky_solve reads one triangle of its factor: the forward takes the leaf's triangle, and the node's
  // grad of input2 is compared on that triangle.
  for (const char* dtype : {"torch.float64", "torch.complex128"}) {
    INFO("dtype = ", dtype);
    const TorchCase c = torch_case(std::string("X = torch.randn(3, 3, dtype=") + dtype + "); L = torch.linalg."
                                       "cholesky(X @ X.mH + 3 * torch.eye(3)); B = torch.randn(3, 2, dtype=" + dtype +
                                       ")",
                                   "case(lambda B, L: torch.cholesky_solve(B, L.tril()), [B, L], "
                                   "'CholeskySolveBackward0', ['input2', 'self', 'upper', 'result'])",
                                   4, 1, 2);
    const Saved saved = {{"input2", c.saved[0]}, {"self", c.saved[1]}, {"upper", flag(c.saved[2])},
                         {"result", c.saved[3]}};
    check_case("CholeskySolveBackward0", c, saved, {true, true},
               [](std::size_t k, const Tensor& g) { return k == 1 ? tril(g) : g; });
  }
}

TEST_CASE("CholeskyInverseBackward0") {
  for (const char* upper : {"False", "True"}) {
    INFO("upper = ", upper);
    const std::string triangle = std::string(upper) == "True" ? "triu" : "tril";
    const TorchCase c = torch_case("X = torch.randn(3, 3, dtype=torch.float64); L = torch.linalg.cholesky("
                                   "X @ X.mT + 3 * torch.eye(3), upper=" + std::string(upper) + ")",
                                   "case(lambda L: torch.cholesky_inverse(L." + triangle + "(), upper=" + upper +
                                       "), [L], 'CholeskyInverseBackward0', ['self', 'upper', 'result'])",
                                   3, 1, 1);
    check_case("CholeskyInverseBackward0", c,
               {{"self", c.saved[0]}, {"upper", flag(c.saved[1])}, {"result", c.saved[2]}}, {true},
               [&](std::size_t, const Tensor& g) { return triangle == "triu" ? triu(g) : tril(g); });
  }
}

TEST_CASE("LinalgLstsqBackward0") {
  struct Case {
    const char* setup;
    const char* forward;
  };
  const Case cases[] = {
      // gelsd computes the residuals of a tall full-rank A; both outputs reach the node
      {"A = torch.randn(5, 3, dtype=torch.float64); B = torch.randn(5, 2, dtype=torch.float64)",
       "lambda A, B: torch.linalg.lstsq(A, B, driver='gelsd')[:2]"},
      {"A = torch.randn(2, 3, 5, dtype=torch.float64); B = torch.randn(2, 3, 2, dtype=torch.float64)",
       "lambda A, B: torch.linalg.lstsq(A, B)[:1]"},  // wide
      {"A = torch.randn(4, 3, dtype=torch.float64); B = torch.randn(4, dtype=torch.float64)",
       "lambda A, B: torch.linalg.lstsq(A, B)[:1]"},  // a vector b
      {"A = torch.randn(4, 3, dtype=torch.complex128); B = torch.randn(4, 2, dtype=torch.complex128)",
       "lambda A, B: torch.linalg.lstsq(A, B, driver='gelsd')[:2]"},
  };
  for (const Case& k : cases) {
    INFO("k.setup = ", k.setup);
    INFO("k.forward = ", k.forward);
    const bool residuals = std::string(k.forward).find("[:2]") != std::string::npos;
    const TorchCase c = torch_case(k.setup,
                                   std::string("case(") + k.forward + ", [A, B], 'LinalgLstsqBackward0', "
                                   "['b', 'self', 'solution'])",
                                   3, residuals ? 2 : 1, 2);
    TorchCase with_both = c;
    if (!residuals) with_both.grads.push_back(std::nullopt);  // no grad reaches the residuals
    const Saved saved = {{"b", c.saved[0]}, {"self", c.saved[1]}, {"solution", c.saved[2]}};
    check_case("LinalgLstsqBackward0", with_both, saved, {true, true});
    check_case("LinalgLstsqBackward0", with_both, saved, {false, true});
  }
}

TEST_CASE("LinalgMatrixExpBackward0") {
  for (const char* A : {"torch.randn(3, 3, dtype=torch.float64) / 4", "4 * torch.randn(2, 3, 3, dtype=torch.float64)",
                        "torch.randn(3, 3, dtype=torch.complex128)"}) {  // the second one is scaled and squared
    INFO("A = ", A);
    const TorchCase c = torch_case(std::string("A = ") + A,
                                   "case(lambda A: torch.linalg.matrix_exp(A), [A], 'LinalgMatrixExpBackward0', "
                                   "['self'])",
                                   1, 1, 1);
    check_case("LinalgMatrixExpBackward0", c, {{"self", c.saved[0]}}, {true});
  }
}

TEST_CASE("LinalgHouseholderProductBackward0") {
  for (const char* setup : {"input, tau = torch.geqrf(torch.randn(5, 3, dtype=torch.float64))",
                            "input, tau = torch.geqrf(torch.randn(2, 4, 4, dtype=torch.float64)); tau = tau[..., :3]",
                            "input, tau = torch.geqrf(torch.randn(4, 3, dtype=torch.complex128))"}) {
    INFO("setup = ", setup);
    const TorchCase c = torch_case(setup,
                                   "case(lambda input, tau: torch.linalg.householder_product(input, tau), [input, tau], "
                                   "'LinalgHouseholderProductBackward0', ['input', 'tau', 'result'])",
                                   3, 1, 2);
    const Saved saved = {{"input", c.saved[0]}, {"tau", c.saved[1]}, {"result", c.saved[2]}};
    check_case("LinalgHouseholderProductBackward0", c, saved, {true, true});
    check_case("LinalgHouseholderProductBackward0", c, saved, {false, true});
  }
}

TEST_CASE("OrmqrBackward0") {
  for (const char* left : {"True", "False"})
    for (const char* transpose : {"False", "True"})
      for (const char* dtype : {"torch.float64", "torch.complex128"}) {
        INFO("left = ", left);
        INFO("transpose = ", transpose);
        INFO("dtype = ", dtype);
        const std::string other_shape = std::string(left) == "True" ? "(4, 2)" : "(2, 4)";
        const TorchCase c = torch_case(std::string("input, tau = torch.geqrf(torch.randn(4, 3, dtype=") + dtype +
                                           ")); other = torch.randn" + other_shape + ".to(" + dtype + ")",
                                       std::string("case(lambda input, tau, other: torch.ormqr(input, tau, other, "
                                                   "left=") + left + ", transpose=" + transpose + "), "
                                       "[input, tau, other], 'OrmqrBackward0', ['input2', 'input3', 'left', 'self', "
                                       "'transpose', 'result'])",
                                       6, 1, 3);
        const Saved saved = {{"input2", c.saved[0]}, {"input3", c.saved[1]}, {"left", flag(c.saved[2])},
                             {"self", c.saved[3]}, {"transpose", flag(c.saved[4])}, {"result", c.saved[5]}};
        check_case("OrmqrBackward0", c, saved, {true, true, true});
        check_case("OrmqrBackward0", c, saved, {false, false, true});
      }
}

TEST_CASE("LinalgCrossBackward0") {
  for (const char* setup : {"a = torch.randn(4, 3, dtype=torch.float64); b = torch.randn(4, 3, dtype=torch.float64)",
                            "a = torch.randn(1, 3, dtype=torch.float64); b = torch.randn(5, 3, dtype=torch.float64)",
                            "a = torch.randn(3, 2, dtype=torch.complex128); b = torch.randn(3, 2, "
                            "dtype=torch.complex128)"}) {
    INFO("setup = ", setup);
    const std::string dim = std::string(setup).find("complex") != std::string::npos ? "0" : "-1";
    const TorchCase c = torch_case(setup,
                                   "case(lambda a, b: torch.linalg.cross(a, b, dim=" + dim + "), [a, b], "
                                   "'LinalgCrossBackward0', ['dim', 'other', 'self'])",
                                   3, 1, 2);
    const Saved saved = {{"dim", integer(c.saved[0])}, {"other", c.saved[1]}, {"self", c.saved[2]}};
    check_case("LinalgCrossBackward0", c, saved, {true, true});
    check_case("LinalgCrossBackward0", c, saved, {false, true});
  }
}

}  // TEST_SUITE
