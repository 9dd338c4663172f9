// L2: a functionalized backward program — its declarations and instructions —
// with the text assembly (print, parse) and the verifier.
//
// This header is the readable form: names, not indices. bytecode.hpp lowers
// it to the flat loaded form the interpreter runs; bundle.hpp stores it with
// its tensors in one .safetensors file. docs/program.md documents the text
// syntax and the exact semantics of every instruction; this header says what
// each field holds.
//
//   program mul                                 # z = x * y, then z.sum()
//     grad   %g     : f32[3]                    # the root's incoming grad
//     saved  $x     : f32[3] = [1.0, 2.0, 3.0]  # a small saved tensor, inline
//     saved  $y     : f32[3]                    # a large one: from the bundle
//     leaf   @x     : f32[3]
//     leaf   @y     : f32[3]
//   code
//     %0 = validate %g : f32[3]
//     %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
//     %3, %4 = validate %1, %2 : f32[3], f32[3]
//     accumulate_grad @y %4
//     accumulate_grad @x %3
//
// Sigils name what a thing is: %register, $saved tensor, @leaf, &host
// callable (hook or autograd.Function backward), ^output.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "refgrad/aten.hpp"
#include "refgrad/engine.hpp"
#include "refgrad/nodes.hpp"
#include "refgrad/tensor.hpp"

