// torch's own node called on a grad: the oracle for nodes that torch records below other nodes
// (EuclideanDistBackward0 under cdist's view) or whose grads autograd sums back to broadcast inputs.
#pragma once

#include <string>
#include <vector>

#include "node_test.hpp"

namespace refgrad::testing {

// Runs the Python statements `forward` (over the inputs a, b, ...; they leave the output in `out`),
// walks from out.grad_fn along next_functions[0] to the node named `node`, draws a random grad g of
// the shape and dtype of `grad_like` (an expression over fn, e.g. "fn._saved_result"), calls fn(g)
// and returns the tensors of the tuple `saved` (an expression over fn), then g, then each output of
// fn(g): torch's node itself, without the engine's validate. An undefined output comes back as a 0-d
// NaN of float64 (see is_undefined_output). signed(i) reads a saved negative int back.
inline std::vector<Tensor> torch_node_call(const std::string& node, const std::string& forward,
                                           const std::string& grad_like, const std::string& saved,
                                           const std::vector<Tensor>& inputs, int seed = 7) {
  const std::string code = R"(
def signed(d): return d - 2**64 if d >= 2**63 else d
)" + forward + R"(
fn = out.grad_fn
while fn is not None and fn.name() != ")" + node + R"(":
    fn = fn.next_functions[0][0] if fn.next_functions else None
assert fn is not None, "no )" + node + R"( below " + out.grad_fn.name()
like = )" + grad_like + R"(
gen = torch.Generator().manual_seed()" + std::to_string(seed) + R"()
g = torch.randn(like.shape, generator=gen, dtype=torch.float64)
if like.dtype.is_complex: g = torch.complex(g, torch.randn(like.shape, generator=gen, dtype=torch.float64))
g = g.to(like.dtype)
outs = fn(g)
if not isinstance(outs, (tuple, list)): outs = (outs,)
result = (*)" + saved + R"(, g, *[torch.tensor(float('nan'), dtype=torch.float64) if o is None else o.resolve_conj() for o in outs])
)";
  return torch_exec(code, inputs);
}

inline bool is_undefined_output(const Tensor& t) {
  return t.dim() == 0 && t.dtype() == DType::Float64 && std::isnan(t.item<double>());
}

}  // namespace refgrad::testing
