// Finite differences for the node tests: the numerical vector-Jacobian
// product of a forward function written with L0 primitives, in float64, with
// gradcheck's defaults.
#pragma once

#include <functional>
#include <vector>

#include "refgrad/tensor.hpp"

namespace refgrad::testing {

using Forward = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// d/d inputs[k] of sum(grad_output * forward(inputs)), by central differences
// with step eps on each element of inputs[k] (a float64 tensor).
Tensor numerical_vjp(const Forward& forward, const std::vector<Tensor>& inputs, std::size_t k,
                     const Tensor& grad_output, double eps = 1e-6);

// gradcheck's tolerances: |analytical - numerical| <= atol + rtol * |numerical|.
constexpr double kGradcheckAtol = 1e-5;
constexpr double kGradcheckRtol = 1e-3;

}  // namespace refgrad::testing
