// `refgrad nodes [NAME]`: the backward nodes refgrad knows, from the node
// registry; with NAME, one node's schema and formula. `--aten`: the ATen ops
// a program's `aten` instructions can call, with torch's schemas.
#include <algorithm>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"

namespace refgrad::cli {

namespace {

std::string joined(const std::vector<std::string>& parts) { return fmt::format("{}", fmt::join(parts, ", ")); }

// "self : Tensor", with † for a field PyTorch does not expose as grad_fn._saved_<name>.
std::string field_text(const SavedFieldSchema& field) {
  return fmt::format("{}{} : {}", field.name, field.exposed ? "" : "†", type_name(field.type));
}

std::string saved_fields(const NodeSchema& schema) {
  std::vector<std::string> fields;
  for (const SavedFieldSchema& field : schema.saved) fields.push_back(field_text(field));
  return fields.empty() ? "—" : joined(fields);
}

std::string grads_in(const NodeSchema& schema) {
  return schema.num_grads == kVariadic ? std::string("one per forward output") : std::to_string(schema.num_grads);
}

void list_nodes() {
  const std::vector<const NodeDef*> nodes = all_nodes();
  std::size_t name_width = 4, op_width = 7, inputs_width = 6;
  for (const NodeDef* node : nodes) {
    name_width = std::max(name_width, node->schema.name.size());
    op_width = std::max(op_width, node->schema.aten_op.size());
    inputs_width = std::max(inputs_width, joined(node->schema.inputs).size());
  }
  const auto row = [&](const std::string& name, const std::string& op, const std::string& inputs,
                       const std::string& saved) {
    std::cout << fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", name, name_width, op, op_width, inputs, inputs_width,
                             saved);
  };
  row("node", "forward", "inputs", "saved fields");
  for (const NodeDef* node : nodes) {
    row(node->schema.name, node->schema.aten_op, joined(node->schema.inputs), saved_fields(node->schema));
  }
  std::cout << fmt::format("{} nodes; † marks a saved field PyTorch does not expose as grad_fn._saved_<name>\n",
                           nodes.size());
}

void show_node(const std::string& name) {
  const NodeSchema& s = get_node(name).schema;
  std::cout << s.name << '\n'
            << "  forward:  " << s.aten_op << '\n'
            << "  inputs:   " << joined(s.inputs) << "  (one gradient out per input)\n"
            << "  grads in: " << grads_in(s) << '\n'
            << "  saved:" << (s.saved.empty() ? "    —" : "") << '\n';
  bool hidden = false;
  for (const SavedFieldSchema& field : s.saved) {
    std::cout << "    " << field_text(field) << '\n';
    hidden = hidden || !field.exposed;
  }
  if (hidden) std::cout << "    († PyTorch stores the field but does not expose it as grad_fn._saved_<name>)\n";
  std::cout << "  formula (derivatives.yaml):\n";
  std::size_t start = 0;
  while (start < s.formula.size()) {
    const std::size_t end = std::min(s.formula.find('\n', start), s.formula.size());
    std::cout << "    " << s.formula.substr(start, end - start) << '\n';
    start = end + 1;
  }
}

void list_aten_ops() {
  const std::vector<const AtenOpDef*> ops = all_aten_ops();
  for (const AtenOpDef* op : ops) std::cout << op->schema.text << '\n';
  std::cout << fmt::format("{} ATen ops (torch's schemas; a program calls one as `%r = {}.OP.OVERLOAD ...`)\n",
                           ops.size(), "aten");
}

}  // namespace

void add_nodes_command(CLI::App& app, int& exit_code) {
  auto name = std::make_shared<std::string>();
  auto aten = std::make_shared<bool>(false);
  CLI::App* command = app.add_subcommand("nodes", "list the backward nodes refgrad knows; with NAME, one node");
  command->add_option("NAME", *name, "a node name, e.g. MulBackward0: its forward op, inputs, saved fields, formula");
  command->add_flag("--aten", *aten, "list the ATen ops a program's aten instructions can call, with torch's schemas");
  command->callback([name, aten, &exit_code] {
    if (*aten) list_aten_ops();
    else if (name->empty()) list_nodes();
    else show_node(*name);
    exit_code = kExitOk;
  });
}

}  // namespace refgrad::cli
