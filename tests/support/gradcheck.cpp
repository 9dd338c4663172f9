#include "gradcheck.hpp"

namespace refgrad::testing {

namespace {

// sum(a * b) of two float64 tensors of one shape, without L0 ops.
double dot_all(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  check(x.size() == y.size(), "numerical_vjp: forward output has ", x.size(), " elements, grad_output ", y.size());
  double total = 0;
  for (std::size_t i = 0; i < x.size(); ++i) total += x[i] * y[i];
  return total;
}

}  // namespace

Tensor numerical_vjp(const Forward& forward, const std::vector<Tensor>& inputs, std::size_t k,
                     const Tensor& grad_output, double eps) {
  check(inputs[k].dtype() == DType::Float64, "numerical_vjp: input ", k, " must be float64");
  Tensor result = zeros(inputs[k].sizes(), DType::Float64);
  for (std::int64_t i = 0; i < inputs[k].numel(); ++i) {
    std::vector<Tensor> shifted = inputs;
    shifted[k] = inputs[k].clone();
    double* element = shifted[k].data_ptr<double>() + i;
    const double original = *element;
    *element = original + eps;
    const double plus = dot_all(forward(shifted), grad_output);
    *element = original - eps;
    const double minus = dot_all(forward(shifted), grad_output);
    result.data_ptr<double>()[i] = (plus - minus) / (2 * eps);
  }
  return result;
}

}  // namespace refgrad::testing
