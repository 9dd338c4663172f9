// Checking the eager tape's grads against finite differences (float64),
// shared by the eager test files.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <string>
#include <variant>

#include "refgrad/eager.hpp"
#include "refgrad/graph.hpp"
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

// The saved field `name` of a graph node (raises when it has none).
const FieldValue& field(const GraphNode& node, const std::string& name);
template <class T>
const T& typed_field(const GraphNode& node, const std::string& name) {
  return std::get<T>(field(node, name));
}
inline bool is_none(const FieldValue& value) { return std::holds_alternative<None>(value); }

// The first node of the graph named `name` (raises when there is none).
const GraphNode& node_named(const Graph& graph, const std::string& name);

template <class Fn>
Op unary(Fn fn) {
  return [fn](const std::vector<eager::Variable>& x) { return fn(x[0]); };
}
template <class Fn>
Op binary(Fn fn) {
  return [fn](const std::vector<eager::Variable>& x) { return fn(x[0], x[1]); };
}

}  // namespace refgrad::testing
