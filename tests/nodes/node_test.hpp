// Shared by the node tests: inputs, finite-difference checks, saved values.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "expect.hpp"
#include "gradcheck.hpp"
#include "refgrad/nodes.hpp"
#include "torch_oracle.hpp"

namespace refgrad::testing {

using Saved = std::map<std::string, FieldValue>;

// N(0, 1) values in float64, reproducible by seed.
inline Tensor random64(const Shape& sizes, std::uint64_t seed) {
  Generator generator(seed);
  return randn(sizes, generator, DType::Float64);
}

// (a) of every node test: output k of the node against the numerical VJP of
// `forward` (written with L0 primitives) at `inputs`, with gradcheck's tolerances.
inline void check_against_finite_differences(const Grads& node_out, std::size_t k, const Forward& forward,
                                             const std::vector<Tensor>& inputs, const Tensor& grad) {
  REQUIRE(node_out[k].has_value());
  CHECK_TENSOR(*node_out[k], numerical_vjp(forward, inputs, k, grad), kGradcheckRtol, kGradcheckAtol);
}

// (a) for every differentiable input of `node` at once.
inline void check_all_against_finite_differences(const std::string& node, const Saved& saved, const Forward& forward,
                                          const std::vector<Tensor>& inputs, const Tensor& grad) {
  const Grads out = call_node(node, {grad}, Need(inputs.size(), true), saved);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    CAPTURE(k);
    check_against_finite_differences(out, k, forward, inputs, grad);
  }
}

// Every node: need[i] alone gives exactly output i; an undefined grad gives none.
inline void check_need_mask_and_undefined(const std::string& node, const Tensor& grad, std::size_t inputs,
                                          const Saved& saved) {
  for (std::size_t i = 0; i < inputs; ++i) {
    Need need(inputs, false);
    need[i] = true;
    const Grads out = call_node(node, {grad}, need, saved);
    REQUIRE(out.size() == inputs);
    for (std::size_t j = 0; j < inputs; ++j) CHECK(out[j].has_value() == (i == j));
  }
  const Grads undefined = call_node(node, {std::nullopt}, Need(inputs, true), saved);
  REQUIRE(undefined.size() == inputs);
  for (const auto& out : undefined) CHECK_FALSE(out.has_value());
}

// An int64 tensor from torch (sizes, strides, dims) as an IntList.
inline IntList int_list(const Tensor& t) {
  const std::vector<std::int64_t> values = t.to_vector<std::int64_t>();
  return IntList(values.begin(), values.end());
}

}  // namespace refgrad::testing
