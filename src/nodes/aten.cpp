// ATen ops: torch's schema text parsed, the arguments an op's function reads, and the registry.
// The ops themselves are in aten_ops.cpp.
#include "refgrad/aten.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "define.hpp"
#include "refgrad/error.hpp"

namespace refgrad {

namespace nodes {
void add_aten_ops(std::vector<AtenOpDef>& registry);  // aten_ops.cpp
}  // namespace nodes

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// `text` split at the commas outside (), [] and quotes.
std::vector<std::string_view> split_top_level(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  bool quoted = false;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') quoted = !quoted;
    if (quoted) continue;
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (!trim(text.substr(start)).empty()) parts.push_back(trim(text.substr(start)));
  return parts;
}

// The type with its alias annotation dropped: "Tensor(a!)" -> "Tensor", "Tensor(a -> *)[]" -> "Tensor[]".
std::string without_annotation(std::string_view type) {
  std::string out;
  int depth = 0;
  for (char c : type) {
    if (c == '(') ++depth;
    if (depth == 0 && c != ' ') out += c;
    if (c == ')') --depth;
  }
  return out;
}

FieldType argument_type(const std::string& spelled, std::string_view schema) {
  std::string base = spelled;
  FieldType type{FieldKind::Int};
  if (!base.empty() && base.back() == '?') {
    type.optional = true;
    base.pop_back();
  }
  bool list = false;
  if (!base.empty() && base.back() == ']') {
    list = true;
    base.erase(base.find('['));
  }
  if (list) {
    if (base == "Tensor") type.kind = FieldKind::TensorList;
    else if (base == "Tensor?") type.kind = FieldKind::OptionalTensorList;
    else if (base == "int" || base == "SymInt") type.kind = FieldKind::IntList;
    else if (base == "bool") type.kind = FieldKind::BoolList;
    else fail(fmt::format("ATen schema {}: refgrad has no values of type '{}'", schema, spelled));
    return type;
  }
  if (base == "Tensor") type.kind = FieldKind::Tensor;
  else if (base == "int" || base == "SymInt") type.kind = FieldKind::Int;
  else if (base == "float") type.kind = FieldKind::Float;
  else if (base == "bool") type.kind = FieldKind::Bool;
  else if (base == "Scalar") type.kind = FieldKind::Scalar;
  else if (base == "str") type.kind = FieldKind::String;
  else if (base == "ScalarType") type.kind = FieldKind::DType;
  else if (base == "Layout") type.kind = FieldKind::Layout;
  else if (base == "Device") type.kind = FieldKind::Device;
  else if (base == "MemoryFormat") type.kind = FieldKind::MemoryFormat;
  else fail(fmt::format("ATen schema {}: refgrad has no values of type '{}'", schema, spelled));
  return type;
}

AtenArgument parse_argument(std::string_view text, bool keyword_only, std::string_view schema) {
  AtenArgument argument;
  argument.keyword_only = keyword_only;
  std::string_view declared = text;
  // The default follows the first '=' outside an annotation ("Tensor(a -> *)" has none).
  const std::size_t equals = text.find('=');
  if (equals != std::string_view::npos) {
    argument.default_ = std::string(trim(text.substr(equals + 1)));
    declared = trim(text.substr(0, equals));
  }
  const std::size_t space = declared.rfind(' ');
  check(space != std::string_view::npos, "ATen schema ", schema, ": argument '", text, "' has no name");
  argument.name = std::string(declared.substr(space + 1));
  argument.type = argument_type(without_annotation(declared.substr(0, space)), schema);
  return argument;
}

std::size_t result_count(std::string_view returns) {
  returns = trim(returns);
  if (returns == "()") return 0;
  const std::string type = without_annotation(returns);
  if (type.size() > 2 && type.ends_with("[]")) return kVariadic;
  if (!returns.empty() && returns.front() == '(') return split_top_level(returns.substr(1, returns.size() - 2)).size();
  return 1;
}

std::optional<std::int64_t> integer_of(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> float_of(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A schema may name an op without an overload ("aten::neg"): a program calls it "aten.neg.default".
std::string program_name(std::string_view qualified) {
  const std::size_t colons = qualified.find("::");
  check(colons != std::string_view::npos, "ATen schema name '", qualified, "' has no namespace");
  std::string name = fmt::format("{}.{}", qualified.substr(0, colons), qualified.substr(colons + 2));
  if (qualified.substr(colons + 2).find('.') == std::string_view::npos) name += ".default";
  return name;
}

const std::vector<AtenOpDef>& registry() {
  static const std::vector<AtenOpDef> ops = [] {
    std::vector<AtenOpDef> all;
    nodes::add_aten_ops(all);
    std::sort(all.begin(), all.end(),
              [](const AtenOpDef& a, const AtenOpDef& b) { return a.schema.name < b.schema.name; });
    return all;
  }();
  return ops;
}

}  // namespace

AtenSchema parse_aten_schema(std::string_view text) {
  AtenSchema schema;
  schema.text = std::string(text);
  const std::size_t open = text.find('(');
  const std::size_t arrow = text.rfind(") -> ");
  check(open != std::string_view::npos && arrow != std::string_view::npos && arrow >= open,
        "ATen schema '", text, "': expected NAME(ARGUMENTS) -> RESULTS");
  schema.name = program_name(trim(text.substr(0, open)));
  bool keyword_only = false;
  for (std::string_view part : split_top_level(text.substr(open + 1, arrow - open - 1))) {
    if (part == "*") {
      keyword_only = true;
      continue;
    }
    schema.arguments.push_back(parse_argument(part, keyword_only, text));
  }
  schema.num_results = result_count(text.substr(arrow + 5));
  return schema;
}

std::optional<FieldValue> default_value(const AtenArgument& argument) {
  if (!argument.default_) return std::nullopt;
  const std::string_view text = *argument.default_;
  if (text == "None") return FieldValue(None{});
  switch (argument.type.kind) {
    case FieldKind::Bool:
      if (text == "True" || text == "False") return FieldValue(text == "True");
      break;
    case FieldKind::Int:
      if (const auto value = integer_of(text)) return FieldValue(*value);
      break;
    case FieldKind::Float:
      if (const auto value = float_of(text)) return FieldValue(*value);
      break;
    case FieldKind::Scalar:
      if (const auto value = integer_of(text)) return FieldValue(Scalar(*value));
      if (const auto value = float_of(text)) return FieldValue(Scalar(*value));
      break;
    case FieldKind::IntList: {
      // "[]", "[0, 1]"; a bare int stands for a list of it, which needs the list's length: not read.
      if (text.size() < 2 || text.front() != '[' || text.back() != ']') break;
      IntList values;
      for (std::string_view item : split_top_level(text.substr(1, text.size() - 2))) {
        const auto value = integer_of(item);
        if (!value) return std::nullopt;
        values.push_back(*value);
      }
      return FieldValue(values);
    }
    case FieldKind::String:
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
        return FieldValue(std::string(text.substr(1, text.size() - 2)));
      }
      break;
    case FieldKind::MemoryFormat:
      if (text == "contiguous_format") return FieldValue(MemoryFormat::Contiguous);
      break;
    default: break;
  }
  return std::nullopt;
}

// -------------------------------------------------------------- arguments ---

const FieldValue& AtenArgs::at(std::size_t i) const {
  check(i < values_.size(), op_, ": argument ", i, " is out of range (", values_.size(), " arguments)");
  return values_[i];
}

Tensor AtenArgs::tensor(std::size_t i) const {
  const FieldValue& value = at(i);
  if (const auto* tensor = std::get_if<Tensor>(&value)) return *tensor;
  const auto* number = std::get_if<Scalar>(&value);
  check(number != nullptr, op_, ": argument ", i, " must be a tensor, got ", describe(value));
  for (const FieldValue& other : values_) {
    if (const auto* tensor = std::get_if<Tensor>(&other); tensor && tensor->defined()) {
      return scalar_tensor(*number, result_type(*tensor, *number));
    }
  }
  return scalar_tensor(*number);
}

OptionalTensor AtenArgs::optional_tensor(std::size_t i) const {
  if (std::holds_alternative<None>(at(i))) return std::nullopt;
  const Tensor value = tensor(i);
  return value.defined() ? OptionalTensor(value) : std::nullopt;
}

namespace {
template <class T>
const T& expect(const FieldValue& value, const std::string& op, std::size_t i, std::string_view kind) {
  const auto* got = std::get_if<T>(&value);
  check(got != nullptr, op, ": argument ", i, " must be ", kind, ", got ", describe(value));
  return *got;
}
}  // namespace

TensorList AtenArgs::tensor_list(std::size_t i) const { return expect<TensorList>(at(i), op_, i, "a Tensor[]"); }
std::vector<OptionalTensor> AtenArgs::optional_tensor_list(std::size_t i) const {
  return expect<std::vector<OptionalTensor>>(at(i), op_, i, "a Tensor?[]");
}
std::int64_t AtenArgs::integer(std::size_t i) const { return expect<std::int64_t>(at(i), op_, i, "an int"); }
std::optional<std::int64_t> AtenArgs::optional_integer(std::size_t i) const {
  if (is_none(i)) return std::nullopt;
  return integer(i);
}
IntList AtenArgs::ints(std::size_t i) const { return expect<IntList>(at(i), op_, i, "an int[]"); }
std::optional<IntList> AtenArgs::optional_ints(std::size_t i) const {
  if (is_none(i)) return std::nullopt;
  return ints(i);
}
double AtenArgs::floating(std::size_t i) const { return expect<double>(at(i), op_, i, "a float"); }
std::optional<double> AtenArgs::optional_floating(std::size_t i) const {
  if (is_none(i)) return std::nullopt;
  return floating(i);
}
bool AtenArgs::boolean(std::size_t i) const { return expect<bool>(at(i), op_, i, "a bool"); }
std::vector<bool> AtenArgs::bools(std::size_t i) const { return expect<std::vector<bool>>(at(i), op_, i, "a bool[]"); }
Scalar AtenArgs::scalar(std::size_t i) const { return expect<Scalar>(at(i), op_, i, "a Scalar"); }
std::optional<Scalar> AtenArgs::optional_scalar(std::size_t i) const {
  if (is_none(i)) return std::nullopt;
  return scalar(i);
}
std::string AtenArgs::string(std::size_t i) const { return expect<std::string>(at(i), op_, i, "a str"); }
std::optional<std::string> AtenArgs::optional_string(std::size_t i) const {
  if (is_none(i)) return std::nullopt;
  return string(i);
}
DType AtenArgs::dtype(std::size_t i) const { return expect<DType>(at(i), op_, i, "a ScalarType"); }
std::optional<DType> AtenArgs::optional_dtype(std::size_t i) const {
  if (is_none(i)) return std::nullopt;
  return dtype(i);
}
bool AtenArgs::is_none(std::size_t i) const { return std::holds_alternative<None>(at(i)); }

// --------------------------------------------------------------- registry ---

const AtenOpDef* find_aten_op(std::string_view name) {
  const std::vector<AtenOpDef>& ops = registry();
  const auto it = std::lower_bound(ops.begin(), ops.end(), name,
                                   [](const AtenOpDef& op, std::string_view key) { return op.schema.name < key; });
  return it != ops.end() && it->schema.name == name ? &*it : nullptr;
}

const AtenOpDef& get_aten_op(std::string_view name) {
  const AtenOpDef* op = find_aten_op(name);
  check(op != nullptr, "refgrad has no ATen op '", name, "' (`refgrad nodes --aten` lists the ones it has)");
  return *op;
}

std::vector<const AtenOpDef*> all_aten_ops() {
  std::vector<const AtenOpDef*> ops;
  for (const AtenOpDef& op : registry()) ops.push_back(&op);
  return ops;
}

AtenResults call_aten_op(std::string_view name, const std::vector<FieldValue>& values) {
  const AtenOpDef& op = get_aten_op(name);
  const std::vector<AtenArgument>& arguments = op.schema.arguments;
  check(values.size() == arguments.size(), op.schema.name, " takes ", arguments.size(), " arguments, got ",
        values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const AtenArgument& argument = arguments[i];
    if (argument.is_tensor() && std::holds_alternative<Scalar>(values[i])) continue;  // a wrapped number
    nodes::check_field(values[i], argument.type, op.schema.name, argument.name);
  }
  AtenResults results = op.run(AtenArgs(op.schema.name, values));
  if (op.schema.num_results != kVariadic) {
    check(results.size() == op.schema.num_results, op.schema.name, " returned ", results.size(),
          " results, its schema has ", op.schema.num_results);
  }
  return results;
}

}  // namespace refgrad
