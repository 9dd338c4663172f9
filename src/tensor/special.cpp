// Special functions: lgamma, digamma and polygamma; the modified Bessel functions i0, i1 and their
// exponentially scaled forms; erfinv, erfcx, ndtri and log_ndtr.
//
// All are computed in double whatever the input's floating dtype, and rounded
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
    const double term = std::pow(a, -s);
    // Past a = 1 the terms only shrink: once one underflows to 0, so do the rest and the tail (a huge s, a
    // polygamma of order 2^40, would otherwise sum one term per unit step up to s).
    if (term == 0 && a > 1) return sum;
    sum += term;
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

// ------------------------------------------------- modified Bessel functions ---
// I_nu(x) for nu = 0, 1 (DLMF 10.25). I0 is even and I1 odd, so both are computed at |x|: below
// kBesselAsymptotic with the C++17 library's std::cyl_bessel_i, above it from Hankel's expansion
// (DLMF 10.40.1) of the scaled function
//   e^-x I_nu(x) ~ 1/sqrt(2 pi x) sum_k (-1)^k a_k(nu) / x^k,
//   a_k(nu) = (4nu^2 - 1^2)(4nu^2 - 3^2)...(4nu^2 - (2k-1)^2) / (k! 8^k),
// whose terms shrink by about k / (2x): at x >= 500 a dozen reach 1e-17 relative.
constexpr double kBesselAsymptotic = 500;

double scaled_bessel_i_asymptotic(int nu, double x) {
  const double four_nu_squared = 4.0 * nu * nu;
  double term = 1, sum = 1;
  for (int k = 1; k <= 40 && std::abs(term) > 1e-18 * std::abs(sum); ++k) {
    const double odd = 2.0 * k - 1;
    term *= -(four_nu_squared - odd * odd) / (8.0 * k * x);
    sum += term;
  }
  return sum / std::sqrt(2 * kPi * x);
}

// e^-|x| I_nu(|x|), for x >= 0.
double scaled_bessel_i(int nu, double x) {
  if (std::isinf(x)) return 0;
  if (x < kBesselAsymptotic) return std::exp(-x) * std::cyl_bessel_i(static_cast<double>(nu), x);
  return scaled_bessel_i_asymptotic(nu, x);
}

// I_nu(x) for x >= 0; I overflows past x ~ 714, where e^x (taken in two halves, as e^x alone
// overflows first) makes it inf.
double bessel_i(int nu, double x) {
  if (std::isinf(x)) return x;
  if (x < kBesselAsymptotic) return std::cyl_bessel_i(static_cast<double>(nu), x);
  const double half = std::exp(x / 2);
  return scaled_bessel_i_asymptotic(nu, x) * half * half;
}

double i0(double x) { return std::isnan(x) ? x : bessel_i(0, std::abs(x)); }
double i0e(double x) { return std::isnan(x) ? x : scaled_bessel_i(0, std::abs(x)); }
double i1(double x) { return std::isnan(x) ? x : std::copysign(bessel_i(1, std::abs(x)), x); }
double i1e(double x) { return std::isnan(x) ? x : std::copysign(scaled_bessel_i(1, std::abs(x)), x); }

// ------------------------------------------------------- error functions ---

constexpr double kSqrtPi = 1.77245385090551602729816748334114518;
constexpr double kSqrt2 = 1.41421356237309504880168872420969808;

// e^(x^2) without the error of rounding x^2: x = hi + lo with hi of 26 bits (Veltkamp's split), so
// hi^2 is exact and e^(x^2) = e^(hi^2) e^(2 hi lo + lo^2).
double exp_of_square(double x) {
  const double scaled = 134217729.0 * x;  // 2^27 + 1
  const double hi = scaled - (scaled - x);
  const double lo = x - hi;
  return std::exp(hi * hi) * std::exp(2 * hi * lo + lo * lo);
}

// erfcx(x) = e^(x^2) erfc(x), the scaled complementary error function.
//   x >= 10:  the asymptotic series (DLMF 7.12.1)
//               erfcx(x) ~ 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2x^2)^k,
//             whose terms shrink by (2k-1)/(2x^2) <= 1/8 over the first dozen;
//   0 <= x < 10: e^(x^2) erfc(x), both accurate there (erfc(10) ~ 2e-45 is far from underflow);
//   x < 0:    erfcx(x) = 2 e^(x^2) - erfcx(-x), which overflows to inf below x ~ -26.6.
double erfcx(double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return x < 0 ? x * x : 0;  // exp_of_square's split gives NaN at inf
  if (x < 0) return 2 * exp_of_square(x) - erfcx(-x);
  if (x < 10) return exp_of_square(x) * std::erfc(x);
  const double inverse_two_x_squared = 1 / (2 * x * x);
  double term = 1, sum = 1;
  for (int k = 1; k <= 40 && std::abs(term) > 1e-18; ++k) {
    term *= -(2.0 * k - 1) * inverse_two_x_squared;
    sum += term;
  }
  return sum / (x * kSqrtPi);
}

// The upper-tail normal quantile z with Q(z) = p, 0 < p <= 0.5, from Abramowitz & Stegun 26.2.23
// (absolute error below 4.5e-4): the starting point that the solvers below refine.
double normal_quantile_guess(double p) {
  const double t = std::sqrt(-2 * std::log(p));
  return t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1 + t * (1.432788 + t * (0.189269 + t * 0.001308)));
}

