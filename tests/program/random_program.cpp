// Random programs for the text round trip (and any other property test that
// wants awkward but well-formed programs). Every declaration kind, opcode,
// hook kind and saved-field kind shows up, with the values that are easy to
// get wrong: NaN of both signs, -0.0, inf, subnormals, int64's ends, strings
// with quotes, backslashes, newlines and UTF-8, empty and 0-dim tensors.
//
// The generator draws from mt19937_64 with its own small helpers (not
// std:: distributions, whose results differ between standard libraries), so a
// seed gives the same program everywhere.
#include "random_program.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace refgrad::testing {

namespace {

constexpr DType kDTypes[] = {DType::Bool, DType::Int64, DType::Float32, DType::Float64};
constexpr Layout kLayouts[] = {Layout::Strided,   Layout::Sparse,    Layout::SparseCsr, Layout::Mkldnn,
                               Layout::SparseCsc, Layout::SparseBsr, Layout::SparseBsc, Layout::Jagged};
constexpr HookKind kHookKinds[] = {HookKind::TensorPre, HookKind::Pre, HookKind::Post, HookKind::PostAccGrad};

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : engine_(seed) {}

  Program program();

 private:
  // ---------------------------------------------------------------- draws ---
  std::uint64_t below(std::uint64_t n) { return engine_() % n; }
  bool percent(int p) { return below(100) < static_cast<std::uint64_t>(p); }
  template <class T, std::size_t N>
  const T& pick(const T (&items)[N]) {
    return items[below(N)];
  }
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items[below(items.size())];
  }

  // ---------------------------------------------------------------- names ---
  std::string name();
  std::string register_name() { return percent(50) ? std::to_string(below(1000)) : name(); }
  std::vector<std::optional<std::string>> registers(std::size_t count, int none_percent);
  std::string awkward_string();

  // --------------------------------------------------------------- values ---
  std::int64_t integer();
  double float64();
  float float32();
  Shape sizes(std::size_t max_rank, std::int64_t max_size);
  IntList ints();
  TensorType tensor_type();
  Tensor tensor_of(const TensorType& type);
  std::optional<Tensor> maybe_value(const TensorType& type);
  InputMetadata metadata();
  TensorOptions options();
  TensorGeometry geometry();
  SavedRef saved_ref() { return SavedRef{pick(saved_names_)}; }
  AttrValue field_value(FieldType type);

  // --------------------------------------------------------- instructions ---
  Instr instruction(Opcode op);
  const NodeDef* node();
  void fill_call(Instr& instr);
  void fill_hook(Instr& instr);
  void fill_aten(Instr& instr);
  std::vector<bool> need(std::size_t size);

  std::mt19937_64 engine_;
  std::vector<std::string> saved_names_;
  std::vector<std::string> leaf_names_;
  std::vector<HookDecl> hooks_;
  std::vector<std::string> function_names_;
  std::vector<std::string> output_names_;
};

// ------------------------------------------------------------------- names ---

// [A-Za-z_][A-Za-z0-9_.]*: layer1.weight, _x, a.b_2, x..
std::string Generator::name() {
  static const std::string first = "abcxyzABCWZ_";
  static const std::string rest = "abcxyz019_.";
  std::string text(1, first[below(first.size())]);
  const std::uint64_t length = below(9);
  for (std::uint64_t i = 0; i < length; ++i) text += rest[below(rest.size())];
  return text;
}

std::vector<std::optional<std::string>> Generator::registers(std::size_t count, int none_percent) {
  std::vector<std::optional<std::string>> names;
  for (std::size_t i = 0; i < count; ++i) {
    if (percent(none_percent)) names.push_back(std::nullopt);
    else names.push_back(register_name());
  }
  return names;
}

std::string Generator::awkward_string() {
  static const std::vector<std::string> pieces = {
      "tanh", "none", "model.py:14", "\"", "\\", "\n", "\t", "\x01", "\x7f", "#", " ", "=", "caf\xc3\xa9", "\xff"};
  std::string text;
  const std::uint64_t count = below(5);
  for (std::uint64_t i = 0; i < count; ++i) text += pick(pieces);
  return text;
}

// ------------------------------------------------------------------ values ---

std::int64_t Generator::integer() {
  static const std::vector<std::int64_t> edges = {
      0, 1, -1, 2, 7, -42, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()};
  return percent(50) ? pick(edges) : static_cast<std::int64_t>(engine_());
}

double Generator::float64() {
  using limits = std::numeric_limits<double>;
  static const std::vector<double> edges = {
      0.0, -0.0, 1.0, -1.5, 0.1, 1e-05, 1e20, 1e16, 123456.0, limits::quiet_NaN(), -limits::quiet_NaN(),
      limits::infinity(), -limits::infinity(), limits::denorm_min(), limits::min(), limits::max(), -limits::max()};
  if (percent(60)) return pick(edges);
  // Any finite double: random bits, NaNs (whose payloads the text does not keep) redrawn.
  while (true) {
    const std::uint64_t bits = engine_();
    double value;
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isnan(value)) return value;
  }
}

