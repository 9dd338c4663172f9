// The output length of a pooled dim, shared by the 2-d pools (nn.cpp, which defines it) and the 3-d ones
// (pooling.cpp).
#pragma once

#include <cstdint>

namespace refgrad::nodes {

// ATen's pooling_output_shape (Pool.h): the output length of one pooled dim; fails, naming `node`, where
// `input + 2 * pad` overflows (an empty batch may come with any sizes).
std::int64_t pooling_output_size(const char* node, std::int64_t input, std::int64_t kernel, std::int64_t pad,
                                 std::int64_t stride, std::int64_t dilation, bool ceil_mode);

}  // namespace refgrad::nodes
