// The execution fuzzer's program generator (fuzz_run.cpp): the fuzzer's input
// bytes, read as a stream of decisions, become a small program around one
// node of the registry, with every value inline, so that the program alone
// reproduces a finding (`REFGRAD_FUZZ_PRINT=1 build-fuzz/fuzz/fuzz_run FILE`
// prints it).
//
// An input is "NodeName\n" followed by decision bytes. The name picks the node
// (a name the registry lacks picks one by its hash, so mutated names still
// reach every node); the first decision byte picks the mode:
//   consistent  shapes that fit the node's formula as its schema suggests: one
//               base shape for the tensors, size fields and options; dims in
//               range; index tensors within their sizes; grads of the
//               forward output's likely shapes (the base shape, or reduced
//               over the node's dims). Such a case usually runs to the end, so
//               the fuzzer reaches deep into node bodies.
//   wild        anything of the right kind: ranks 0 to 4, size-0 dims, every
//               dtype, NaN and Inf, negative and huge dims, sizes and
//               indices, fields of the wrong length, None where allowed,
//               need masks and operand counts that do not fit, CopySlices
//               geometries, views (a transpose or an expand) as grads.
// An input whose name starts with "aten" calls an ATen op instead (aten.hpp): "aten.mul.Tensor\n"
// that op, another name one picked by its hash; its tensor arguments are grads and saved tensors
// shaped as the node fields of the same name are.
// When the bytes run out every further decision reads 0, so a short input is
// a valid (and simple) case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "refgrad/program.hpp"

namespace refgrad::fuzzing {

struct GeneratedCase {
  Program program;
  std::string node;         // the node (or ATen op) the case is built around
  bool consistent = false;  // which mode made it
};

GeneratedCase generate_case(std::span<const std::uint8_t> input);

}  // namespace refgrad::fuzzing