float Generator::float32() {
  using limits = std::numeric_limits<float>;
  static const std::vector<float> edges = {
      0.0f, -0.0f, 1.0f, 0.1f, 1e-05f, 16777216.0f, limits::quiet_NaN(), -limits::quiet_NaN(),
      limits::infinity(), -limits::infinity(), limits::denorm_min(), limits::min(), limits::max()};
  if (percent(60)) return pick(edges);
  while (true) {
    const auto bits = static_cast<std::uint32_t>(engine_());
    float value;
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isnan(value)) return value;
  }
}

Shape Generator::sizes(std::size_t max_rank, std::int64_t max_size) {
  Shape shape(below(max_rank + 1));
  for (std::int64_t& size : shape) size = static_cast<std::int64_t>(below(static_cast<std::uint64_t>(max_size) + 1));
  return shape;
}

IntList Generator::ints() {
  IntList values(below(4));
  for (std::int64_t& value : values) value = integer();
  return values;
}

TensorType Generator::tensor_type() {
  TensorType type;
  type.dtype = pick(kDTypes);
  type.sizes = sizes(3, 3);
  type.device = percent(20) ? Device::CUDA : Device::CPU;
  return type;
}

// A value of `type` (on the CPU: the text keeps a device only in the type).
Tensor Generator::tensor_of(const TensorType& type) {
  const auto count = static_cast<std::size_t>(numel_of(type.sizes));
  switch (type.dtype) {
    case DType::Bool: {
      std::vector<bool> values(count);
      for (std::size_t i = 0; i < count; ++i) values[i] = percent(50);
      return from_vector(values, type.sizes);
    }
    case DType::Int64: {
      std::vector<std::int64_t> values(count);
      for (auto& value : values) value = integer();
      return from_vector(values, type.sizes);
    }
    case DType::Float32: {
      std::vector<float> values(count);
      for (auto& value : values) value = float32();
      return from_vector(values, type.sizes);
    }
    case DType::Float64: break;
  }
  std::vector<double> values(count);
  for (auto& value : values) value = float64();
  return from_vector(values, type.sizes);
}

std::optional<Tensor> Generator::maybe_value(const TensorType& type) {
  if (percent(50)) return std::nullopt;
  return tensor_of(type);
}

InputMetadata Generator::metadata() {
  InputMetadata meta;
  meta.dtype = pick(kDTypes);
  meta.shape = sizes(3, 5);
  meta.device = percent(20) ? Device::CUDA : Device::CPU;
  meta.is_tensor_subclass = percent(20);
  const std::uint64_t grad_dtype = below(3);
  meta.grad_dtype = grad_dtype == 0 ? std::nullopt : std::optional<DType>(grad_dtype == 1 ? meta.dtype : pick(kDTypes));
  return meta;
}

TensorOptions Generator::options() {
  TensorOptions options;
  if (percent(50)) options.dtype = pick(kDTypes);
  if (percent(50)) options.device = percent(50) ? Device::CUDA : Device::CPU;
  if (percent(50)) options.layout = pick(kLayouts);
  if (percent(50)) options.requires_grad = percent(50);
  return options;
}

TensorGeometry Generator::geometry() { return TensorGeometry{ints(), ints(), integer()}; }

AttrValue Generator::field_value(FieldType type) {
  if ((type.optional || type.kind == FieldKind::Tensor) && percent(20)) return None{};
  switch (type.kind) {
    case FieldKind::Tensor: return saved_ref();
    case FieldKind::TensorList: {
      std::vector<SavedRef> refs(below(4));
      for (SavedRef& ref : refs) ref = saved_ref();
      return refs;
    }
    case FieldKind::OptionalTensorList: {
      std::vector<std::optional<SavedRef>> refs(below(4));
      for (auto& ref : refs) {
        if (percent(70)) ref = saved_ref();
      }
      return refs;
    }
    case FieldKind::Int: return integer();
    case FieldKind::IntList:
    case FieldKind::Sizes: return ints();
    case FieldKind::Float: return float64();
    case FieldKind::Bool: return percent(50);
    case FieldKind::Scalar: {
      switch (below(4)) {
        case 0: return Scalar(percent(50));
        case 1: return Scalar(integer());
        case 2: return Scalar(float64());
        default: return Scalar(std::complex<double>(float64(), float64()));
      }
    }
    case FieldKind::String: return awkward_string();
    case FieldKind::DType: return pick(kDTypes);
    case FieldKind::Layout: return pick(kLayouts);
    case FieldKind::TensorOptions: return options();
    case FieldKind::TensorGeometry: return geometry();
    case FieldKind::TypeAndSize: return TypeAndSize{ints(), options()};
    case FieldKind::DTypeList: {
      std::vector<DType> dtypes(below(4));
      for (DType& dtype : dtypes) dtype = pick(kDTypes);
      return dtypes;
    }
    case FieldKind::SizesList: {
      std::vector<IntList> lists(below(4));
      for (IntList& list : lists) list = ints();
      return lists;
    }
    case FieldKind::BoolList: {
      std::vector<bool> bits(below(4));
      for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = percent(50);
      return bits;
    }
    case FieldKind::Device: return percent(50) ? Device::CPU : Device::CUDA;
    case FieldKind::MemoryFormat: return static_cast<MemoryFormat>(below(4));
  }
  return None{};
}

