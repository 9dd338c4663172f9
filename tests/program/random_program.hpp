// Random programs for property tests: every declaration kind, every opcode,
// every saved-field kind, awkward names and values (NaN, -0.0, empty
// tensors). They are well formed as text goes but not meant to verify or run.
#pragma once

#include <cstdint>

#include "refgrad/program.hpp"

namespace refgrad::testing {

Program random_program(std::uint64_t seed);

}  // namespace refgrad::testing
