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
// (its .grad included). Only float tensors on the CPU; no in-place ops. A view
// op's result shares its input's storage, as in PyTorch, but since nothing is
// written in place that is never visible.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "refgrad/graph.hpp"
#include "refgrad/tensor.hpp"

namespace refgrad::eager {

struct VariableState;  // src/frontends/tape.hpp

// Tensor.register_hook: sees the grad flowing into the tensor; returns a
// replacement, or nullopt to leave it as it is.
using TensorHook = std::function<std::optional<Tensor>(const Tensor& grad)>;
// Tensor.register_post_accumulate_grad_hook: runs after a leaf's .grad was
// updated, and sees the new .grad.
using PostAccumulateGradHook = std::function<void(const Tensor& grad)>;

class Variable {
 public:
  Variable() = default;  // undefined (an optional input left out): every accessor raises
  bool defined() const { return state_ != nullptr; }
  const Tensor& data() const;
  bool requires_grad() const;
  bool is_leaf() const;                 // made by leaf()/constant(), or by an op on constants only
  // A leaf's .grad (None until a backward reaches it), or a non-leaf's after retain_grad().
  std::optional<Tensor> grad() const;
  void zero_grad();                     // .grad = None

  // Hooks, run by the program's `hook` instructions where PyTorch's engine
  // runs them. On a leaf a tensor hook runs before AccumulateGrad; on an op's
  // result, before its grad_fn. Registration order is run order.
  void register_hook(TensorHook hook) const;
  void register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;  // leaves only
  void retain_grad() const;  // a non-leaf's .grad is set by the next backward (replaced, not added)
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

// Ops. Each records the nodes PyTorch 2.13 records for the same call on the
// CPU (one or several: matmul on 3-d operands records a view, a bmm and an
// _unsafe_view) and only when an input requires grad; their saved fields are
// the ones PyTorch saves (docs/nodes.md), None where PyTorch leaves a tensor
// unsaved because the other input needs no grad. Bad arguments raise
// refgrad::Error naming the op and the shapes.

// --- elementwise and linear algebra (eager.cpp)
Variable add(const Variable& self, const Variable& other);  // AddBackward0, alpha 1; broadcasts
Variable add(const Variable& self, Scalar other);           // AddBackward1
Variable sub(const Variable& self, const Variable& other);  // SubBackward0, alpha 1; broadcasts
Variable mul(const Variable& self, const Variable& other);  // MulBackward0; broadcasts
Variable mul(const Variable& self, Scalar other);           // MulBackward1
Variable div(const Variable& self, const Variable& other);  // DivBackward0; broadcasts
Variable div(const Variable& self, Scalar other);           // DivBackward1
Variable pow(const Variable& self, Scalar exponent);        // PowBackward0
Variable sqrt(const Variable& self);                        // SqrtBackward0
Variable rsqrt(const Variable& self);                       // RsqrtBackward0
Variable relu(const Variable& self);
Variable tanh(const Variable& self);
Variable sigmoid(const Variable& self);
Variable exp(const Variable& self);
Variable log(const Variable& self);
Variable neg(const Variable& self);
Variable sum(const Variable& self);   // SumBackward0, over all elements
Variable sum(const Variable& self, const IntList& dim, bool keepdim = false);   // SumBackward1
Variable mean(const Variable& self);  // MeanBackward0, over all elements
Variable mean(const Variable& self, const IntList& dim, bool keepdim = false);  // MeanBackward1
Variable softmax(const Variable& self, std::int64_t dim);      // SoftmaxBackward0; dim saved as given
Variable log_softmax(const Variable& self, std::int64_t dim);  // LogSoftmaxBackward0; dim saved as given
Variable mm(const Variable& self, const Variable& mat2);    // MmBackward0
Variable bmm(const Variable& self, const Variable& mat2);   // BmmBackward0
// torch.matmul for 2-d @ 2-d (mm), n-d @ 2-d and 3-d @ 3-d with equal batch
// sizes, following ATen's choice: n-d @ 2-d folds into one mm (reshape, mm,
// _unsafe_view) when the matrix requires grad or the fold needs no copy;
// otherwise the batched path (expand, reshape, bmm, _unsafe_view). Other
// ranks raise.
Variable matmul(const Variable& self, const Variable& other);
Variable t(const Variable& self);                           // TBackward0, 2-d
// F.linear: x @ weight.t() + bias as torch records it — for 2-d x TBackward0
// and AddmmBackward0; for n-d x also a view before and after; without a bias
// (an undefined Variable) matmul with the transposed weight.
Variable linear(const Variable& input, const Variable& weight, const Variable& bias = {});

// --- shapes, views and indexing (eager_shape.cpp)
Variable view(const Variable& self, const Shape& shape);       // ViewBackward0; one -1 allowed
// Tensor.reshape: a view (ViewBackward0) of a contiguous tensor, _reshape_alias
// (ReshapeAliasBackward0) where strides allow a view, else clone + _unsafe_view.
Variable reshape(const Variable& self, const Shape& shape);
Variable flatten(const Variable& self, std::int64_t start_dim = 0, std::int64_t end_dim = -1);  // reshape
Variable transpose(const Variable& self, std::int64_t dim0, std::int64_t dim1);  // TransposeBackward0
Variable permute(const Variable& self, const IntList& dims);                   // PermuteBackward0
Variable unsqueeze(const Variable& self, std::int64_t dim);                    // UnsqueezeBackward0
Variable expand(const Variable& self, const Shape& sizes);                     // ExpandBackward0
Variable contiguous(const Variable& self);  // itself when contiguous, else CloneBackward0
Variable select(const Variable& self, std::int64_t dim, std::int64_t index);   // x[..., i, ...]: SelectBackward0
// x[start:end:step] along dim: SliceBackward0 (end saved as PyTorch saves an
// open end, INT64_MAX).
Variable slice(const Variable& self, std::int64_t dim, std::optional<std::int64_t> start,
               std::optional<std::int64_t> end, std::int64_t step = 1);
Variable index(const Variable& self, const Tensor& indices);  // x[indices] (int64, dim 0): IndexBackward0
Variable index_select(const Variable& self, std::int64_t dim, const Tensor& index);  // IndexSelectBackward0

// --- neural-network ops (eager_nn.cpp)
Variable gelu(const Variable& self, const std::string& approximate = "none");  // GeluBackward0
// F.layer_norm: NativeLayerNormBackward0 (mean and rstd saved as result1 and
// result2); weight and bias may be undefined Variables.
Variable layer_norm(const Variable& input, const IntList& normalized_shape, const Variable& weight = {},
                    const Variable& bias = {}, double eps = 1e-5);
// F.dropout(input, p, training) with a seeded mask. On the CPU PyTorch records
// a MulBackward0 by the mask scaled by 1/(1-p) (native_dropout, and its node,
// are CUDA's), so the tape records that. Not training, or p == 0: the input.
Variable dropout(const Variable& input, double p, bool training, Generator& generator);
// F.embedding: EmbeddingBackward0; indices int64 of any shape.
Variable embedding(const Variable& weight, const Tensor& indices, std::int64_t padding_idx = -1);
// F.nll_loss on (N, C) log-probabilities and (N) int64 targets: NllLossBackward0.
Variable nll_loss(const Variable& input, const Tensor& target, std::int64_t ignore_index = -100,
                  const std::string& reduction = "mean");
// F.cross_entropy on (N, C) logits: log_softmax over dim 1, then nll_loss.
Variable cross_entropy(const Variable& input, const Tensor& target, std::int64_t ignore_index = -100,
                       const std::string& reduction = "mean");
Variable mse_loss(const Variable& self, const Variable& target);  // MseLossBackward0, reduction mean
// F.conv2d on (N, C, H, W): ConvolutionBackward0; bias may be undefined.
Variable conv2d(const Variable& input, const Variable& weight, const Variable& bias = {}, const IntList& stride = {1, 1},
                const IntList& padding = {0, 0}, const IntList& dilation = {1, 1}, std::int64_t groups = 1);
// F.max_pool2d: MaxPool2DWithIndicesBackward0; stride defaults to kernel_size.
Variable max_pool2d(const Variable& input, const IntList& kernel_size, const IntList& stride = {},
                    const IntList& padding = {0, 0});

// The graph a backward from `roots` would functionalize: root grads named
// "g0", "g1", ... (grads[i], or ones for a one-element root when absent),
// leaves with their current .grad. Raises, in PyTorch's words, for a root
// that does not require grad. Hooks appear in the graph by name ("hook0",
// ...; retained grads as outputs "retained0", ...); backward() and grad()
// run the program with the hooks themselves.
Graph record(const std::vector<Variable>& roots, const std::vector<std::optional<Tensor>>& grads = {});

// root.backward(grad): accumulates into the leaves' .grad.
void backward(const Variable& root, std::optional<Tensor> grad = std::nullopt);

// torch.autograd.grad(outputs, inputs, allow_unused): the grads of `inputs`
// (leaves or not), nullopt for an unused one when allow_unused. Leaves' .grad
// are left as they are.
std::vector<std::optional<Tensor>> grad(const std::vector<Variable>& outputs, const std::vector<Variable>& inputs,
                                        bool allow_unused = false);

}  // namespace refgrad::eager
