// functionalize(): an autograd Graph to a backward program, in the order
// PyTorch's engine runs it (../shared/reference/pytorch-autograd.md §2).
//
// Two passes. The schedule (which nodes run, in which order) depends only on
// the graph's structure, never on values, so it is computed first: eager's
// ready queue (§2.2) or compiled autograd's LIFO worklist. Then the Writer
// walks the schedule and writes each node as the engine executes it (§2.4):
// captures and tensor pre-hooks, pre-hooks, the call, validate, post-hooks,
// and the hand-off of each output to the input buffer of the node it feeds
// (§2.3), which becomes `add OLD, NEW` when the slot already holds a grad.
#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "refgrad/error.hpp"
#include "refgrad/graph.hpp"

namespace refgrad {
namespace {

using Kind = GraphNode::Kind;

// ------------------------------------------------------------- the graph ---

// Incoming grad slots of a node (its differentiable forward outputs): AccumulateGrad has one.
std::size_t slot_count(const GraphNode& node) {
  return node.kind == Kind::AccumulateGrad ? 1 : node.input_metadata.size();
}

void check_edge(const Graph& graph, const Edge& edge, const std::string& where) {
  if (!edge.valid()) return;
  check(static_cast<std::size_t>(edge.node) < graph.nodes.size(), "functionalize: ", where, " points to node ",
        edge.node, ", but the graph has ", graph.nodes.size(), " nodes");
  const std::size_t slots = slot_count(graph.nodes[static_cast<std::size_t>(edge.node)]);
  check(edge.input_nr < slots, "functionalize: ", where, " points to input ", edge.input_nr, " of node ", edge.node,
        ", which has ", slots, " (one per input_metadata)");
}

std::string describe_node(const Graph& graph, int index) {
  const GraphNode& node = graph.nodes[static_cast<std::size_t>(index)];
  const std::string name = node.kind == Kind::AccumulateGrad ? "AccumulateGrad(@" + node.leaf + ")" : node.name;
  return fmt::format("node {} ({})", index, name);
}

// Kahn's algorithm: peel nodes no edge leads to; a cycle is what remains.
void check_acyclic(const Graph& graph) {
  std::vector<int> incoming(graph.nodes.size(), 0);
  for (const GraphNode& node : graph.nodes) {
    for (const Edge& edge : node.next_edges) {
      if (edge.valid()) ++incoming[static_cast<std::size_t>(edge.node)];
    }
  }
  std::vector<std::size_t> free;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    if (incoming[n] == 0) free.push_back(n);
  }
  std::size_t peeled = 0;
  while (!free.empty()) {
    const std::size_t n = free.back();
    free.pop_back();
    ++peeled;
    for (const Edge& edge : graph.nodes[n].next_edges) {
      if (edge.valid() && --incoming[static_cast<std::size_t>(edge.node)] == 0) {
        free.push_back(static_cast<std::size_t>(edge.node));
      }
    }
  }
  check(peeled == graph.nodes.size(), "functionalize: the graph has a cycle");
}

// What functionalize needs to hold before it can order anything: edges in
// range, roots with a grad each, leaves declared.
void check_graph(const Graph& graph, const FunctionalizeOptions& options) {
  check(!graph.roots.empty(), "functionalize: the graph has no roots");
  check(graph.root_grads.size() == graph.roots.size(), "functionalize: ", graph.roots.size(), " roots but ",
        graph.root_grads.size(), " root grads");
  for (std::size_t i = 0; i < graph.roots.size(); ++i) {
    check(graph.roots[i].valid(), "element ", i, " of tensors does not require grad and does not have a grad_fn");
    check_edge(graph, graph.roots[i], fmt::format("root {}", i));
  }
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const GraphNode& node = graph.nodes[n];
    for (std::size_t i = 0; i < node.next_edges.size(); ++i) {
      check_edge(graph, node.next_edges[i], fmt::format("{}'s edge {}", describe_node(graph, static_cast<int>(n)), i));
    }
    if (node.kind == Kind::AccumulateGrad) {
      const bool known = std::any_of(graph.leaves.begin(), graph.leaves.end(),
                                     [&](const GraphLeaf& leaf) { return leaf.name == node.leaf; });
      check(known, describe_node(graph, static_cast<int>(n)), " names leaf @", node.leaf, ", which the graph lacks");
    }
  }
  check_acyclic(graph);
  for (const auto& [name, edge] : graph.captures) {
    check(edge.valid(), "One of the differentiated Tensors does not require grad");
    check_edge(graph, edge, "capture ^" + name);
  }
  check(options.accumulate_grad || !graph.captures.empty(), "grad requires non-empty inputs.");
}

