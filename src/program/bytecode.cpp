// Bytecode: a program lowered to indices (assemble), lifted back to names
// (disassemble), and bound to its tensors and its nodes' typed structs (bind).
#include <map>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "refgrad/bytecode.hpp"

namespace refgrad {

ArgPool arg_pool(Opcode op) {
  switch (op) {
    case Opcode::Call:
    case Opcode::CopySlices:
    case Opcode::Aten: return ArgPool::Nodes;
    case Opcode::AccumulateGrad: return ArgPool::Leaves;
    case Opcode::Hook: return ArgPool::Hooks;
    case Opcode::CallBackward: return ArgPool::Functions;
    case Opcode::Output: return ArgPool::Outputs;
    case Opcode::Validate:
    case Opcode::Add:
    case Opcode::Zeros: return ArgPool::None;
  }
  return ArgPool::None;
}

namespace {

// "instruction 4 (MulBackward0)", "instruction 7 (accumulate_grad @w)": how
// assemble and bind name an instruction. `subject` is the node, or the target
// with its sigil; empty for opcodes that have neither.
std::string instruction_label(std::size_t pc, Opcode op, std::string_view subject) {
  std::string what;
  if (op == Opcode::Call || op == Opcode::Aten) what = std::string(subject);
  else if (op == Opcode::CopySlices) what = fmt::format("CopySlices[{}]", subject);
  else if (subject.empty()) what = mnemonic(op);
  else what = fmt::format("{} {}", mnemonic(op), subject);
  return fmt::format("instruction {} ({})", pc, what);
}

std::string_view sigil(ArgPool pool) {
  switch (pool) {
    case ArgPool::Leaves: return "@";
    case ArgPool::Hooks:
    case ArgPool::Functions: return "&";
    case ArgPool::Outputs: return "^";
    case ArgPool::None:
    case ArgPool::Nodes: return "";
  }
  return "";
}

std::uint32_t to_index(std::size_t size, std::string_view pool) {
  check(size < kNoIndex, "assemble: too many ", pool, " for 32-bit indices");
  return static_cast<std::uint32_t>(size);
}

// The index of a pool entry equal to `value`, appending it when there is none:
// register names, node names, origins and need masks are stored once each.
template <class T>
class Interner {
 public:
  Interner(std::vector<T>& pool, std::string_view what) : pool_(pool), what_(what) {}
  std::uint32_t operator()(const T& value) {
    auto [it, added] = index_.try_emplace(value, to_index(pool_.size(), what_));
    if (added) pool_.push_back(value);
    return it->second;
  }

 private:
  std::vector<T>& pool_;
  std::string_view what_;
  std::map<T, std::uint32_t> index_;
};

// A pool entry by index, checked: bytecode built in memory is not checked by a reader.
template <class T>
const T& pool_entry(const std::vector<T>& pool, std::uint32_t index, std::string_view what) {
  check(index < pool.size(), what, " index ", index, " is out of range (", pool.size(), " entries)");
  return pool[index];
}

// ----------------------------------------------------------------- assemble ---

class Assembler {
 public:
  explicit Assembler(const Program& program) : program_(program) {
    out_.name = program.name;
    out_.grads = program.grads;
    out_.saved = program.saved;
    out_.leaves = program.leaves;
    out_.hooks = program.hooks;
    out_.functions = program.functions;
    out_.outputs = program.outputs;
  }

  Bytecode run() && {
    for (std::size_t pc = 0; pc < program_.code.size(); ++pc) {
      const Instr& instr = program_.code[pc];
      const std::string subject =
          !instr.node.empty() ? instr.node
          : !instr.target.empty() ? std::string(sigil(arg_pool(instr.op))) + instr.target : "";
      try {
        out_.code.push_back(lower(instr));
      } catch (const Error& error) {
        fail(fmt::format("assemble: {}: {}", instruction_label(pc, instr.op, subject), error.what()));
      }
    }
    return std::move(out_);
  }

