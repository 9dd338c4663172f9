// The execution fuzzer's program generator; generate.hpp says what a case is.
#include "generate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string_view>
#include <type_traits>
#include <variant>

#include "refgrad/aten.hpp"
#include "refgrad/nodes.hpp"
#include "refgrad/ops.hpp"

namespace refgrad::fuzzing {
namespace {

using std::int64_t;

// The input's decision bytes, read front to back; 0 once they run out.
class Decisions {
 public:
  explicit Decisions(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  std::uint8_t byte() { return next_ < bytes_.size() ? bytes_[next_++] : 0; }
  // Uniform enough in [0, n) for n up to 2^16.
  std::uint64_t below(std::uint64_t n) {
    if (n <= 1) return 0;
    const std::uint64_t value = n <= 256 ? byte() : (std::uint64_t{byte()} << 8) | byte();
    return value % n;
  }
  int64_t in(int64_t low, int64_t high) {  // [low, high]
    return low + static_cast<int64_t>(below(static_cast<std::uint64_t>(high - low) + 1));
  }
  // True with probability about percent / 100.
  bool chance(unsigned percent) { return below(100) < percent; }
  template <class T>
  const T& pick(std::initializer_list<T> options) {
    return *(options.begin() + below(options.size()));
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t next_ = 0;
};

constexpr int64_t kHuge[] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                             int64_t{1} << 40, int64_t{1} << 31, int64_t{1} << 62, -(int64_t{1} << 40)};

// Everything a case is built from, and the declarations made so far.
class Builder {
 public:
  Builder(Decisions& in, const NodeDef& node, bool consistent) : in_(in), node_(node), consistent_(consistent) {
    program_.name = "fuzz";
    dtype_ = in_.chance(50) ? DType::Float64 : DType::Float32;
    // Up to 4 dims, so that pooling, convolution and upsampling ([N, C, H, W]) fit too.
    const int64_t rank = consistent_ ? in_.in(1, 4) : in_.in(0, 4);
    for (int64_t d = 0; d < rank; ++d) base_.push_back(consistent_ ? in_.in(1, rank == 4 ? 3 : 4) : in_.in(0, 4));
  }

  Program take_program() { return std::move(program_); }

  // A call of one ATen op: each tensor argument a grad (inline) or a saved tensor, read as the
  // node's fields of that name are; sometimes a number for it, or none for a Tensor?.
  void build_aten(const AtenOpDef& op) {
    Instr call;
    call.op = Opcode::Aten;
    call.node = op.schema.name;
    for (const AtenArgument& argument : op.schema.arguments) {
      const SavedFieldSchema field{argument.name, argument.type, true};
      if (argument.is_tensor()) {
        if (argument.type.optional && in_.chance(25)) {
          call.operands.push_back(std::nullopt);
          call.attrs.push_back({argument.name, None{}});
        } else if (!consistent_ && in_.chance(10)) {
          call.attrs.push_back({argument.name, Scalar(in_.in(-2, 3))});  // a number where a tensor goes
        } else {
          call.operands.push_back(tensor_operand(saved_tensor(argument.name)));
          call.attrs.push_back({argument.name, None{}});
        }
      } else if (argument.is_tensor_list()) {
        const int64_t length = consistent_ ? in_.in(1, 3) : in_.in(0, 3);
        for (int64_t i = 0; i < length; ++i) {
          if (argument.type.kind == FieldKind::OptionalTensorList && in_.chance(25)) call.operands.push_back(std::nullopt);
          else if (consistent_ && argument.type.kind == FieldKind::OptionalTensorList && i < rank())
            call.operands.push_back(tensor_operand(tensor_of({in_.in(1, 3)}, DType::Int64, 0, base_[i])));
          else call.operands.push_back(tensor_operand(saved_tensor(argument.name)));
        }
        call.attrs.push_back({argument.name, length});
      } else {
        call.attrs.push_back({argument.name, field_value(field)});
      }
    }
    const std::size_t results = op.schema.num_results == kVariadic ? static_cast<std::size_t>(in_.in(1, 3))
                                                                   : op.schema.num_results;
    for (std::size_t r = 0; r < results + (!consistent_ && in_.chance(3) ? 1 : 0); ++r) {
      call.results.push_back(in_.chance(85) ? std::optional<std::string>(fresh_register()) : std::nullopt);
    }
    program_.code.push_back(call);
    finish(program_.code.back());
  }