std::uint64_t sequence_nr(const GraphNode& node) {
  return node.kind == Kind::AccumulateGrad ? kAccumulateGradSequenceNr : node.sequence_nr;
}

// compute_dependencies (§2.1): a DFS from the root over every edge; a node
// reached twice from one parent counts twice. `start` are the root's edges.
std::vector<int> count_dependencies(const Graph& graph, const std::vector<Edge>& start) {
  std::vector<int> dependencies(graph.nodes.size(), 0);
  std::vector<bool> seen(graph.nodes.size(), false);
  std::vector<const std::vector<Edge>*> stack{&start};
  while (!stack.empty()) {
    const std::vector<Edge>& edges = *stack.back();
    stack.pop_back();
    for (const Edge& edge : edges) {
      if (!edge.valid()) continue;
      const auto next = static_cast<std::size_t>(edge.node);
      dependencies[next] += 1;
      if (!seen[next]) {
        seen[next] = true;
        stack.push_back(&graph.nodes[next].next_edges);
      }
    }
  }
  return dependencies;
}

// GraphTask::exec_info_ (init_to_execute, §2.6): empty for a plain backward();
// with captures, a node runs (should_execute) when it is needed — it has a
// path to a capture, or (backward(inputs=...)) is one — or when it captures.
class ExecInfo {
 public:
  ExecInfo(const Graph& graph, const FunctionalizeOptions& options) : graph_(graph) {
    if (graph.captures.empty()) return;
    enabled_ = true;
    const std::size_t count = graph.nodes.size();
    captured_.assign(count, false);
    forced_.assign(count, false);
    for (const auto& capture : graph.captures) {
      const auto node = static_cast<std::size_t>(capture.second.node);
      (options.accumulate_grad ? forced_ : captured_)[node] = true;
    }
    needed_.assign(count, kUnknown);
  }

  bool enabled() const { return enabled_; }
  // The single-root eager engine runs its root node itself: graph_root is needed.
  void force_needed(int node) {
    if (enabled_) forced_[static_cast<std::size_t>(node)] = true;
  }
  bool captures(int node) const { return enabled_ && captured_[static_cast<std::size_t>(node)]; }
  bool needed(int node) {
    if (!enabled_) return true;
    if (needed_[static_cast<std::size_t>(node)] == kUnknown) compute_needed(node);
    return needed_[static_cast<std::size_t>(node)] == 1;
  }
  bool should_execute(int node) { return needed(node) || captures(node); }
  // task_should_compute_output: the edge is valid and leads somewhere that runs.
  bool should_compute(const Edge& edge) { return edge.valid() && should_execute(edge.node); }

 private:
  // needed = forced, or some next node should execute: a post-order walk
  // without recursion, so that deep graphs cannot overflow the stack.
  void compute_needed(int start) {
    constexpr int kVisiting = -2;
    std::vector<std::pair<int, std::size_t>> stack{{start, 0}};  // node, next edge to visit
    needed_[static_cast<std::size_t>(start)] = kVisiting;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const std::vector<Edge>& edges = graph_.nodes[static_cast<std::size_t>(node)].next_edges;
      if (next < edges.size()) {
        const Edge& edge = edges[next++];
        if (!edge.valid()) continue;
        int& state = needed_[static_cast<std::size_t>(edge.node)];
        if (state == kUnknown) {  // the graph is acyclic (check_graph), so kVisiting is never met again
          state = kVisiting;
          stack.emplace_back(edge.node, 0);
        }
        continue;
      }
      bool any = forced_[static_cast<std::size_t>(node)];
      for (const Edge& edge : edges) any = any || (edge.valid() && should_execute(edge.node));
      needed_[static_cast<std::size_t>(node)] = any ? 1 : 0;
      stack.pop_back();
    }
  }

  const Graph& graph_;
  bool enabled_ = false;
  std::vector<bool> captured_, forced_;
  static constexpr int kUnknown = -1;
  std::vector<int> needed_;  // 1 needed, 0 not, kUnknown not computed yet
};

