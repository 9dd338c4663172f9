// Checking the eager tape's grads against finite differences (float64),
// shared by the eager test files.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "refgrad/eager.hpp"
#include "refgrad/tensor.hpp"

namespace refgrad::testing {

// Deterministic, uneven float64 values of `shape`, none near zero by accident.
Tensor values(const Shape& shape, double seed);

// A 1-d float64 tensor.
Tensor f64(const std::vector<double>& data);

// Whether `actual` is within gradcheck's tolerances of `expected` (same shape).
bool within_gradcheck_tolerance(const Tensor& actual, const Tensor& expected);

// CHECKs that `actual` is present and within gradcheck's tolerances of `expected`.
void check_grad(const std::optional<Tensor>& actual, const Tensor& expected);

using Op = std::function<eager::Variable(const std::vector<eager::Variable>&)>;

// Runs `op` on leaves x0, x1, ... holding `inputs`, backward with an uneven
// grad_output, and compares each leaf's .grad with the numerical VJP of the
// same op run on constants (plain L0 forward, no tape).
void check_against_finite_differences(const Op& op, const std::vector<Tensor>& inputs);

template <class Fn>
Op unary(Fn fn) {
  return [fn](const std::vector<eager::Variable>& x) { return fn(x[0]); };
}
template <class Fn>
Op binary(Fn fn) {
  return [fn](const std::vector<eager::Variable>& x) { return fn(x[0], x[1]); };
}

}  // namespace refgrad::testing