  void build() {
    const NodeSchema& schema = node_.schema;
    std::vector<Attr> attrs;
    for (const SavedFieldSchema& field : schema.saved) attrs.push_back({field.name, field_value(field)});
    if (!consistent_ && !attrs.empty() && in_.chance(3)) attrs.pop_back();  // a field missing

    const std::size_t grad_count = schema.num_grads == kVariadic ? static_cast<std::size_t>(in_.in(1, 4))
                                                                 : schema.num_grads + (consistent_ || !in_.chance(3) ? 0 : 1);
    const bool copy_slices = !consistent_ && grad_count == 1 && in_.chance(8);

    Instr call;
    call.op = copy_slices ? Opcode::CopySlices : Opcode::Call;
    call.node = schema.name;
    for (std::size_t g = 0; g < grad_count; ++g) call.operands.push_back(grad_operand(g, attrs));
    std::size_t results = call_result_count(schema, attrs).value_or(schema.inputs.size());
    if (copy_slices) {
      attrs.insert(attrs.begin(), {{"base", geometry()}, {"view", geometry()}});
    }
    call.attrs = std::move(attrs);
    call.need.resize(schema.inputs.size());
    for (std::size_t i = 0; i < call.need.size(); ++i) call.need[i] = consistent_ ? in_.chance(80) : in_.chance(60);
    if (!consistent_ && in_.chance(3)) call.need.push_back(true);  // a mask of the wrong length
    if (!consistent_ && in_.chance(3)) ++results;
    for (std::size_t r = 0; r < results; ++r) {
      const std::size_t input = r < schema.inputs.size() || !schema.list_length_field.empty()
                                    ? input_of_result(schema, std::min(r, results - 1))
                                    : 0;
      const bool needed = input < call.need.size() && call.need[input];
      if (needed || (!consistent_ && in_.chance(10))) call.results.push_back(fresh_register());
      else call.results.push_back(std::nullopt);
    }
    program_.code.push_back(call);
    finish(program_.code.back());
  }

 private:
  // --------------------------------------------------------------- tensors ---

  DType any_dtype() {
    if (consistent_) return dtype_;
    return in_.pick({DType::Float32, DType::Float64, DType::Float64, DType::Float32, DType::Int64, DType::Bool});
  }

  Shape any_shape() {
    if (consistent_) return base_;
    if (in_.chance(40)) return base_;
    Shape shape;
    const int64_t rank = in_.in(0, 4);
    for (int64_t d = 0; d < rank; ++d) shape.push_back(in_.chance(10) ? 0 : in_.in(1, 5));
    return shape;
  }

  double any_float() {
    switch (in_.below(consistent_ ? 2 : 16)) {
      case 0: return static_cast<double>(in_.in(-8, 8)) / 4;
      case 1: return static_cast<double>(in_.in(-100, 100)) / 32 + 0.03125;
      case 2: return std::numeric_limits<double>::quiet_NaN();
      case 3: return std::numeric_limits<double>::infinity();
      case 4: return -std::numeric_limits<double>::infinity();
      case 5: return -0.0;
      case 6: return 1e30;
      case 7: return 1e-30;
      case 8: return -1e300;
      default: return static_cast<double>(in_.in(-1000, 1000)) / 100;
    }
  }

  // A tensor with values of its dtype; int64 values in [low, high) unless wild.
  Tensor tensor_of(const Shape& sizes, DType dtype, int64_t low = -3, int64_t high = 6) {
    const int64_t numel = numel_of(sizes);
    std::vector<double> values(static_cast<std::size_t>(numel));
    for (double& value : values) {
      if (dtype == DType::Bool) value = static_cast<double>(in_.below(2));
      else if (dtype == DType::Int64) value = static_cast<double>(high > low ? in_.in(low, high - 1) : low);
      else value = any_float();
    }
    if (dtype == DType::Int64 && !consistent_ && numel > 0 && in_.chance(10)) {
      // A huge index: doubles cannot carry every int64, so write it afterwards.
      Tensor t = to(from_vector(values, sizes), DType::Int64);
      t.data_ptr<int64_t>()[in_.below(static_cast<std::uint64_t>(numel))] = kHuge[in_.below(std::size(kHuge))];
      return t;
    }
    return to(from_vector(values, sizes), dtype);
  }

