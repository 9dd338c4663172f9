// Special functions: lgamma, digamma and polygamma.
//
// Both are computed in double whatever the input's floating dtype, and rounded
// once to it: float32 (and float16/bfloat16, whose opmath is float32) get the
// double result rounded, which is at least as accurate as ATen's float kernels.
// int64 and bool inputs compute in the default dtype, as ATen's float-valued ops.
//
// The formulas (DLMF chapters 5 and 25):
//   lgamma(x)       = log |Gamma(x)|   (the C library's lgamma, as ATen)
//   digamma(x)      = psi(x) = d/dx log Gamma(x)
//   polygamma(n, x) = psi^(n)(x) = (-1)^(n+1) n! zeta(n+1, x)   for n >= 1,
// with zeta(s, q) = sum_{k>=0} (q+k)^-s the Hurwitz zeta function.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel.hpp"

namespace refgrad {
namespace {

constexpr double kPi = 3.14159265358979323846264338327950288;

// B_2j / (2j)!, the Euler-Maclaurin (and Stirling) coefficients, j = 1..8.
constexpr double kBernoulliOverFactorial[] = {
    1.0 / 12.0,
    -1.0 / 720.0,
    1.0 / 30240.0,
    -1.0 / 1209600.0,
    1.0 / 47900160.0,
    -691.0 / 1307674368000.0,
    1.0 / 74724249600.0,
    -3617.0 / 10670622842880000.0,
};

// psi(x), with ATen's values at the poles: -inf or +inf at +-0 (the sign of
// -x, as the limit from that side), NaN at the negative integers.
double digamma(double x) {
  if (std::isnan(x)) return x;
  if (x == 0) return std::copysign(std::numeric_limits<double>::infinity(), -x);
  if (x < 0) {
    if (x == std::trunc(x)) return std::numeric_limits<double>::quiet_NaN();
    // Reflection: psi(1 - x) - psi(x) = pi / tan(pi x). tan(pi x) is taken of the
    // fractional part of x, where pi * r loses nothing to a large integer part.
    double integer_part = 0;
    const double fraction = std::modf(x, &integer_part);
    return digamma(1 - x) - kPi / std::tan(kPi * fraction);
  }
  if (std::isinf(x)) return x;
  // Recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10, then Stirling's series
  //   psi(x) ~ log x - 1/(2x) - sum_j B_2j / (2j x^2j),
  // whose eighth term is below 1e-16 relative at x = 10.
  double result = 0;
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  const double inverse_square = 1 / (x * x);
  double series = 0;
  double power = inverse_square;
  for (int j = 1; j <= 8; ++j) {
    // B_2j / (2j) = (B_2j / (2j)!) * (2j - 1)!
    double odd_factorial = 1;
    for (int k = 2; k < 2 * j; ++k) odd_factorial *= k;
    series += kBernoulliOverFactorial[j - 1] * odd_factorial * power;
    power *= inverse_square;
  }
  return result + std::log(x) - 0.5 / x - series;
}

// The Hurwitz zeta function zeta(s, q) for s > 1, by Euler-Maclaurin summation:
// the first terms (q+k)^-s directly until q + N >= max(16, s), then
//   zeta(s, a) ~ a^(1-s)/(s-1) + a^-s/2 + sum_j B_2j/(2j)! s(s+1)...(s+2j-2) a^(-s-2j+1)
// for a = q + N. Each correction term is smaller than the last by about
// (s+2j)^2 / (2 pi a)^2, so eight of them leave an error below 1e-17 relative.
// q a non-positive integer is a pole: +inf (ATen's value); other negative q
// sum through the negative terms, which is right for the integer s used here.
double hurwitz_zeta(double s, double q) {
  if (std::isnan(q)) return q;
  if (q <= 0 && q == std::floor(q)) return std::numeric_limits<double>::infinity();
  if (std::isinf(q)) return 0;  // q = +inf (-inf was a pole above)
  const double threshold = std::max(16.0, s);
  double sum = 0;
  double a = q;
  while (a < threshold) {
    sum += std::pow(a, -s);
    a += 1;
  }
  const double a_to_minus_s = std::pow(a, -s);
  double tail = a * a_to_minus_s / (s - 1) + 0.5 * a_to_minus_s;
  // term_j = B_2j/(2j)! * rising * a^(-s-2j+1), rising = s (s+1) ... (s+2j-2)
  double rising = s;
  double power = a_to_minus_s / a;  // a^(-s-1)
  for (int j = 1; j <= 8; ++j) {
    tail += kBernoulliOverFactorial[j - 1] * rising * power;
    rising *= (s + 2 * j - 1) * (s + 2 * j);
    power /= a * a;
  }
  return sum + tail;
}

// psi^(n)(x) for n >= 1. n! overflows to inf past n = 170, as ATen's exp(lgamma(n + 1)) does.
double polygamma(std::int64_t n, double x) {
  const double sign = n % 2 == 1 ? 1.0 : -1.0;
  double factorial = 1;
  for (std::int64_t k = 2; k <= n && std::isfinite(factorial); ++k) factorial *= static_cast<double>(k);
  return sign * factorial * hurwitz_zeta(static_cast<double>(n) + 1, x);
}

// hurwitz_zeta sums one term per unit step from q up to 16: refgrad refuses an x so negative that
// the sum would take long (ATen's Cephes zeta takes as long), rather than hang.
constexpr double kLowestPolygammaArgument = -1e7;

// A special function of a real tensor: computed in double, rounded once to the
// result dtype (the input's floating dtype, else float32).
template <class F>
Tensor special_unary(const Tensor& self, const char* op, F f) {
  check(self.defined(), op, ": tensor is undefined");
  check(!is_complex(self.dtype()), op, ": not implemented for ", dtype_name(self.dtype()));
  const DType dtype = is_floating_point(self.dtype()) ? self.dtype() : default_dtype();
  const Tensor input = self.to(DType::Float64);
  const Tensor result = kernel::map<double, double>(input.sizes(), f, input);
  return result.to(dtype);
}

}  // namespace

Tensor lgamma(const Tensor& self) {
  return special_unary(self, "lgamma", [](double x) { return std::lgamma(x); });
}

Tensor digamma(const Tensor& self) {
  return special_unary(self, "digamma", [](double x) { return digamma(x); });
}

Tensor polygamma(std::int64_t n, const Tensor& self) {
  check(n >= 0, "polygamma: polygamma(n, x) does not support negative n, got n=", n);
  if (n == 0) return digamma(self);
  if (self.defined() && self.numel() > 0 && !is_complex(self.dtype())) {
    const double lowest = min(self.to(DType::Float64)).item<double>();  // NaN if any is NaN: passes
    check(!(lowest < kLowestPolygammaArgument), "polygamma: x=", lowest, " is below ", kLowestPolygammaArgument,
          ", where refgrad's Hurwitz zeta sum would take too long");
  }
  return special_unary(self, "polygamma", [n](double x) { return polygamma(n, x); });
}

}  // namespace refgrad
