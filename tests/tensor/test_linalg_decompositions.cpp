// Solves and factorizations: linalg_solve_triangular, linalg_lu_factor, linalg_lu_solve, lu_unpack,
// linalg_solve, linalg_svd, linalg_pinv, linalg_matrix_exp, linalg_cross, diagonal, diag_embed, mH,
// each against torch on the same inputs (batched, and complex where torch has it).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval;
using refgrad::testing::torch_eval1;

namespace {

Tensor random(const Shape& sizes, std::uint64_t seed, DType dtype = DType::Float64) {
  Generator generator(seed);
  if (dtype == DType::ComplexDouble || dtype == DType::ComplexFloat) {
    const DType part = dtype == DType::ComplexDouble ? DType::Float64 : DType::Float32;
    return complex(randn(sizes, generator, part), randn(sizes, generator, part));
  }
  return randn(sizes, generator, dtype);
}

// A well-conditioned square matrix: random plus 4 on the diagonal.
Tensor well_conditioned(const Shape& sizes, std::uint64_t seed, DType dtype = DType::Float64) {
  return add(random(sizes, seed, dtype), mul(diag_embed(ones({sizes.back()}, dtype)), Scalar(4.0)));
}

double rtol_of(DType dtype) { return dtype == DType::Float32 || dtype == DType::ComplexFloat ? 1e-4 : 1e-10; }

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("diagonal, diag_embed and mH") {
  const Tensor x = random({2, 3, 4}, 1, DType::ComplexDouble);
  CHECK_TENSOR(contiguous(diagonal(x, 0, -2, -1)), torch_eval1("a.diagonal(0, -2, -1)", {x}));
  CHECK_TENSOR(contiguous(diagonal(x, 1, 1, 2)), torch_eval1("a.diagonal(1, 1, 2)", {x}));
  CHECK_TENSOR(contiguous(diagonal(x, -1, 0, 2)), torch_eval1("a.diagonal(-1, 0, 2)", {x}));
  CHECK(diagonal(x, 0, -2, -1).storage() == x.storage());  // a view
  CHECK_TENSOR(diag_embed(x), torch_eval1("torch.diag_embed(a)", {x}));
  CHECK_TENSOR(contiguous(mH(x)), torch_eval1("a.mH", {x}));
  CHECK_THROWS_AS(diagonal(x, 0, 1, 1), Error);
}

TEST_CASE("linalg_solve_triangular") {
  for (const DType dtype : {DType::Float64, DType::Float32, DType::ComplexDouble})
    for (const bool upper : {true, false})
      for (const bool left : {true, false})
        for (const bool unit : {false, true}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(upper);
          CAPTURE(left);
          CAPTURE(unit);
          const Tensor A = well_conditioned({2, 3, 3}, 2, dtype);
          const Tensor B = left ? random({3, 2}, 3, dtype) : random({2, 1, 2, 3}, 3, dtype);  // B broadcasts
          const std::string flags = std::string(upper ? "True" : "False") + ", left=" + (left ? "True" : "False") +
                                    ", unitriangular=" + (unit ? "True" : "False");
          CHECK_TENSOR(linalg_solve_triangular(A, B, upper, left, unit),
                       torch_eval1("torch.linalg.solve_triangular(a, b, upper=" + flags + ")", {A, B}),
                       rtol_of(dtype), 1e-6);
        }
  CHECK_THROWS_WITH_AS(linalg_solve_triangular(random({3, 3}, 1), random({4, 2}, 2), true),
                       doctest::Contains("do not fit"), Error);
  CHECK_THROWS_WITH_AS(linalg_solve_triangular(random({3, 3}, 1, DType::Float16), random({3, 2}, 2, DType::Float16),
                                               true),
                       doctest::Contains("must be float32, float64, complex64 or complex128"), Error);
}

TEST_CASE("linalg_lu_factor, lu_unpack and linalg_lu_solve") {
  for (const DType dtype : {DType::Float64, DType::ComplexDouble, DType::Float32}) {
    CAPTURE(dtype_name(dtype));
    for (const Shape& shape : {Shape{2, 4, 4}, Shape{3, 5}, Shape{5, 3}}) {
      CAPTURE(str(shape));
      const Tensor A = random(shape, 4, dtype);
      const auto [LU, pivots] = linalg_lu_factor(A);
      const auto expected = torch_eval("torch.linalg.lu_factor(a)", {A});
      CHECK_TENSOR(LU, expected[0], rtol_of(dtype), 1e-6);
      CHECK_TENSOR(pivots, expected[1]);
      const auto [P, L, U] = lu_unpack(LU, pivots);
      const auto unpacked = torch_eval("torch.lu_unpack(a, b)", {LU, pivots});
      CHECK_TENSOR(P, unpacked[0]);
      CHECK_TENSOR(L, unpacked[1]);
      CHECK_TENSOR(U, unpacked[2]);
    }
    const Tensor A = well_conditioned({2, 3, 3}, 5, dtype);
    const auto [LU, pivots] = linalg_lu_factor(A);
    for (const bool left : {true, false})
      for (const bool adjoint : {false, true}) {
        CAPTURE(left);
        CAPTURE(adjoint);
        const Tensor B = left ? random({3, 2}, 6, dtype) : random({2, 3}, 6, dtype);
        const std::string flags = std::string("left=") + (left ? "True" : "False") +
                                  ", adjoint=" + (adjoint ? "True" : "False");
        CHECK_TENSOR(linalg_lu_solve(LU, pivots, B, left, adjoint),
                     torch_eval1("torch.linalg.lu_solve(a, b, c, " + flags + ").resolve_conj()", {LU, pivots, B}), rtol_of(dtype),
                     1e-6);
      }
  }
  const auto [LU, pivots] = linalg_lu_factor(random({3, 3}, 7));
  CHECK_THROWS_WITH_AS(linalg_lu_solve(LU, full({3}, 9, DType::Int32), random({3, 1}, 8)),
                       doctest::Contains("pivot 9 is out of range"), Error);
  CHECK_THROWS_WITH_AS(linalg_lu_solve(LU, full({2}, 1, DType::Int32), random({3, 1}, 8)),
                       doctest::Contains("do not fit LU"), Error);
}

TEST_CASE("linalg_solve") {
  for (const DType dtype : {DType::Float64, DType::ComplexDouble}) {
    CAPTURE(dtype_name(dtype));
    const Tensor A = well_conditioned({2, 3, 3}, 9, dtype);
    const Tensor B = random({2, 3, 4}, 10, dtype), b = random({2, 3}, 11, dtype), Bl = random({4, 3}, 12, dtype);
    CHECK_TENSOR(linalg_solve(A, B), torch_eval1("torch.linalg.solve(a, b)", {A, B}), 1e-10, 1e-12);
    CHECK_TENSOR(linalg_solve(A, b), torch_eval1("torch.linalg.solve(a, b)", {A, b}), 1e-10, 1e-12);  // vectors
    CHECK_TENSOR(linalg_solve(A, Bl, false), torch_eval1("torch.linalg.solve(a, b, left=False).resolve_conj()", {A, Bl}), 1e-10,
                 1e-12);
  }
}

TEST_CASE("linalg_svd and linalg_pinv") {
  for (const DType dtype : {DType::Float64, DType::Float32, DType::ComplexDouble, DType::ComplexFloat}) {
    CAPTURE(dtype_name(dtype));
    for (const Shape& shape : {Shape{2, 4, 3}, Shape{3, 5}, Shape{4, 4}}) {
      CAPTURE(str(shape));
      const Tensor A = random(shape, 13, dtype);
      for (const bool full_matrices : {false, true}) {
        const auto [U, S, Vh] = linalg_svd(A, full_matrices);
        const Tensor k = full({}, std::min(shape[shape.size() - 2], shape.back()), DType::Int64);
        // Singular vectors are defined up to a phase each: compare S, the product, and orthonormality.
        CHECK_TENSOR(S, torch_eval1("torch.linalg.svdvals(a)", {A}), rtol_of(dtype), 1e-6);
        const Tensor rebuilt = torch_eval1("(a[..., :c] * b.unsqueeze(-2).to(a.dtype)) @ d[..., :c, :]", {U, S, k, Vh});
        CHECK_TENSOR(rebuilt, A, rtol_of(dtype), 1e-5);
        const double off_identity = torch_eval1("(a.mH @ a - torch.eye(a.shape[-1], dtype=a.dtype)).abs().max()", {U})
                                        .item<double>();
        CHECK(off_identity < 1e-5);
      }
      CHECK_TENSOR(linalg_pinv(A), torch_eval1("torch.linalg.pinv(a)", {A}), rtol_of(dtype) * 10, 1e-5);
    }
  }
  // A rank-1 matrix: the zero singular values are cut off, as torch's default tolerance does.
  const Tensor rank_one = torch_eval1("torch.outer(torch.arange(1., 4., dtype=torch.float64), "
                                      "torch.arange(1., 5., dtype=torch.float64))");
  CHECK_TENSOR(linalg_pinv(rank_one), torch_eval1("torch.linalg.pinv(a)", {rank_one}), 1e-10, 1e-12);
}

TEST_CASE("linalg_matrix_exp") {
  for (const DType dtype : {DType::Float64, DType::Float32, DType::ComplexDouble}) {
    CAPTURE(dtype_name(dtype));
    const Tensor small = mul(random({2, 3, 3}, 14, dtype), Scalar(0.1)), large = mul(random({3, 3}, 15, dtype), Scalar(5.0));
    CHECK_TENSOR(linalg_matrix_exp(small), torch_eval1("torch.linalg.matrix_exp(a)", {small}), rtol_of(dtype), 1e-6);
    CHECK_TENSOR(linalg_matrix_exp(large), torch_eval1("torch.linalg.matrix_exp(a)", {large}), rtol_of(dtype) * 10,
                 1e-5);
  }
  // float16 computes in float32, rounded once (torch's own float16 kernel gives NaN here)
  const Tensor half = to(random({3, 3}, 16), DType::Float16);
  CHECK_TENSOR(linalg_matrix_exp(half), torch_eval1("torch.linalg.matrix_exp(a.float()).half()", {half}), 1e-3, 1e-3);
}

TEST_CASE("linalg_cross") {
  const Tensor a = random({4, 3}, 17), b = random({1, 3}, 18);
  CHECK_TENSOR(linalg_cross(a, b), torch_eval1("torch.linalg.cross(a, b)", {a, b}));
  const Tensor c = random({3, 2}, 19, DType::ComplexDouble), d = random({3, 2}, 20, DType::ComplexDouble);
  CHECK_TENSOR(linalg_cross(c, d, 0), torch_eval1("torch.linalg.cross(a, b, dim=0)", {c, d}));
  const Tensor h = to(a, DType::Float16), g = to(b, DType::Float16);
  CHECK_TENSOR(linalg_cross(h, g), torch_eval1("torch.linalg.cross(a, b)", {h, g}));
  // 0-d inputs (a fuzzer's reproducer reached them through LinalgCrossBackward0): an error, not an out-of-range read
  CHECK_THROWS_WITH_AS(linalg_cross(random({}, 1), random({}, 2)), doctest::Contains("at least one dimension"),
                       Error);
  CHECK_THROWS_WITH_AS(linalg_cross(random({4, 2}, 1), random({4, 2}, 2)), doctest::Contains("must have length 3"),
                       Error);
}

}  // TEST_SUITE