  // An aten instruction's tensor operand: a grad with the value inline ("g0"), or a saved tensor ("$s0").
  std::string tensor_operand(const Tensor& value) {
    if (in_.chance(50)) return "$" + declare_saved(value);
    const std::string name = "g" + std::to_string(program_.grads.size());
    program_.grads.push_back({name, type_of(value), value, {}});
    return name;
  }

  std::string declare_saved(const Tensor& value) {
    const std::string name = "s" + std::to_string(program_.saved.size());
    program_.saved.push_back({name, type_of(value), value, {}});
    return name;
  }

  // A saved tensor field by its name: indices within the base shape, masks of bools, weights and
  // statistics along the channel dim; everything else the base shape.
  Tensor saved_tensor(const std::string& field) {
    if (!consistent_) {
      const DType dtype = field.find("ind") != std::string::npos || field == "target" ? in_.pick({DType::Int64, any_dtype()})
                                                                                        : any_dtype();
      return tensor_of(any_shape(), dtype);
    }
    const int64_t channels = base_.size() > 1 ? base_[1] : base_[0];
    if (field == "index" || field == "indices") {  // as gather's (self's rank) or index_select's (1-d)
      const int64_t bound = *std::min_element(base_.begin(), base_.end());
      return tensor_of(in_.chance(50) ? Shape{base_[0]} : base_, DType::Int64, 0, bound);
    }
    if (field == "target" && in_.chance(50)) return tensor_of({base_[0]}, DType::Int64, 0, channels);
    if (field == "mask" || field == "condition" || field == "attn_mask") return tensor_of(base_, DType::Bool);
    const bool per_channel = field == "weight" || field == "bias" || field == "running_mean" ||
                             field == "running_var" || field == "pos_weight" || field == "total_weight" ||
                             (field.starts_with("result") && field != "result");
    if (per_channel) {
      if (in_.chance(50)) return tensor_of({channels}, dtype_);
    }
    if (field == "mat2" || field == "vec" || field == "tensor") {
      if (in_.chance(50)) return tensor_of({base_.back(), in_.in(1, 3)}, dtype_);
    }
    return tensor_of(base_, dtype_);
  }

  // ---------------------------------------------------------------- fields ---

  int64_t any_int() {
    if (!consistent_ && in_.chance(8)) return kHuge[in_.below(std::size(kHuge))];
    return consistent_ ? in_.in(0, 2) : in_.in(-5, 5);
  }

  int64_t rank() const { return static_cast<int64_t>(base_.size()); }

  int64_t dim_in_range() { return in_.in(-std::max<int64_t>(rank(), 1), std::max<int64_t>(rank(), 1) - 1); }

  IntList int_list(const std::string& field) {
    if (!consistent_) {
      IntList list;
      const int64_t length = in_.chance(70) ? rank() : in_.in(0, 5);
      for (int64_t i = 0; i < length; ++i) list.push_back(in_.chance(60) && i < rank() ? base_[i] : any_int());
      return list;
    }
    const int64_t spatial = std::max<int64_t>(rank() - 2, 1);
    const bool as_strided = node_.schema.name == "AsStridedBackward0";
    if (field.ends_with("sizes") || field == "size") return base_;
    if (field.ends_with("strides") || (field == "stride" && as_strided)) return contiguous_strides(base_);
    if (field == "normalized_shape") return Shape(base_.end() - in_.in(1, rank()), base_.end());
    if (field == "dim" || field == "dims") {
      IntList dims;
      for (int64_t d = 0; d < rank(); ++d)
        if (in_.chance(50)) dims.push_back(d);
      return dims;
    }
    if (field == "kernel_size") return IntList(spatial, in_.in(1, 2));
    if (field == "stride" || field == "dilation") return IntList(spatial, 1);
    if (field == "padding" || field == "output_padding") return IntList(spatial, 0);
    if (field == "output_size") return IntList(spatial, in_.in(1, 3));
    if (field == "pad") return IntList(2 * in_.in(1, rank()), in_.in(0, 1));
    if (field == "repeats") {
      IntList repeats(base_.size(), 1);
      for (int64_t& r : repeats) r = in_.in(1, 2);
      return repeats;
    }
    if (field == "split_sizes") return IntList{base_[0]};
    return base_;
  }