namespace refgrad {

// ------------------------------------------------------------ tensor types ---

// What a declaration says about a tensor: "f32[4,5]", "f64[] cuda".
struct TensorType {
  DType dtype = DType::Float32;
  Shape sizes;
  Device device = Device::CPU;
  bool operator==(const TensorType& other) const = default;
};
std::string to_string(const TensorType& type);    // "f32[4,5]", "i64[] cuda"
std::optional<DType> parse_short_dtype(std::string_view name);
TensorType type_of(const Tensor& tensor);

// An edge's metadata as `validate` writes it: "f32[4,3]", and only where they
// differ from the defaults, "{...}" with device, grad_dtype, subclass:
// "f32[4,3]{grad_dtype=f64}", "f32[3]{grad_dtype=none}", "f32[3]{device=cuda, subclass}".
std::string to_string(const InputMetadata& metadata);

// --------------------------------------------------------------- locations ---

// Where something was written: 1-based line and column in the text it was
// parsed from; line 0 when it did not come from text (built in C++, loaded
// from bytecode). Never part of a program's equality.
struct SourceLocation {
  std::string file;  // the path given to parse_program, "<text>" by default
  int line = 0;
  int column = 0;
};

// ----------------------------------------------------------- declarations ---

// `grad %g0 : f32[]` — an incoming gradient of a root (a grad_output of
// backward() / autograd.grad). `= VALUE` gives a default value; otherwise the
// value is supplied when the program runs (bundle tensor "%g0", CLI, API).
struct GradDecl {
  std::string name;  // without the sigil: "g0"
  TensorType type;
  std::optional<Tensor> value;
  SourceLocation where;
};

// `saved $x : f32[4,5]` — a tensor saved by the forward. The value is written
// inline (`= [[1.0, 2.0], ...]`) or comes from the bundle tensor "$x".
struct SavedDecl {
  std::string name;
  TensorType type;
  std::optional<Tensor> value;  // inline value; nullopt: from the bundle
  SourceLocation where;
};

// `leaf @w : f32[5,3]` — a tensor whose .grad AccumulateGrad updates. `= VALUE`
// (inline) or the bundle tensor "@w" gives its .grad before the program runs;
// with neither, .grad starts as None.
struct LeafDecl {
  std::string name;
  TensorType type;
  std::optional<Tensor> grad;  // inline initial .grad
  SourceLocation where;
};

// What a hook is and when the engine calls it (../shared/reference/pytorch-autograd.md §1.7, §2.4).
enum class HookKind : std::uint8_t {
  TensorPre,    // tensor.register_hook: grad -> grad | None (unchanged)
  Pre,          // node.register_prehook: (grad_outputs...) -> (grad_outputs...) | None
  Post,         // node.register_hook: (grad_inputs..., grad_outputs...) -> (grad_inputs...) | None
  PostAccGrad,  // tensor.register_post_accumulate_grad_hook: (leaf) -> None
};
std::string to_string(HookKind kind);  // "tensor_pre", "pre", "post", "post_acc_grad"
std::optional<HookKind> parse_hook_kind(std::string_view name);

// `hook &double : tensor_pre` — a host callable registered by name.
struct HookDecl {
  std::string name;
  HookKind kind = HookKind::TensorPre;
  SourceLocation where;
};

// `function &MyMulBackward` — an autograd.Function's backward, a host callable
// called by `call_backward` with its ctx's saved tensors.
struct FunctionDecl {
  std::string name;
  SourceLocation where;
};

// `output ^x : f32[4,5]` — a gradient the program returns, as
// torch.autograd.grad(outputs, inputs) returns one per input, in declaration
// order. An output that no `output` instruction writes is undefined (None).
struct OutputDecl {
  std::string name;
  TensorType type;
  SourceLocation where;
};

// -------------------------------------------------------- saved-field values ---

// A reference to a saved tensor declaration: `$x`.
struct SavedRef {
  std::string name;
  bool operator==(const SavedRef& other) const = default;
};

// A saved field's value as a program writes it: FieldValue with every tensor
// replaced by a reference to a `saved` declaration. The alternatives follow
// FieldValue's one for one (nodes.hpp), so binding swaps SavedRef for Tensor:
//   None                                 none                (an optional field, or an unsaved tensor)
//   SavedRef                             $x                  Tensor
//   std::vector<SavedRef>                [$a, $b]            Tensor[]
//   std::vector<std::optional<SavedRef>> [$i, none]          Tensor?[]
//   std::int64_t                         -1                  int
//   IntList                              [4,3]               int[], SymInt[]
//   double                               0.5, 1.0, inf, nan  float (always with '.', 'e', inf or nan)
//   bool                                 true                bool
//   Scalar                               2, 2.0, true        Scalar (its kind is in the spelling)
//   std::string                          "tanh"              str (C-style escapes)
//   DType                                f32                 ScalarType
//   Layout                               strided             Layout (torch.strided without "torch.")
//   TensorOptions                        {dtype=f32, device=cpu, layout=strided, requires_grad=false}
//                                        (parts that are absent are left out: {} is all absent)
//   TensorGeometry                       {sizes=[2,3], strides=[3,1], storage_offset=0}
//   TypeAndSize                          {sizes=[2,3], options={dtype=f32}}
//   std::vector<DType>                   [f32, f64]          ScalarType[]
//   std::vector<IntList>                 [[2,3], [4]]        SymInt[][]
//   std::vector<bool>                    [true, false]       bool[N]         (ATen ops' arguments only)
//   Device                               cpu                 Device          (ATen ops' arguments only)
//   MemoryFormat                         contiguous_format   MemoryFormat    (ATen ops' arguments only)
using AttrValue = std::variant<None, SavedRef, std::vector<SavedRef>, std::vector<std::optional<SavedRef>>,
                               std::int64_t, IntList, double, bool, Scalar, std::string, DType, Layout,
                               TensorOptions, TensorGeometry, TypeAndSize, std::vector<DType>,
                               std::vector<IntList>, std::vector<bool>, Device, MemoryFormat>;

struct Attr {
  std::string name;  // the node's saved-field name
  AttrValue value;
};

// ------------------------------------------------------------ instructions ---

enum class Opcode : std::uint8_t {
  Call,            // %a, %b = MulBackward0 %g  other=$y ... need=[1,1]
  CopySlices,      // %a, %b = CopySlices[MulBackward0] %g  base={...} view={...} other=$y ...
  Validate,        // %a, %b = validate %x, %y : f32[4,3], f32[3]
  Add,             // %c = add %a, %b
  Zeros,           // %z = zeros : f32[4,3]
  AccumulateGrad,  // accumulate_grad @w %g
  Hook,            // %h = hook &double %g      hook &log @w    (by the hook's kind)
  CallBackward,    // %a, %b = call_backward &MyMulBackward %g  saved=[$x, $y] need=[1,1]
  Output,          // output ^x %g
  Aten,            // %c = aten.mul.Tensor %a, $x      (an ATen op: aten.hpp)
};
std::string mnemonic(Opcode op);  // "call" for Call, "CopySlices", "validate", "add", ...

// How many results a call of the node with these fields has: one per node
// input, or, for a Tensor[] input (cat, stack), one per element: the entries
// of its list_length_field. nullopt when that field is missing or no list.
std::optional<std::size_t> call_result_count(const NodeSchema& schema, std::span<const Attr> attrs);

// One instruction. Which fields an opcode uses (the others stay empty):
//   Call          results (one per node input, or per element of a Tensor[] input; nullopt
//                 `_` where need is 0 or the element's edge is invalid), operands (the
//                 incoming grads, nullopt `none` for an undefined grad), node, need, attrs
//                 (the node's saved fields, in schema order)
//   CopySlices    as Call, with node = the wrapped node (PyTorch's CopySlices::fn) and attrs =
//                 `base` and `view` (TensorGeometry) followed by the wrapped node's saved fields
//   Validate      results, operands and metadata, one each per slot (metadata nullopt `_`
//                 for an edge without metadata). The node whose outputs these are, named in
//                 errors, is the one whose instruction defines the operands (none: the roots)
//   Add           results (one), operands (two registers)
//   Zeros         results (one), metadata (one: the zeros' type)
//   AccumulateGrad operands (one), target (the leaf)
//   Hook          target (the hook); tensor_pre: operands (one) and results (one); pre:
//                 operands and results, one per incoming grad of the node; post: results (one
//                 per grad_input), operands = grad_inputs then grad_outputs; post_acc_grad:
//                 leaf (its .grad is passed), no operands, no results
//   CallBackward  target (the function), results, operands, need, attrs = one `saved`
//                 (Tensor[]: the ctx's saved tensors)
//   Output        target (the output), operands (one; nullopt `none` stores None)
//   Aten          node (the op: "aten.mul.Tensor"), results (one per schema result; nullopt `_` for
//                 one not used), operands (the tensors it reads, in argument order: registers, or
//                 saved tensors named with their sigil, "$x"; nullopt `none` for an absent Tensor?),
//                 attrs (one per schema argument, in schema order: a value argument's value; for a
//                 Tensor or Tensor? argument None (it reads the next operand) or a Scalar (a
//                 number passed for it, as FX graphs write `aten.sub.Tensor(1, x)`); for a Tensor[]
//                 or Tensor?[] argument an int, how many operands it reads)
struct Instr {
  Opcode op = Opcode::Call;
  std::vector<std::optional<std::string>> results;   // register names without '%'
  std::vector<std::optional<std::string>> operands;  // register names without '%' (Aten: or "$saved")
  std::string node;                                  // Call, CopySlices, Aten
  std::string target;                                // leaf, hook, function or output name
  std::string leaf;                                  // Hook of kind post_acc_grad
  std::vector<bool> need;                            // Call, CopySlices, CallBackward
  std::vector<Attr> attrs;                           // Call, CopySlices, CallBackward, Aten
  std::vector<std::optional<InputMetadata>> metadata;  // Validate, Zeros
  std::string origin;  // forward source line that created the node ("model.py:14"), "" unknown
  SourceLocation where;
};

// ------------------------------------------------------- ATen instructions ---

// One argument of an `aten` instruction, as its op's schema reads it: the schema's argument, the
// instruction's attribute for it, and the operands it reads (one for a Tensor or Tensor? argument
// unless a number stands for it; the list's for a Tensor[] or Tensor?[] one; none for a value).
struct AtenInstrArgument {
  const AtenArgument* schema = nullptr;
  const AttrValue* value = nullptr;
  std::vector<std::optional<std::string>> operands;
};

// An `aten` instruction's arguments in its op's schema order. Raises refgrad::Error when the
// instruction does not fit the schema: an op refgrad has not, attributes not one per argument by
// name, a tensor argument's attribute neither None, a number nor a list's length, too few or too
// many operands.
std::vector<AtenInstrArgument> aten_arguments(const Instr& instr);

// A value that holds no tensor (an ATen argument's default) as an attribute; raises for a tensor.
AttrValue attr_value_of(const FieldValue& value);

// ---------------------------------------------------------------- program ---

struct Program {
  std::string name = "main";
  std::vector<GradDecl> grads;
  std::vector<SavedDecl> saved;
  std::vector<LeafDecl> leaves;
  std::vector<HookDecl> hooks;
  std::vector<FunctionDecl> functions;
  std::vector<OutputDecl> outputs;
  std::vector<Instr> code;