// ------------------------------------------------------------ scheduling ---

// ReadyQueue::CompareNodeTaskTime: true when t2 runs before t1, i.e. the
// higher sequence_nr first. std::priority_queue with this comparator and
// the engine's push order breaks ties (AccumulateGrad's) as PyTorch does.
struct NodeTask {
  std::uint64_t sequence_nr;
  int node;
};
struct CompareNodeTaskTime {
  bool operator()(const NodeTask& t1, const NodeTask& t2) const { return t1.sequence_nr < t2.sequence_nr; }
};

// The nodes the eager engine evaluates, in order. With one root the root
// node itself is the graph root (skip_dummy_node); else a GraphRoot hands
// the root grads to the roots' edges first.
std::vector<int> eager_schedule(const Graph& graph, ExecInfo& exec, bool skip_dummy_node) {
  const std::vector<Edge> root_node_edges{{graph.roots[0].node, 0}};
  std::vector<int> dependencies = count_dependencies(graph, skip_dummy_node ? root_node_edges : graph.roots);
  std::priority_queue<NodeTask, std::vector<NodeTask>, CompareNodeTaskTime> ready;
  const auto release = [&](const std::vector<Edge>& edges) {  // evaluate_function's loop over outputs
    for (const Edge& edge : edges) {
      if (!edge.valid()) continue;
      const bool is_ready = --dependencies[static_cast<std::size_t>(edge.node)] == 0;
      if (!exec.should_execute(edge.node)) continue;
      if (is_ready) ready.push({sequence_nr(graph.nodes[static_cast<std::size_t>(edge.node)]), edge.node});
    }
  };
  if (skip_dummy_node) {
    ready.push({sequence_nr(graph.nodes[static_cast<std::size_t>(graph.roots[0].node)]), graph.roots[0].node});
  } else {
    release(graph.roots);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int node = ready.top().node;
    ready.pop();
    order.push_back(node);
    if (exec.needed(node)) release(graph.nodes[static_cast<std::size_t>(node)].next_edges);
  }
  return order;
}

// Compiled autograd's order (_compiled_autograd_impl): a LIFO worklist from a
// GraphRoot; a node is pushed when its last dependency has been visited.
std::vector<int> compiled_autograd_schedule(const Graph& graph, ExecInfo& exec) {
  std::vector<int> dependencies = count_dependencies(graph, graph.roots);
  constexpr int kGraphRoot = -1;
  std::vector<int> worklist{kGraphRoot};
  std::vector<int> order;
  while (!worklist.empty()) {
    const int node = worklist.back();
    worklist.pop_back();
    if (node != kGraphRoot) order.push_back(node);
    const std::vector<Edge>& edges =
        node == kGraphRoot ? graph.roots : graph.nodes[static_cast<std::size_t>(node)].next_edges;
    for (const Edge& edge : edges) {
      if (!edge.valid() || !exec.should_execute(edge.node)) continue;
      if (--dependencies[static_cast<std::size_t>(edge.node)] == 0) worklist.push_back(edge.node);
    }
  }
  return order;
}

// ---------------------------------------------------------------- writing ---

using Slots = std::vector<std::optional<std::string>>;  // registers, nullopt: undefined (`none`)

TensorType type_of_metadata(const InputMetadata& metadata) { return {metadata.dtype, metadata.shape, metadata.device}; }

