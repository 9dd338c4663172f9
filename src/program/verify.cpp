// L2: the verifier — checks a program without running it.
//
// One pass over the declarations, one over the code in order (so "defined
// before use" is simply "defined by now"), then the warnings that need the
// whole program (never used, never written, never accumulated). Types are
// followed where they are known: from declarations, validate metadata and
// zeros; a node call's results have no known type (refgrad does not infer
// node shapes). docs/program.md ("The verifier") lists every rule with its
// message.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "refgrad/ops.hpp"
#include "refgrad/program.hpp"

namespace refgrad {

namespace {

using Severity = Diagnostic::Severity;
using MaybeType = std::optional<TensorType>;  // nullopt: not known here

// "1 operand", "2 operands"; `plural` for nouns that do not take an s.
std::string counted(std::size_t n, std::string_view noun, std::string_view plural = "") {
  if (n == 1) return fmt::format("1 {}", noun);
  return plural.empty() ? fmt::format("{} {}s", n, noun) : fmt::format("{} {}", n, plural);
}

bool has_negative_size(const Shape& sizes) {
  for (std::int64_t size : sizes) {
    if (size < 0) return true;
  }
  return false;
}

// "f32[4,3]": dtype and sizes only, for comparisons that leave the device out.
std::string dtype_and_sizes(DType dtype, const Shape& sizes) { return short_dtype_name(dtype) + str(sizes); }

// ------------------------------------------------------ saved-field kinds ---

// The kind an attribute value spells (program.hpp's table, read backwards);
// nullopt for None. IntList stands for both int[] and SymInt[].
std::optional<FieldKind> kind_of(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::optional<FieldKind> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, None>) return std::nullopt;
        else if constexpr (std::is_same_v<T, SavedRef>) return FieldKind::Tensor;
        else if constexpr (std::is_same_v<T, std::vector<SavedRef>>) return FieldKind::TensorList;
        else if constexpr (std::is_same_v<T, std::vector<std::optional<SavedRef>>>) return FieldKind::OptionalTensorList;
        else if constexpr (std::is_same_v<T, std::int64_t>) return FieldKind::Int;
        else if constexpr (std::is_same_v<T, IntList>) return FieldKind::IntList;
        else if constexpr (std::is_same_v<T, double>) return FieldKind::Float;
        else if constexpr (std::is_same_v<T, bool>) return FieldKind::Bool;
        else if constexpr (std::is_same_v<T, Scalar>) return FieldKind::Scalar;
        else if constexpr (std::is_same_v<T, std::string>) return FieldKind::String;
        else if constexpr (std::is_same_v<T, DType>) return FieldKind::DType;
        else if constexpr (std::is_same_v<T, Layout>) return FieldKind::Layout;
        else if constexpr (std::is_same_v<T, TensorOptions>) return FieldKind::TensorOptions;
        else if constexpr (std::is_same_v<T, TensorGeometry>) return FieldKind::TensorGeometry;
        else if constexpr (std::is_same_v<T, TypeAndSize>) return FieldKind::TypeAndSize;
        else if constexpr (std::is_same_v<T, std::vector<DType>>) return FieldKind::DTypeList;
        else if constexpr (std::is_same_v<T, std::vector<IntList>>) return FieldKind::SizesList;
        else if constexpr (std::is_same_v<T, std::vector<bool>>) return FieldKind::BoolList;
        else if constexpr (std::is_same_v<T, Device>) return FieldKind::Device;
        else return FieldKind::MemoryFormat;
      },
      value);
}

// None only where the schema says the field is optional. A tensor PyTorch
// may leave unsaved (MulBackward0's `other` when self needs no grad) is
// declared `Tensor?` by its node, so the schema is the one authority, as it
// is for the registry's bind at load time.
bool fits(const AttrValue& value, FieldType type) {
  const std::optional<FieldKind> kind = kind_of(value);
  if (!kind) return type.optional;
  if (*kind == FieldKind::IntList) return type.kind == FieldKind::IntList || type.kind == FieldKind::Sizes;
  return *kind == type.kind;
}

