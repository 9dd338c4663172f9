// Finite-difference checks of the eager tape (eager_check.hpp).
#include "eager_check.hpp"

#include <cmath>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "gradcheck.hpp"
#include "refgrad/error.hpp"

namespace refgrad::testing {

Tensor values(const Shape& shape, double seed) {
  std::vector<double> data(static_cast<std::size_t>(numel_of(shape)));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = 0.2 + 0.9 * std::sin(1.3 * static_cast<double>(i) + seed);
  return from_vector(data, shape);
}

Tensor f64(const std::vector<double>& data) { return from_vector(data, Shape{static_cast<std::int64_t>(data.size())}); }

bool within_gradcheck_tolerance(const Tensor& actual, const Tensor& expected) {
  if (actual.sizes() != expected.sizes()) return false;
  const auto a = actual.contiguous().to_vector<double>(), e = expected.contiguous().to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i] - e[i]) > kGradcheckAtol + kGradcheckRtol * std::fabs(e[i])) return false;
  }
  return true;
}

void check_grad(const std::optional<Tensor>& actual, const Tensor& expected) {
  REQUIRE(actual.has_value());
  INFO("actual: ", actual->repr(), "\nexpected: ", expected.repr());
  CHECK(within_gradcheck_tolerance(*actual, expected));
}

void check_against_finite_differences(const Op& op, const std::vector<Tensor>& inputs) {
  std::vector<eager::Variable> leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) leaves.push_back(eager::leaf(inputs[i], fmt::format("x{}", i)));
  const eager::Variable output = op(leaves);
  const Tensor grad_output = values(output.data().sizes(), 0.7);
  eager::backward(output, grad_output);

  const Forward forward = [&op](const std::vector<Tensor>& tensors) {
    std::vector<eager::Variable> constants;
    for (const Tensor& tensor : tensors) constants.push_back(eager::constant(tensor));
    return op(constants).data();
  };
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    INFO("input ", k);
    check_grad(leaves[k].grad(), numerical_vjp(forward, inputs, k, grad_output));
  }
}

const FieldValue& field(const GraphNode& node, const std::string& name) {
  for (const auto& [field_name, value] : node.saved) {
    if (field_name == name) return value;
  }
  fail("node " + node.name + " has no field " + name);
}

const GraphNode& node_named(const Graph& graph, const std::string& name) {
  for (const GraphNode& node : graph.nodes) {
    if (node.name == name) return node;
  }
  fail("no node " + name);
}

}  // namespace refgrad::testing