Instr instruction(Opcode op, Slots results = {}, Slots operands = {}, std::string target = {}) {
  Instr instr;
  instr.op = op;
  instr.results = std::move(results);
  instr.operands = std::move(operands);
  instr.target = std::move(target);
  return instr;
}

class Writer {
 public:
  Writer(const Graph& graph, const FunctionalizeOptions& options, ExecInfo& exec)
      : graph_(graph), options_(options), exec_(exec), buffers_(graph.nodes.size()) {
    program().name = options.program_name;
    for (const auto& [name, value] : graph.root_grads) taken_.insert(name);
  }

  // Declares the root grads and validates them (Engine::execute's first
  // validate_outputs); returns the validated registers.
  Slots write_roots() {
    Instr validate = instruction(Opcode::Validate);
    for (std::size_t i = 0; i < graph_.roots.size(); ++i) {
      const auto& [name, value] = graph_.root_grads[i];
      const std::optional<InputMetadata>& metadata = metadata_of(graph_.roots[i]);
      check(value || metadata, "functionalize: root ", i, " has neither a grad value nor input metadata");
      GradDecl grad;
      grad.name = name;
      grad.type = value ? type_of(*value) : type_of_metadata(*metadata);
      if (value && store_inline(*value, "%" + name)) grad.value = *value;
      program().grads.push_back(std::move(grad));
      validate.operands.emplace_back(name);
      validate.results.emplace_back(fresh());
      validate.metadata.push_back(metadata);
    }
    Slots validated = validate.results;
    emit(std::move(validate));
    return validated;
  }

  // The single root node fed directly (skip_dummy_node), or GraphRoot's outputs handed on.
  void feed_root_node(const Slots& validated) {
    const Edge& root = graph_.roots[0];
    buffer(root.node)[root.input_nr] = validated[0];
  }
  void feed_roots(const Slots& validated) { hand_on(graph_.roots, validated); }

  void declare_captures() {
    if (options_.accumulate_grad) return;  // backward(inputs=...) returns nothing
    for (const auto& [name, edge] : graph_.captures) {
      const std::optional<InputMetadata>& metadata = metadata_of(edge);
      check(metadata.has_value(), "functionalize: capture ^", name, " leads to an input without metadata");
      declare_output(name, *metadata);
    }
  }

  // evaluate_function (§2.4), or one step of compiled autograd's trace loop.
  void evaluate(int index) {
    const GraphNode& node = graph_.nodes[static_cast<std::size_t>(index)];
    Slots inputs = std::move(buffer(index));
    const bool needed = exec_.needed(index);
    if (exec_.enabled()) {
      // NOTE [Hooks ordering]: eager captures before the tensor pre-hooks when the node
      // is also needed (call_function runs them), after them when not; compiled autograd
      // always after.
      const bool hooks_first = !needed || options_.order == Order::CompiledAutograd;
      if (hooks_first) inputs = tensor_pre_hooks(node, std::move(inputs));
      write_captures(index, inputs);
      if (!needed) return;
      if (!hooks_first) inputs = tensor_pre_hooks(node, std::move(inputs));
    } else {
      inputs = tensor_pre_hooks(node, std::move(inputs));
    }
    inputs = pre_hooks(node, std::move(inputs));
    if (node.kind == Kind::AccumulateGrad) {
      accumulate(index, inputs);
    } else {
      Slots outputs = validate(node, call(index, inputs));
      outputs = post_hooks(node, std::move(outputs), inputs);
      hand_on(node.next_edges, outputs);
    }
  }

  // torch.autograd.grad's check after the run, for captures nothing reached.
  void check_captures_used() const {
    if (options_.accumulate_grad || options_.allow_unused) return;
    for (const auto& capture : graph_.captures) {  // not retains_grad's outputs: those may stay None
      check(written_.count(capture.first) == 1,
            "One of the differentiated Tensors appears to not have been used in the graph. Set allow_unused=True "
            "if this is the desired behavior.");
    }
  }

  Functionalized finish() && { return std::move(out_); }