  // A saved field's value as the program writes it: tensors declared `saved` and referenced by name.
  AttrValue field_value(const SavedFieldSchema& field) {
    FieldValue value = field_value_of(field);
    if (const auto* tensor = std::get_if<Tensor>(&value)) return SavedRef{declare_saved(*tensor)};
    if (const auto* list = std::get_if<TensorList>(&value)) {
      std::vector<SavedRef> refs;
      for (const Tensor& t : *list) refs.push_back({declare_saved(t)});
      return refs;
    }
    if (const auto* list = std::get_if<std::vector<OptionalTensor>>(&value)) {
      std::vector<std::optional<SavedRef>> refs;
      for (const OptionalTensor& t : *list) {
        if (t) refs.push_back(SavedRef{declare_saved(*t)});
        else refs.push_back(std::nullopt);
      }
      return refs;
    }
    return std::visit(
        [](auto&& alternative) -> AttrValue {
          using V = std::decay_t<decltype(alternative)>;
          if constexpr (std::is_same_v<V, Tensor> || std::is_same_v<V, TensorList> ||
                        std::is_same_v<V, std::vector<OptionalTensor>>) {
            return None{};  // handled above
          } else {
            return alternative;
          }
        },
        value);
  }

  FieldValue field_value_of(const SavedFieldSchema& field) {
    if (field.type.optional && in_.chance(consistent_ ? 20 : 30)) return None{};
    const std::string& name = field.name;
    switch (field.type.kind) {
      case FieldKind::Tensor: return saved_tensor(name);
      case FieldKind::TensorList: {
        TensorList list;
        const int64_t length = consistent_ ? in_.in(1, 3) : in_.in(0, 3);
        for (int64_t i = 0; i < length; ++i) list.push_back(saved_tensor(name));
        return list;
      }
      case FieldKind::OptionalTensorList: {
        std::vector<OptionalTensor> list;
        const int64_t length = consistent_ ? in_.in(1, rank()) : in_.in(0, 5);
        for (int64_t i = 0; i < length; ++i) {
          if (in_.chance(25)) list.push_back(std::nullopt);
          else if (consistent_ && i < rank()) list.push_back(tensor_of({in_.in(1, 3)}, DType::Int64, 0, base_[i]));
          else list.push_back(saved_tensor(name));
        }
        return list;
      }
      case FieldKind::Int: {
        if (name == "dim" || name == "dim0" || name == "dim1" || name == "dimension" || name == "source_dim")
          return consistent_ || in_.chance(60) ? dim_in_range() : any_int();
        if (!consistent_) return any_int();
        if (name == "groups" || name == "step" || name == "group") return int64_t{1};
        if (name == "reduction") return in_.in(0, 2);
        if (name == "padding_idx" || name == "ignore_index") return int64_t{-1};
        if (name == "split_size" || name == "size" || name == "weight_sym_argsize_0" || name == "C" || name == "N")
          return rank() > 0 ? base_[0] : int64_t{1};
        if (name == "self_sym_numel" || name == "HxW") return numel_of(base_);
        return any_int();
      }
      case FieldKind::IntList:
      case FieldKind::Sizes: return int_list(name);
      case FieldKind::Float: {
        if (consistent_ && (name == "eps" || name == "p" || name == "dropout_p")) return 0.25;
        return any_float();
      }
      case FieldKind::Bool: return in_.chance(50);
      case FieldKind::Scalar:
        switch (in_.below(3)) {
          case 0: return Scalar(in_.in(-2, 3));
          case 1: return Scalar(any_float());
          default: return Scalar(in_.chance(50));
        }
      case FieldKind::String: {
        if (name == "approximate") return std::string(in_.pick<const char*>({"none", "tanh", "erf"}));
        if (name == "rounding_mode") return std::string(in_.pick<const char*>({"floor", "trunc", "round"}));
        return std::string(in_.pick<const char*>({"none", "sum", "mean", "", "x\n\"y"}));
      }
      case FieldKind::DType: return any_dtype();
      case FieldKind::Layout: return consistent_ || in_.chance(80) ? Layout::Strided : Layout::Sparse;
      case FieldKind::TensorOptions: {
        TensorOptions options;
        if (consistent_ || in_.chance(70)) options.dtype = any_dtype();
        if (in_.chance(20)) options.device = Device::CPU;
        return options;
      }
      case FieldKind::TensorGeometry: return geometry();
      case FieldKind::TypeAndSize: {
        TensorOptions options;
        options.dtype = any_dtype();
        return TypeAndSize{any_shape(), options};
      }
      case FieldKind::DTypeList: {
        std::vector<DType> list(static_cast<std::size_t>(consistent_ ? in_.in(1, 3) : in_.in(0, 4)));
        for (DType& dtype : list) dtype = any_dtype();
        return list;
      }
      case FieldKind::SizesList: {
        std::vector<IntList> list(static_cast<std::size_t>(consistent_ ? 1 : in_.in(0, 4)));
        for (IntList& sizes : list) sizes = consistent_ ? base_ : int_list("sizes");
        return list;
      }
      case FieldKind::BoolList: {  // output_mask: bool[3]
        std::vector<bool> bits(static_cast<std::size_t>(consistent_ ? 3 : in_.in(0, 4)));
        for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = in_.chance(70);
        return bits;
      }
      case FieldKind::Device: return consistent_ || in_.chance(80) ? Device::CPU : Device::CUDA;
      case FieldKind::MemoryFormat:
        return in_.pick({MemoryFormat::Contiguous, MemoryFormat::Preserve, MemoryFormat::ChannelsLast});
    }
    return None{};
  }

