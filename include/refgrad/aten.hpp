// L1: ATen ops as a backward program calls them.
//
// AOTAutograd writes the backward of a torch.compile'd region as an FX graph of ATen ops
// (torch.ops.aten.mul.Tensor, aten.threshold_backward.default, ...): a functionalized backward program
// one level below the nodes. A refgrad program runs such a graph as `aten` instructions
// (docs/program.md, "ATen instructions"):
//
//   %3 = aten.mul.Tensor %1, $tanh
//   %4 = aten.sum.dim_IntList %3, [0], true
//   %5, %6, _ = aten.native_layer_norm_backward.default %4, $x, [32], $mean, $rstd, $w, $b, [true, true, false]
//
// Each op here is torch's schema, copied from the installed torch as str(torch.ops.aten.<op>._schema)
// prints it (tests/python/test_aten.py checks every one against torch._C), and a short function over
// L0's primitives. An ATen backward kernel (threshold_backward, native_layer_norm_backward, ...) is the
// formula of the node whose derivatives.yaml entry calls it, so it runs that node.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "refgrad/nodes.hpp"

namespace refgrad {

// One argument of an ATen op's schema. Its FieldType says what it holds: a tensor (FieldKind::Tensor,
// optional for `Tensor?`), a tensor list (TensorList `Tensor[]`, OptionalTensorList `Tensor?[]`), or a
// value of one of the other kinds (`int` and `SymInt` are Int; `int[]`, `int[2]`, `SymInt[]` IntList;
// `bool[3]` BoolList; `ScalarType` DType; ...).
struct AtenArgument {
  std::string name;                     // the schema's name: "self", "dim", "keepdim"
  FieldType type;
  bool keyword_only = false;            // after the schema's `*`
  std::optional<std::string> default_;  // the schema's spelling of its default: "False", "None", "[]", "1"
  bool is_tensor() const { return type.kind == FieldKind::Tensor; }
  bool is_tensor_list() const {
    return type.kind == FieldKind::TensorList || type.kind == FieldKind::OptionalTensorList;
  }
};

struct AtenSchema {
  std::string name;  // how a program names the op: "aten.mul.Tensor", "aten.neg.default"
  std::string text;  // torch's schema: "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"
  std::vector<AtenArgument> arguments;
  std::size_t num_results = 1;  // kVariadic: the op returns a Tensor[] (split), one result per element
};

// Parses torch's schema text (FunctionSchema's str()): the name and overload, the arguments with their
// types, `*` and defaults (alias annotations such as `Tensor(a!)` are read and dropped), and the number
// of results. Raises for a type refgrad's values do not have (Generator, Dimname, float[]).
AtenSchema parse_aten_schema(std::string_view text);

// An argument's default as a value of its type: None, a bool, an int, a float, a list of ints or bools,
// a string, a memory format. nullopt when it has none.
std::optional<FieldValue> default_value(const AtenArgument& argument);

// An op's arguments as its function reads them, by schema position: values[i] is argument i's value
// (a Tensor for a tensor argument; None for an absent `Tensor?`; a Scalar for a number passed where the
// schema has a Tensor, as FX graphs write `aten.sub.Tensor(1, x)`).
class AtenArgs {
 public:
  AtenArgs(const std::string& op, std::span<const FieldValue> values) : op_(op), values_(values) {}

  // A tensor argument. A number given for it is a "wrapped number", as ATen makes it: a 0-dim tensor
  // whose dtype follows the op's first tensor argument (an int or bool keeps it; a float keeps a
  // floating dtype and makes an integer one float32), so it never promotes the other operands.
  Tensor tensor(std::size_t i) const;
  OptionalTensor optional_tensor(std::size_t i) const;
  TensorList tensor_list(std::size_t i) const;
  std::vector<OptionalTensor> optional_tensor_list(std::size_t i) const;
  std::int64_t integer(std::size_t i) const;
  std::optional<std::int64_t> optional_integer(std::size_t i) const;
  IntList ints(std::size_t i) const;
  std::optional<IntList> optional_ints(std::size_t i) const;
  double floating(std::size_t i) const;
  std::optional<double> optional_floating(std::size_t i) const;
  bool boolean(std::size_t i) const;
  std::vector<bool> bools(std::size_t i) const;
  Scalar scalar(std::size_t i) const;
  std::optional<Scalar> optional_scalar(std::size_t i) const;
  std::string string(std::size_t i) const;
  std::optional<std::string> optional_string(std::size_t i) const;
  std::optional<DType> optional_dtype(std::size_t i) const;
  DType dtype(std::size_t i) const;
  bool is_none(std::size_t i) const;
  const std::string& op() const { return op_; }

 private:
  const FieldValue& at(std::size_t i) const;
  const std::string& op_;
  std::span<const FieldValue> values_;
};

using AtenResults = std::vector<OptionalTensor>;

struct AtenOpDef {
  AtenSchema schema;
  AtenResults (*run)(const AtenArgs& args);
};

const AtenOpDef* find_aten_op(std::string_view name);  // "aten.mul.Tensor"; nullptr when refgrad has none
const AtenOpDef& get_aten_op(std::string_view name);   // raises "refgrad has no ATen op ..."
std::vector<const AtenOpDef*> all_aten_ops();          // sorted by name

// Runs the op on values in schema order (tensors in place), after checking each against its argument's
// type; the results, one per schema result. For tests, bindings and one-off calls.
AtenResults call_aten_op(std::string_view name, const std::vector<FieldValue>& values);

}  // namespace refgrad