std::string kind_text(const AttrValue& value) {
  const std::optional<FieldKind> kind = kind_of(value);
  return kind ? type_name(FieldType{*kind}) : "none";
}

// Calls `visit` with every saved-tensor reference in a value.
template <class Visit>
void for_each_saved_ref(const AttrValue& value, Visit visit) {
  if (const auto* ref = std::get_if<SavedRef>(&value)) visit(*ref);
  if (const auto* refs = std::get_if<std::vector<SavedRef>>(&value)) {
    for (const SavedRef& ref : *refs) visit(ref);
  }
  if (const auto* refs = std::get_if<std::vector<std::optional<SavedRef>>>(&value)) {
    for (const std::optional<SavedRef>& ref : *refs) {
      if (ref) visit(*ref);
    }
  }
}

const Attr* find_attr(const Instr& instr, std::string_view name) {
  for (const Attr& attr : instr.attrs) {
    if (attr.name == name) return &attr;
  }
  return nullptr;
}

// The fields a call instruction must give: the node's saved fields, and for
// CopySlices the base's and the view's geometry first.
std::vector<SavedFieldSchema> fields_of(const Instr& instr, const NodeSchema& schema) {
  std::vector<SavedFieldSchema> fields;
  if (instr.op == Opcode::CopySlices) {
    fields.push_back({"base", FieldType{FieldKind::TensorGeometry}, true});
    fields.push_back({"view", FieldType{FieldKind::TensorGeometry}, true});
  }
  fields.insert(fields.end(), schema.saved.begin(), schema.saved.end());
  return fields;
}

// --------------------------------------------------------------- verifier ---

struct Register {
  int pc = -1;     // the defining instruction; -1 for a grad declaration
  MaybeType type;  // what the value is when it is defined
  bool used = false;
};

class Verifier {
 public:
  explicit Verifier(const Program& program) : program_(program) {}

  std::vector<Diagnostic> run() {
    check_declarations();
    for (int pc = 0; pc < static_cast<int>(program_.code.size()); ++pc) {
      const Instr& instr = program_.code[static_cast<std::size_t>(pc)];
      for (const auto& result : instr.results) {
        if (result) first_definition_.try_emplace(*result, pc);
      }
    }
    for (pc_ = 0; pc_ < static_cast<int>(program_.code.size()); ++pc_) {
      check_instruction(program_.code[static_cast<std::size_t>(pc_)]);
    }
    warn_about_unused();
    return std::move(diagnostics_);
  }

 private:
  // ------------------------------------------------------------ reports ---

  void report(Severity severity, int pc, const SourceLocation& where, std::string message) {
    diagnostics_.push_back(Diagnostic{severity, std::move(message), pc, where});
  }
  void report_at(Severity severity, int pc, const std::string& message) {
    const Instr& instr = program_.code[static_cast<std::size_t>(pc)];
    report(severity, pc, instr.where, fmt::format("instruction {} ({}): {}", pc, print_instruction(instr), message));
  }
  void error(const std::string& message) { report_at(Severity::Error, pc_, message); }
  void warning(const std::string& message) { report_at(Severity::Warning, pc_, message); }
  void declaration_error(const SourceLocation& where, std::string message) {
    report(Severity::Error, -1, where, std::move(message));
  }
  void declaration_warning(const SourceLocation& where, std::string message) {
    report(Severity::Warning, -1, where, std::move(message));
  }

  // ------------------------------------------------------- declarations ---