 private:
  Program& program() { return out_.bundle.program; }
  const Program& program() const { return out_.bundle.program; }

  std::string fresh() {
    std::string name;
    do {
      name = std::to_string(next_register_++);
    } while (taken_.count(name) != 0);
    return name;
  }

  const std::optional<InputMetadata>& metadata_of(const Edge& edge) const {
    static const std::optional<InputMetadata> none;
    if (!edge.valid()) return none;
    const GraphNode& node = graph_.nodes[static_cast<std::size_t>(edge.node)];
    if (edge.input_nr < node.input_metadata.size()) return node.input_metadata[edge.input_nr];
    if (node.kind == Kind::AccumulateGrad && edge.input_nr == 0) return leaf_metadata(node.leaf);
    return none;
  }

  // An AccumulateGrad without recorded metadata takes its leaf's type.
  const std::optional<InputMetadata>& leaf_metadata(const std::string& leaf_name) const {
    auto [it, inserted] = leaf_metadata_.try_emplace(leaf_name);
    if (inserted) {
      for (const GraphLeaf& leaf : graph_.leaves) {
        if (leaf.name != leaf_name) continue;
        InputMetadata metadata;
        metadata.dtype = leaf.type.dtype;
        metadata.shape = leaf.type.sizes;
        metadata.device = leaf.type.device;
        metadata.grad_dtype = leaf.type.dtype;
        it->second = metadata;
      }
    }
    return it->second;
  }

  Slots& buffer(int node) {
    Slots& slots = buffers_[static_cast<std::size_t>(node)];
    if (slots.empty()) slots.resize(slot_count(graph_.nodes[static_cast<std::size_t>(node)]));
    return slots;
  }

  // True when `value` is small enough to write inline; else it goes to the bundle under `key`.
  bool store_inline(const Tensor& value, const std::string& key) {
    if (static_cast<std::size_t>(value.numel()) <= options_.inline_limit) return true;
    out_.bundle.tensors[key] = value;
    return false;
  }

  void emit(Instr instr, int node = -1) {
    program().code.push_back(std::move(instr));
    out_.node_of_instruction.push_back(node);
  }

  void declare_output(const std::string& name, const InputMetadata& metadata) {
    OutputDecl decl;
    decl.name = name;
    decl.type = type_of_metadata(metadata);
    program().outputs.push_back(std::move(decl));
  }

  void declare_hook(const std::string& name, HookKind kind) {
    for (const HookDecl& hook : program().hooks) {
      if (hook.name != name) continue;
      check(hook.kind == kind, "functionalize: hook &", name, " is used as a ", to_string(hook.kind),
            " hook and as a ", to_string(kind), " hook");
      return;
    }
    HookDecl decl;
    decl.name = name;
    decl.kind = kind;
    program().hooks.push_back(std::move(decl));
  }

