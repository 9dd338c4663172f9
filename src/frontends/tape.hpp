// The eager tape's insides, shared by the files that define its ops
// (eager.cpp: Variable, record, backward, hooks and the elementwise and
// linear-algebra ops; eager_shape.cpp: views and indexing; eager_nn.cpp: the
// neural-network ops). Not installed: users see include/refgrad/eager.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "refgrad/eager.hpp"

namespace refgrad::eager {

struct TapeNode;

// Where a grad goes: input `input_nr` of `node`, or a leaf's accumulator;
// neither for an input that needs no grad (PyTorch's invalid edge).
struct TapeEdge {
  std::shared_ptr<TapeNode> node;
  std::shared_ptr<VariableState> leaf;
  std::uint32_t input_nr = 0;
};

struct TapeNode {
  std::string name;
  std::vector<std::pair<std::string, FieldValue>> saved;
  std::vector<TapeEdge> next_edges;
  std::uint64_t sequence_nr = 0;
  std::vector<std::optional<InputMetadata>> input_metadata;  // one per output
  // Hooks registered on the node's outputs (Tensor.register_hook on a non-leaf).
  std::map<std::uint32_t, std::vector<TensorHook>> tensor_pre_hooks;
  std::map<std::uint32_t, std::weak_ptr<VariableState>> retains_grad;  // retain_grad() on output i
};

struct VariableState {
  Tensor data;
  std::string name;
  bool requires_grad = false;
  std::optional<Tensor> grad;
  std::shared_ptr<TapeNode> grad_fn;  // null for a leaf
  std::uint32_t output_nr = 0;
  // A leaf's hooks: tensor hooks (run before AccumulateGrad) and
  // post-accumulate-grad hooks, in registration order.
  std::vector<TensorHook> tensor_hooks;
  std::vector<PostAccumulateGradHook> post_accumulate_grad_hooks;
};

namespace tape {

using Saved = std::vector<std::pair<std::string, FieldValue>>;

// dtype, shape and device of `tensor`, as its grad must have them (validate_outputs).
InputMetadata metadata_of(const Tensor& tensor);

// The edge a grad for `variable` flows along: its grad_fn's output slot, its
// accumulator (a leaf that requires grad), or none.
TapeEdge gradient_edge(const Variable& variable);

// The result of an op: a constant when no input requires grad; otherwise
// output 0 of a new node `node_name` with `saved`, whose next edges are the
// inputs' gradient edges (in order, one per differentiable input).
Variable record_op(const std::string& node_name, Tensor result, const std::vector<Variable>& inputs, Saved saved);

// A node with several outputs (split, unbind): one Variable per result.
std::vector<Variable> record_multi_output_op(const std::string& node_name, std::vector<Tensor> results,
                                             const std::vector<Variable>& inputs, Saved saved);

// A tensor PyTorch saves only when `needed` (another input requires grad); None otherwise.
FieldValue saved_if(bool needed, const Variable& variable);

// Strides PyTorch saves only when the tensor's own grad is needed (empty otherwise).
FieldValue strides_if(bool needed, const Variable& variable);

// ATen's _unsafe_view (UnsafeViewBackward0), which reshape and matmul record
// after a copy or an mm; defined in eager_shape.cpp.
Variable unsafe_view(const Variable& self, const Shape& shape);

}  // namespace tape
}  // namespace refgrad::eager
