// `refgrad dot FILE`: the program's dataflow as a Graphviz DOT graph. One
// node per instruction (its op or backward node, and the types of its
// results where the program states them: validate's metadata, zeros'), one
// per declaration (grads, saved tensors, leaves, outputs, each its own
// shape), and an edge from where each value is made to where it is used,
// labelled with the register or saved field.
#include <iostream>
#include <map>
#include <memory>
#include <variant>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"

namespace refgrad::cli {

namespace {

// A DOT string literal: quotes and backslashes escaped, newlines as \n.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out + '"';
}

std::string instruction_id(std::size_t pc) { return quoted(fmt::format("pc{}", pc)); }
std::string declaration_id(char sigil, const std::string& name) { return quoted(std::string(1, sigil) + name); }

// "MulBackward0", "CopySlices[MulBackward0]", "validate", "hook &double", ...
std::string operation_label(const Instr& instr) {
  switch (instr.op) {
    case Opcode::Call: return instr.node;
    case Opcode::CopySlices: return "CopySlices[" + instr.node + "]";
    case Opcode::Hook: return "hook &" + instr.target;
    case Opcode::CallBackward: return "call_backward &" + instr.target;
    default: return mnemonic(instr.op);
  }
}

// The result types the program states: validate's metadata, zeros' type.
std::string known_types(const Instr& instr) {
  std::vector<std::string> types;
  for (const std::optional<InputMetadata>& metadata : instr.metadata) {
    types.push_back(metadata ? to_string(*metadata) : "_");
  }
  return fmt::format("{}", fmt::join(types, ", "));
}

// The saved tensors an instruction's fields refer to, with the field's name.
std::vector<std::pair<std::string, std::string>> saved_references(const Instr& instr) {
  std::vector<std::pair<std::string, std::string>> references;
  for (const Attr& attr : instr.attrs) {
    if (const auto* one = std::get_if<SavedRef>(&attr.value)) references.emplace_back(attr.name, one->name);
    if (const auto* list = std::get_if<std::vector<SavedRef>>(&attr.value)) {
      for (const SavedRef& ref : *list) references.emplace_back(attr.name, ref.name);
    }
    if (const auto* list = std::get_if<std::vector<std::optional<SavedRef>>>(&attr.value)) {
      for (const std::optional<SavedRef>& ref : *list) {
        if (ref) references.emplace_back(attr.name, ref->name);
      }
    }
  }
  return references;
}

void write_declarations(const Program& program, std::ostream& out) {
  const auto node = [&](char sigil, const std::string& name, const TensorType& type, const char* shape,
                        const char* style) {
    out << fmt::format("  {} [label={}, {}, {}];\n", declaration_id(sigil, name),
                       quoted(fmt::format("{}{}\n{}", sigil, name, to_string(type))), shape, style);
  };
  const char* input = "style=filled, fillcolor=\"#dbe8fb\"";   // blue: what comes in
  const char* saved = "style=filled, fillcolor=\"#fdf3d0\"";   // yellow: what the forward kept
  const char* result = "style=filled, fillcolor=\"#d9f2dd\"";  // green: what the program makes
  for (const GradDecl& grad : program.grads) node('%', grad.name, grad.type, "shape=invhouse", input);
  for (const SavedDecl& decl : program.saved) node('$', decl.name, decl.type, "shape=note", saved);
  for (const LeafDecl& leaf : program.leaves) node('@', leaf.name, leaf.type, "shape=doubleoctagon", result);
  for (const OutputDecl& output : program.outputs) node('^', output.name, output.type, "shape=house", result);
}

void write_instruction(const Program& program, std::size_t pc, std::map<std::string, std::string>& made_by,
                       std::ostream& out) {
  const Instr& instr = program.code[pc];
  const std::string id = instruction_id(pc);
  const std::string types = known_types(instr);
  const bool is_node = instr.op == Opcode::Call || instr.op == Opcode::CopySlices || instr.op == Opcode::CallBackward;
  out << fmt::format("  {} [label={}, shape={}];\n", id,
                     quoted(fmt::format("{}: {}{}", pc, operation_label(instr), types.empty() ? "" : "\n" + types)),
                     is_node ? "box, style=bold" : "box, style=rounded");
  for (const std::optional<std::string>& operand : instr.operands) {
    const auto maker = operand ? made_by.find(*operand) : made_by.end();
    if (maker != made_by.end()) {
      out << fmt::format("  {} -> {} [label={}];\n", maker->second, id, quoted("%" + *operand));
    }
  }
  for (const auto& [field, saved] : saved_references(instr)) {
    if (program.find_saved(saved)) {
      out << fmt::format("  {} -> {} [label={}, style=dashed];\n", declaration_id('$', saved), id, quoted(field));
    }
  }
  if (instr.op == Opcode::AccumulateGrad && program.find_leaf(instr.target)) {
    out << fmt::format("  {} -> {};\n", id, declaration_id('@', instr.target));
  }
  if (instr.op == Opcode::Hook && !instr.leaf.empty() && program.find_leaf(instr.leaf)) {
    out << fmt::format("  {} -> {} [label=\".grad\", style=dashed];\n", declaration_id('@', instr.leaf), id);
  }
  if (instr.op == Opcode::Output && program.find_output(instr.target)) {
    out << fmt::format("  {} -> {};\n", id, declaration_id('^', instr.target));
  }
  for (const std::optional<std::string>& result : instr.results) {
    if (result) made_by[*result] = id;
  }
}

// Draws any program that loads, as dis shows it: an operand nothing defines
// has no edge.
int dot_command(const std::string& file) {
  const Program program = load_program_file(file).program;
  std::ostream& out = std::cout;
  out << "digraph " << quoted(program.name) << " {\n"
      << "  node [fontname=\"Helvetica\", fontsize=10];\n"
      << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  write_declarations(program, out);
  std::map<std::string, std::string> made_by;  // register -> the DOT node that makes it
  for (const GradDecl& grad : program.grads) made_by[grad.name] = declaration_id('%', grad.name);
  for (std::size_t pc = 0; pc < program.code.size(); ++pc) write_instruction(program, pc, made_by, out);
  out << "}\n";
  return kExitOk;
}

}  // namespace

void add_dot_command(CLI::App& app, int& exit_code) {
  auto file = std::make_shared<std::string>();
  CLI::App* command = app.add_subcommand("dot", "print the program's dataflow as a Graphviz DOT graph (dot -Tsvg)");
  command->add_option("FILE", *file, "the program: .bwd text, .rgbc bytecode or .safetensors bundle")->required();
  command->callback([file, &exit_code] { exit_code = dot_command(*file); });
}

}  // namespace refgrad::cli
