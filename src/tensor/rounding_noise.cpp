// L0: rounding noise, the Monte Carlo arithmetic of the check rule's sensitivity runs (tensor.hpp,
// RoundingNoiseScope). The primitives that round call with_rounding_noise on the result they made.
#include <complex>
#include <cstdint>

#include "refgrad/tensor.hpp"

namespace refgrad {
namespace {

thread_local RoundingNoiseScope* active_scope = nullptr;

// Multiplies each of the n real numbers at `data` by 1 + u eps, u uniform on [-1, 1) drawn from `stream`.
template <class Real>
void add_noise(Real* data, std::int64_t n, std::uint64_t stream, double eps) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double u = uniform_minus_one_to_one(stream, static_cast<std::uint64_t>(i));
    data[i] = static_cast<Real>(static_cast<double>(data[i]) * (1.0 + u * eps));
  }
}

}  // namespace

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double uniform_minus_one_to_one(std::uint64_t stream, std::uint64_t index) {
  return static_cast<double>(splitmix64(stream + index) >> 11) * 0x1p-52 - 1.0;
}

RoundingNoiseScope::RoundingNoiseScope(std::uint64_t stream, double eps)
    : stream_(stream), eps_(eps), previous_(active_scope) {
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
    case DType::Float32: add_noise(noisy.data_ptr<float>(), noisy.numel(), stream, scope->eps_); break;
    case DType::Float64: add_noise(noisy.data_ptr<double>(), noisy.numel(), stream, scope->eps_); break;
    case DType::ComplexFloat:  // each part apart
      add_noise(reinterpret_cast<float*>(noisy.data_ptr<std::complex<float>>()), 2 * noisy.numel(), stream, scope->eps_);
      break;
    case DType::ComplexDouble:
      add_noise(reinterpret_cast<double*>(noisy.data_ptr<std::complex<double>>()), 2 * noisy.numel(), stream,
                scope->eps_);
      break;
    default: break;
  }
  return noisy.dtype() == dtype ? noisy : noisy.to(dtype);
}

}  // namespace refgrad
