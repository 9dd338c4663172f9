// The printer: a Program as its canonical text (docs/program.md "Canonical
// text"). Everything is spelled so that the parser reads back the same bits:
// floats in their shortest round-trip form with the kind visible, strings
// escaped, a Scalar's kind in its spelling.
#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "text.hpp"

namespace refgrad {

namespace text {

// ------------------------------------------------------------- spellings ---

namespace {

// In Layout's enum order.
constexpr std::array<std::string_view, 8> kLayoutSpellings = {
    "strided", "sparse_coo", "sparse_csr", "mkldnn", "sparse_csc", "sparse_bsr", "sparse_bsc", "jagged"};

}  // namespace

std::string layout_spelling(Layout layout) {
  const auto index = static_cast<std::size_t>(layout);
  return index < kLayoutSpellings.size() ? std::string(kLayoutSpellings[index]) : "?";
}

std::optional<Layout> parse_layout(std::string_view spelling) {
  for (std::size_t i = 0; i < kLayoutSpellings.size(); ++i) {
    if (kLayoutSpellings[i] == spelling) return static_cast<Layout>(i);
  }
  return std::nullopt;
}

std::optional<Device> parse_device(std::string_view spelling) {
  for (Device device : {Device::CPU, Device::CUDA}) {
    if (spelling == device_name(device)) return device;
  }
  return std::nullopt;
}

std::optional<MemoryFormat> parse_memory_format(std::string_view spelling) {
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::Preserve, MemoryFormat::ChannelsLast,
                              MemoryFormat::ChannelsLast3d}) {
    if (spelling == memory_format_name(format)) return format;
  }
  return std::nullopt;
}

// --------------------------------------------------- attributes and need ---

namespace {

const NodeSchema* schema_of(const Instr& instr) {
  if (instr.op != Opcode::Call && instr.op != Opcode::CopySlices) return nullptr;
  const NodeDef* node = find_node(instr.node);
  return node ? &node->schema : nullptr;
}

}  // namespace

std::vector<std::string> attr_order(const Instr& instr) {
  std::vector<std::string> names;
  if (instr.op == Opcode::CopySlices) names = {"base", "view"};
  if (instr.op == Opcode::CallBackward) names = {"saved"};
  if (instr.op == Opcode::Aten) {
    if (const AtenOpDef* op = find_aten_op(instr.node)) {
      for (const AtenArgument& argument : op->schema.arguments) names.push_back(argument.name);
    }
  }
  if (const NodeSchema* schema = schema_of(instr)) {
    for (const SavedFieldSchema& field : schema->saved) names.push_back(field.name);
  }
  return names;
}

void sort_attrs(Instr& instr) {
  const std::vector<std::string> order = attr_order(instr);
  auto rank = [&order](const Attr& attr) {
    return std::find(order.begin(), order.end(), attr.name) - order.begin();
  };
  std::stable_sort(instr.attrs.begin(), instr.attrs.end(),
                   [&rank](const Attr& a, const Attr& b) { return rank(a) < rank(b); });
}

std::optional<std::size_t> default_need_size(const Instr& instr) {
  if (instr.op == Opcode::CallBackward) return instr.results.size();
  if (const NodeSchema* schema = schema_of(instr)) return schema->inputs.size();
  return std::nullopt;
}

}  // namespace text

// ---------------------------------------------------------------- values ---

namespace {

// The shortest spelling that reads back to the same bits, with a '.' or an
// exponent so that it reads back as a float: 1.0, -0.0, 0.1, 1e-05, inf, -nan.
template <class Float>
std::string format_float(Float value) {
  if (std::isnan(value)) return std::signbit(value) ? "-nan" : "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string quote(const std::string& value) {
  std::string text = "\"";
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\\' || c == '"') text += fmt::format("\\{}", c);
    else if (c == '\n') text += "\\n";
    else if (c == '\t') text += "\\t";
    else if (byte < 0x20 || byte == 0x7F) text += fmt::format("\\x{:02x}", byte);
    else text += c;  // printable ASCII, and UTF-8 bytes as they are
  }
  return text + "\"";
}

std::string format_bool(bool value) { return value ? "true" : "false"; }

template <class Float>
std::string format_complex(std::complex<Float> value) {
  // Python's spelling, the imaginary part always signed: 1.5-2.0j, 0.0+1.0j, nan+infj.
  std::string imaginary = format_float(value.imag());
  if (imaginary[0] != '-') imaginary = "+" + imaginary;
  return format_float(value.real()) + imaginary + "j";
}

