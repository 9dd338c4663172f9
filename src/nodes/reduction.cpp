// Reduction nodes: sum.
#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// SumBackward0 — sum(Tensor self, *, ScalarType? dtype=None)
//   self: grad.expand_symint(self.sym_sizes())
struct SumBackward0Saved {
  IntList self_sym_sizes;
};

Grads SumBackward0(const Grads& grads, const SumBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{expand(*grads[0], saved.self_sym_sizes)};
}

}  // namespace

void add_reduction_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<SumBackward0Saved, SumBackward0>(
      {"SumBackward0", "sum", {"self"}, 1, {}, "self: grad.expand_symint(self.sym_sizes())"},
      {saved<&SumBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
}

}  // namespace refgrad::nodes
