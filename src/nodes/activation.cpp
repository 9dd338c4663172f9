// Activation nodes: relu.
#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// ReluBackward0 — relu(Tensor self)
//   self: threshold_backward(grad, result, 0)
// The grad at 0 is 0: relu's result is 0 there, and threshold_backward passes
// the grad only where result > 0.
struct ReluBackward0Saved {
  Tensor result;
};

Grads ReluBackward0(const Grads& grads, const ReluBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{threshold_backward(*grads[0], saved.result, 0)};
}

}  // namespace

void add_activation_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<ReluBackward0Saved, ReluBackward0>(
      {"ReluBackward0", "relu", {"self"}, 1, {}, "self: threshold_backward(grad, result, 0)"},
      {saved<&ReluBackward0Saved::result>("result", FieldKind::Tensor)}));
}

}  // namespace refgrad::nodes