  const GradDecl* find_grad(std::string_view name) const;
  const SavedDecl* find_saved(std::string_view name) const;
  const LeafDecl* find_leaf(std::string_view name) const;
  const HookDecl* find_hook(std::string_view name) const;
  const FunctionDecl* find_function(std::string_view name) const;
  const OutputDecl* find_output(std::string_view name) const;
};

// Structural equality: names, types, instructions, attributes and inline
// values (tensors compared by dtype, shape and bits, so NaN == NaN and
// -0.0 != 0.0). Locations are ignored.
bool operator==(const Program& a, const Program& b);
bool operator==(const Instr& a, const Instr& b);
bool operator==(const Attr& a, const Attr& b);
bool same_tensor(const std::optional<Tensor>& a, const std::optional<Tensor>& b);

// --------------------------------------------------------------- assembly ---

struct PrintOptions {
  bool pc = false;  // number the instructions ("   3  %4 = ..."), as `refgrad dis` does
};

// The canonical text: parse_program(print_program(p)) == p, and
// print_program(parse_program(t)) is the canonical spelling of t (comments
// dropped, spacing normalized, attributes in schema order, need=[...] written
// only when some bit is 0, floats in their shortest exact spelling).
std::string print_program(const Program& program, const PrintOptions& options = {});
std::string print_instruction(const Instr& instr);  // one line, no pc, no newline

// Parses the text form. Syntax only plus what the syntax needs: node names
// must be in the registry (a node's schema says how to read its attributes);
// use verify() for everything else. Errors raise refgrad::Error with
//   file:line:col: error: message
//     <the line>
//           ^
Program parse_program(std::string_view text, std::string_view file = "<text>");

// A tensor literal as declarations write it: nested brackets of numbers. "1.0" for 0-dim, "[]" for shape [0];
// floats nan, inf, -inf; bools true/false.
std::string print_tensor_literal(const Tensor& tensor);

// ---------------------------------------------------------------- verifier ---

struct Diagnostic {
  enum class Severity : std::uint8_t { Error, Warning };
  Severity severity = Severity::Error;
  std::string message;   // "instruction 4 (%5 = add %3, %9): register %9 is used before it is defined"
  int pc = -1;           // the instruction, -1 for a declaration or the program
  SourceLocation where;  // from the instruction or declaration, when parsed from text
};
// "file:line:col: error: message" (or "warning"), without the location when there is none.
std::string to_string(const Diagnostic& diagnostic);

// Checks a program without running it (docs/program.md lists every rule):
// names declared once; every register defined once and before use; node
// names known; operand and result counts, `need` length and saved fields
// (present, of the right kind, None only where allowed) as the node's schema
// says; saved references to declared tensors; hooks, functions, leaves and
// outputs declared and used as their kind allows; types where they are
// known (declarations, validate metadata, zeros, and the rules that follow
// from them: add of two types, accumulate_grad into a leaf, output of a
// declared type, sizes fields against the saved tensor they describe).
// Results that are never used are warnings.
std::vector<Diagnostic> verify(const Program& program);

// verify(), raising refgrad::Error with every error (one per line) when there
// is one. Returns the warnings.
std::vector<Diagnostic> check_program(const Program& program);

}  // namespace refgrad
