// Prints docs/nodes.md: every node in the registry with its forward op, its
// inputs (outgoing edges), its incoming grads, its saved fields (kind; † = not
// exposed as grad_fn._saved_<name>) and its formula.
// `make docs` writes the file; the nodes suite checks that it is up to date.
#include <refgrad/nodes.hpp>

#include <iostream>

int main() {
  using namespace refgrad;
  const auto nodes = all_nodes();
  std::cout << "# Backward nodes\n\n"
            << "Generated from refgrad's node registry by `make docs` (tools/nodes_md.cpp); do not edit.\n"
            << nodes.size() << " nodes. Saved fields are in PyTorch's packing order; † marks a field PyTorch "
            << "stores but does not expose as `grad_fn._saved_<name>`. grads: the incoming grads, one per "
            << "differentiable forward output (torch's `len(grad_fn._input_metadata)`). A Tensor[] input has one "
            << "outgoing edge per list element (and one need bit).\n\n"
            << "| node | forward | inputs | grads | saved fields | formula |\n|---|---|---|---|---|---|\n";
  for (const NodeDef* def : nodes) {
    const NodeSchema& s = def->schema;
    std::string inputs, saved, formula;
    for (const std::string& input : s.inputs) inputs += (inputs.empty() ? "" : ", ") + input;
    if (!s.list_length_field.empty()) inputs += " : Tensor[] (one per entry of " + s.list_length_field + ")";
    const std::string grads = s.num_grads == kVariadic ? "one per output" : std::to_string(s.num_grads);
    for (const SavedFieldSchema& field : s.saved)
      saved += (saved.empty() ? "" : ", ") + field.name + (field.exposed ? "" : "†") + " : " + type_name(field.type);
    for (char c : s.formula) formula += c == '\n' ? std::string("<br>") : c == '|' ? std::string("\\|") : std::string(1, c);
    std::cout << "| " << s.name << " | " << s.aten_op << " | " << inputs << " | " << grads << " | "
              << (saved.empty() ? "—" : saved)
              << " | " << formula << " |\n";
  }
  return 0;
}