// ------------------------------------------------------------ instructions ---

// Half the time any node; half the time a node with a field of a kind drawn
// first, so that the rare kinds (one node has a TensorGeometry) show up too.
const NodeDef* Generator::node() {
  static const std::vector<const NodeDef*> nodes = all_nodes();
  static const std::vector<std::vector<const NodeDef*>> nodes_by_kind = [] {
    std::vector<std::vector<const NodeDef*>> by_kind(static_cast<std::size_t>(FieldKind::SizesList) + 1);
    for (const NodeDef* node : nodes) {
      for (const SavedFieldSchema& field : node->schema.saved) {
        auto& bucket = by_kind[static_cast<std::size_t>(field.type.kind)];
        if (bucket.empty() || bucket.back() != node) bucket.push_back(node);
      }
    }
    std::erase_if(by_kind, [](const auto& bucket) { return bucket.empty(); });
    return by_kind;
  }();
  return percent(50) ? pick(nodes) : pick(pick(nodes_by_kind));
}

// Mostly the default length (all ones or some bits 0); sometimes a wrong
// length, which the printer must write out for the round trip to hold.
std::vector<bool> Generator::need(std::size_t size) {
  if (percent(10)) size = below(4);
  std::vector<bool> bits(size, true);
  if (percent(50)) {
    for (std::size_t i = 0; i < size; ++i) bits[i] = percent(70);
  }
  return bits;
}

// A node from the registry with its saved fields (some left out, which the
// verifier, not the parser, reports) in schema order.
void Generator::fill_call(Instr& instr) {
  const NodeSchema& schema = node()->schema;
  instr.node = schema.name;
  instr.results = registers(schema.inputs.size(), 25);
  instr.operands = registers(schema.num_grads == kVariadic ? below(4) : schema.num_grads, 15);
  if (instr.op == Opcode::CopySlices) {
    instr.attrs.push_back(Attr{"base", geometry()});
    instr.attrs.push_back(Attr{"view", geometry()});
  }
  for (const SavedFieldSchema& field : schema.saved) {
    if (percent(95)) instr.attrs.push_back(Attr{field.name, field_value(field.type)});
  }
  instr.need = need(schema.inputs.size());
}

// The forms a hook instruction takes by the hook's kind (program.hpp, Instr).
void Generator::fill_hook(Instr& instr) {
  const HookDecl& hook = pick(hooks_);
  instr.target = hook.name;
  switch (hook.kind) {
    case HookKind::TensorPre:
      instr.operands = registers(1, 10);
      instr.results = registers(1, 0);
      break;
    case HookKind::Pre: {
      const std::size_t grads = 1 + below(3);
      instr.operands = registers(grads, 20);
      instr.results = registers(grads, 10);
      break;
    }
    case HookKind::Post: {
      const std::size_t inputs = 1 + below(3);
      instr.results = registers(inputs, 10);
      instr.operands = registers(inputs + 1 + below(2), 20);
      break;
    }
    case HookKind::PostAccGrad: instr.leaf = pick(leaf_names_); break;
  }
}

// Any ATen op with every argument: tensors as registers, saved tensors ("$x"), none where a Tensor?
// allows it, or a number; values of the argument's kind (None sometimes, where optional).
void Generator::fill_aten(Instr& instr) {
  static const std::vector<const AtenOpDef*> ops = all_aten_ops();
  const AtenSchema& schema = pick(ops)->schema;
  instr.node = schema.name;
  const auto operand = [this](bool none_allowed) -> std::optional<std::string> {
    if (none_allowed && percent(20)) return std::nullopt;
    return percent(40) ? "$" + saved_ref().name : register_name();
  };
  for (const AtenArgument& argument : schema.arguments) {
    if (argument.is_tensor() && percent(10)) {
      instr.attrs.push_back(Attr{argument.name, percent(50) ? Scalar(integer()) : Scalar(float64())});
    } else if (argument.is_tensor()) {
      instr.operands.push_back(operand(argument.type.optional));
      instr.attrs.push_back(Attr{argument.name, None{}});
    } else if (argument.is_tensor_list()) {
      const std::size_t length = below(4);
      for (std::size_t i = 0; i < length; ++i) {
        instr.operands.push_back(operand(argument.type.kind == FieldKind::OptionalTensorList));
      }
      instr.attrs.push_back(Attr{argument.name, static_cast<std::int64_t>(length)});
    } else if (argument.type.optional && percent(20)) {
      instr.attrs.push_back(Attr{argument.name, None{}});
    } else {
      instr.attrs.push_back(Attr{argument.name, field_value(FieldType{argument.type.kind})});
    }
  }
  instr.results = registers(schema.num_results == kVariadic ? 1 + below(3) : schema.num_results, 25);
}