  void check_declarations() {
    for (const GradDecl& grad : program_.grads) {
      const std::string what = "grad %" + grad.name;
      check_declared_once("%" + grad.name, what, grad.where);
      check_type(grad.type, what, grad.where);
      check_inline(grad.value, grad.type, what + "'s value", grad.where);
      if (registers_.try_emplace(grad.name, Register{-1, grad.type}).second) defined_.push_back(grad.name);
    }
    for (const SavedDecl& saved : program_.saved) {
      const std::string what = "saved $" + saved.name;
      check_declared_once("$" + saved.name, what, saved.where);
      check_type(saved.type, what, saved.where);
      check_inline(saved.value, saved.type, what + "'s value", saved.where);
    }
    for (const LeafDecl& leaf : program_.leaves) {
      const std::string what = "leaf @" + leaf.name;
      check_declared_once("@" + leaf.name, what, leaf.where);
      check_type(leaf.type, what, leaf.where);
      check_inline(leaf.grad, leaf.type, what + "'s .grad", leaf.where);
    }
    // Hooks and functions share the `&` sigil, so they share their names.
    for (const HookDecl& hook : program_.hooks) check_declared_once("&" + hook.name, "hook &" + hook.name, hook.where);
    for (const FunctionDecl& function : program_.functions) {
      check_declared_once("&" + function.name, "function &" + function.name, function.where);
    }
    for (const OutputDecl& output : program_.outputs) {
      const std::string what = "output ^" + output.name;
      check_declared_once("^" + output.name, what, output.where);
      check_type(output.type, what, output.where);
    }
  }

  void check_declared_once(const std::string& name, const std::string& what, const SourceLocation& where) {
    const auto [first, inserted] = declared_.try_emplace(name, what);
    if (inserted) return;
    declaration_error(where, first->second == what ? what + " is declared twice"
                                                   : what + " has the same name as " + first->second);
  }

  void check_type(const TensorType& type, const std::string& what, const SourceLocation& where) {
    if (has_negative_size(type.sizes)) declaration_error(where, what + " has a negative size: " + to_string(type));
  }

  // An inline value must be what its declaration says (its device is
  // metadata: values are read onto the CPU).
  void check_inline(const std::optional<Tensor>& value, const TensorType& type, const std::string& what,
                    const SourceLocation& where) {
    if (!value) return;
    const std::string declared = dtype_and_sizes(type.dtype, type.sizes);
    if (!value->defined()) {
      declaration_error(where, fmt::format("{} is undefined; the declaration says {}", what, declared));
    } else if (value->dtype() != type.dtype || value->sizes() != type.sizes) {
      declaration_error(where, fmt::format("{} is {}, but the declaration says {}", what,
                                           dtype_and_sizes(value->dtype(), value->sizes()), declared));
    }
  }

  // ---------------------------------------------------------- registers ---

  // Marks each operand used and returns what is known of its type. `none`
  // (an undefined grad) is allowed where the opcode passes it on.
  std::vector<MaybeType> use_operands(const Instr& instr, bool none_allowed) {
    std::vector<MaybeType> types;
    for (std::size_t i = 0; i < instr.operands.size(); ++i) {
      const auto& name = instr.operands[i];
      if (!name && !none_allowed) error(fmt::format("operand {} is none, but {} takes registers", i, mnemonic(instr.op)));
      types.push_back(name ? use_register(*name) : std::nullopt);
    }
    return types;
  }

  MaybeType use_register(const std::string& name) {
    const auto found = registers_.find(name);
    if (found != registers_.end()) {
      found->second.used = true;
      return found->second.type;
    }
    const auto later = first_definition_.find(name);
    if (later == first_definition_.end()) {
      error(fmt::format("register %{} is not defined", name));
    } else {
      error(fmt::format("register %{} is used before it is defined (by instruction {})", name, later->second));
    }
    return std::nullopt;
  }

  // Defines the results, with the types that are known (`types` may be
  // shorter than the results). `_` is allowed where a result may be dropped.
  void define_results(const Instr& instr, const std::vector<MaybeType>& types, bool discard_allowed) {
    for (std::size_t i = 0; i < instr.results.size(); ++i) {
      const auto& name = instr.results[i];
      if (!name) {
        if (!discard_allowed) error(fmt::format("result {} is _, but {} must name a register", i, mnemonic(instr.op)));
        continue;
      }
      const MaybeType type = i < types.size() ? types[i] : std::nullopt;
      const auto [existing, inserted] = registers_.try_emplace(*name, Register{pc_, type});
      if (inserted) {
        defined_.push_back(*name);
      } else {
        error(fmt::format("register %{} is already defined by {}", *name,
                          existing->second.pc < 0 ? "grad %" + *name
                                                  : fmt::format("instruction {}", existing->second.pc)));
      }
    }
  }

