// The tests' torch oracle: expected values computed by torch 2.13 at test
// time, never pasted in. One Python process serves the whole test binary.
//
//   Tensor expected = torch_eval1("torch.var(a, dim=0, correction=0)", {x});
//   CHECK(allclose(var(x, {0}, 0), expected));
//
// The inputs are bound to a, b, c, ...; torch, F (torch.nn.functional), math
// and np are in scope. A result may be a tensor, a Python number, a dtype
// (returned as a 0-d tensor of that dtype) or a tuple/list of them.
#pragma once

#include <string>
#include <vector>

#include "refgrad/tensor.hpp"

namespace refgrad::testing {

struct TorchResult {
  bool ok = false;
  std::vector<Tensor> outputs;  // when ok
  std::string error;            // torch's exception, "Type: message", when not ok
};

// Evaluates `expression` in torch. Throws refgrad::Error if the torch process
// cannot be started or answers garbage; a Python exception is a result.
TorchResult torch_run(const std::string& expression, const std::vector<Tensor>& inputs = {});
// The outputs; a Python exception becomes a refgrad::Error with torch's message.
std::vector<Tensor> torch_eval(const std::string& expression, const std::vector<Tensor>& inputs = {});
// Exactly one output.
Tensor torch_eval1(const std::string& expression, const std::vector<Tensor>& inputs = {});
// Runs Python statements that leave their value in `result`, with the same
// names in scope; returns the outputs like torch_eval.
std::vector<Tensor> torch_exec(const std::string& code, const std::vector<Tensor>& inputs = {});
// str() of the expression's value, e.g. torch_text("repr(a)", {x}).
std::string torch_text(const std::string& expression, const std::vector<Tensor>& inputs = {});
// str() of `result` after running Python statements.
std::string torch_exec_text(const std::string& code, const std::vector<Tensor>& inputs = {});
// torch's error message for an expression that must raise; throws if it does not.
std::string torch_error(const std::string& expression, const std::vector<Tensor>& inputs = {});

}  // namespace refgrad::testing
