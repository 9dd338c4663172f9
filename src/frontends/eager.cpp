// The eager tape (include/refgrad/eager.hpp). Variables point at their
// grad_fn (a TapeNode) or, for leaves, hold their .grad; record() walks the
// TapeNodes from the roots into a Graph, one AccumulateGrad node per leaf.
// This file holds the tape itself, hooks, and the elementwise and
// linear-algebra ops; eager_shape.cpp and eager_nn.cpp hold the others.
#include "refgrad/eager.hpp"

#include <atomic>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "refgrad/error.hpp"
#include "refgrad/interpreter.hpp"
#include "refgrad/ops.hpp"
#include "tape.hpp"

namespace refgrad::eager {

namespace {

// PyTorch's thread-local sequence_nr counter, one per process here.
std::atomic<std::uint64_t> next_sequence_nr{0};

}  // namespace

namespace tape {

InputMetadata metadata_of(const Tensor& tensor) {
  InputMetadata metadata;
  metadata.dtype = tensor.dtype();
  metadata.shape = tensor.sizes();
  metadata.device = tensor.device();
  metadata.grad_dtype = tensor.dtype();
  return metadata;
}

TapeEdge gradient_edge(const Variable& variable) {
  if (!variable.defined()) return {};  // an optional input left out (a bias)
  const VariableState& state = *variable.state();
  if (state.grad_fn) return {state.grad_fn, nullptr, state.output_nr};
  if (state.requires_grad) return {nullptr, variable.state(), 0};
  return {};
}

std::vector<Variable> record_multi_output_op(const std::string& node_name, std::vector<Tensor> results,
                                             const std::vector<Variable>& inputs, Saved saved) {
  bool any_requires_grad = false;
  for (const Variable& input : inputs) any_requires_grad = any_requires_grad || (input.defined() && input.requires_grad());
  std::vector<Variable> outputs;
  if (!any_requires_grad) {
    for (Tensor& result : results) outputs.push_back(constant(std::move(result)));
    return outputs;
  }
  auto node = std::make_shared<TapeNode>();
  node->name = node_name;
  node->saved = std::move(saved);
  for (const Variable& input : inputs) node->next_edges.push_back(gradient_edge(input));
  node->sequence_nr = next_sequence_nr++;
  for (std::size_t i = 0; i < results.size(); ++i) {
    node->input_metadata.emplace_back(metadata_of(results[i]));
    auto state = std::make_shared<VariableState>();
    state->data = std::move(results[i]);
    state->requires_grad = true;
    state->grad_fn = node;
    state->output_nr = static_cast<std::uint32_t>(i);
    outputs.emplace_back(std::move(state));
  }
  return outputs;
}

Variable record_op(const std::string& node_name, Tensor result, const std::vector<Variable>& inputs, Saved saved) {
  return record_multi_output_op(node_name, {std::move(result)}, inputs, std::move(saved)).front();
}

FieldValue saved_if(bool needed, const Variable& variable) {
  if (needed) return variable.data();
  return None{};
}

FieldValue strides_if(bool needed, const Variable& variable) {
  if (needed) return IntList(variable.data().strides());
  return IntList{};
}

}  // namespace tape

namespace {

using tape::gradient_edge;
using tape::metadata_of;
using tape::record_op;
using tape::saved_if;
using tape::Saved;
using tape::strides_if;

// The fields add and sub save: alpha and both scalar types.
Saved alpha_saved(const Variable& self, const Variable& other) {
  return {{"alpha", Scalar(1)}, {"other_scalar_type", other.data().dtype()}, {"self_scalar_type", self.data().dtype()}};
}

// The fields the scalar ops add, mul and div save: the scalar (mul, div) and self's dtype.
Saved scalar_type_saved(const Variable& self) { return {{"self_scalar_type", self.data().dtype()}}; }
Saved scalar_and_type_saved(const Variable& self, Scalar other) {
  return {{"other", other}, {"self_scalar_type", self.data().dtype()}};
}

// The result-saving unary ops (exp, relu, tanh, sigmoid, sqrt, rsqrt): the node saves its output.
Variable unary_saving_result(const std::string& node_name, const Variable& self, Tensor result) {
  Saved saved = {{"result", result}};
  return record_op(node_name, std::move(result), {self}, std::move(saved));
}

}  // namespace

// --------------------------------------------------------------- Variable ---

const VariableState& Variable::checked() const {
  check(state_ != nullptr, "eager: the Variable is undefined");
  return *state_;
}
const Tensor& Variable::data() const { return checked().data; }
bool Variable::requires_grad() const { return checked().requires_grad; }
bool Variable::is_leaf() const { return checked().grad_fn == nullptr; }
std::optional<Tensor> Variable::grad() const { return checked().grad; }
void Variable::zero_grad() {
  checked();
  state_->grad.reset();
}
const std::string& Variable::name() const { return checked().name; }

Variable leaf(Tensor value, std::string name, bool requires_grad) {
  check(value.defined(), "eager::leaf: the tensor is undefined");
  check(!requires_grad || value.is_floating_point(),
        "only Tensors of floating point dtype can require gradients (leaf '", name, "')");
  auto state = std::make_shared<VariableState>();
  state->data = std::move(value);
  state->name = std::move(name);
  state->requires_grad = requires_grad;
  return Variable(std::move(state));
}

Variable constant(Tensor value) { return leaf(std::move(value), "", false); }

// -------------------------------------------------------------------- ops ---

Variable add(const Variable& self, const Variable& other) {
  return record_op("AddBackward0", refgrad::add(self.data(), other.data()), {self, other}, alpha_saved(self, other));
}

Variable add(const Variable& self, Scalar other) {
  return record_op("AddBackward1", refgrad::add(self.data(), other), {self}, scalar_type_saved(self));
}

Variable sub(const Variable& self, const Variable& other) {
  return record_op("SubBackward0", refgrad::sub(self.data(), other.data()), {self, other}, alpha_saved(self, other));
}

Variable mul(const Variable& self, const Variable& other) {
  Saved saved = {{"other", saved_if(self.requires_grad(), other)},
                 {"other_scalar_type", other.data().dtype()},
                 {"self", saved_if(other.requires_grad(), self)},
                 {"self_scalar_type", self.data().dtype()}};
  return record_op("MulBackward0", refgrad::mul(self.data(), other.data()), {self, other}, std::move(saved));
}

Variable mul(const Variable& self, Scalar other) {
  return record_op("MulBackward1", refgrad::mul(self.data(), other), {self}, scalar_and_type_saved(self, other));
}

Variable div(const Variable& self, const Variable& other) {
  // self's grad needs other; other's grad needs self and other.
  Saved saved = {{"other", other.data()},
                 {"self", saved_if(other.requires_grad(), self)},
                 {"self_scalar_type", self.data().dtype()}};
  return record_op("DivBackward0", refgrad::div(self.data(), other.data()), {self, other}, std::move(saved));
}

Variable div(const Variable& self, Scalar other) {
  return record_op("DivBackward1", refgrad::div(self.data(), other), {self}, scalar_and_type_saved(self, other));
}

Variable pow(const Variable& self, Scalar exponent) {
  return record_op("PowBackward0", refgrad::pow(self.data(), exponent), {self},
                   {{"exponent", exponent}, {"self", self.data()}});
}

Variable sqrt(const Variable& self) {
  return unary_saving_result("SqrtBackward0", self, refgrad::sqrt(self.data()));
}

Variable rsqrt(const Variable& self) {
  return unary_saving_result("RsqrtBackward0", self, refgrad::rsqrt(self.data()));
}

Variable mm(const Variable& self, const Variable& mat2) {
  check(self.data().dim() == 2 && mat2.data().dim() == 2, "eager::mm: expected 2-d operands, got ",
        shape_text(self.data().sizes()), " and ", shape_text(mat2.data().sizes()));
  Saved saved = {{"mat2", saved_if(self.requires_grad(), mat2)},
                 {"mat2_layout", Layout::Strided},
                 {"mat2_sym_sizes", IntList(mat2.data().sizes())},
                 {"mat2_sym_strides", strides_if(mat2.requires_grad(), mat2)},
                 {"self", saved_if(mat2.requires_grad(), self)},
                 {"self_layout", Layout::Strided},
                 {"self_sym_sizes", IntList(self.data().sizes())},
                 {"self_sym_strides", strides_if(self.requires_grad(), self)}};
  return record_op("MmBackward0", refgrad::mm(self.data(), mat2.data()), {self, mat2}, std::move(saved));
}

Variable bmm(const Variable& self, const Variable& mat2) {
  check(self.data().dim() == 3 && mat2.data().dim() == 3, "eager::bmm: expected 3-d operands, got ",
        shape_text(self.data().sizes()), " and ", shape_text(mat2.data().sizes()));
  Saved saved = {{"mat2", saved_if(self.requires_grad(), mat2)}, {"self", saved_if(mat2.requires_grad(), self)}};
  return record_op("BmmBackward0", refgrad::bmm(self.data(), mat2.data()), {self, mat2}, std::move(saved));
}

namespace {

// ATen's should_fold for n-d @ 2-d: fold self's batch dims into its rows and
// run one mm when other needs a grad (its grad is then one mm, not a bmm
// whose batch is summed away) or when the fold is a view (no copy).
bool should_fold(const Variable& self, const Variable& other) {
  if (other.requires_grad()) return true;
  const Tensor& tensor = self.data();
  if (tensor.numel() == 0) return true;
  for (std::int64_t i = 0; i + 2 < tensor.dim(); ++i) {
    if (tensor.stride(i) != tensor.stride(i + 1) * tensor.size(i + 1)) return false;
  }
  return true;
}

// sizes without the last `count` dims, followed by `tail`.
Shape replace_last_dims(const Shape& sizes, std::size_t count, const Shape& tail) {
  Shape result(sizes.begin(), sizes.end() - static_cast<std::ptrdiff_t>(count));
  result.insert(result.end(), tail.begin(), tail.end());
  return result;
}

// [..., n, m] @ [m, p] as one mm: reshape to [N, m], mm, _unsafe_view to [..., n, p].
Variable folded_matmul(const Variable& self, const Variable& other) {
  const Shape& sizes = self.data().sizes();
  const std::int64_t rows = numel_of(replace_last_dims(sizes, 1, {}));
  const Variable product = mm(reshape(self, {rows, sizes.back()}), other);
  return tape::unsafe_view(product, replace_last_dims(sizes, 1, {other.data().size(1)}));
}

// ATen's general matmul path: both operands expanded to self's batch dims
// and reshaped to 3-d, one bmm, _unsafe_view back to the batch dims.
Variable batched_matmul(const Variable& self, const Variable& other) {
  const Shape& self_sizes = self.data().sizes();
  const Shape batch = replace_last_dims(self_sizes, 2, {});
  const std::int64_t batch_size = numel_of(batch);
  const std::int64_t n = self.data().size(-2), m = self.data().size(-1), p = other.data().size(-1);
  const Variable self_3d = reshape(expand(self, self_sizes), {batch_size, n, m});
  const Variable other_3d = reshape(expand(other, replace_last_dims(batch, 0, {m, p})), {batch_size, m, p});
  return tape::unsafe_view(bmm(self_3d, other_3d), replace_last_dims(batch, 0, {n, p}));
}

}  // namespace

Variable matmul(const Variable& self, const Variable& other) {
  const Shape& a = self.data().sizes();
  const Shape& b = other.data().sizes();
  const bool supported = (a.size() >= 2 && b.size() == 2) || (a.size() == 3 && b.size() == 3 && a[0] == b[0]);
  check(supported, "eager::matmul: supports 2-d @ 2-d, n-d @ 2-d and 3-d @ 3-d with equal batch sizes, got ",
        shape_text(a), " and ", shape_text(b));
  check(a.back() == b[b.size() - 2], "eager::matmul: shapes ", shape_text(a), " and ", shape_text(b),
        " cannot be multiplied");
  if (a.size() == 2) return mm(self, other);
  if (b.size() == 2 && should_fold(self, other)) return folded_matmul(self, other);
  return batched_matmul(self, other);
}

Variable t(const Variable& self) {
  check(self.data().dim() == 2, "eager::t: only 2-d tensors are supported");
  return record_op("TBackward0", refgrad::t(self.data()), {self}, {});
}

namespace {

// addmm(bias, mat1, mat2) with beta = alpha = 1: AddmmBackward0.
Variable addmm(const Variable& bias, const Variable& mat1, const Variable& mat2) {
  const Tensor result = refgrad::addmm(bias.data(), mat1.data(), mat2.data());
  Saved saved = {{"alpha", Scalar(1)},
                 {"beta", Scalar(1)},
                 {"mat1", saved_if(mat2.requires_grad(), mat1)},
                 {"mat1_layout", Layout::Strided},
                 {"mat1_sym_sizes", IntList(mat1.data().sizes())},
                 {"mat1_sym_strides", strides_if(mat1.requires_grad(), mat1)},
                 {"mat2", saved_if(mat1.requires_grad(), mat2)},
                 {"mat2_layout", Layout::Strided},
                 {"mat2_sym_sizes", IntList(mat2.data().sizes())},
                 {"mat2_sym_strides", strides_if(mat2.requires_grad(), mat2)}};
  return record_op("AddmmBackward0", result, {bias, mat1, mat2}, std::move(saved));
}

// ATen's _flatten_nd_linear: [..., in] reshaped to [N, in], addmm, viewed back to [..., out].
Variable flattened_linear(const Variable& input, const Variable& weight, const Variable& bias) {
  const Shape& sizes = input.data().sizes();
  const Shape batch(sizes.begin(), sizes.end() - 1);
  const Variable flat = reshape(input, {numel_of(batch), sizes.back()});
  const Variable weight_t = t(weight);  // recorded after the reshape, as ATen does
  const Variable result = addmm(bias, flat, weight_t);
  Shape output_sizes = batch;
  output_sizes.push_back(result.data().size(1));
  return view(result, output_sizes);
}

}  // namespace

// ATen's linear: the fused addmm for 2-d input, or for contiguous input
// flattened to 2-d; otherwise matmul with weight.t() and then the bias added.
Variable linear(const Variable& input, const Variable& weight, const Variable& bias) {
  const Shape& input_sizes = input.data().sizes();
  const Shape& weight_sizes = weight.data().sizes();
  check(!input_sizes.empty() && weight_sizes.size() == 2 && input_sizes.back() == weight_sizes[1],
        "eager::linear: expected input [..., in] and weight [out, in], got ", shape_text(input_sizes), " and ",
        shape_text(weight_sizes));
  if (bias.defined()) {
    if (input_sizes.size() == 2) {
      const Variable weight_t = t(weight);
      return addmm(bias, input, weight_t);
    }
    if (input.data().is_contiguous() && (input_sizes.size() == 3 || bias.data().dim() == 1)) {
      return flattened_linear(input, weight, bias);
    }
  }
  const Variable weight_t = t(weight);
  const Variable output = matmul(input, weight_t);
  return bias.defined() ? add(output, bias) : output;  // ATen adds in place: the same AddBackward0
}

Variable relu(const Variable& self) { return unary_saving_result("ReluBackward0", self, refgrad::relu(self.data())); }
Variable tanh(const Variable& self) { return unary_saving_result("TanhBackward0", self, refgrad::tanh(self.data())); }
Variable sigmoid(const Variable& self) {
  return unary_saving_result("SigmoidBackward0", self, refgrad::sigmoid(self.data()));
}
Variable exp(const Variable& self) { return unary_saving_result("ExpBackward0", self, refgrad::exp(self.data())); }

Variable log(const Variable& self) {
  return record_op("LogBackward0", refgrad::log(self.data()), {self}, {{"self", self.data()}});
}

Variable neg(const Variable& self) { return record_op("NegBackward0", refgrad::neg(self.data()), {self}, {}); }

Variable sum(const Variable& self) {
  return record_op("SumBackward0", refgrad::sum(self.data()), {self}, {{"self_sym_sizes", IntList(self.data().sizes())}});
}

Variable mean(const Variable& self) {
  Saved saved = {{"self_sym_numel", self.data().numel()}, {"self_sym_sizes", IntList(self.data().sizes())}};
  return record_op("MeanBackward0", refgrad::mean(self.data()), {self}, std::move(saved));
}

Variable sum(const Variable& self, const IntList& dim, bool keepdim) {
  Saved saved = {{"dim", dim}, {"keepdim", keepdim}, {"self_sym_sizes", IntList(self.data().sizes())}};
  return record_op("SumBackward1", refgrad::sum(self.data(), dim, keepdim), {self}, std::move(saved));
}

Variable mean(const Variable& self, const IntList& dim, bool keepdim) {
  Saved saved = {{"dim", dim},
                 {"keepdim", keepdim},
                 {"self_sym_numel", self.data().numel()},
                 {"self_sym_sizes", IntList(self.data().sizes())}};
  return record_op("MeanBackward1", refgrad::mean(self.data(), dim, keepdim), {self}, std::move(saved));
}

namespace {

// softmax and log_softmax save dim (unwrapped, as given), the input's dtype and their result.
Variable softmax_like(const std::string& node_name, const Variable& self, std::int64_t dim, Tensor result) {
  Saved saved = {{"dim", dim}, {"self_scalar_type", self.data().dtype()}, {"result", result}};
  return record_op(node_name, std::move(result), {self}, std::move(saved));
}

}  // namespace

Variable softmax(const Variable& self, std::int64_t dim) {
  return softmax_like("SoftmaxBackward0", self, dim, refgrad::softmax(self.data(), dim));
}

Variable log_softmax(const Variable& self, std::int64_t dim) {
  return softmax_like("LogSoftmaxBackward0", self, dim, refgrad::log_softmax(self.data(), dim));
}


// ----------------------------------------------------------------- record ---

namespace {

// Copies TapeNodes into a Graph, each once, depth first from the roots in
// next-edge order (so node indices, and the saved tensors' names, are stable).
class GraphBuilder {
 public:
  Edge edge(const TapeEdge& tape_edge) {
    if (tape_edge.node) return {node_index(tape_edge.node), tape_edge.input_nr};
    if (tape_edge.leaf) return {leaf_index(tape_edge.leaf), 0};
    return {};
  }
  Graph take() { return std::move(graph_); }
  // The leaves added so far, for writing their grads back after a run.
  const std::vector<std::shared_ptr<VariableState>>& leaves() const { return leaf_states_; }