  // "add expects 2 operands, got 1"; returns whether the count is right.
  bool check_count(std::size_t got, std::size_t expected, std::string_view noun, std::string_view who) {
    if (got != expected) error(fmt::format("{} expects {}, got {}", who, counted(expected, noun), got));
    return got == expected;
  }

  // -------------------------------------------------------- instructions ---

  void check_instruction(const Instr& instr) {
    switch (instr.op) {
      case Opcode::Call:
      case Opcode::CopySlices: check_call(instr); break;
      case Opcode::Validate: check_validate(instr); break;
      case Opcode::Add: check_add(instr); break;
      case Opcode::Zeros: check_zeros(instr); break;
      case Opcode::AccumulateGrad: check_accumulate_grad(instr); break;
      case Opcode::Hook: check_hook(instr); break;
      case Opcode::CallBackward: check_call_backward(instr); break;
      case Opcode::Output: check_output(instr); break;
      case Opcode::Aten: check_aten(instr); break;
    }
  }

  // aten: the op is one refgrad has; one attribute per schema argument, each of its type; the operands
  // registers defined before (or saved tensors declared), none only for an absent Tensor?; one result
  // per schema result.
  void check_aten(const Instr& instr) {
    const AtenOpDef* op = find_aten_op(instr.node);
    if (!op) {
      error(fmt::format("refgrad has no ATen op '{}'", instr.node));
      define_results(instr, {}, true);
      return;
    }
    std::vector<AtenInstrArgument> arguments;
    try {
      arguments = aten_arguments(instr);
    } catch (const Error& e) {
      error(e.what());
    }
    for (const AtenInstrArgument& argument : arguments) {
      const AtenArgument& schema = *argument.schema;
      if (!schema.is_tensor() && !schema.is_tensor_list() && !fits(*argument.value, schema.type)) {
        error(fmt::format("argument '{}' expects {}, got {}", schema.name, type_name(schema.type),
                          kind_text(*argument.value)));
      }
      const bool none_allowed = schema.is_tensor() ? schema.type.optional
                                                   : schema.type.kind == FieldKind::OptionalTensorList;
      for (const std::optional<std::string>& operand : argument.operands) {
        if (!operand) {
          if (!none_allowed) error(fmt::format("argument '{}' ({}) is none", schema.name, type_name(schema.type)));
        } else if (operand->starts_with('$')) {
          const std::string name = operand->substr(1);
          if (program_.find_saved(name)) referenced_.insert(name);
          else error(fmt::format("argument '{}' names ${}, which is not declared", schema.name, name));
        } else {
          use_register(*operand);
        }
      }
    }
    if (op->schema.num_results != kVariadic) check_count(instr.results.size(), op->schema.num_results, "result", instr.node);
    define_results(instr, {}, true);
  }

  // call and CopySlices: counts, need and fields as the node's schema says.
  void check_call(const Instr& instr) {
    use_operands(instr, true);
    const NodeDef* node = find_node(instr.node);
    if (!node) {
      error(fmt::format("backward node '{}' is not in the registry", instr.node));
      // Its fields cannot be checked, but the tensors they name are used.
      for (const Attr& attr : instr.attrs) {
        for_each_saved_ref(attr.value, [this](const SavedRef& ref) { referenced_.insert(ref.name); });
      }
    } else {
      const NodeSchema& schema = node->schema;
      const std::string who = instr.op == Opcode::CopySlices ? "CopySlices[" + schema.name + "]" : schema.name;
      check_incoming_grads(instr, schema, who);
      check_need_and_results(instr, schema, who);
      const std::vector<SavedFieldSchema> fields = fields_of(instr, schema);
      check_fields(instr, fields, who);
      check_shape_rules(instr, fields);
    }
    define_results(instr, {}, true);
  }

