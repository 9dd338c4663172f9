// L4: the autograd graph, and the functionalizer that turns it into a program
// with PyTorch's engine semantics.
//
// A Graph is what PyTorch's grad_fn graph holds, made plain: nodes with their
// saved fields, next edges, sequence_nr and input metadata; leaves
// (AccumulateGrad and its variable); roots with their grad_outputs; hooks;
// captures (the `inputs` of torch.autograd.grad). It is filled by refgrad's
// own eager tape (eager.hpp) or by the PyTorch bridge, which walks a real
// grad_fn graph. functionalize() orders it as Engine::execute would
// (../shared/reference/pytorch-autograd.md §2) and writes the program.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "refgrad/bundle.hpp"
#include "refgrad/engine.hpp"
#include "refgrad/nodes.hpp"
#include "refgrad/program.hpp"

namespace refgrad {

// An edge to input `input_nr` of node `node` (an index into Graph::nodes);
// node -1 is PyTorch's invalid edge (an input that needs no grad).
struct Edge {
  int node = -1;
  std::uint32_t input_nr = 0;
  bool valid() const { return node >= 0; }
  bool operator==(const Edge& other) const = default;
};

// AccumulateGrad's sequence_nr: it runs as soon as it is ready (function.h, NOTE [ Sequence Number ]).
inline constexpr std::uint64_t kAccumulateGradSequenceNr = std::numeric_limits<std::uint64_t>::max();

struct GraphNode {
  enum class Kind : std::uint8_t {
    Builtin,         // a node of the registry: `name` is its name, `saved` its fields
    AccumulateGrad,  // a leaf's grad accumulator: `leaf` names it
    Function,        // an autograd.Function's backward (PyNode): `name` is the host function,
                     // `function_saved` the ctx's saved tensors
    CopySlices,      // CopySlices around the Builtin `name`: `saved` holds base, view, then its fields
  };
  Kind kind = Kind::Builtin;
  std::string name;
  std::vector<std::pair<std::string, FieldValue>> saved;  // by PyTorch's field names
  std::vector<Tensor> function_saved;
  std::string leaf;                        // AccumulateGrad: the leaf's name
  std::vector<Edge> next_edges;            // one per node input (outgoing edge)
  std::uint64_t sequence_nr = 0;
  // One per incoming grad slot (differentiable forward output): what validate_outputs checks
  // the grads flowing *into* this node against (PyTorch's input_metadata).
  std::vector<std::optional<InputMetadata>> input_metadata;
  // Hooks by host name: tensor pre-hooks and retains_grad per incoming slot,
  // node pre-hooks, node post-hooks, and (AccumulateGrad) post-accumulate-grad hooks.
  std::map<std::uint32_t, std::vector<std::string>> tensor_pre_hooks;
  std::map<std::uint32_t, std::string> retains_grad;   // slot -> output name that receives the grad
  std::vector<std::string> pre_hooks;
  std::vector<std::string> post_hooks;
  std::vector<std::string> post_acc_grad_hooks;
  std::string origin;  // forward source line, when known
};

struct GraphLeaf {
  std::string name;
  TensorType type;
  std::optional<Tensor> grad;  // .grad before the backward
};

struct Graph {
  std::vector<GraphNode> nodes;
  std::vector<GraphLeaf> leaves;           // AccumulateGrad nodes name these
  std::vector<Edge> roots;                 // the outputs' gradient edges
  std::vector<std::pair<std::string, std::optional<Tensor>>> root_grads;  // name and value per root
  // torch.autograd.grad's inputs, by output name; with accumulate_grad, backward(inputs=...)'s.
  std::vector<std::pair<std::string, Edge>> captures;
};

enum class Order : std::uint8_t {
  Eager,             // Engine's ready queue: higher sequence_nr first, AccumulateGrad as soon as ready
  CompiledAutograd,  // compiled autograd's LIFO topological order, out-of-place adds
};

struct FunctionalizeOptions {
  Order order = Order::Eager;
  // backward() accumulates into leaves; torch.autograd.grad (captures) does not
  // unless accumulate_grad is asked for (backward(inputs=...)).
  bool accumulate_grad = true;
  bool allow_unused = false;  // torch.autograd.grad's allow_unused
  std::size_t inline_limit = 16;  // saved tensors up to this many elements are written inline
  std::string program_name = "backward";
};

// The program and its tensors (a bundle without results: saved tensors, root
// grads and leaf .grads larger than inline_limit, by sigiled name), and for
// each instruction the graph node it came from: the node's call
// (call, CopySlices, call_backward) or its accumulate_grad; -1 for the others.
struct Functionalized {
  Bundle bundle;
  std::vector<int> node_of_instruction;
};

// Orders the graph as the engine would and writes the program. Raises for
// what PyTorch raises for (a root that needs no grad, an unused capture
// without allow_unused, in PyTorch's words) and for graphs refgrad cannot
// express yet, naming the node (src/frontends/functionalize.cpp).
//
// The program: one `validate` of the root grads (GraphRoot's own validate,
// which repeats it, is left out: it changes nothing); then each node in the
// engine's order: captures (`output`) and tensor pre-hooks in the order NOTE
// [Hooks ordering] gives, retains_grad as an `output`, pre-hooks, the call
// with need=task_should_compute_output, `validate` against the next edges'
// metadata, post-hooks, and `add OLD, NEW` where a grad reaches a buffer slot
// that already holds one. Saved tensors are named `$n<node>_<field>`
// (`_<i>` for list items; `$n<node>_saved_<i>` for an autograd.Function),
// registers `%0`, `%1`, ... in order. With captures and accumulate_grad
// (backward(inputs=...)) the captured nodes are needed and nothing is output.
//
// Not reproduced: a capture or allow_unused check whose grad is undefined
// only at run time (the program leaves the output None); retains_grad adds
// to an existing .grad in PyTorch (the output holds this backward's grad);
// tensor pre-hooks run slot by slot, not in registration order across
// slots; compiled autograd's reorder passes for hooks and accumulate nodes;
// min_topo_nr pruning (it changes no order); reentrant backward and devices
// other than the CPU's ready queue.
Functionalized functionalize(const Graph& graph, const FunctionalizeOptions& options = {});

}  // namespace refgrad
