// functionalize() from Python. The graph model lives in Python as plain
// dataclasses (refgrad/graph.py: Edge, GraphNode, GraphLeaf, Graph,
// FunctionalizeOptions), so that capture code can build it with lists and
// dicts; here it is read into the C++ Graph (include/refgrad/graph.hpp), field
// by field, with each saved field read as its node's schema types it.
#include <limits>
#include <map>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "convert.hpp"

namespace refgrad::python {

namespace {

py::object field(py::handle object, const char* name, std::string_view where) {
  check(py::hasattr(object, name), where, ": ", python_type_name(object), " has no attribute '", name, "'");
  return object.attr(name);
}

std::uint64_t uint64_from_python(py::handle value, std::string_view where) {
  check(PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr()), where, ": expected an int, got ",
        python_type_name(value));
  const py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!number) throw py::error_already_set();  // its __index__ raised
  const unsigned long long result = PyLong_AsUnsignedLongLong(number.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail(fmt::format("{}: expected an int in [0, 2**64), got {}", where, std::string(py::repr(value))));
  }
  return result;
}

// An Edge (or anything with .node and .input_nr), a (node, input_nr) pair, or None for an invalid edge.
Edge edge_from_python(py::handle value, std::string_view where) {
  if (value.is_none()) return Edge{};
  const bool pair = py::isinstance<py::tuple>(value);
  if (pair) {
    check(py::len(value) == 2, where, ": expected an Edge or a (node, input_nr) pair, got ", py::len(value), " items");
  }
  const py::object node = pair ? value[py::int_(0)] : field(value, "node", where);
  const py::object input_nr = pair ? value[py::int_(1)] : field(value, "input_nr", where);
  const std::int64_t index = int_from_python(node, fmt::format("{}.node", where));
  const std::int64_t slot = int_from_python(input_nr, fmt::format("{}.input_nr", where));
  check(index >= -1 && index <= std::numeric_limits<int>::max(), where, ": node index ", index, " is out of range");
  check(slot >= 0 && slot <= std::numeric_limits<std::uint32_t>::max(), where, ": input_nr ", slot,
        " is out of range");
  return Edge{static_cast<int>(index), static_cast<std::uint32_t>(slot)};
}

std::optional<InputMetadata> metadata_from_python(py::handle value, std::string_view where) {
  if (value.is_none()) return std::nullopt;
  check(py::isinstance<InputMetadata>(value), where, ": expected an InputMetadata or None, got ",
        python_type_name(value));
  return value.cast<InputMetadata>();
}

std::vector<std::string> names_from_python(py::handle value, std::string_view where) {
  return list_from_python<std::string>(value, where, string_from_python);
}

template <class Value, class Read>
std::map<std::uint32_t, Value> slots_from_python(py::handle value, std::string_view where, const Read& read) {
  check(py::isinstance<py::dict>(value), where, ": expected a dict {slot: ...}, got ", python_type_name(value));
  std::map<std::uint32_t, Value> slots;
  for (const auto& [key, item] : py::reinterpret_borrow<py::dict>(value)) {
    const std::int64_t slot = int_from_python(key, where);
    check(slot >= 0 && slot <= std::numeric_limits<std::uint32_t>::max(), where, ": slot ", slot, " is out of range");
    slots[static_cast<std::uint32_t>(slot)] = read(item, fmt::format("{}[{}]", where, slot));
  }
  return slots;
}

GraphNode::Kind kind_from_python(py::handle value, std::string_view where) {
  const py::handle name = py::hasattr(value, "value") ? value.attr("value") : value;  // an Enum member or a str
  const std::string kind = string_from_python(name, where);
  if (kind == "builtin") return GraphNode::Kind::Builtin;
  if (kind == "accumulate_grad") return GraphNode::Kind::AccumulateGrad;
  if (kind == "function") return GraphNode::Kind::Function;
  if (kind == "copy_slices") return GraphNode::Kind::CopySlices;
  fail(fmt::format("{}: unknown node kind '{}' (expected builtin, accumulate_grad, function or copy_slices)", where,
                   kind));
}