  // One operand per incoming grad: the node's differentiable forward outputs (at least one
  // for a variadic node); CopySlices takes the one grad of the base.
  void check_incoming_grads(const Instr& instr, const NodeSchema& schema, const std::string& who) {
    if (instr.op == Opcode::CopySlices) {
      check_count(instr.operands.size(), 1, "operand", who);
    } else if (schema.num_grads != kVariadic) {
      check_count(instr.operands.size(), schema.num_grads, "operand", who);
    } else if (instr.operands.empty()) {
      error(fmt::format("{} expects at least 1 operand, got 0", who));
    }
  }

  // One need bit per node input; one result per node input, or per element
  // of a Tensor[] input (cat, stack). A result where its input's bit is 0 is
  // an error (PyTorch never computes it); `_` where it is 1 a warning, but
  // not for one element of a list: PyTorch computes the list as a whole and
  // drops the grad of an element with no edge (a constant in a cat).
  void check_need_and_results(const Instr& instr, const NodeSchema& schema, const std::string& who) {
    const std::size_t inputs = schema.inputs.size();
    const std::optional<std::size_t> results = call_result_count(schema, instr.attrs);
    const bool results_ok = results && check_count(instr.results.size(), *results, "result", who);
    if (instr.need.size() != inputs) {
      error(fmt::format("need has {}, but {} has {}", counted(instr.need.size(), "bit"), who,
                        counted(inputs, "input")));
      return;
    }
    if (!results_ok) return;
    const bool list = !schema.list_length_field.empty();
    for (std::size_t i = 0; i < instr.results.size(); ++i) {
      const auto& result = instr.results[i];
      const std::size_t input = input_of_result(schema, i);
      if (result && !instr.need[input]) {
        error(fmt::format("result %{} is for input '{}', whose need bit is 0: PyTorch never computes it (write _)",
                          *result, schema.inputs[input]));
      } else if (!result && instr.need[input] && !list) {
        warning(fmt::format("result {} (input '{}') is _ but its need bit is 1: computed and dropped", i,
                            schema.inputs[input]));
      }
    }
    const bool all_dropped = std::none_of(instr.results.begin(), instr.results.end(),
                                          [](const auto& result) { return result.has_value(); });
    if (list && instr.need[0] && all_dropped) {
      warning(fmt::format("every result (input '{}') is _ but its need bit is 1: computed and dropped",
                          schema.inputs[0]));
    }
  }

  // Every field given once, none unknown, each of its kind; the saved
  // tensors named are declared.
  void check_fields(const Instr& instr, const std::vector<SavedFieldSchema>& fields, const std::string& who) {
    std::set<std::string> given;
    for (const Attr& attr : instr.attrs) {
      const auto field = std::find_if(fields.begin(), fields.end(),
                                      [&attr](const SavedFieldSchema& f) { return f.name == attr.name; });
      if (field == fields.end()) {
        error(fmt::format("{} has no field '{}'", who, attr.name));
      } else if (!given.insert(attr.name).second) {
        error(fmt::format("field '{}' is given twice", attr.name));
      } else if (!fits(attr.value, field->type)) {
        error(fmt::format("field '{}' expects {}, got {}", attr.name, type_name(field->type), kind_text(attr.value)));
      } else {
        for_each_saved_ref(attr.value, [&](const SavedRef& ref) { reference_saved(ref, attr.name); });
      }
    }
    for (const SavedFieldSchema& field : fields) {
      if (!given.contains(field.name)) error(fmt::format("field '{}' is missing", field.name));
    }
  }

  void reference_saved(const SavedRef& ref, const std::string& field) {
    if (program_.find_saved(ref.name)) {
      referenced_.insert(ref.name);
    } else {
      error(fmt::format("field '{}' names ${}, which is not declared", field, ref.name));
    }
  }