 private:
  BytecodeInstr lower(const Instr& instr) {
    BytecodeInstr code;
    code.op = instr.op;
    std::tie(code.first_operand, code.operand_count) = register_run(instr.operands);
    std::tie(code.first_result, code.result_count) = register_run(instr.results);
    code.arg = arg_index(instr);
    if (!instr.leaf.empty()) {
      code.leaf = declaration_index(program_.leaves, program_.find_leaf(instr.leaf), "leaf @", instr.leaf);
    }
    if (!instr.attrs.empty()) {
      code.attrs = to_index(out_.attribute_blocks.size(), "attribute blocks");
      out_.attribute_blocks.push_back(instr.attrs);
    }
    if (!instr.need.empty()) code.need = need_masks_(instr.need);
    if (!instr.metadata.empty()) {
      code.metadata = to_index(out_.metadata.size(), "metadata entries");
      code.metadata_count = to_index(instr.metadata.size(), "metadata entries");
      out_.metadata.insert(out_.metadata.end(), instr.metadata.begin(), instr.metadata.end());
    }
    if (!instr.origin.empty()) code.origin = strings_(instr.origin);
    return code;
  }

  std::pair<std::uint32_t, std::uint32_t> register_run(const std::vector<std::optional<std::string>>& names) {
    const std::uint32_t first = to_index(out_.registers.size(), "registers");
    for (const std::optional<std::string>& name : names) {
      out_.registers.push_back(name ? registers_(*name) : kNoRegister);
    }
    return {first, to_index(names.size(), "registers")};
  }

  // The node or declaration `arg` names; an opcode without one must not name any.
  std::uint32_t arg_index(const Instr& instr) {
    const ArgPool pool = arg_pool(instr.op);
    if (pool != ArgPool::Nodes) check(instr.node.empty(), mnemonic(instr.op), " does not take a node");
    if (pool == ArgPool::Nodes || pool == ArgPool::None) {
      check(instr.target.empty(), mnemonic(instr.op), " does not take a target");
    }
    switch (pool) {
      case ArgPool::None: return kNoIndex;
      case ArgPool::Nodes:
        if (instr.op == Opcode::Aten) check(find_aten_op(instr.node) != nullptr, "refgrad has no ATen op '", instr.node, "'");
        else check(find_node(instr.node) != nullptr, "unknown backward node '", instr.node, "'");
        return nodes_(instr.node);
      case ArgPool::Leaves:
        return declaration_index(program_.leaves, program_.find_leaf(instr.target), "leaf @", instr.target);
      case ArgPool::Hooks:
        return declaration_index(program_.hooks, program_.find_hook(instr.target), "hook &", instr.target);
      case ArgPool::Functions:
        return declaration_index(program_.functions, program_.find_function(instr.target), "function &",
                                 instr.target);
      case ArgPool::Outputs:
        return declaration_index(program_.outputs, program_.find_output(instr.target), "output ^", instr.target);
    }
    return kNoIndex;
  }

  template <class Decl>
  static std::uint32_t declaration_index(const std::vector<Decl>& decls, const Decl* found, std::string_view kind,
                                         const std::string& name) {
    check(found != nullptr, "undeclared ", kind, name);
    return static_cast<std::uint32_t>(found - decls.data());
  }