  // A geometry: contiguous over the base shape, or anything in wild cases.
  TensorGeometry geometry() {
    TensorGeometry g{any_shape(), {}, 0};
    g.strides = contiguous_strides(g.sizes);
    if (!consistent_) {
      for (int64_t& stride : g.strides)
        if (in_.chance(20)) stride = in_.chance(50) ? 0 : any_int();
      if (in_.chance(20)) g.strides.push_back(1);
      if (in_.chance(20)) g.storage_offset = any_int();
    }
    return g;
  }

  // ----------------------------------------------------------------- grads ---

  std::string fresh_register() { return "r" + std::to_string(next_register_++); }

  // The likely shape of the forward output: the base shape, or reduced over
  // the node's `dim` field (kept as size 1 under keepdim).
  Shape grad_shape(const std::vector<Attr>& attrs) {
    if (!consistent_) return any_shape();
    const auto find = [&](std::string_view name) -> const AttrValue* {
      for (const Attr& attr : attrs)
        if (attr.name == name) return &attr.value;
      return nullptr;
    };
    const AttrValue* dim = find("dim");
    const AttrValue* keepdim = find("keepdim");
    if (!dim) return base_;
    IntList dims;
    if (const auto* one = std::get_if<int64_t>(dim)) dims.push_back(*one);
    if (const auto* list = std::get_if<IntList>(dim)) dims = *list;
    if (dims.empty() && keepdim) return {};
    const bool keep = keepdim && std::get_if<bool>(keepdim) && *std::get_if<bool>(keepdim);
    Shape shape;
    for (int64_t d = 0; d < rank(); ++d) {
      const bool reduced = std::any_of(dims.begin(), dims.end(), [&](int64_t x) { return (x + rank()) % rank() == d; });
      if (!reduced) shape.push_back(base_[d]);
      else if (keep) shape.push_back(1);
    }
    return keepdim ? shape : base_;
  }

  // The register of incoming grad g: a declared grad, sometimes seen through a
  // view (an expand of a 0-d grad, or a transpose), or `none`.
  std::optional<std::string> grad_operand(std::size_t g, const std::vector<Attr>& attrs) {
    if (in_.chance(consistent_ ? 3 : 10)) return std::nullopt;  // an undefined grad
    const Shape shape = grad_shape(attrs);
    const DType dtype = any_dtype();
    const std::string name = "g" + std::to_string(g);
    const unsigned view = in_.chance(consistent_ ? 15 : 25) ? in_.below(2) + 1 : 0;
    if (view == 1) {  // an expanded (stride 0) grad: SumBackward0 expands a 0-d grad
      program_.grads.push_back({name, {dtype, {}}, tensor_of({}, dtype), {}});
      Instr expand;
      expand.op = Opcode::Call;
      expand.node = "SumBackward0";
      expand.operands = {name};
      expand.results = {fresh_register()};
      expand.need = {true};
      expand.attrs = {{"self_sym_sizes", IntList(shape)}};
      program_.code.push_back(expand);
      return expand.results[0];
    }
    if (view == 2 && shape.size() >= 2) {  // a transposed grad
      Shape transposed = shape;
      std::swap(transposed.front(), transposed.back());
      program_.grads.push_back({name, {dtype, transposed}, tensor_of(transposed, dtype), {}});
      Instr transpose;
      transpose.op = Opcode::Call;
      transpose.node = "TransposeBackward0";
      transpose.operands = {name};
      transpose.results = {fresh_register()};
      transpose.need = {true};
      transpose.attrs = {{"dim0", int64_t{0}}, {"dim1", static_cast<int64_t>(shape.size()) - 1}};
      program_.code.push_back(transpose);
      return transpose.results[0];
    }
    program_.grads.push_back({name, {dtype, shape}, tensor_of(shape, dtype), {}});
    if (consistent_ || in_.chance(50)) {  // the roots' validate, as capture writes it
      Instr validate;
      validate.op = Opcode::Validate;
      validate.operands = {name};
      validate.results = {fresh_register()};
      validate.metadata = {InputMetadata{dtype, shape}};
      program_.code.push_back(validate);
      return validate.results[0];
    }
    return name;
  }