  // Node shape rules: PyTorch saves facts about a tensor X next to it
  // (X_sym_sizes, X_scalar_type, X_sym_strides); when X is saved too, they
  // must agree with X's declaration.
  void check_shape_rules(const Instr& instr, const std::vector<SavedFieldSchema>& fields) {
    for (const SavedFieldSchema& field : fields) {
      if (field.type.kind != FieldKind::Tensor) continue;
      const Attr* attr = find_attr(instr, field.name);
      const SavedRef* ref = attr ? std::get_if<SavedRef>(&attr->value) : nullptr;
      const SavedDecl* saved = ref ? program_.find_saved(ref->name) : nullptr;
      if (!saved) continue;
      const std::string tensor = fmt::format("${} (field '{}')", saved->name, field.name);
      for (const char* suffix : {"_sym_sizes", "_sizes"}) {
        const Attr* sizes = find_attr(instr, field.name + suffix);
        const IntList* value = sizes ? std::get_if<IntList>(&sizes->value) : nullptr;
        if (value && *value != saved->type.sizes) {
          error(fmt::format("field '{}' is {}, but {} has sizes {}", sizes->name, str(*value), tensor,
                            str(saved->type.sizes)));
        }
      }
      const Attr* dtype = find_attr(instr, field.name + "_scalar_type");
      const DType* dtype_value = dtype ? std::get_if<DType>(&dtype->value) : nullptr;
      if (dtype_value && *dtype_value != saved->type.dtype) {
        error(fmt::format("field '{}' is {}, but {} is {}", dtype->name, short_dtype_name(*dtype_value), tensor,
                          short_dtype_name(saved->type.dtype)));
      }
      const Attr* strides = find_attr(instr, field.name + "_sym_strides");
      const IntList* strides_value = strides ? std::get_if<IntList>(&strides->value) : nullptr;
      // PyTorch leaves X_sym_strides empty when nothing needs it (mm's self
      // strides when mat2 needs no grad), so only a non-empty list is checked.
      if (strides_value && !strides_value->empty() && strides_value->size() != saved->type.sizes.size()) {
        error(fmt::format("field '{}' has {}, but {} has {}", strides->name, counted(strides_value->size(), "entry", "entries"),
                          tensor, counted(saved->type.sizes.size(), "dimension")));
      }
    }
  }

  // validate: one operand, result and metadata per slot; each grad must
  // reduce to its metadata's shape, as validate_outputs' maybe_reduce does.
  void check_validate(const Instr& instr) {
    const std::vector<MaybeType> operand_types = use_operands(instr, true);
    std::vector<MaybeType> result_types;
    const std::size_t slots = instr.operands.size();
    if (instr.results.size() != slots || instr.metadata.size() != slots) {
      error(fmt::format("validate needs as many results and metadata as operands, got {}, {} and {}",
                        counted(slots, "operand"), counted(instr.results.size(), "result"),
                        counted(instr.metadata.size(), "metadata", "metadata")));
    } else {
      for (std::size_t i = 0; i < slots; ++i) result_types.push_back(validated_type(i, operand_types[i], instr.metadata[i]));
    }
    define_results(instr, result_types, true);
  }

  MaybeType validated_type(std::size_t slot, const MaybeType& grad, const std::optional<InputMetadata>& metadata) {
    if (!metadata) return grad;  // an edge without metadata passes its grad on
    if (has_negative_size(metadata->shape)) {
      error(fmt::format("metadata {} has a negative size: {}", slot, to_string(*metadata)));
      return std::nullopt;
    }
    if (grad && grad->sizes != metadata->shape && !is_expandable_to(metadata->shape, grad->sizes)) {
      error(fmt::format("operand {} has shape {}, which does not reduce to the metadata's shape {}", slot,
                        str(grad->sizes), str(metadata->shape)));
    }
    // grad_dtype none accepts any dtype: the grad keeps its own.
    const std::optional<DType> dtype = metadata->grad_dtype ? metadata->grad_dtype
                                       : grad                ? std::optional<DType>(grad->dtype)
                                                             : std::nullopt;
    if (!dtype) return std::nullopt;
    return TensorType{*dtype, metadata->shape, metadata->device};
  }