// The x >= 0 with erf(x) = y, for 0 <= y <= 0.5, by Halley's method on f(x) = erf(x) - y:
//   f' = 2/sqrt(pi) e^(-x^2), f'' = -2x f',  so  x -= u / (1 + x u)  with u = f / f'.
// It starts from erfinv's Maclaurin series (sqrt(pi)/2)(y + pi y^3 / 12) for small y, where it is
// good to 1e-6 relative, and from A&S's quantile (erfc(x) = 2 Q(x sqrt 2)) otherwise.
double inverse_erf_center(double y) {
  if (y == 0) return y;
  double x = y < 0.1 ? kSqrtPi / 2 * y * (1 + kPi / 12 * y * y) : normal_quantile_guess((1 - y) / 2) / kSqrt2;
  for (int iteration = 0; iteration < 50; ++iteration) {
    const double u = (std::erf(x) - y) / (2 / kSqrtPi * std::exp(-x * x));
    const double step = u / (1 + x * u);
    x -= step;
    if (std::abs(step) <= 1e-17 * std::abs(x)) break;
  }
  return x;
}

// The x > 0 with erfc(x) = w, for 0 < w <= 0.5, by Newton's method on
//   g(x) = log erfc(x) - log w = log erfcx(x) - x^2 - log w,   g'(x) = -2 / (sqrt(pi) erfcx(x)),
// which stays accurate far into the tail (w down to the smallest double), where erfc(x) and
// e^(-x^2) themselves underflow. log erfc is concave, so the steps never overshoot after the first.
double inverse_erfc_tail(double w) {
  if (w == 0) return std::numeric_limits<double>::infinity();
  const double log_w = std::log(w);
  double x = normal_quantile_guess(w / 2) / kSqrt2;
  for (int iteration = 0; iteration < 50; ++iteration) {
    const double scaled = erfcx(x);
    const double step = (std::log(scaled) - x * x - log_w) / (-2 / (kSqrtPi * scaled));
    x -= step;
    if (std::abs(step) <= 1e-17 * std::abs(x)) break;
  }
  return x;
}

// erfinv(y): erf(erfinv(y)) = y on [-1, 1]; +-inf at +-1, NaN outside. Odd, so solved at |y|: around
// 0 on erf itself, and near 1 on erfc(x) = 1 - |y| (exact there, |y| >= 0.5), which keeps the
// precision of the small distance to 1.
double erfinv(double y) {
  if (std::isnan(y) || std::abs(y) > 1) return std::numeric_limits<double>::quiet_NaN();
  const double a = std::abs(y);
  const double x = a <= 0.5 ? inverse_erf_center(a) : inverse_erfc_tail(1 - a);
  return std::copysign(x, y);
}

// ndtri(p): the standard normal quantile, Phi(ndtri(p)) = p on [0, 1]; -inf at 0, inf at 1, NaN
// outside. Phi(x) = erfc(-x / sqrt 2) / 2 = (1 + erf(x / sqrt 2)) / 2, so
//   ndtri(p) = sqrt 2 erfinv(2p - 1)           for 1/4 <= p <= 3/4 (2p - 1 exact),
//            = -sqrt 2 erfcinv(2p)             for p < 1/4 (the tail keeps p's precision),
//            = sqrt 2 erfcinv(2 (1 - p))       for p > 3/4 (1 - p exact).
double ndtri(double p) {
  if (std::isnan(p) || p < 0 || p > 1) return std::numeric_limits<double>::quiet_NaN();
  if (p < 0.25) return -kSqrt2 * inverse_erfc_tail(2 * p);
  if (p > 0.75) return kSqrt2 * inverse_erfc_tail(2 * (1 - p));
  const double y = 2 * p - 1;
  return kSqrt2 * std::copysign(inverse_erf_center(std::abs(y)), y);
}

// log_ndtr(x) = log Phi(x):
//   x < -1:  Phi(x) = erfcx(t) e^(-t^2) / 2 with t = -x / sqrt 2, so log Phi = log(erfcx(t) / 2) - x^2 / 2,
//            finite however far the tail (Phi itself underflows below x ~ -38);
//   x >= -1: log1p(-erfc(x / sqrt 2) / 2), accurate where Phi is close to 1.
double log_ndtr(double x) {
  if (std::isnan(x)) return x;
  if (x < -1) return std::log(erfcx(-x / kSqrt2) / 2) - x * x / 2;
  return std::log1p(-std::erfc(x / kSqrt2) / 2);
}

}  // namespace

Tensor i0(const Tensor& self) {
  return special_unary(self, "i0", [](double x) { return i0(x); });
}

Tensor special_i0e(const Tensor& self) {
  return special_unary(self, "special_i0e", [](double x) { return i0e(x); });
}

Tensor special_i1(const Tensor& self) {
  return special_unary(self, "special_i1", [](double x) { return i1(x); });
}

Tensor special_i1e(const Tensor& self) {
  return special_unary(self, "special_i1e", [](double x) { return i1e(x); });
}

Tensor erfinv(const Tensor& self) {
  return special_unary(self, "erfinv", [](double x) { return erfinv(x); });
}

Tensor special_erfcx(const Tensor& self) {
  return special_unary(self, "special_erfcx", [](double x) { return erfcx(x); });
}

Tensor special_ndtri(const Tensor& self) {
  return special_unary(self, "special_ndtri", [](double x) { return ndtri(x); });
}

Tensor special_log_ndtr(const Tensor& self) {
  return special_unary(self, "special_log_ndtr", [](double x) { return log_ndtr(x); });
}

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