  const Program& program_;
  Bytecode out_;
  Interner<std::string> registers_{out_.register_names, "registers"};
  Interner<std::string> nodes_{out_.nodes, "nodes"};
  Interner<std::string> strings_{out_.strings, "strings"};
  Interner<std::vector<bool>> need_masks_{out_.need_masks, "need masks"};
};

// -------------------------------------------------------------- disassemble ---

std::vector<std::optional<std::string>> register_names(const Bytecode& bytecode, std::uint32_t first,
                                                       std::uint32_t count) {
  check(std::uint64_t{first} + count <= bytecode.registers.size(), "register run [", first, ", +", count,
        ") is out of range (", bytecode.registers.size(), " entries)");
  std::vector<std::optional<std::string>> names;
  for (std::uint32_t i = first; i < first + count; ++i) {
    const std::uint32_t reg = bytecode.registers[i];
    if (reg == kNoRegister) names.emplace_back(std::nullopt);
    else names.emplace_back(pool_entry(bytecode.register_names, reg, "register"));
  }
  return names;
}

// The name `arg` stands for: a node, or a declaration's name.
std::string arg_name(const Bytecode& bytecode, const BytecodeInstr& code) {
  switch (arg_pool(code.op)) {
    case ArgPool::None: return "";
    case ArgPool::Nodes: return pool_entry(bytecode.nodes, code.arg, "node");
    case ArgPool::Leaves: return pool_entry(bytecode.leaves, code.arg, "leaf").name;
    case ArgPool::Hooks: return pool_entry(bytecode.hooks, code.arg, "hook").name;
    case ArgPool::Functions: return pool_entry(bytecode.functions, code.arg, "function").name;
    case ArgPool::Outputs: return pool_entry(bytecode.outputs, code.arg, "output").name;
  }
  return "";
}

std::vector<std::optional<InputMetadata>> metadata_run(const Bytecode& bytecode, const BytecodeInstr& code) {
  if (code.metadata_count == 0) return {};
  check(std::uint64_t{code.metadata} + code.metadata_count <= bytecode.metadata.size(), "metadata run [",
        code.metadata, ", +", code.metadata_count, ") is out of range (", bytecode.metadata.size(), " entries)");
  const auto first = bytecode.metadata.begin() + code.metadata;
  return {first, first + code.metadata_count};
}

Instr lift(const Bytecode& bytecode, const BytecodeInstr& code) {
  Instr instr;
  instr.op = code.op;
  instr.operands = register_names(bytecode, code.first_operand, code.operand_count);
  instr.results = register_names(bytecode, code.first_result, code.result_count);
  const std::string arg = arg_name(bytecode, code);
  if (arg_pool(code.op) == ArgPool::Nodes) instr.node = arg;
  else instr.target = arg;
  if (code.leaf != kNoIndex) instr.leaf = pool_entry(bytecode.leaves, code.leaf, "leaf").name;
  if (code.attrs != kNoIndex) instr.attrs = pool_entry(bytecode.attribute_blocks, code.attrs, "attribute block");
  if (code.need != kNoIndex) instr.need = pool_entry(bytecode.need_masks, code.need, "need mask");
  instr.metadata = metadata_run(bytecode, code);
  if (code.origin != kNoIndex) instr.origin = pool_entry(bytecode.strings, code.origin, "string");
  return instr;
}

}  // namespace

Bytecode assemble(const Program& program) { return Assembler(program).run(); }

Program disassemble(const Bytecode& bytecode) {
  Program program;
  program.name = bytecode.name;
  program.grads = bytecode.grads;
  program.saved = bytecode.saved;
  program.leaves = bytecode.leaves;
  program.hooks = bytecode.hooks;
  program.functions = bytecode.functions;
  program.outputs = bytecode.outputs;
  for (std::size_t pc = 0; pc < bytecode.code.size(); ++pc) {
    try {
      program.code.push_back(lift(bytecode, bytecode.code[pc]));
    } catch (const Error& error) {
      fail(fmt::format("disassemble: instruction {}: {}", pc, error.what()));
    }
  }
  return program;
}

// ------------------------------------------------------------------ binding ---

namespace {

// Runs `body`, prefixing any refgrad::Error it raises with `label`.
template <class Body>
auto with_context(const std::string& label, Body&& body) {
  try {
    return body();
  } catch (const Error& error) {
    fail(fmt::format("{}: {}", label, error.what()));
  }
}

// A declared tensor's value: the sizes and dtype must be the declared ones;
// the device is metadata (a program recorded on CUDA runs on the CPU).
void check_declared_type(const Tensor& value, const TensorType& type) {
  check(value.defined(), "the value is an undefined tensor");
  check(value.dtype() == type.dtype && value.sizes() == type.sizes, "declared ", to_string(type),
        " but the value is ", to_string(TensorType{value.dtype(), value.sizes(), type.device}));
}

std::optional<Tensor> given(const TensorMap& tensors, const std::string& key) {
  const auto it = tensors.find(key);
  if (it == tensors.end()) return std::nullopt;
  return it->second;
}

// Tensor values for every declaration, checked against their types.
void bind_declarations(BoundProgram& bound, const TensorMap& tensors) {
  const Bytecode& bytecode = bound.bytecode;
  for (const SavedDecl& decl : bytecode.saved) {
    bound.saved_values.push_back(with_context("bind: saved $" + decl.name, [&] {
      const std::optional<Tensor> value = decl.value ? decl.value : given(tensors, "$" + decl.name);
      check(value.has_value(), "no value: none inline and no tensor \"$", decl.name, "\" given");
      check_declared_type(*value, decl.type);
      return *value;
    }));
  }
  // A grad's inline value is a default: a given "%name" replaces it.
  for (const GradDecl& decl : bytecode.grads) {
    bound.grad_defaults.push_back(with_context("bind: grad %" + decl.name, [&] {
      std::optional<Tensor> value = given(tensors, "%" + decl.name);
      if (!value) value = decl.value;
      if (value) check_declared_type(*value, decl.type);
      return value;
    }));
  }
  for (const LeafDecl& decl : bytecode.leaves) {
    bound.leaf_grads.push_back(with_context("bind: leaf @" + decl.name, [&] {
      const std::optional<Tensor> value = decl.grad ? decl.grad : given(tensors, "@" + decl.name);
      if (value) check_declared_type(*value, decl.type);
      return value;
    }));
  }
}

// Saved tensors by declared name, for resolving SavedRefs.
class SavedTensors {
 public:
  explicit SavedTensors(const BoundProgram& bound) {
    for (std::size_t i = 0; i < bound.bytecode.saved.size(); ++i) {
      by_name_.emplace(bound.bytecode.saved[i].name, &bound.saved_values[i]);
    }
  }
  const Tensor& operator[](const SavedRef& ref) const {
    const auto it = by_name_.find(ref.name);
    check(it != by_name_.end(), "$", ref.name, " is not a declared saved tensor");
    return *it->second;
  }