  // InputBuffer::add (§2.3) for each output, in order: an undefined grad is
  // skipped, the first one held, each later one added after the held one.
  void hand_on(const std::vector<Edge>& edges, const Slots& outputs) {
    for (std::size_t i = 0; i < edges.size() && i < outputs.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.valid() || !exec_.should_execute(edge.node)) continue;
      std::optional<std::string>& held = buffer(edge.node)[edge.input_nr];
      if (!outputs[i]) continue;
      if (!held) {
        held = outputs[i];
        continue;
      }
      const std::string sum = fresh();
      emit(instruction(Opcode::Add, {sum}, {held, outputs[i]}));
      held = sum;
    }
  }

  // call_tensor_pre_hooks: tensor pre-hooks slot by slot, then retains_grad.
  Slots tensor_pre_hooks(const GraphNode& node, Slots inputs) {
    for (const auto& [slot, hooks] : node.tensor_pre_hooks) {
      check(slot < inputs.size(), "functionalize: a tensor pre-hook on input ", slot, " of ", node.name,
            ", which has ", inputs.size(), " inputs");
      for (const std::string& hook : hooks) {
        declare_hook(hook, HookKind::TensorPre);
        const std::string result = fresh();
        emit(instruction(Opcode::Hook, {result}, {inputs[slot]}, hook));
        inputs[slot] = result;
      }
    }
    for (const auto& [slot, output] : node.retains_grad) {
      check(slot < inputs.size(), "functionalize: retains_grad on input ", slot, " of ", node.name);
      check(slot < node.input_metadata.size() && node.input_metadata[slot], "functionalize: retains_grad ^", output,
            " needs the input's metadata");
      declare_output(output, *node.input_metadata[slot]);
      write_output(output, inputs[slot]);
    }
    return inputs;
  }

  void write_output(const std::string& name, const std::optional<std::string>& grad) {
    if (!grad) return;  // an undefined grad leaves the output None
    emit(instruction(Opcode::Output, {}, {grad}, name));
    written_.insert(name);
  }

  void write_captures(int index, const Slots& inputs) {
    if (options_.accumulate_grad || !exec_.captures(index)) return;
    for (const auto& [name, edge] : graph_.captures) {
      if (edge.node == index) write_output(name, inputs[edge.input_nr]);
    }
  }

  Slots pre_hooks(const GraphNode& node, Slots inputs) {
    for (const std::string& hook : node.pre_hooks) {
      declare_hook(hook, HookKind::Pre);
      Instr instr = instruction(Opcode::Hook, {}, inputs, hook);
      for (auto& slot : inputs) slot = fresh();
      instr.results = inputs;
      emit(std::move(instr));
    }
    return inputs;
  }

  Slots post_hooks(const GraphNode& node, Slots outputs, const Slots& inputs) {
    for (const std::string& hook : node.post_hooks) {
      declare_hook(hook, HookKind::Post);
      Instr instr = instruction(Opcode::Hook, {}, outputs, hook);
      instr.operands.insert(instr.operands.end(), inputs.begin(), inputs.end());
      // A hook may return a grad where there was none; only where the edge needs one is it kept.
      for (std::size_t i = 0; i < outputs.size(); ++i) {
        outputs[i] = exec_.should_compute(node.next_edges[i]) ? std::optional<std::string>(fresh()) : std::nullopt;
      }
      instr.results = outputs;
      emit(std::move(instr));
    }
    return outputs;
  }

  // AccumulateGrad::apply: an undefined grad returns early (no hook); else
  // accumulate, then the post-accumulate-grad hooks; node post-hooks last.
  void accumulate(int index, const Slots& inputs) {
    const GraphNode& node = graph_.nodes[static_cast<std::size_t>(index)];
    if (inputs[0]) {
      Instr instr = instruction(Opcode::AccumulateGrad, {}, {inputs[0]}, node.leaf);
      instr.origin = node.origin;
      emit(std::move(instr), index);
      for (const std::string& hook : node.post_acc_grad_hooks) {
        declare_hook(hook, HookKind::PostAccGrad);
        Instr instr = instruction(Opcode::Hook, {}, {}, hook);
        instr.leaf = node.leaf;
        emit(std::move(instr));
      }
    }
    post_hooks(node, {}, inputs);
  }

  // The node's call: one result per next edge, `_` where PyTorch computes nothing
  // (builtin_attrs turns the need bits of a Tensor[] input's edges into one).
  Slots call(int index, const Slots& inputs) {
    const GraphNode& node = graph_.nodes[static_cast<std::size_t>(index)];
    Instr instr = instruction(Opcode::Call, {}, inputs);
    instr.node = node.name;
    instr.origin = node.origin;
    for (const Edge& edge : node.next_edges) {
      const bool need = exec_.should_compute(edge);
      instr.need.push_back(need);
      instr.results.push_back(need ? std::optional<std::string>(fresh()) : std::nullopt);
    }
    switch (node.kind) {
      case Kind::Builtin: instr.op = Opcode::Call; builtin_attrs(index, instr, false); break;
      case Kind::CopySlices: instr.op = Opcode::CopySlices; builtin_attrs(index, instr, true); break;
      case Kind::Function: function_call(index, instr); break;
      case Kind::AccumulateGrad: break;  // written by accumulate()
    }
    Slots results = instr.results;
    emit(std::move(instr), index);
    return results;
  }

  // validate_outputs against the next edges' metadata, `_` for invalid edges.
  Slots validate(const GraphNode& node, const Slots& outputs) {
    if (node.next_edges.empty()) return outputs;
    Instr instr = instruction(Opcode::Validate, {}, outputs);
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      instr.metadata.push_back(metadata_of(node.next_edges[i]));
      instr.results.push_back(outputs[i] ? std::optional<std::string>(fresh()) : std::nullopt);
    }
    Slots validated = instr.results;
    emit(std::move(instr));
    return validated;
  }

  void builtin_attrs(int index, Instr& instr, bool copy_slices) {
    const GraphNode& node = graph_.nodes[static_cast<std::size_t>(index)];
    const NodeDef* def = find_node(node.name);
    check(def != nullptr, "functionalize: ", describe_node(graph_, index), " is not a node refgrad has");
    const NodeSchema& schema = def->schema;
    check(schema.num_grads == kVariadic || schema.num_grads == node.input_metadata.size(), "functionalize: ",
          describe_node(graph_, index), " has ", node.input_metadata.size(), " input metadata, but ", node.name,
          " takes ", schema.num_grads, " grads");
    std::vector<std::string> fields;
    if (copy_slices) fields = {"base", "view"};
    for (const SavedFieldSchema& field : schema.saved) fields.push_back(field.name);
    check(fields.size() == node.saved.size(), "functionalize: ", describe_node(graph_, index), " has ",
          node.saved.size(), " saved fields, but ", fields.size(), " are expected");
    for (const std::string& field : fields) {
      const auto found = std::find_if(node.saved.begin(), node.saved.end(),
                                       [&](const auto& saved) { return saved.first == field; });
      check(found != node.saved.end(), "functionalize: ", describe_node(graph_, index), " lacks saved field '",
            field, "'");
      instr.attrs.push_back({field, attr_value(index, field, found->second)});
    }
    check_edge_count(index, schema, instr);
    if (!schema.list_length_field.empty()) {
      // One need bit for a Tensor[] input: torch's task_should_compute_output over the range of
      // its elements' edges, true when any one of them is.
      const bool any = std::find(instr.need.begin(), instr.need.end(), true) != instr.need.end();
      instr.need = {any};
    }
  }

  // One next edge per node input, or per element of a Tensor[] input (as many
  // as its saved list_length_field has entries).
  void check_edge_count(int index, const NodeSchema& schema, const Instr& instr) {
    const GraphNode& node = graph_.nodes[static_cast<std::size_t>(index)];
    const std::optional<std::size_t> results = call_result_count(schema, instr.attrs);
    check(results.has_value(), "functionalize: ", describe_node(graph_, index), ": saved field '",
          schema.list_length_field, "' must be a ScalarType[], one entry per element of its Tensor[] input");
    const std::string expected = schema.list_length_field.empty()
                                     ? std::to_string(*results) + " inputs"
                                     : std::to_string(*results) + " list elements ('" + schema.list_length_field + "')";
    check(*results == node.next_edges.size(), "functionalize: ", describe_node(graph_, index), " has ",
          node.next_edges.size(), " next edges, but ", node.name, " has ", expected);
  }

  void function_call(int index, Instr& instr) {
    const GraphNode& node = graph_.nodes[static_cast<std::size_t>(index)];
    instr.op = Opcode::CallBackward;
    instr.target = node.name;
    instr.node.clear();
    const bool declared = std::any_of(program().functions.begin(), program().functions.end(),
                                      [&](const FunctionDecl& decl) { return decl.name == node.name; });
    if (!declared) {
      FunctionDecl decl;
      decl.name = node.name;
      program().functions.push_back(std::move(decl));
    }
    std::vector<SavedRef> saved;
    for (std::size_t i = 0; i < node.function_saved.size(); ++i) {
      saved.push_back(declare_saved(fmt::format("n{}_saved_{}", index, i), node.function_saved[i]));
    }
    instr.attrs.push_back({"saved", std::move(saved)});
  }

  SavedRef declare_saved(const std::string& name, const Tensor& value) {
    SavedDecl decl;
    decl.name = name;
    decl.type = type_of(value);
    if (store_inline(value, "$" + name)) decl.value = value;
    program().saved.push_back(std::move(decl));
    return {name};
  }

  // A FieldValue with each tensor declared as `$n<node>_<field>[_<i>]`.
  AttrValue attr_value(int index, const std::string& field, const FieldValue& value) {
    const std::string base = fmt::format("n{}_{}", index, field);
    const auto tensor_ref = [&](const Tensor& tensor, const std::string& name) -> std::optional<SavedRef> {
      if (!tensor.defined()) return std::nullopt;
      return declare_saved(name, tensor);
    };
    return std::visit(
        [&](const auto& v) -> AttrValue {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, Tensor>) {
            std::optional<SavedRef> ref = tensor_ref(v, base);
            if (!ref) return None{};
            return *ref;
          } else if constexpr (std::is_same_v<T, TensorList>) {
            std::vector<SavedRef> refs;
            for (std::size_t i = 0; i < v.size(); ++i) {
              std::optional<SavedRef> ref = tensor_ref(v[i], fmt::format("{}_{}", base, i));
              check(ref.has_value(), "functionalize: field '", field, "' holds an undefined tensor");
              refs.push_back(*ref);
            }
            return refs;
          } else if constexpr (std::is_same_v<T, std::vector<OptionalTensor>>) {
            std::vector<std::optional<SavedRef>> refs;
            for (std::size_t i = 0; i < v.size(); ++i) {
              refs.push_back(v[i] ? tensor_ref(*v[i], fmt::format("{}_{}", base, i)) : std::nullopt);
            }
            return refs;
          } else {
            return v;
          }
        },
        value);
  }

  const Graph& graph_;
  const FunctionalizeOptions& options_;
  ExecInfo& exec_;
  Functionalized out_;
  std::vector<Slots> buffers_;         // per node: its input buffer (empty until first used)
  std::set<std::string> taken_;        // grad names, which registers must not reuse
  std::set<std::string> written_;      // outputs written
  int next_register_ = 0;
  mutable std::map<std::string, std::optional<InputMetadata>> leaf_metadata_;
};