std::string format_scalar(const Scalar& scalar) {
  if (scalar.is_boolean()) return format_bool(scalar.to_bool());
  if (scalar.is_integral()) return std::to_string(scalar.to_int64());
  if (scalar.is_complex()) return format_complex(scalar.to_complex());
  return format_float(scalar.to_double());
}

// Integer lists are written tight, as sizes are ("[4,3]"); other lists with ", ".
std::string format_ints(const IntList& values) { return fmt::format("[{}]", fmt::join(values, ",")); }

template <class T, class Format>
std::string format_list(const std::vector<T>& items, Format format) {
  std::vector<std::string> parts;
  for (const T& item : items) parts.push_back(format(item));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string format_saved_ref(const SavedRef& ref) { return "$" + ref.name; }

// {key=value, ...} with the parts that are present.
std::string format_record(const std::vector<std::string>& parts) {
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

std::string format_options(const TensorOptions& options) {
  std::vector<std::string> parts;
  if (options.dtype) parts.push_back("dtype=" + short_dtype_name(*options.dtype));
  if (options.device) parts.push_back("device=" + device_name(*options.device));
  if (options.layout) parts.push_back("layout=" + text::layout_spelling(*options.layout));
  if (options.requires_grad) parts.push_back("requires_grad=" + format_bool(*options.requires_grad));
  return format_record(parts);
}

std::string format_geometry(const TensorGeometry& geometry) {
  return format_record({"sizes=" + format_ints(geometry.sizes), "strides=" + format_ints(geometry.strides),
                        "storage_offset=" + std::to_string(geometry.storage_offset)});
}

std::string format_type_and_size(const TypeAndSize& info) {
  return format_record({"sizes=" + format_ints(info.sizes), "options=" + format_options(info.options)});
}

std::string format_value(const AttrValue& value) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, None>) return "none";
        else if constexpr (std::is_same_v<T, SavedRef>) return format_saved_ref(x);
        else if constexpr (std::is_same_v<T, std::vector<SavedRef>>) return format_list(x, format_saved_ref);
        else if constexpr (std::is_same_v<T, std::vector<std::optional<SavedRef>>>) {
          return format_list(x, [](const std::optional<SavedRef>& ref) {
            return ref ? format_saved_ref(*ref) : std::string("none");
          });
        } else if constexpr (std::is_same_v<T, std::int64_t>) return std::to_string(x);
        else if constexpr (std::is_same_v<T, IntList>) return format_ints(x);
        else if constexpr (std::is_same_v<T, double>) return format_float(x);
        else if constexpr (std::is_same_v<T, bool>) return format_bool(x);
        else if constexpr (std::is_same_v<T, Scalar>) return format_scalar(x);
        else if constexpr (std::is_same_v<T, std::string>) return quote(x);
        else if constexpr (std::is_same_v<T, DType>) return short_dtype_name(x);
        else if constexpr (std::is_same_v<T, Layout>) return text::layout_spelling(x);
        else if constexpr (std::is_same_v<T, TensorOptions>) return format_options(x);
        else if constexpr (std::is_same_v<T, TensorGeometry>) return format_geometry(x);
        else if constexpr (std::is_same_v<T, TypeAndSize>) return format_type_and_size(x);
        else if constexpr (std::is_same_v<T, std::vector<DType>>) return format_list(x, short_dtype_name);
        else if constexpr (std::is_same_v<T, std::vector<IntList>>) return format_list(x, format_ints);
        else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          std::vector<std::string> parts;
          for (bool bit : x) parts.push_back(format_bool(bit));
          return fmt::format("[{}]", fmt::join(parts, ", "));
        } else if constexpr (std::is_same_v<T, Device>) return device_name(x);
        else return memory_format_name(x);  // MemoryFormat
      },
      value);
}

// -------------------------------------------------------- tensor literals ---

template <class T>
std::string format_element(T value) {
  if constexpr (std::is_same_v<T, bool>) {
    return format_bool(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    return format_float(value);
  } else if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
    return format_complex(value);
  } else {
    return std::to_string(value);
  }
}

