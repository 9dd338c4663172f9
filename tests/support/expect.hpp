// Comparing a refgrad result with an expected tensor in tests. Written with
// to_vector only, so that it does not depend on the ops under test.
#pragma once

#include <string>

#include "refgrad/tensor.hpp"

namespace refgrad::testing {

// "" when `actual` has the expected dtype (unless check_dtype is false) and
// shape, and every value is within atol + rtol * |expected| (NaN matches NaN,
// infinities must match exactly); otherwise a description of the first mismatch.
std::string differences(const Tensor& actual, const Tensor& expected, double rtol = 1e-6, double atol = 1e-9,
                        bool check_dtype = true);

}  // namespace refgrad::testing

// CHECK_TENSOR(actual, expected) or CHECK_TENSOR(actual, expected, rtol, atol, check_dtype)
#define CHECK_TENSOR(...)                                                   \
  do {                                                                      \
    const std::string refgrad_diff = ::refgrad::testing::differences(__VA_ARGS__); \
    CHECK_MESSAGE(refgrad_diff.empty(), refgrad_diff);                      \
  } while (0)