void declare_leaves(const Graph& graph, const FunctionalizeOptions& options, Functionalized& out) {
  for (const GraphLeaf& leaf : graph.leaves) {
    LeafDecl decl;
    decl.name = leaf.name;
    decl.type = leaf.type;
    if (leaf.grad) {
      if (static_cast<std::size_t>(leaf.grad->numel()) <= options.inline_limit) {
        decl.grad = leaf.grad;
      } else {
        out.bundle.tensors["@" + leaf.name] = *leaf.grad;
      }
    }
    out.bundle.program.leaves.push_back(std::move(decl));
  }
}

}  // namespace

Functionalized functionalize(const Graph& graph, const FunctionalizeOptions& options) {
  check_graph(graph, options);
  ExecInfo exec(graph, options);
  const bool skip_dummy_node = graph.roots.size() == 1 && options.order == Order::Eager;
  if (skip_dummy_node) exec.force_needed(graph.roots[0].node);
  const std::vector<int> schedule = options.order == Order::Eager ? eager_schedule(graph, exec, skip_dummy_node)
                                                                   : compiled_autograd_schedule(graph, exec);

  Writer writer(graph, options, exec);
  writer.declare_captures();
  const Slots roots = writer.write_roots();
  if (skip_dummy_node) {
    writer.feed_root_node(roots);
  } else {
    writer.feed_roots(roots);
  }
  for (int node : schedule) writer.evaluate(node);
  writer.check_captures_used();
  Functionalized out = std::move(writer).finish();
  declare_leaves(graph, options, out);
  return out;
}

}  // namespace refgrad