GraphNode node_from_python(py::handle value, std::string_view index_where) {
  GraphNode node;
  node.kind = kind_from_python(field(value, "kind", index_where), fmt::format("{}.kind", index_where));
  node.name = string_from_python(field(value, "name", index_where), fmt::format("{}.name", index_where));
  node.leaf = string_from_python(field(value, "leaf", index_where), fmt::format("{}.leaf", index_where));
  const std::string where = fmt::format("{} ({})", index_where, node.kind == GraphNode::Kind::AccumulateGrad
                                                                    ? "AccumulateGrad of " + node.leaf
                                                                    : node.name);
  const py::object saved = field(value, "saved", where);
  const bool has_schema = node.kind == GraphNode::Kind::Builtin || node.kind == GraphNode::Kind::CopySlices;
  if (has_schema) {
    const NodeDef* def = find_node(node.name);
    check(def != nullptr, where, ": refgrad has no node '", node.name, "' (refgrad.nodes() lists those it has)");
    node.saved = saved_fields_from_python(saved, def->schema, node.kind == GraphNode::Kind::CopySlices, where);
  } else {
    check(py::len(saved) == 0, where, ": only builtin and copy_slices nodes have saved fields "
                                      "(an autograd.Function's go in function_saved)");
  }
  node.function_saved = list_from_python<Tensor>(field(value, "function_saved", where), where + ".function_saved",
                                         tensor_from_python);
  node.next_edges = list_from_python<Edge>(field(value, "next_edges", where), where + ".next_edges", edge_from_python);
  node.sequence_nr = uint64_from_python(field(value, "sequence_nr", where), where + ".sequence_nr");
  node.input_metadata = list_from_python<std::optional<InputMetadata>>(field(value, "input_metadata", where),
                                                              where + ".input_metadata", metadata_from_python);
  node.tensor_pre_hooks = slots_from_python<std::vector<std::string>>(
      field(value, "tensor_pre_hooks", where), where + ".tensor_pre_hooks", names_from_python);
  node.retains_grad = slots_from_python<std::string>(field(value, "retains_grad", where), where + ".retains_grad",
                                                     string_from_python);
  node.pre_hooks = names_from_python(field(value, "pre_hooks", where), where + ".pre_hooks");
  node.post_hooks = names_from_python(field(value, "post_hooks", where), where + ".post_hooks");
  node.post_acc_grad_hooks =
      names_from_python(field(value, "post_acc_grad_hooks", where), where + ".post_acc_grad_hooks");
  node.origin = string_from_python(field(value, "origin", where), where + ".origin");
  return node;
}

GraphLeaf leaf_from_python(py::handle value, std::string_view where) {
  GraphLeaf leaf;
  leaf.name = string_from_python(field(value, "name", where), fmt::format("{}.name", where));
  const py::object type = field(value, "type", where);
  check(py::isinstance<TensorType>(type), where, ".type: expected a TensorType, got ", python_type_name(type));
  leaf.type = type.cast<TensorType>();
  leaf.grad = optional_tensor_from_python(field(value, "grad", where), fmt::format("{}.grad", where));
  return leaf;
}

// A (name, value) pair of a list such as root_grads and captures.
template <class Value, class Read>
std::pair<std::string, Value> named_from_python(py::handle value, std::string_view where, const Read& read) {
  const py::sequence pair = sequence_from_python(value, where);
  check(pair.size() == 2, where, ": expected a (name, value) pair, got ", pair.size(), " items");
  return {string_from_python(pair[0], fmt::format("{}[0]", where)), read(pair[1], fmt::format("{}[1]", where))};
}

Graph graph_from_python(py::handle value) {
  Graph graph;
  graph.nodes = list_from_python<GraphNode>(field(value, "nodes", "Graph"), "Graph.nodes", node_from_python);
  graph.leaves = list_from_python<GraphLeaf>(field(value, "leaves", "Graph"), "Graph.leaves", leaf_from_python);
  graph.roots = list_from_python<Edge>(field(value, "roots", "Graph"), "Graph.roots", edge_from_python);
  graph.root_grads = list_from_python<std::pair<std::string, std::optional<Tensor>>>(
      field(value, "root_grads", "Graph"), "Graph.root_grads", [](py::handle item, std::string_view where) {
        return named_from_python<std::optional<Tensor>>(item, where, optional_tensor_from_python);
      });
  graph.captures = list_from_python<std::pair<std::string, Edge>>(
      field(value, "captures", "Graph"), "Graph.captures", [](py::handle item, std::string_view where) {
        return named_from_python<Edge>(item, where, edge_from_python);
      });
  return graph;
}

Order order_from_python(py::handle value) {
  const py::handle name = py::hasattr(value, "value") ? value.attr("value") : value;
  const std::string order = string_from_python(name, "FunctionalizeOptions.order");
  if (order == "eager") return Order::Eager;
  if (order == "compiled_autograd") return Order::CompiledAutograd;
  fail(fmt::format("FunctionalizeOptions.order: unknown order '{}' (expected eager or compiled_autograd)", order));
}

FunctionalizeOptions options_from_python(py::handle value) {
  FunctionalizeOptions options;
  if (value.is_none()) return options;
  const std::string_view where = "FunctionalizeOptions";
  options.order = order_from_python(field(value, "order", where));
  options.accumulate_grad = field(value, "accumulate_grad", where).cast<bool>();
  options.allow_unused = field(value, "allow_unused", where).cast<bool>();
  const std::int64_t limit = int_from_python(field(value, "inline_limit", where), "FunctionalizeOptions.inline_limit");
  check(limit >= 0, "FunctionalizeOptions.inline_limit must be >= 0, got ", limit);
  options.inline_limit = static_cast<std::size_t>(limit);
  options.program_name = string_from_python(field(value, "program_name", where), "FunctionalizeOptions.program_name");
  return options;
}

}  // namespace

void bind_graph(py::module_& m) {
  m.attr("ACCUMULATE_GRAD_SEQUENCE_NR") = py::int_(kAccumulateGradSequenceNr);
  m.def(
      "_functionalize",
      [](py::handle graph, py::handle options) {
        Functionalized result = functionalize(graph_from_python(graph), options_from_python(options));
        return py::make_tuple(std::move(result.bundle), result.node_of_instruction);
      },
      py::arg("graph"), py::arg("options") = py::none(),
      "functionalize() reading a refgrad.graph.Graph; use refgrad.functionalize.");
}

}  // namespace refgrad::python
