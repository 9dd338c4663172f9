// The program model: names of things, lookups and structural equality.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "refgrad/program.hpp"

namespace refgrad {

std::optional<DType> parse_short_dtype(std::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (name == short_dtype_name(dtype)) return dtype;
  }
  return std::nullopt;
}

namespace {

std::string sizes_text(const Shape& sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ","));
}

}  // namespace

std::string to_string(const TensorType& type) {
  std::string text = short_dtype_name(type.dtype) + sizes_text(type.sizes);
  if (type.device != Device::CPU) text += fmt::format(" {}", device_name(type.device));
  return text;
}

TensorType type_of(const Tensor& tensor) {
  return TensorType{tensor.dtype(), tensor.sizes(), tensor.device()};
}

std::string to_string(const InputMetadata& metadata) {
  std::string text = short_dtype_name(metadata.dtype) + sizes_text(metadata.shape);
  std::vector<std::string> extras;
  if (metadata.device != Device::CPU) extras.push_back("device=" + device_name(metadata.device));
  if (metadata.grad_dtype != metadata.dtype) {
    extras.push_back("grad_dtype=" + (metadata.grad_dtype ? short_dtype_name(*metadata.grad_dtype) : "none"));
  }
  if (metadata.is_tensor_subclass) extras.push_back("subclass");
  if (!extras.empty()) text += fmt::format("{{{}}}", fmt::join(extras, ", "));
  return text;
}

std::string to_string(HookKind kind) {
  switch (kind) {
    case HookKind::TensorPre: return "tensor_pre";
    case HookKind::Pre: return "pre";
    case HookKind::Post: return "post";
    case HookKind::PostAccGrad: return "post_acc_grad";
  }
  return "?";
}

std::optional<HookKind> parse_hook_kind(std::string_view name) {
  for (HookKind kind : {HookKind::TensorPre, HookKind::Pre, HookKind::Post, HookKind::PostAccGrad}) {
    if (name == to_string(kind)) return kind;
  }
  return std::nullopt;
}

std::optional<std::size_t> call_result_count(const NodeSchema& schema, std::span<const Attr> attrs) {
  if (schema.list_length_field.empty()) return schema.inputs.size();
  const auto attr = std::find_if(attrs.begin(), attrs.end(),
                                 [&](const Attr& a) { return a.name == schema.list_length_field; });
  const auto* list = attr == attrs.end() ? nullptr : std::get_if<std::vector<DType>>(&attr->value);
  if (!list) return std::nullopt;
  return num_results(schema, list->size());
}

std::string mnemonic(Opcode op) {
  switch (op) {
    case Opcode::Call: return "call";
    case Opcode::CopySlices: return "CopySlices";
    case Opcode::Validate: return "validate";
    case Opcode::Add: return "add";
    case Opcode::Zeros: return "zeros";
    case Opcode::AccumulateGrad: return "accumulate_grad";
    case Opcode::Hook: return "hook";
    case Opcode::CallBackward: return "call_backward";
    case Opcode::Output: return "output";
    case Opcode::Aten: return "aten";
  }
  return "?";
}

std::string to_string(const Diagnostic& diagnostic) {
  const char* severity = diagnostic.severity == Diagnostic::Severity::Error ? "error" : "warning";
  if (diagnostic.where.line == 0) return fmt::format("{}: {}", severity, diagnostic.message);
  return fmt::format("{}:{}:{}: {}: {}", diagnostic.where.file, diagnostic.where.line, diagnostic.where.column,
                     severity, diagnostic.message);
}

// ----------------------------------------------------------------- lookups ---

namespace {

template <class Decl>
const Decl* find_by_name(const std::vector<Decl>& decls, std::string_view name) {
  for (const Decl& decl : decls) {
    if (decl.name == name) return &decl;
  }
  return nullptr;
}

}  // namespace

const GradDecl* Program::find_grad(std::string_view n) const { return find_by_name(grads, n); }
const SavedDecl* Program::find_saved(std::string_view n) const { return find_by_name(saved, n); }
const LeafDecl* Program::find_leaf(std::string_view n) const { return find_by_name(leaves, n); }
const HookDecl* Program::find_hook(std::string_view n) const { return find_by_name(hooks, n); }
const FunctionDecl* Program::find_function(std::string_view n) const { return find_by_name(functions, n); }
const OutputDecl* Program::find_output(std::string_view n) const { return find_by_name(outputs, n); }

// ------------------------------------------------------- ATen instructions ---