// Writes the block of dimension `dim` that starts at values[next], moving `next` past it.
template <class T>
void format_nested(const std::vector<T>& values, const Shape& sizes, std::size_t dim, std::size_t& next,
                   std::string& out) {
  if (dim == sizes.size()) {
    out += format_element<T>(values[next++]);
    return;
  }
  out += '[';
  for (std::int64_t i = 0; i < sizes[dim]; ++i) {
    if (i > 0) out += ", ";
    format_nested(values, sizes, dim + 1, next, out);
  }
  out += ']';
}

template <class T>
std::string format_literal(const Tensor& tensor) {
  const std::vector<T> values = tensor.to_vector<T>();
  std::string out;
  std::size_t next = 0;
  format_nested(values, tensor.sizes(), 0, next, out);
  return out;
}

}  // namespace

std::string print_tensor_literal(const Tensor& tensor) {
  check(tensor.defined(), "print_tensor_literal: the tensor is undefined");
  switch (tensor.dtype()) {
    case DType::Bool: return format_literal<bool>(tensor);
    case DType::Int64: return format_literal<std::int64_t>(tensor);
    case DType::Float32: return format_literal<float>(tensor);
    case DType::Float64: return format_literal<double>(tensor);
    case DType::Float16:
    case DType::BFloat16: return format_literal<float>(tensor);  // exact: float holds every value
    case DType::ComplexHalf:  // exact: complex64 holds every value
    case DType::ComplexFloat: return format_literal<std::complex<float>>(tensor);
    case DType::ComplexDouble: return format_literal<std::complex<double>>(tensor);
    default: return format_literal<std::int64_t>(tensor);  // the other integers: exact in int64
  }
}

// ----------------------------------------------------------- instructions ---

namespace {

std::string format_registers(const std::vector<std::optional<std::string>>& names, const char* missing) {
  std::vector<std::string> parts;
  for (const auto& name : names) parts.push_back(name ? "%" + *name : missing);
  return fmt::format("{}", fmt::join(parts, ", "));
}

// " : f32[3], _" (validate, zeros); " :" when there is none.
std::string format_metadata(const std::vector<std::optional<InputMetadata>>& metadata) {
  std::vector<std::string> parts;
  for (const auto& meta : metadata) parts.push_back(meta ? to_string(*meta) : "_");
  return parts.empty() ? " :" : fmt::format(" : {}", fmt::join(parts, ", "));
}

// What follows the results' "=": the opcode, its target and its operands.
std::string format_body(const Instr& instr) {
  const std::string operands = format_registers(instr.operands, "none");
  auto with_operands = [&operands](std::string head) {
    return operands.empty() ? head : head + " " + operands;
  };
  switch (instr.op) {
    case Opcode::Call: return with_operands(instr.node);
    case Opcode::CopySlices: return with_operands("CopySlices[" + instr.node + "]");
    case Opcode::Validate: return with_operands("validate") + format_metadata(instr.metadata);
    case Opcode::Add: return with_operands("add");
    case Opcode::Zeros: return "zeros" + format_metadata(instr.metadata);
    case Opcode::AccumulateGrad: return with_operands("accumulate_grad @" + instr.target);
    case Opcode::Hook: return with_operands("hook &" + instr.target + (instr.leaf.empty() ? "" : " @" + instr.leaf));
    case Opcode::CallBackward: return with_operands("call_backward &" + instr.target);
    case Opcode::Output: return with_operands("output ^" + instr.target);
    case Opcode::Aten: return with_operands(instr.node);  // one that does not fit its schema (format_aten)
  }
  return "?";
}

std::string format_operand(const std::optional<std::string>& name) {
  if (!name) return "none";
  return name->starts_with('$') ? *name : "%" + *name;
}

// An ATen op's call as FX writes it: the positional arguments in schema order, separated by commas,
// then the keyword-only ones that differ from their defaults as name=value.
std::string format_aten(const Instr& instr) {
  std::vector<std::string> positional, keywords;
  for (const AtenInstrArgument& argument : aten_arguments(instr)) {
    std::string text;
    if (argument.schema->is_tensor()) {
      text = argument.operands.empty() ? format_value(*argument.value) : format_operand(argument.operands[0]);
    } else if (argument.schema->is_tensor_list()) {
      std::vector<std::string> parts;
      for (const auto& operand : argument.operands) parts.push_back(format_operand(operand));
      text = fmt::format("[{}]", fmt::join(parts, ", "));
    } else {
      text = format_value(*argument.value);
    }
    if (!argument.schema->keyword_only) {
      positional.push_back(text);
      continue;
    }
    const std::optional<FieldValue> fallback = default_value(*argument.schema);
    const bool is_default = argument.schema->is_tensor()
                                ? argument.operands.size() == 1 && !argument.operands[0] && fallback
                                : fallback && !argument.schema->is_tensor_list() &&
                                      Attr{"", *argument.value} == Attr{"", attr_value_of(*fallback)};
    if (!is_default) keywords.push_back(argument.schema->name + "=" + text);
  }
  std::string line = instr.node;
  if (!positional.empty()) line += " " + fmt::format("{}", fmt::join(positional, ", "));
  if (!keywords.empty()) line += "  " + fmt::format("{}", fmt::join(keywords, " "));
  if (!instr.origin.empty()) line += (keywords.empty() ? "  " : " ") + ("origin=" + quote(instr.origin));
  return line;
}

// `field=value ... need=[...] origin="..."`: attributes in canonical order,
// need where it differs from the default (every bit 1), origin when known.
std::vector<std::string> format_keywords(const Instr& instr) {
  Instr sorted = instr;
  text::sort_attrs(sorted);
  std::vector<std::string> parts;
  for (const Attr& attr : sorted.attrs) parts.push_back(attr.name + "=" + format_value(attr.value));
  const std::optional<std::size_t> default_size = text::default_need_size(instr);
  const bool default_need = default_size && instr.need == std::vector<bool>(*default_size, true);
  if (!default_need && (default_size || !instr.need.empty())) {
    std::string bits;
    for (bool bit : instr.need) bits += std::string(bits.empty() ? "" : ",") + (bit ? "1" : "0");
    parts.push_back("need=[" + bits + "]");
  }
  if (!instr.origin.empty()) parts.push_back("origin=" + quote(instr.origin));
  return parts;
}

bool calls_a_node(Opcode op) { return op == Opcode::Call || op == Opcode::CopySlices || op == Opcode::CallBackward; }

}  // namespace