 private:
  int node_index(const std::shared_ptr<TapeNode>& node) {
    const auto found = nodes_.find(node.get());
    if (found != nodes_.end()) return found->second;
    const int index = add({});
    nodes_[node.get()] = index;
    GraphNode graph_node;
    graph_node.name = node->name;
    graph_node.saved = node->saved;
    graph_node.sequence_nr = node->sequence_nr;
    graph_node.input_metadata = node->input_metadata;
    for (const TapeEdge& next : node->next_edges) graph_node.next_edges.push_back(edge(next));
    graph_.nodes[static_cast<std::size_t>(index)] = std::move(graph_node);
    return index;
  }

  int leaf_index(const std::shared_ptr<VariableState>& leaf) {
    const auto found = leaves_.find(leaf.get());
    if (found != leaves_.end()) return found->second;
    check(!leaf->name.empty(), "eager: a leaf that requires grad needs a name");
    for (const GraphLeaf& other : graph_.leaves) {
      check(other.name != leaf->name, "eager: two leaves are named '", leaf->name, "'");
    }
    graph_.leaves.push_back({leaf->name, TensorType{leaf->data.dtype(), leaf->data.sizes(), leaf->data.device()},
                             leaf->grad});
    GraphNode accumulate;
    accumulate.kind = GraphNode::Kind::AccumulateGrad;
    accumulate.leaf = leaf->name;
    accumulate.sequence_nr = kAccumulateGradSequenceNr;
    accumulate.input_metadata = {metadata_of(leaf->data)};
    const int index = add(std::move(accumulate));
    leaves_[leaf.get()] = index;
    leaf_states_.push_back(leaf);
    return index;
  }

