// L1: PyTorch's backward nodes as pure functions, and the registry that maps a
// node's name to its schema and its function.
//
// A node takes the incoming gradients (one per differentiable forward output;
// std::nullopt is an undefined gradient), a `need` mask (PyTorch's
// needs_input_grad, one bit per differentiable forward input) and its saved
// fields, and returns one optional gradient per forward input (per element
// of a Tensor[] input). Saved fields have PyTorch's names and
// are listed in PyTorch's packing order (saved inputs by name, then saved
// outputs by name), as `<Node>_apply_functional` takes them.
//
// Saved fields travel as FieldValues of a closed list of kinds; binding them
// to a node's typed struct happens once (at program load), so running a node
// does no lookup by name.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "refgrad/ops.hpp"
#include "refgrad/tensor.hpp"

namespace refgrad {

using Grads = std::vector<std::optional<Tensor>>;
using Need = std::vector<bool>;

// c10::Layout; refgrad computes on strided tensors only, the others are
// accepted as saved metadata.
enum class Layout : std::uint8_t { Strided, Sparse, SparseCsr, Mkldnn, SparseCsc, SparseBsr, SparseBsc, Jagged };
std::string layout_name(Layout layout);  // "torch.strided"

// c10::MemoryFormat, in its order. refgrad's values do not depend on it (it says how a result's strides
// are laid out); ATen ops' arguments carry it.
enum class MemoryFormat : std::uint8_t { Contiguous, Preserve, ChannelsLast, ChannelsLast3d };
std::string memory_format_name(MemoryFormat format);  // "contiguous_format", "channels_last", ...

// The parts of c10::TensorOptions a backward formula reads (ToCopyBackward0's
// self_options, IndexBackward0's self_options, ...); absent parts are nullopt.
struct TensorOptions {
  std::optional<DType> dtype;
  std::optional<Device> device;
  std::optional<Layout> layout;
  std::optional<bool> requires_grad;
  bool operator==(const TensorOptions& other) const = default;
};

// c10's TensorGeometry: a tensor's sizes, strides and storage offset
// (AsStridedBackward0's self_geometry, CopySlices' base and view).
struct TensorGeometry {
  Shape sizes;
  Shape strides;
  std::int64_t storage_offset = 0;
  bool operator==(const TensorGeometry& other) const = default;
};

// torch::autograd's TypeAndSize: a tensor's sizes and options, enough to make
// zeros like it (IndexPutBackward0's values_info).
struct TypeAndSize {
  Shape sizes;
  TensorOptions options;
  bool operator==(const TypeAndSize& other) const = default;
};

// ------------------------------------------------------- saved-field kinds ---

// The closed list of kinds a saved field can have: the C++ types PyTorch
// stores on nodes, as compiled autograd's IValuePacker packs them.
enum class FieldKind : std::uint8_t {
  Tensor,               // SavedVariable
  TensorList,           // std::vector<SavedVariable> (Tensor[])
  OptionalTensorList,   // c10::List<std::optional<Tensor>> (Tensor?[], index's indices)
  Int,                  // int64_t, c10::SymInt
  IntList,              // std::vector<int64_t> (dims, pads, kernel sizes)
  Sizes,                // std::vector<c10::SymInt> (sym_sizes, sym_strides)
  Float,                // double
  Bool,                 // bool
  Scalar,               // at::Scalar
  String,               // std::string (approximate, reduction names)
  DType,                // at::ScalarType
  Layout,               // c10::Layout
  TensorOptions,        // c10::TensorOptions
  TensorGeometry,       // at::TensorGeometry
  TypeAndSize,          // torch::autograd::TypeAndSize
  DTypeList,            // std::vector<at::ScalarType> (cat's tensors_args_scalartypes)
  SizesList,            // std::vector<std::vector<c10::SymInt>> (cat's tensors_args_sizes_symint)
  // Kinds only ATen ops' arguments have (aten.hpp), never a node's saved field:
  BoolList,             // bool[N] (output_mask)
  Device,               // c10::Device (Device? device)
  MemoryFormat,         // c10::MemoryFormat (MemoryFormat? memory_format)
};

// A kind, possibly optional (PyTorch's `Tensor?`, `int?`, `int[]?`, `Scalar?`,
// `str?`, `float?`, `bool?`): an optional field may hold None.
struct FieldType {
  FieldKind kind;
  bool optional = false;
  bool operator==(const FieldType& other) const = default;
};
std::string type_name(FieldType type);  // in derivatives.yaml's spelling: "Tensor?", "SymInt[]", "int[]?"

struct None {
  bool operator==(const None&) const = default;
};

// A saved field's value. Which alternative is allowed follows the FieldKind:
// Tensor -> Tensor; TensorList -> TensorList; OptionalTensorList ->
// std::vector<OptionalTensor>; Int -> int64_t; IntList and Sizes -> IntList;
// Float -> double; Bool -> bool; Scalar -> Scalar; String -> std::string;
// DType, Layout, TensorOptions, TensorGeometry, TypeAndSize -> themselves;
// DTypeList -> std::vector<DType>; SizesList -> std::vector<IntList>;
// BoolList -> std::vector<bool>; Device, MemoryFormat -> themselves; None
// for an optional field.
using FieldValue =
    std::variant<None, Tensor, TensorList, std::vector<OptionalTensor>, std::int64_t, IntList, double, bool, Scalar,
                 std::string, DType, Layout, TensorOptions, TensorGeometry, TypeAndSize, std::vector<DType>,
                 std::vector<IntList>, std::vector<bool>, Device, MemoryFormat>;
std::string describe(const FieldValue& value);  // "Tensor f32[2,3]", "int 4", "None", ...

// ----------------------------------------------------------------- schema ---

struct SavedFieldSchema {
  std::string name;  // PyTorch's name, without the trailing underscore of SavedVariables
  FieldType type;
  bool exposed;      // readable from Python as grad_fn._saved_<name>; false for hidden fields (†)
};

struct NodeSchema {
  std::string name;                      // PyTorch's node name: "MulBackward0"
  std::string aten_op;                   // the forward op's overload: "mul.Tensor"
  std::vector<std::string> inputs;       // differentiable forward inputs = outgoing edges, in order
  std::size_t num_grads = 1;             // incoming gradients = differentiable forward outputs (PyTorch
                                         // records no input for the others, max.dim's indices); kVariadic:
                                         // one per output of a forward whose output count varies (split)
  std::vector<SavedFieldSchema> saved;   // PyTorch's packing order
  std::string formula;                   // derivatives.yaml's lines, one per input
  // A node whose one input is a Tensor[] (cat's and stack's `tensors`) names here the saved field
  // (a ScalarType[]) that has one entry per list element; "" for the others. PyTorch gives such a
  // node one outgoing edge per element, so a call has one result per element; its one need bit
  // covers the whole list (task_should_compute_output over the list's range of edges).
  std::string list_length_field = {};  // (= {}: the registry's initializers leave it out)
};

inline constexpr std::size_t kVariadic = 0;

// The results (outgoing edges) of one call of the node: one per input, or, for
// a Tensor[] input, `list_length` (the entries of its list_length_field).
std::size_t num_results(const NodeSchema& schema, std::size_t list_length);
// The index of the input result `result` of a call belongs to (0 for every
// element of a Tensor[] input): the need bit that decides it.
std::size_t input_of_result(const NodeSchema& schema, std::size_t result);

// A node's saved fields bound to its typed struct.
using BoundSaved = std::shared_ptr<const void>;

struct NodeDef {
  NodeSchema schema;
  // Checks every value against the schema (kind, None only where optional)
  // and fills the node's typed struct. Values in schema.saved order. Runs
  // once per node of a program, at load time.
  std::function<BoundSaved(const std::vector<FieldValue>& values)> bind;
  // The pure function. `saved` is what bind returned.
  Grads (*apply)(const Grads& grads, const void* saved, const Need& need);
};

// ---------------------------------------------------------------- registry ---

const NodeDef* find_node(std::string_view name);  // nullptr when refgrad has no such node

// Whether ATen computes the node's backward as one CPU kernel (native_layer_norm_backward,
// _softmax_backward_data, gelu_backward, ...): such a kernel reads float16/bfloat16 into float32,
// computes everything there and rounds its results once, where refgrad's formula takes several
// primitives that would each round. The interpreter runs these nodes as the kernel does (DESIGN.md,
// "Numbers and precision"): float16/bfloat16 inputs read into float32, the results rounded back once.
bool computes_in_one_kernel(const NodeSchema& schema);
// Whether the node's formula has been checked for complex numbers: the conjugates derivatives.yaml
// writes (grad * other.conj()), handle_r_to_c for a real input, and L0 ops that take complex
// tensors. A node not checked raises when a complex grad or saved tensor reaches it
// (check_complex_supported) instead of computing a gradient that may lack a conjugate.
bool supports_complex(const NodeSchema& schema);
// Raises "<node>: complex64 is not supported yet by this node ..." when `grads` or `saved` hold a
// complex tensor and the node does not support_complex().
void check_complex_supported(const NodeSchema& schema, const Grads& grads);
void check_complex_supported(const NodeSchema& schema, const std::vector<FieldValue>& saved);
const NodeDef& get_node(std::string_view name);   // raises "unknown backward node ..."
std::vector<const NodeDef*> all_nodes();          // sorted by name

// Binds `saved` (in schema order, or by name) and runs the node, after
// checking the number of grads and the length of `need`. For tests, bindings
// and one-off calls; an interpreter binds once and calls `apply` directly.
Grads call_node(std::string_view name, const Grads& grads, const Need& need, const std::vector<FieldValue>& saved);
Grads call_node(std::string_view name, const Grads& grads, const Need& need,
                const std::map<std::string, FieldValue>& saved);

}  // namespace refgrad
