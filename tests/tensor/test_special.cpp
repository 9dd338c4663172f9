// Special functions: i0, special_i0e, special_i1, special_i1e, erfinv, special_erfcx, special_ndtri and
// special_log_ndtr, against mpmath at 40 digits in float64 (an independent truth), against torch in
// every dtype torch computes them in, and at hand-checked points (zeros, infinities, NaN, poles).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// f(x) for each x by mpmath at 40 digits, rounded to float64; `function` is a Python expression in
// mpmath's v (an mpf).
Tensor mpmath_values(const std::string& function, const Tensor& x) {
  return refgrad::testing::torch_exec(
             "import mpmath\n"
             "mpmath.mp.dps = 40\n"
             "f = lambda v: " + function + "\n"
             "result = torch.tensor([float(f(mpmath.mpf(v))) for v in a.tolist()], dtype=torch.float64)\n",
             {x})
      .at(0);
}

// The same op in torch for float64, float32, float16 and bfloat16 inputs (those torch's CPU kernel has),
// each compared in its dtype with torch's tolerance for it.
void check_against_torch(Tensor (*op)(const Tensor&), const std::string& torch_op, const Tensor& x, bool low_precision) {
  CHECK_TENSOR(op(x), torch_eval1(torch_op + "(a)", {x}), 1e-12, 1e-300);
  const Tensor x32 = x.to(DType::Float32);
  CHECK_TENSOR(op(x32), torch_eval1(torch_op + "(a)", {x32}), 1e-5, 1e-30);
  if (low_precision) {
    for (DType dtype : {DType::Float16, DType::BFloat16}) {
      CAPTURE(dtype_name(dtype));
      const Tensor low = x.to(dtype);
      CHECK_TENSOR(op(low), torch_eval1(torch_op + "(a)", {low}), dtype == DType::Float16 ? 1e-3 : 2e-2, 0);
    }
  }
  const Tensor ints = tensor({0, 1, -2});  // int64 computes in float32
  CHECK_TENSOR(op(ints), torch_eval1(torch_op + "(a.double()).float()", {ints}), 2e-6, 0);
}

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("i0, special_i0e, special_i1, special_i1e") {
  // Both sides of 0, the series/large-argument boundary of std::cyl_bessel_i, the switch to Hankel's
  // expansion at 500, and I's overflow past ~713.99 (the scaled forms stay finite).
  const Tensor x = tensor({0.0, 1e-8, 0.5, -0.5, 1.0, 3.0, -7.5, 15.0, 30.0, 99.0, -250.0, 499.0, 500.0, 650.0,
                           -700.0, 705.0, 800.0, 1e4, 1e10},
                          DType::Float64);
  SUBCASE("against mpmath, in float64") {
    CHECK_TENSOR(i0(x), mpmath_values("mpmath.besseli(0, v)", x), 1e-14, 0);
    CHECK_TENSOR(special_i1(x), mpmath_values("mpmath.besseli(1, v)", x), 1e-14, 0);
    CHECK_TENSOR(special_i0e(x), mpmath_values("mpmath.exp(-abs(v)) * mpmath.besseli(0, v)", x), 1e-14, 0);
    CHECK_TENSOR(special_i1e(x), mpmath_values("mpmath.exp(-abs(v)) * mpmath.besseli(1, v)", x), 1e-14, 0);
  }
  SUBCASE("against torch, in every dtype") {
    const Tensor moderate = tensor({0.0, 0.25, -1.5, 4.0, -9.0, 20.0}, DType::Float64);
    check_against_torch(i0, "torch.i0", x, false);
    check_against_torch(i0, "torch.i0", moderate, true);
    check_against_torch(special_i0e, "torch.special.i0e", x, false);
    check_against_torch(special_i0e, "torch.special.i0e", moderate, true);
    check_against_torch(special_i1, "torch.special.i1", x, false);
    check_against_torch(special_i1e, "torch.special.i1e", x, false);
  }
  SUBCASE("by hand: parity, infinities, NaN") {
    const Tensor ends = tensor({-kInf, kInf, kNaN, -0.0}, DType::Float64);
    CHECK_TENSOR(i0(ends), tensor({kInf, kInf, kNaN, 1.0}, DType::Float64));
    CHECK_TENSOR(special_i0e(ends), tensor({0.0, 0.0, kNaN, 1.0}, DType::Float64));
    CHECK_TENSOR(special_i1(ends), tensor({-kInf, kInf, kNaN, -0.0}, DType::Float64));
    CHECK_TENSOR(special_i1e(ends), tensor({-0.0, 0.0, kNaN, -0.0}, DType::Float64));
    CHECK_TENSOR(special_i1(tensor({-2.0}, DType::Float64)), neg(special_i1(tensor({2.0}, DType::Float64))), 0, 0);
    CHECK_THROWS_WITH_AS(i0(tensor({1.0}).to(DType::ComplexDouble)), "i0: not implemented for complex128", Error);
  }
}

