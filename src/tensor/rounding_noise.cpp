// L0: rounding noise, the Monte Carlo arithmetic of the check rule's sensitivity runs (tensor.hpp,
// RoundingNoiseScope). The primitives that round call with_rounding_noise on the result they made.
#include <complex>
#include <cstdint>

#include "refgrad/tensor.hpp"

namespace refgrad {
namespace {

thread_local RoundingNoiseScope* active_scope = nullptr;

// Multiplies each of the n real numbers at `data` by 1 + u eps, u uniform on [-1, 1) drawn from `stream`,
// and, where `absolute` is not 0, adds v absolute, v drawn from another stream.
template <class Real>
void add_noise(Real* data, std::int64_t n, std::uint64_t stream, double eps, double absolute) {
  const std::uint64_t absolute_stream = splitmix64(stream ^ 0x6a09e667f3bcc909ULL);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto index = static_cast<std::uint64_t>(i);
    double x = static_cast<double>(data[i]) * (1.0 + uniform_minus_one_to_one(stream, index) * eps);
    if (absolute != 0.0) x += uniform_minus_one_to_one(absolute_stream, index) * absolute;
    data[i] = static_cast<Real>(x);
  }
}

}  // namespace

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::Float16:
    case DType::ComplexHalf: return 0x1p-11;
    case DType::BFloat16: return 0x1p-8;
    case DType::Float32:
    case DType::ComplexFloat: return 0x1p-24;
    case DType::Float64:
    case DType::ComplexDouble: return 0x1p-53;
    default: return 0.0;
  }
}

double smallest_subnormal(DType dtype) {
  switch (dtype) {
    case DType::Float16:
    case DType::ComplexHalf: return 0x1p-24;
    case DType::BFloat16: return 0x1p-133;
    case DType::Float32:
    case DType::ComplexFloat: return 0x1p-149;
    case DType::Float64:
    case DType::ComplexDouble: return 0x1p-1074;
    default: return 0.0;
  }
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double uniform_minus_one_to_one(std::uint64_t stream, std::uint64_t index) {
  return static_cast<double>(splitmix64(stream + index) >> 11) * 0x1p-52 - 1.0;
}

RoundingNoiseScope::RoundingNoiseScope(std::uint64_t stream, double eps, double absolute)
    : stream_(stream), eps_(eps), absolute_(absolute), previous_(active_scope) {
  active_scope = this;
}

RoundingNoiseScope::~RoundingNoiseScope() { active_scope = previous_; }

Tensor with_rounding_noise(Tensor result) {
  RoundingNoiseScope* scope = active_scope;
  if (scope == nullptr || !result.defined() || result.numel() == 0) return result;
  const DType dtype = result.dtype();
  if (!is_floating_point(dtype) && !is_complex(dtype)) return result;
  // The copies below are no primitive's rounding: no noise while making them.
  struct Paused {
    RoundingNoiseScope* scope;
    ~Paused() { active_scope = scope; }
  } paused{scope};
  active_scope = nullptr;
  const std::uint64_t stream = splitmix64(scope->stream_ ^ splitmix64(++scope->calls_));
  // float16, bfloat16 and complex32 results are moved in their compute type and rounded back.
  const DType compute = opmath_dtype(dtype);
  Tensor noisy = compute == dtype && result.is_contiguous() ? result : result.to(compute).contiguous();
  switch (compute) {
    case DType::Float32: add_noise(noisy.data_ptr<float>(), noisy.numel(), stream, scope->eps_, scope->absolute_); break;
    case DType::Float64: add_noise(noisy.data_ptr<double>(), noisy.numel(), stream, scope->eps_, scope->absolute_); break;
    case DType::ComplexFloat:  // each part apart
      add_noise(reinterpret_cast<float*>(noisy.data_ptr<std::complex<float>>()), 2 * noisy.numel(), stream, scope->eps_, scope->absolute_);
      break;
    case DType::ComplexDouble:
      add_noise(reinterpret_cast<double*>(noisy.data_ptr<std::complex<double>>()), 2 * noisy.numel(), stream,
                scope->eps_, scope->absolute_);
      break;
    default: break;
  }
  return noisy.dtype() == dtype ? noisy : noisy.to(dtype);
}

}  // namespace refgrad
