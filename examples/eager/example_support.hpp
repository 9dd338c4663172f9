// What the eager examples share: the command line, printing the backward
// program, gradient norms, an SGD step and parameter initialization.
#pragma once

#include <cmath>
#include <cstdlib>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "refgrad/eager.hpp"
#include "refgrad/error.hpp"
#include "refgrad/graph.hpp"
#include "refgrad/ops.hpp"
#include "refgrad/program.hpp"

namespace example {

namespace eager = refgrad::eager;
using eager::Variable;

// `--print-program` asks for the backward program instead of a run; anything
// else on the command line is a mistake.
inline bool wants_program(int argc, char** argv) {
  if (argc == 1) return false;
  if (argc == 2 && std::string_view(argv[1]) == "--print-program") return true;
  refgrad::fail(fmt::format("usage: {} [--print-program]", argv[0]));
}

// The program backward(loss) would run: the tape's graph, ordered by the
// engine's rules and written out as instructions (graph.hpp, program.hpp).
inline void print_backward_program(const Variable& loss) {
  fmt::print("{}", refgrad::print_program(refgrad::functionalize(eager::record({loss})).bundle.program));
}

// A parameter drawn from N(0, scale^2) with a seeded generator, so every run
// is the same. The name is what the program calls the leaf (@name).
inline Variable parameter(const refgrad::Shape& shape, double scale, refgrad::Generator& generator,
                          const std::string& name) {
  return eager::leaf(refgrad::mul(refgrad::randn(shape, generator), scale), name);
}

inline void print_grad_norms(const std::vector<Variable>& parameters) {
  for (const Variable& p : parameters) {
    fmt::print("  |grad {:<16}| = {:.6f}\n", p.name(), refgrad::norm(*p.grad()).item<double>());
  }
}

// Plain SGD: w <- w - lr * w.grad. The tape has no in-place ops, so each
// parameter becomes a new leaf with the same name (and no .grad), as after
// `with torch.no_grad(): w -= lr * w.grad; w.grad = None`.
inline std::vector<Variable> sgd_step(const std::vector<Variable>& parameters, double lr) {
  std::vector<Variable> updated;
  for (const Variable& p : parameters) {
    updated.push_back(eager::leaf(refgrad::sub(p.data(), refgrad::mul(*p.grad(), lr)), p.name()));
  }
  return updated;
}

// Runs an example's body, turning a refgrad::Error into a message and exit code 1.
template <class Body>
int run(Body body) {
  try {
    return body();
  } catch (const refgrad::Error& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return EXIT_FAILURE;
  }
}

}  // namespace example