 private:
  std::map<std::string, const Tensor*> by_name_;
};

// An attribute as the node's bind() takes it: saved references become their
// tensors, None stays None, every other alternative is the same type.
FieldValue field_value(const AttrValue& value, const SavedTensors& saved) {
  return std::visit(
      [&saved](const auto& x) -> FieldValue {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, SavedRef>) {
          return saved[x];
        } else if constexpr (std::is_same_v<T, std::vector<SavedRef>>) {
          TensorList list;
          for (const SavedRef& ref : x) list.push_back(saved[ref]);
          return list;
        } else if constexpr (std::is_same_v<T, std::vector<std::optional<SavedRef>>>) {
          std::vector<OptionalTensor> list;
          for (const std::optional<SavedRef>& ref : x) {
            list.push_back(ref ? OptionalTensor(saved[*ref]) : OptionalTensor());
          }
          return list;
        } else {
          return FieldValue(std::in_place_type<T>, x);
        }
      },
      value);
}

// The node's saved fields in its schema's order, from attributes by name.
std::vector<FieldValue> schema_values(const NodeSchema& schema, std::span<const Attr> attrs,
                                      const SavedTensors& saved) {
  std::map<std::string_view, const Attr*> by_name;
  for (const Attr& attr : attrs) {
    check(by_name.emplace(attr.name, &attr).second, "field '", attr.name, "' is given twice");
  }
  std::vector<FieldValue> values;
  for (const SavedFieldSchema& field : schema.saved) {
    const auto it = by_name.find(field.name);
    check(it != by_name.end(), "missing saved field '", field.name, "'");
    values.push_back(with_context("field '" + field.name + "'", [&] { return field_value(it->second->value, saved); }));
    by_name.erase(it);
  }
  if (!by_name.empty()) fail(fmt::format("'{}' is not a saved field of {}", by_name.begin()->first, schema.name));
  return values;
}

// A TensorGeometry attribute by position (CopySlices' base and view).
const TensorGeometry& geometry_attr(const std::vector<Attr>& attrs, std::size_t i, std::string_view name) {
  check(i < attrs.size() && attrs[i].name == name, "CopySlices: field ", i, " must be '", name, "'");
  const auto* geometry = std::get_if<TensorGeometry>(&attrs[i].value);
  check(geometry != nullptr, "CopySlices: '", name, "' must be a TensorGeometry");
  return *geometry;
}

const std::vector<Attr>& attribute_block(const Bytecode& bytecode, const BytecodeInstr& code) {
  static const std::vector<Attr> kNoAttrs;
  return code.attrs == kNoIndex ? kNoAttrs : pool_entry(bytecode.attribute_blocks, code.attrs, "attribute block");
}

// The float16/bfloat16 tensors among a node's saved values read into float32, as the one ATen kernel
// that computes the node reads them (computes_in_one_kernel); returns the dtype they were stored in.
std::optional<DType> read_into_float32(std::vector<FieldValue>& values) {
  std::optional<DType> stored;
  const auto widen = [&](Tensor& t) {
    if (!t.defined() || (t.dtype() != DType::Float16 && t.dtype() != DType::BFloat16)) return;
    if (!stored) stored = t.dtype();
    t = to(t, DType::Float32);
  };
  for (FieldValue& value : values) {
    if (auto* t = std::get_if<Tensor>(&value)) widen(*t);
    if (auto* list = std::get_if<TensorList>(&value))
      for (Tensor& t : *list) widen(t);
    if (auto* list = std::get_if<std::vector<OptionalTensor>>(&value))
      for (OptionalTensor& t : *list)
        if (t) widen(*t);
  }
  return stored;
}

BoundCall bind_call(const Bytecode& bytecode, const BytecodeInstr& code, const SavedTensors& saved) {
  BoundCall call;
  call.node = &get_node(pool_entry(bytecode.nodes, code.arg, "node"));
  std::span<const Attr> fields = attribute_block(bytecode, code);
  if (code.op == Opcode::CopySlices) {
    call.base = geometry_attr(attribute_block(bytecode, code), 0, "base");
    call.view = geometry_attr(attribute_block(bytecode, code), 1, "view");
    fields = fields.subspan(2);
  }
  std::vector<FieldValue> values = schema_values(call.node->schema, fields, saved);
  check_complex_supported(call.node->schema, values);
  call.one_kernel = code.op == Opcode::Call && computes_in_one_kernel(call.node->schema);
  if (call.one_kernel) call.stored_dtype = read_into_float32(values);
  call.saved = call.node->bind(values);
  return call;
}

// An aten instruction's arguments with their values in place: value attributes as they are, numbers
// standing for tensors as Scalars, and each operand's slot; saved-tensor operands ("$x") bound now.
BoundAten bind_aten(const Bytecode& bytecode, const BytecodeInstr& code, const SavedTensors& saved) {
  Instr instr;  // the instruction by names: aten_arguments() reads it
  instr.op = Opcode::Aten;
  instr.node = pool_entry(bytecode.nodes, code.arg, "node");
  instr.attrs = attribute_block(bytecode, code);
  instr.operands = register_names(bytecode, code.first_operand, code.operand_count);
  BoundAten bound;
  bound.op = &get_aten_op(instr.node);
  for (const AtenInstrArgument& argument : aten_arguments(instr)) {
    const std::size_t index = bound.arguments.size();
    const AtenArgument& schema = *argument.schema;
    const auto operand_value = [&](const std::optional<std::string>& operand, std::optional<std::size_t> element) {
      const bool from_register = operand && !operand->starts_with('$');
      bound.operands.push_back(BoundAten::Slot{index, element, from_register});
      if (!operand) return OptionalTensor();
      return from_register ? OptionalTensor() : OptionalTensor(saved[SavedRef{operand->substr(1)}]);
    };
    if (schema.is_tensor() && !argument.operands.empty()) {
      const OptionalTensor value = operand_value(argument.operands[0], std::nullopt);
      bound.arguments.push_back(value ? FieldValue(*value) : FieldValue(None{}));
    } else if (schema.type.kind == FieldKind::TensorList) {
      TensorList list;
      for (std::size_t e = 0; e < argument.operands.size(); ++e) {
        const OptionalTensor value = operand_value(argument.operands[e], e);
        check(argument.operands[e].has_value(), "argument '", schema.name, "' (Tensor[]) has none for element ", e);
        list.push_back(value.value_or(Tensor()));
      }
      bound.arguments.push_back(list);
    } else if (schema.type.kind == FieldKind::OptionalTensorList) {
      std::vector<OptionalTensor> list;
      for (std::size_t e = 0; e < argument.operands.size(); ++e) list.push_back(operand_value(argument.operands[e], e));
      bound.arguments.push_back(list);
    } else {
      bound.arguments.push_back(field_value(*argument.value, saved));
    }
  }
  return bound;
}

// call_backward's one attribute: `saved`, the ctx's saved tensors.
std::vector<Tensor> backward_saved(const Bytecode& bytecode, const BytecodeInstr& code, const SavedTensors& saved) {
  const std::vector<Attr>& attrs = attribute_block(bytecode, code);
  check(attrs.size() == 1 && attrs[0].name == "saved", "call_backward takes one field, 'saved'");
  const FieldValue value = field_value(attrs[0].value, saved);
  const auto* tensors = std::get_if<TensorList>(&value);
  check(tensors != nullptr, "'saved' must be a list of saved tensors, got ", describe(value));
  return *tensors;
}

// The node or target an instruction names, for its label; "" when its index
// is bad (binding reports that itself).
std::string subject(const Bytecode& bytecode, const BytecodeInstr& code) {
  const ArgPool pool = arg_pool(code.op);
  if (pool == ArgPool::None) return "";
  try {
    return std::string(sigil(pool)) + arg_name(bytecode, code);
  } catch (const Error&) {
    return "";
  }
}

}  // namespace