  void check_add(const Instr& instr) {
    const std::vector<MaybeType> types = use_operands(instr, false);
    check_count(instr.operands.size(), 2, "operand", "add");
    check_count(instr.results.size(), 1, "result", "add");
    MaybeType sum;
    if (types.size() == 2 && types[0] && types[1]) {
      if (*types[0] == *types[1]) {
        sum = types[0];
      } else {
        error(fmt::format("the operands' types differ: {} and {}", to_string(*types[0]), to_string(*types[1])));
      }
    }
    define_results(instr, {sum}, false);
  }

  void check_zeros(const Instr& instr) {
    use_operands(instr, true);
    check_count(instr.operands.size(), 0, "operand", "zeros");
    check_count(instr.results.size(), 1, "result", "zeros");
    MaybeType type;
    if (check_count(instr.metadata.size(), 1, "type", "zeros")) {
      const std::optional<InputMetadata>& metadata = instr.metadata[0];
      if (!metadata) {
        error("zeros needs a type, got _");
      } else if (has_negative_size(metadata->shape)) {
        error("the type has a negative size: " + to_string(*metadata));
      } else {
        type = TensorType{metadata->dtype, metadata->shape, metadata->device};
      }
    }
    define_results(instr, {type}, false);
  }

  const LeafDecl* require_leaf(const std::string& name) {
    const LeafDecl* leaf = program_.find_leaf(name);
    if (!leaf) error(fmt::format("leaf @{} is not declared", name));
    return leaf;
  }

  void check_accumulate_grad(const Instr& instr) {
    const std::vector<MaybeType> types = use_operands(instr, false);
    const bool one_operand = check_count(instr.operands.size(), 1, "operand", "accumulate_grad");
    check_count(instr.results.size(), 0, "result", "accumulate_grad");
    if (const LeafDecl* leaf = require_leaf(instr.target)) {
      if (one_operand && types[0] && types[0]->sizes != leaf->type.sizes) {
        error(fmt::format("the operand has shape {}, but leaf @{} has shape {}", str(types[0]->sizes), leaf->name,
                          str(leaf->type.sizes)));
      }
      const auto [first, inserted] = accumulated_.try_emplace(leaf->name, pc_);
      if (!inserted) {
        warning(fmt::format("leaf @{} is accumulated again (first by instruction {}); PyTorch accumulates each leaf "
                            "once per backward",
                            leaf->name, first->second));
      }
    }
    define_results(instr, {}, true);
  }

  void check_hook(const Instr& instr) {
    const std::vector<MaybeType> types = use_operands(instr, true);
    std::vector<MaybeType> result_types;
    if (const HookDecl* hook = program_.find_hook(instr.target)) {
      check_hook_arity(instr, hook->kind);
      // A tensor pre-hook returns a grad in place of its grad: same type.
      if (hook->kind == HookKind::TensorPre) result_types = types;
    } else {
      error(fmt::format("hook &{} is not declared", instr.target));
    }
    define_results(instr, result_types, true);
  }

  // The operands and results a hook takes, by its kind (program.hpp, Instr).
  void check_hook_arity(const Instr& instr, HookKind kind) {
    const std::size_t operands = instr.operands.size(), results = instr.results.size();
    bool ok = false;
    std::string rule;
    switch (kind) {
      case HookKind::TensorPre:
        ok = operands == 1 && results == 1;
        rule = "1 operand and 1 result";
        break;
      case HookKind::Pre:
        ok = operands == results;
        rule = "as many results as operands";
        break;
      case HookKind::Post:
        ok = operands >= results;
        rule = "at least as many operands as results";
        break;
      case HookKind::PostAccGrad:
        ok = operands == 0 && results == 0;
        rule = "no operands or results";
        if (instr.leaf.empty()) error("a post_acc_grad hook needs a leaf");
        else require_leaf(instr.leaf);
        break;
    }
    if (!ok) {
      error(fmt::format("a {} hook takes {}, got {} and {}", to_string(kind), rule, counted(operands, "operand"),
                        counted(results, "result")));
    }
  }