TEST_CASE("erfinv, special_ndtri") {
  // Near 0 (where erfinv is linear), the switch at |y| = 0.5 between the erf and erfc solvers, and
  // close to +-1 down to the last representable steps.
  const Tensor y = tensor({0.0, 1e-300, 1e-12, 0.05, -0.3, 0.5, -0.5000000001, 0.9, -0.999, 1 - 1e-10,
                           -(1 - 1.0 / (1LL << 52)), 1 - 1.0 / (1LL << 53)},
                          DType::Float64);
  // p from the smallest doubles (tails far past erfc's underflow) through the switches at 1/4 and 3/4.
  const Tensor p = tensor({4.9e-324, 1e-300, 1e-100, 1e-20, 1e-5, 0.02, 0.2499, 0.25, 0.3, 0.5, 0.5 + 1e-12, 0.75,
                           0.7501, 0.975, 1 - 1e-12, 1 - 1.0 / (1LL << 53)},
                          DType::Float64);
  SUBCASE("against mpmath, in float64") {
    CHECK_TENSOR(erfinv(y), mpmath_values("mpmath.erfinv(v)", y), 1e-14, 0);
    // p = 4.9e-324 is a subnormal of one bit: p itself is only good to 1 part in 2, so its quantile
    // is good to ~1%; mpmath takes it as exact.
    // From p = 1e-20 on: 2p - 1 at 40 digits keeps p's 16 digits.
    const Tensor normal = slice(p, 0, 3, p.size(0));
    CHECK_TENSOR(special_ndtri(normal), mpmath_values("mpmath.sqrt(2) * mpmath.erfinv(2 * v - 1)", normal), 1e-14, 0);
  }
  SUBCASE("against torch, in every dtype") {
    check_against_torch(erfinv, "torch.erfinv", y, false);
    check_against_torch(erfinv, "torch.erfinv", tensor({0.0, 0.1, -0.4, 0.7, -0.95}, DType::Float64), true);
    check_against_torch(special_ndtri, "torch.special.ndtri", slice(p, 0, 1, p.size(0)), false);
  }
  SUBCASE("by hand: the ends, outside the domain, odd symmetry, and the inverse") {
    CHECK_TENSOR(erfinv(tensor({1.0, -1.0, 1.5, -2.0, kNaN, -0.0}, DType::Float64)),
                 tensor({kInf, -kInf, kNaN, kNaN, kNaN, -0.0}, DType::Float64));
    CHECK_TENSOR(special_ndtri(tensor({0.0, 1.0, -0.1, 1.1, kNaN, 0.5}, DType::Float64)),
                 tensor({-kInf, kInf, kNaN, kNaN, kNaN, 0.0}, DType::Float64));
    const Tensor inside = tensor({0.01, 0.2, 0.45, 0.6, 0.95}, DType::Float64);
    CHECK_TENSOR(erf(erfinv(inside)), inside, 1e-15, 0);
    CHECK_TENSOR(erfinv(neg(inside)), neg(erfinv(inside)), 0, 0);
    // ndtri(0.975) = 1.959963984540054..., the 95% two-sided normal quantile.
    CHECK_TENSOR(special_ndtri(tensor({0.975}, DType::Float64)), tensor({1.959963984540054}, DType::Float64), 1e-15, 0);
  }
}

TEST_CASE("special_erfcx, special_log_ndtr") {
  // The switches of erfcx at 0 and 10, its overflow below ~-26.6, and log_ndtr's switch at -1 and its
  // tail far past where Phi underflows.
  const Tensor x = tensor({0.0, 1e-10, 0.3, -0.3, 1.0, -1.0, -1.0000001, 2.5, -4.0, 9.99, 10.0, 25.0, -26.0, 1e3,
                           -38.5, -1e3, 1e8},
                          DType::Float64);
  SUBCASE("against mpmath, in float64") {
    CHECK_TENSOR(special_erfcx(x), mpmath_values("mpmath.exp(v * v) * mpmath.erfc(v)", x), 1e-14, 0);
    // log_ndtr for x > -1 reads erfc(x / sqrt 2): the rounding of x / sqrt 2 grows by x^2 in erfc
    // (1e-13 at x = 25), as in torch's, which takes the same route.
    CHECK_TENSOR(special_log_ndtr(x), mpmath_values("mpmath.log(mpmath.ncdf(v)) if v < 0 else mpmath.log1p(-mpmath.ncdf(-v))", x), 5e-13, 0);
  }
  SUBCASE("against torch, in float64 and float32 (torch has no float16 kernel)") {
    check_against_torch(special_erfcx, "torch.special.erfcx", x, false);
    check_against_torch(special_log_ndtr, "torch.special.log_ndtr", x, false);
  }
  SUBCASE("by hand: the ends and the overflow") {
    CHECK_TENSOR(special_erfcx(tensor({kInf, -kInf, kNaN, -27.0}, DType::Float64)),
                 tensor({0.0, kInf, kNaN, kInf}, DType::Float64));
    CHECK_TENSOR(special_log_ndtr(tensor({kInf, -kInf, kNaN, 0.0}, DType::Float64)),
                 tensor({0.0, -kInf, kNaN, -std::log(2.0)}, DType::Float64), 1e-16, 0);
    // erfcx(x) -> 1 / (x sqrt(pi)) for large x.
    CHECK_TENSOR(special_erfcx(tensor({1e100}, DType::Float64)), tensor({1e-100 / std::sqrt(M_PI)}, DType::Float64),
                 1e-15, 0);
  }
}

}  // TEST_SUITE