BoundProgram bind(Bytecode bytecode, const TensorMap& tensors) {
  BoundProgram bound;
  bound.bytecode = std::move(bytecode);
  bind_declarations(bound, tensors);
  const SavedTensors saved(bound);
  const Bytecode& code = bound.bytecode;
  bound.calls.resize(code.code.size());
  bound.aten.resize(code.code.size());
  bound.backward_saved.resize(code.code.size());
  for (std::size_t pc = 0; pc < code.code.size(); ++pc) {
    const BytecodeInstr& instr = code.code[pc];
    if (instr.op != Opcode::Call && instr.op != Opcode::CopySlices && instr.op != Opcode::CallBackward &&
        instr.op != Opcode::Aten)
      continue;
    const std::string label = "bind: " + instruction_label(pc, instr.op, subject(code, instr));
    if (instr.op == Opcode::Aten) {
      bound.aten[pc] = with_context(label, [&] { return bind_aten(code, instr, saved); });
    } else if (instr.op == Opcode::CallBackward) {
      bound.backward_saved[pc] = with_context(label, [&] { return backward_saved(code, instr, saved); });
    } else {
      bound.calls[pc] = with_context(label, [&] { return bind_call(code, instr, saved); });
    }
  }
  return bound;
}

}  // namespace refgrad