  void check_call_backward(const Instr& instr) {
    use_operands(instr, true);
    if (!program_.find_function(instr.target)) error(fmt::format("function &{} is not declared", instr.target));
    if (instr.need.size() != instr.results.size()) {
      error(fmt::format("need has {}, for {}", counted(instr.need.size(), "bit"), counted(instr.results.size(), "result")));
    }
    check_fields(instr, {SavedFieldSchema{"saved", FieldType{FieldKind::TensorList}, true}}, "call_backward");
    define_results(instr, {}, true);
  }

  void check_output(const Instr& instr) {
    const std::vector<MaybeType> types = use_operands(instr, true);
    const bool one_operand = check_count(instr.operands.size(), 1, "operand", "output");
    check_count(instr.results.size(), 0, "result", "output");
    const OutputDecl* output = program_.find_output(instr.target);
    if (!output) {
      error(fmt::format("output ^{} is not declared", instr.target));
    } else if (const auto [first, inserted] = written_.try_emplace(output->name, pc_); !inserted) {
      error(fmt::format("output ^{} is already written by instruction {}", output->name, first->second));
    } else if (one_operand && types[0] && *types[0] != output->type) {
      error(fmt::format("the operand has type {}, but output ^{} is declared {}", to_string(*types[0]), output->name,
                        to_string(output->type)));
    }
    define_results(instr, {}, true);
  }

  // ----------------------------------------------------------- warnings ---

  void warn_about_unused() {
    for (const std::string& name : defined_) {
      const Register& reg = registers_.at(name);
      if (reg.used) continue;
      if (reg.pc < 0) declaration_warning(program_.find_grad(name)->where, "grad %" + name + " is never used");
      else report_at(Severity::Warning, reg.pc, "result %" + name + " is never used");
    }
    for (const OutputDecl& output : program_.outputs) {
      if (!written_.contains(output.name)) declaration_warning(output.where, "output ^" + output.name + " is never written");
    }
    // A program that accumulates into no leaf is torch.autograd.grad's: its grads go to outputs, and its
    // leaves are declared for their names and types only.
    for (const LeafDecl& leaf : program_.leaves) {
      if (!accumulated_.empty() && !accumulated_.contains(leaf.name))
        declaration_warning(leaf.where, "leaf @" + leaf.name + " is never accumulated");
    }
    for (const SavedDecl& saved : program_.saved) {
      if (!referenced_.contains(saved.name)) declaration_warning(saved.where, "saved $" + saved.name + " is never referenced");
    }
  }

  const Program& program_;
  std::vector<Diagnostic> diagnostics_;
  int pc_ = 0;                                  // the instruction being checked
  std::map<std::string, std::string> declared_;  // sigil + name -> its declaration ("saved $x")
  std::map<std::string, int> first_definition_;  // register -> the first instruction that defines it
  std::map<std::string, Register> registers_;    // defined so far
  std::vector<std::string> defined_;             // registers in definition order, for the warnings
  std::set<std::string> referenced_;             // saved tensors named by a field
  std::map<std::string, int> accumulated_;       // leaf -> first accumulate_grad
  std::map<std::string, int> written_;           // output -> its output instruction
};

}  // namespace

std::vector<Diagnostic> verify(const Program& program) { return Verifier(program).run(); }

std::vector<Diagnostic> check_program(const Program& program) {
  std::vector<std::string> errors;
  std::vector<Diagnostic> warnings;
  for (Diagnostic& diagnostic : verify(program)) {
    if (diagnostic.severity == Severity::Error) errors.push_back(to_string(diagnostic));
    else warnings.push_back(std::move(diagnostic));
  }
  if (!errors.empty()) fail(fmt::format("{}", fmt::join(errors, "\n")));
  return warnings;
}

}  // namespace refgrad