std::string print_instruction(const Instr& instr) {
  std::string line;
  if (!instr.results.empty()) line = format_registers(instr.results, "_") + " = ";
  if (instr.op == Opcode::Aten) {
    try {
      return line + format_aten(instr);
    } catch (const Error&) {
      // It does not fit its op's schema (verify says how): printed as it is, attributes by name.
    }
  }
  line += format_body(instr);
  const std::vector<std::string> keywords = format_keywords(instr);
  // Two spaces set a node call's fields apart from its operands.
  if (!keywords.empty()) line += (calls_a_node(instr.op) ? "  " : " ") + fmt::format("{}", fmt::join(keywords, " "));
  return line;
}

// ----------------------------------------------------------- declarations ---

namespace {

std::string format_value_suffix(const std::optional<Tensor>& value) {
  return value ? " = " + print_tensor_literal(*value) : "";
}

void print_declarations(const Program& program, std::string& out) {
  for (const GradDecl& grad : program.grads) {
    out += fmt::format("  grad %{} : {}{}\n", grad.name, to_string(grad.type), format_value_suffix(grad.value));
  }
  for (const SavedDecl& saved : program.saved) {
    out += fmt::format("  saved ${} : {}{}\n", saved.name, to_string(saved.type), format_value_suffix(saved.value));
  }
  for (const LeafDecl& leaf : program.leaves) {
    out += fmt::format("  leaf @{} : {}{}\n", leaf.name, to_string(leaf.type), format_value_suffix(leaf.grad));
  }
  for (const HookDecl& hook : program.hooks) out += fmt::format("  hook &{} : {}\n", hook.name, to_string(hook.kind));
  for (const FunctionDecl& function : program.functions) out += fmt::format("  function &{}\n", function.name);
  for (const OutputDecl& output : program.outputs) {
    out += fmt::format("  output ^{} : {}\n", output.name, to_string(output.type));
  }
}

}  // namespace

std::string print_program(const Program& program, const PrintOptions& options) {
  std::string out = "program " + program.name + "\n";
  print_declarations(program, out);
  out += "code\n";
  for (std::size_t pc = 0; pc < program.code.size(); ++pc) {
    const std::string number = options.pc ? fmt::format("{:>4}", pc) : "";
    out += fmt::format("{}  {}\n", number, print_instruction(program.code[pc]));
  }
  return out;
}

}  // namespace refgrad