Instr Generator::instruction(Opcode op) {
  Instr instr;
  instr.op = op;
  switch (op) {
    case Opcode::Call:
    case Opcode::CopySlices: fill_call(instr); break;
    case Opcode::Validate: {
      const std::size_t slots = percent(5) ? 0 : 1 + below(3);
      instr.results = registers(slots, 20);
      instr.operands = registers(slots, 20);
      for (std::size_t i = 0; i < slots; ++i) {
        instr.metadata.push_back(percent(20) ? std::nullopt : std::optional<InputMetadata>(metadata()));
      }
      break;
    }
    case Opcode::Add:
      instr.results = registers(1, 0);
      instr.operands = registers(2, 0);
      break;
    case Opcode::Zeros:
      instr.results = registers(1, 0);
      instr.metadata = {metadata()};
      break;
    case Opcode::AccumulateGrad:
      instr.target = pick(leaf_names_);
      instr.operands = registers(1, 10);
      break;
    case Opcode::Hook: fill_hook(instr); break;
    case Opcode::CallBackward: {
      instr.target = pick(function_names_);
      instr.results = registers(below(4), 25);
      instr.operands = registers(1 + below(3), 15);
      std::vector<SavedRef> saved(below(4));
      for (SavedRef& ref : saved) ref = saved_ref();
      if (percent(90)) instr.attrs.push_back(Attr{"saved", saved});
      instr.need = need(instr.results.size());
      break;
    }
    case Opcode::Output:
      instr.target = pick(output_names_);
      instr.operands = registers(1, 20);
      break;
    case Opcode::Aten: fill_aten(instr); break;
  }
  if (percent(30)) instr.origin = percent(50) ? "model.py:" + std::to_string(below(500)) : awkward_string();
  return instr;
}

// ----------------------------------------------------------------- program ---

Program Generator::program() {
  Program program;
  program.name = name();
  for (std::uint64_t i = 0, n = below(3); i < n; ++i) {
    const TensorType type = tensor_type();
    program.grads.push_back(GradDecl{register_name(), type, maybe_value(type), {}});
  }
  // At least one of each kind that instructions refer to.
  for (std::uint64_t i = 0, n = 1 + below(4); i < n; ++i) {
    TensorType type = tensor_type();
    // Large declared sizes are fine without a literal (the parser allocates nothing from them).
    const bool huge = percent(10);
    if (huge) type.sizes = {1000000000000, 1000000000000};
    program.saved.push_back(SavedDecl{name(), type, huge ? std::nullopt : maybe_value(type), {}});
    saved_names_.push_back(program.saved.back().name);
  }
  for (std::uint64_t i = 0, n = 1 + below(3); i < n; ++i) {
    const TensorType type = tensor_type();
    program.leaves.push_back(LeafDecl{name(), type, maybe_value(type), {}});
    leaf_names_.push_back(program.leaves.back().name);
  }
  for (std::uint64_t i = 0, n = 1 + below(3); i < n; ++i) {
    program.hooks.push_back(HookDecl{name(), pick(kHookKinds), {}});
  }
  hooks_ = program.hooks;
  for (std::uint64_t i = 0, n = 1 + below(2); i < n; ++i) {
    program.functions.push_back(FunctionDecl{name(), {}});
    function_names_.push_back(program.functions.back().name);
  }
  for (std::uint64_t i = 0, n = 1 + below(3); i < n; ++i) {
    program.outputs.push_back(OutputDecl{name(), tensor_type(), {}});
    output_names_.push_back(program.outputs.back().name);
  }
  constexpr Opcode kOpcodes[] = {Opcode::Call, Opcode::CopySlices,     Opcode::Validate,
                                 Opcode::Add,  Opcode::Zeros,          Opcode::AccumulateGrad,
                                 Opcode::Hook, Opcode::CallBackward,   Opcode::Output,
                                 Opcode::Aten};
  for (std::uint64_t i = 0, n = below(12); i < n; ++i) program.code.push_back(instruction(pick(kOpcodes)));
  return program;
}

}  // namespace

Program random_program(std::uint64_t seed) { return Generator(seed).program(); }

}  // namespace refgrad::testing