  int add(GraphNode node) {
    graph_.nodes.push_back(std::move(node));
    return static_cast<int>(graph_.nodes.size()) - 1;
  }

  Graph graph_;
  std::map<const TapeNode*, int> nodes_;
  std::map<const VariableState*, int> leaves_;
  std::vector<std::shared_ptr<VariableState>> leaf_states_;
};

// Adds the roots' nodes to the builder and returns the graph with its roots set.
Graph record_roots(GraphBuilder& builder, const std::vector<Variable>& roots,
                   const std::vector<std::optional<Tensor>>& grads) {
  check(grads.empty() || grads.size() == roots.size(), "eager: ", roots.size(), " roots but ", grads.size(),
        " grads");
  std::vector<std::pair<std::string, std::optional<Tensor>>> root_grads;
  std::vector<Edge> root_edges;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const Variable& root = roots[i];
    check(root.requires_grad(), "element ", i, " of tensors does not require grad and does not have a grad_fn");
    std::optional<Tensor> grad = grads.empty() ? std::nullopt : grads[i];
    if (!grad) {
      check(root.data().numel() == 1, "grad can be implicitly created only for scalar outputs");
      grad = ones_like(root.data());
    }
    root_edges.push_back(builder.edge(gradient_edge(root)));
    root_grads.emplace_back(fmt::format("g{}", i), std::move(grad));
  }
  Graph graph = builder.take();
  graph.roots = std::move(root_edges);
  graph.root_grads = std::move(root_grads);
  return graph;
}

// Runs the functionalized graph; leaf grads by "@name", outputs by "^name".
TensorMap run(const Graph& graph, const FunctionalizeOptions& options) {
  const Functionalized functionalized = functionalize(graph, options);
  return run_program(bind(functionalized.bundle));
}

}  // namespace

