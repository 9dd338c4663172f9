// Helpers shared by the 2-d and adaptive pools (nn.cpp, which defines them) and the 3-d and fractional
// ones (pooling.cpp).
#pragma once

#include <cstdint>

#include "refgrad/tensor.hpp"

namespace refgrad::nodes {

// ATen's pooling_output_shape (Pool.h): the output length of one pooled dim; fails, naming `node`, where
// `input + 2 * pad` overflows (an empty batch may come with any sizes).
std::int64_t pooling_output_size(const char* node, std::int64_t input, std::int64_t kernel, std::int64_t pad,
                                 std::int64_t stride, std::int64_t dilation, bool ceil_mode);

// Whether every index of a max pooling's int64 indices lies in [lowest, plane): the adaptive and
// fractional max pools' check before L0's max_pool_backward, which would skip a -1 they refuse; the
// node builds its message (naming its saved field) only when this fails.
bool indices_within(const Tensor& indices, std::int64_t lowest, std::int64_t plane);

}  // namespace refgrad::nodes