  // After the call: validate its results against the inputs' metadata, accumulate them into leaves,
  // and sometimes add two of them or write one to an output.
  void finish(const Instr& call) {
    std::vector<std::string> results;
    for (const auto& result : call.results)
      if (result) results.push_back(*result);
    if (results.empty()) return;
    std::vector<std::string> validated = results;
    if (consistent_ || in_.chance(60)) {
      Instr validate;
      validate.op = Opcode::Validate;
      validated.clear();
      for (const std::string& result : results) {
        validate.operands.push_back(result);
        validated.push_back(fresh_register());
        validate.results.push_back(validated.back());
        if (!consistent_ && in_.chance(15)) validate.metadata.push_back(std::nullopt);
        else validate.metadata.push_back(InputMetadata{any_dtype(), consistent_ && in_.chance(80) ? base_ : any_shape()});
      }
      program_.code.push_back(validate);
    }
    for (std::size_t i = 0; i < validated.size(); ++i) {
      const std::string leaf = "l" + std::to_string(i);
      LeafDecl decl{leaf, {any_dtype(), any_shape()}, std::nullopt, {}};
      if (in_.chance(15)) decl.grad = tensor_of(decl.type.sizes, decl.type.dtype);  // a starting .grad
      program_.leaves.push_back(decl);
      Instr accumulate;
      accumulate.op = Opcode::AccumulateGrad;
      accumulate.operands = {validated[i]};
      accumulate.target = leaf;
      program_.code.push_back(accumulate);
    }
    if (validated.size() >= 2 && in_.chance(20)) {
      Instr add;
      add.op = Opcode::Add;
      add.operands = {validated[0], validated[1]};
      add.results = {fresh_register()};
      program_.code.push_back(add);
      program_.outputs.push_back({"o", {any_dtype(), any_shape()}, {}});
      Instr output;
      output.op = Opcode::Output;
      output.operands = {add.results[0]};
      output.target = "o";
      program_.code.push_back(output);
    }
  }

  Decisions& in_;
  const NodeDef& node_;
  bool consistent_;
  DType dtype_;
  Shape base_;
  Program program_;
  int next_register_ = 0;
};

const NodeDef& pick_node(std::string_view name) {
  if (const NodeDef* node = find_node(name)) return *node;
  const std::vector<const NodeDef*> nodes = all_nodes();
  std::uint64_t hash = 1469598103934665603u;  // FNV-1a
  for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211u;
  return *nodes[hash % nodes.size()];
}

const AtenOpDef& pick_aten_op(std::string_view name) {
  if (const AtenOpDef* op = find_aten_op(name)) return *op;
  const std::vector<const AtenOpDef*> ops = all_aten_ops();
  std::uint64_t hash = 1469598103934665603u;  // FNV-1a
  for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211u;
  return *ops[hash % ops.size()];
}

}  // namespace

GeneratedCase generate_case(std::span<const std::uint8_t> input) {
  const auto newline = std::find(input.begin(), input.end(), std::uint8_t{'\n'});
  const std::string name(input.begin(), newline);
  const std::span<const std::uint8_t> decisions =
      newline == input.end() ? std::span<const std::uint8_t>() : input.subspan(newline - input.begin() + 1);
  Decisions in(decisions);
  const bool consistent = in.byte() % 2 == 0;
  if (name.starts_with("aten")) {  // an ATen op: "aten.mul.Tensor", or one picked by the name's hash
    const AtenOpDef& op = pick_aten_op(name);
    Builder builder(in, pick_node(""), consistent);
    builder.build_aten(op);
    return {builder.take_program(), op.schema.name, consistent};
  }
  const NodeDef& node = pick_node(name);
  Builder builder(in, node, consistent);
  builder.build();
  return {builder.take_program(), node.schema.name, consistent};
}

}  // namespace refgrad::fuzzing