Graph record(const std::vector<Variable>& roots, const std::vector<std::optional<Tensor>>& grads) {
  GraphBuilder builder;
  return record_roots(builder, roots, grads);
}

void backward(const Variable& root, std::optional<Tensor> grad) {
  GraphBuilder builder;
  const Graph graph = record_roots(builder, {root}, {std::move(grad)});
  const TensorMap results = run(graph, {});
  for (const std::shared_ptr<VariableState>& leaf : builder.leaves()) {
    const auto found = results.find("@" + leaf->name);
    if (found != results.end()) leaf->grad = found->second;
  }
}

std::vector<std::optional<Tensor>> grad(const std::vector<Variable>& outputs, const std::vector<Variable>& inputs,
                                        bool allow_unused) {
  GraphBuilder builder;
  // The captures' nodes go in first: record_roots takes the builder's graph.
  std::vector<std::pair<std::string, Edge>> captures;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check(inputs[i].requires_grad(), "One of the differentiated Tensors does not require grad");
    captures.emplace_back(fmt::format("input{}", i), builder.edge(gradient_edge(inputs[i])));
  }
  Graph graph = record_roots(builder, outputs, {});
  graph.captures = captures;

  FunctionalizeOptions options;
  options.accumulate_grad = false;
  options.allow_unused = allow_unused;
  const TensorMap results = run(graph, options);
  std::vector<std::optional<Tensor>> grads;
  for (const auto& capture : captures) {
    const auto found = results.find("^" + capture.first);
    grads.push_back(found == results.end() || !found->second.defined() ? std::nullopt
                                                                        : std::optional<Tensor>(found->second));
  }
  return grads;
}

}  // namespace refgrad::eager
