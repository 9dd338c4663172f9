// L4: refgrad's own eager tape. Ops on Variables compute their result with the
// L0 ops and record the node PyTorch's autograd would record (its name, its
// saved fields as PyTorch saves them, a sequence_nr from one global counter,
// the input metadata of each output slot). backward() and grad() turn the
// recorded graph into a program with functionalize() (graph.hpp) and run it
// with the interpreter, so the tape runs exactly the program PyTorch's engine
// would run.
//
//   Variable w = leaf(from_vector<double>({1, 2}, {2}), "w");
//   Variable loss = sum(mul(w, w));
//   backward(loss);
//   *w.grad();  // 2 * w
//
// Variables share their state like torch tensors: a copy is the same tensor
// (its .grad included). Only float tensors on the CPU; no in-place ops, views
// or hooks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "refgrad/graph.hpp"
#include "refgrad/tensor.hpp"

namespace refgrad::eager {

struct VariableState;  // eager.cpp

class Variable {
 public:
  Variable() = default;  // undefined: every accessor raises
  const Tensor& data() const;
  bool requires_grad() const;
  bool is_leaf() const;                 // made by leaf()/constant(), or by an op on constants only
  std::optional<Tensor> grad() const;   // a leaf's .grad (None until a backward reaches it)
  void zero_grad();                     // .grad = None
  const std::string& name() const;      // a leaf's name; empty for an op's result
  bool same_as(const Variable& other) const { return state_ == other.state_; }

  explicit Variable(std::shared_ptr<VariableState> state) : state_(std::move(state)) {}
  const std::shared_ptr<VariableState>& state() const { return state_; }

 private:
  const VariableState& checked() const;
  std::shared_ptr<VariableState> state_;
};

// A leaf: its grad accumulates into .grad. Names must be unique within one graph.
Variable leaf(Tensor value, std::string name, bool requires_grad = true);
Variable constant(Tensor value);  // requires_grad false

// Ops. Each records its node only when an input requires grad; its saved
// fields are the ones PyTorch saves (docs/nodes.md), None where PyTorch leaves
// a tensor unsaved because the other input needs no grad.
Variable add(const Variable& self, const Variable& other);  // AddBackward0, alpha 1; broadcasts
Variable sub(const Variable& self, const Variable& other);  // SubBackward0, alpha 1; broadcasts
Variable mul(const Variable& self, const Variable& other);  // MulBackward0; broadcasts
Variable mm(const Variable& self, const Variable& mat2);    // MmBackward0
Variable matmul(const Variable& self, const Variable& other);  // 2-d only: mm, as torch records it
Variable t(const Variable& self);                           // TBackward0, 2-d
// x @ weight.t() + bias for 2-d x: TBackward0 and AddmmBackward0, as torch records F.linear.
Variable linear(const Variable& input, const Variable& weight, const Variable& bias);
Variable relu(const Variable& self);
Variable tanh(const Variable& self);
Variable sigmoid(const Variable& self);
Variable exp(const Variable& self);
Variable log(const Variable& self);
Variable neg(const Variable& self);
Variable sum(const Variable& self);   // SumBackward0, over all elements
Variable mean(const Variable& self);  // MeanBackward0, over all elements
Variable softmax(const Variable& self, std::int64_t dim);      // SoftmaxBackward0; dim saved as given
Variable log_softmax(const Variable& self, std::int64_t dim);  // LogSoftmaxBackward0; dim saved as given
Variable mse_loss(const Variable& self, const Variable& target);  // MseLossBackward0, reduction mean

// The graph a backward from `roots` would functionalize: root grads named
// "g0", "g1", ... (grads[i], or ones for a one-element root when absent),
// leaves with their current .grad. Raises, in PyTorch's words, for a root
// that does not require grad.
Graph record(const std::vector<Variable>& roots, const std::vector<std::optional<Tensor>>& grads = {});

// root.backward(grad): accumulates into the leaves' .grad.
void backward(const Variable& root, std::optional<Tensor> grad = std::nullopt);

// torch.autograd.grad(outputs, inputs, allow_unused): the grads of `inputs`
// (leaves or not), nullopt for an unused one when allow_unused. Leaves' .grad
// are left as they are.
std::vector<std::optional<Tensor>> grad(const std::vector<Variable>& outputs, const std::vector<Variable>& inputs,
                                        bool allow_unused = false);

}  // namespace refgrad::eager