std::vector<AtenInstrArgument> aten_arguments(const Instr& instr) {
  const AtenOpDef& op = get_aten_op(instr.node);
  const std::vector<AtenArgument>& schema = op.schema.arguments;
  check(instr.attrs.size() == schema.size(), instr.node, " takes ", schema.size(), " arguments, the instruction has ",
        instr.attrs.size());
  std::vector<AtenInstrArgument> arguments;
  std::size_t next = 0;  // the next operand
  for (std::size_t i = 0; i < schema.size(); ++i) {
    const AtenArgument& argument = schema[i];
    const Attr& attr = instr.attrs[i];
    check(attr.name == argument.name, instr.node, ": argument ", i, " is '", argument.name, "', the instruction has '",
          attr.name, "'");
    std::size_t reads = 0;
    if (argument.is_tensor()) {
      check(std::holds_alternative<None>(attr.value) || std::holds_alternative<Scalar>(attr.value), instr.node,
            ": tensor argument '", argument.name, "' must read an operand or be a number");
      reads = std::holds_alternative<None>(attr.value) ? 1 : 0;
    } else if (argument.is_tensor_list()) {
      const auto* count = std::get_if<std::int64_t>(&attr.value);
      check(count != nullptr && *count >= 0, instr.node, ": list argument '", argument.name,
            "' must be the number of operands it reads");
      reads = static_cast<std::size_t>(*count);
    }
    check(next + reads <= instr.operands.size(), instr.node, ": argument '", argument.name, "' reads operand ",
          next + reads - 1, " but there are only ", instr.operands.size());
    AtenInstrArgument piece{&argument, &attr.value, {}};
    piece.operands.assign(instr.operands.begin() + static_cast<std::ptrdiff_t>(next),
                          instr.operands.begin() + static_cast<std::ptrdiff_t>(next + reads));
    next += reads;
    arguments.push_back(std::move(piece));
  }
  check(next == instr.operands.size(), instr.node, ": ", instr.operands.size(), " operands, its arguments read ", next);
  return arguments;
}

AttrValue attr_value_of(const FieldValue& value) {
  return std::visit(
      [](const auto& x) -> AttrValue {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Tensor> || std::is_same_v<T, TensorList> ||
                      std::is_same_v<T, std::vector<OptionalTensor>>) {
          fail("attr_value_of: a tensor value has no attribute form (it is a saved tensor or an operand)");
        } else {
          return AttrValue(std::in_place_type<T>, x);
        }
      },
      value);
}

// ---------------------------------------------------------------- equality ---

bool same_tensor(const std::optional<Tensor>& a, const std::optional<Tensor>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  if (a->defined() != b->defined()) return false;
  if (!a->defined()) return true;
  if (a->dtype() != b->dtype() || a->sizes() != b->sizes() || a->device() != b->device()) return false;
  // Bits, not values: NaN equals NaN, -0.0 differs from 0.0.
  const Tensor ca = a->contiguous(), cb = b->contiguous();
  const std::size_t bytes = static_cast<std::size_t>(ca.numel()) * element_size(ca.dtype());
  return bytes == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), bytes) == 0;
}

namespace {

// Doubles by bits, for the same reason as tensors.
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same_scalar(const Scalar& a, const Scalar& b) {
  if (a.kind() != b.kind()) return false;
  if (a.is_complex())
    return same_bits(a.to_complex().real(), b.to_complex().real()) &&
           same_bits(a.to_complex().imag(), b.to_complex().imag());
  return a.is_floating_point() ? same_bits(a.to_double(), b.to_double()) : a.to_int64() == b.to_int64();
}

bool same_value(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&b](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, double>) return same_bits(x, y);
        else if constexpr (std::is_same_v<T, Scalar>) return same_scalar(x, y);
        else return x == y;
      },
      a);
}

bool same_declarations(const Program& a, const Program& b) {
  auto same_list = [](const auto& x, const auto& y, auto same) {
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!same(x[i], y[i])) return false;
    }
    return true;
  };
  // grad, saved and leaf declarations: a name, a type and an optional tensor.
  const auto same_typed = [](auto tensor) {
    return [tensor](const auto& x, const auto& y) {
      return x.name == y.name && x.type == y.type && same_tensor(x.*tensor, y.*tensor);
    };
  };
  return same_list(a.grads, b.grads, same_typed(&GradDecl::value)) &&
         same_list(a.saved, b.saved, same_typed(&SavedDecl::value)) &&
         same_list(a.leaves, b.leaves, same_typed(&LeafDecl::grad)) &&
         same_list(a.hooks, b.hooks,
                   [](const HookDecl& x, const HookDecl& y) { return x.name == y.name && x.kind == y.kind; }) &&
         same_list(a.functions, b.functions,
                   [](const FunctionDecl& x, const FunctionDecl& y) { return x.name == y.name; }) &&
         same_list(a.outputs, b.outputs,
                   [](const OutputDecl& x, const OutputDecl& y) { return x.name == y.name && x.type == y.type; });
}

}  // namespace

bool operator==(const Attr& a, const Attr& b) { return a.name == b.name && same_value(a.value, b.value); }

bool operator==(const Instr& a, const Instr& b) {
  return a.op == b.op && a.results == b.results && a.operands == b.operands && a.node == b.node &&
         a.target == b.target && a.leaf == b.leaf && a.need == b.need && a.attrs == b.attrs &&
         a.metadata == b.metadata && a.origin == b.origin;
}

bool operator==(const Program& a, const Program& b) {
  return a.name == b.name && same_declarations(a, b) && a.code == b.code;
}

}  // namespace refgrad
