// L2: the loaded form of a program — flat arrays of small integers plus
// constant pools — its binary file form, and binding saved fields to each
// node's typed struct.
//
// assemble() lowers a Program (names) to Bytecode (indices); disassemble()
// lifts it back, so that disassemble(assemble(p)) == p. The binary file is
// Bytecode written little-endian after a magic and version header, with a
// checksum; read_bytecode checks every index and length, so a corrupt or
// hostile file gives a clear error and never reads out of bounds.
// docs/program.md describes the file layout byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "refgrad/program.hpp"

namespace refgrad {

// "No register": an undefined operand (`none`) or a result not computed (`_`).
inline constexpr std::uint32_t kNoRegister = 0xFFFFFFFFu;
// "No pool entry": an instruction that does not use that field.
inline constexpr std::uint32_t kNoIndex = 0xFFFFFFFFu;

// One instruction: an opcode and small integers. Operands and results are
// runs [first, first + count) of Bytecode::registers.
struct BytecodeInstr {
  Opcode op = Opcode::Call;
  std::uint32_t first_operand = 0, operand_count = 0;
  std::uint32_t first_result = 0, result_count = 0;
  // Call, CopySlices, Aten: index into Bytecode::nodes (Aten: the op's name, "aten.mul.Tensor").
  // AccumulateGrad: leaf index; Hook: hook index; CallBackward: function index; Output: output index.
  std::uint32_t arg = kNoIndex;
  std::uint32_t leaf = kNoIndex;       // Hook of kind post_acc_grad: leaf index
  std::uint32_t attrs = kNoIndex;      // Call, CopySlices, CallBackward, Aten: index into attribute_blocks
  std::uint32_t need = kNoIndex;       // Call, CopySlices, CallBackward: index into need_masks
  std::uint32_t metadata = kNoIndex;   // Validate, Zeros: first of a run in Bytecode::metadata
  std::uint32_t metadata_count = 0;    // the run's length (Validate: one per slot; Zeros: 1)
  std::uint32_t origin = kNoIndex;     // index into strings
  bool operator==(const BytecodeInstr& other) const = default;
};

// What BytecodeInstr::arg indexes, by opcode: Call, CopySlices and Aten a node (an op),
// AccumulateGrad a leaf, Hook a hook, CallBackward a function, Output an
// output; Validate, Add and Zeros have no arg (kNoIndex).
enum class ArgPool : std::uint8_t { None, Nodes, Leaves, Hooks, Functions, Outputs };
ArgPool arg_pool(Opcode op);

struct Bytecode {
  std::string name;
  std::vector<BytecodeInstr> code;
  std::vector<std::uint32_t> registers;       // operand and result runs; kNoRegister for none / _
  std::vector<std::string> register_names;    // register index -> name, for disassembly and messages
  // Constant pools.
  std::vector<std::string> strings;                       // origins
  std::vector<std::string> nodes;                         // node names, each once
  std::vector<std::vector<Attr>> attribute_blocks;        // saved fields in schema order
  std::vector<std::vector<bool>> need_masks;
  std::vector<std::optional<InputMetadata>> metadata;     // runs, one entry per validate slot
  // Declarations, as in Program (their inline tensors included).
  std::vector<GradDecl> grads;
  std::vector<SavedDecl> saved;
  std::vector<LeafDecl> leaves;
  std::vector<HookDecl> hooks;
  std::vector<FunctionDecl> functions;
  std::vector<OutputDecl> outputs;
};

// Raises for what cannot be lowered (an undeclared leaf, hook, function or
// output, an unknown node); run verify() first for clear messages on the rest.
Bytecode assemble(const Program& program);
Program disassemble(const Bytecode& bytecode);

// --------------------------------------------------------------- binary file ---

// "RGBC" + format version + little-endian sections + a CRC-32 of everything
// before it. write_bytecode(b) read back by read_bytecode gives b again.
inline constexpr std::uint32_t kBytecodeVersion = 1;
std::string write_bytecode(const Bytecode& bytecode);  // the file's bytes
// `origin` names the data in errors ("model.rgbc: ..."). Checks the header,
// the checksum, every length against the bytes left, every index against its
// pool, every enum value, and that tensors' byte counts match their types.
Bytecode read_bytecode(std::span<const std::byte> bytes, std::string_view origin = "<bytes>");
bool is_bytecode(std::span<const std::byte> bytes);  // starts with the magic
// Rewrites the trailing checksum of `bytes` to match its contents (nothing
// when it is too short to hold one). For fuzzing and for tests of hostile
// files that carry a valid checksum.
void reseal_bytecode(std::vector<std::byte>& bytes);
// The file's checksum: CRC-32 (ISO-HDLC, as zlib's crc32), "123456789" -> 0xCBF43926.
std::uint32_t checksum_crc32(std::span<const std::byte> bytes);

// ------------------------------------------------------------------ binding ---

// Tensors for a program's declarations by sigiled name: "$x" saved tensors,
// "%g0" incoming grads, "@w" leaves' initial .grad.
using TensorMap = std::map<std::string, Tensor>;

// A node call ready to run: the node's definition and its saved fields bound
// to its typed struct. For CopySlices, `node` is the wrapped node and base
// and view its geometries.
struct BoundCall {
  const NodeDef* node = nullptr;
  BoundSaved saved;
  TensorGeometry base, view;  // CopySlices only
  // A node computes_in_one_kernel(): its float16/bfloat16 saved tensors are bound in float32, and
  // the dtype they were stored in (when any was) is the one its results are rounded back to.
  bool one_kernel = false;
  std::optional<DType> stored_dtype;
};

// An ATen op call ready to run: the op, and its arguments in schema order with every value in place,
// the saved tensors among its operands included; `operands[i]` is the argument (and, for a list, the
// element) operand i fills from its register at run time, or nullopt for a saved tensor, already in place.
struct BoundAten {
  const AtenOpDef* op = nullptr;
  std::vector<FieldValue> arguments;
  struct Slot {
    std::size_t argument = 0;
    std::optional<std::size_t> element;  // the list element, for a Tensor[] or Tensor?[] argument
    bool from_register = true;
  };
  std::vector<Slot> operands;
};

struct BoundProgram {
  Bytecode bytecode;
  std::vector<Tensor> saved_values;             // per saved declaration
  std::vector<std::optional<Tensor>> grad_defaults;  // per grad declaration: inline or given value
  std::vector<std::optional<Tensor>> leaf_grads;     // per leaf: initial .grad
  std::vector<BoundCall> calls;                 // per instruction (empty for other opcodes)
  std::vector<BoundAten> aten;                  // per instruction (empty for other opcodes)
  std::vector<std::vector<Tensor>> backward_saved;  // per instruction: CallBackward's saved tensors
};

// Resolves every saved tensor (inline value, else tensors["$name"]), checks
// it against its declared type (dtype and sizes; a device other than CPU is
// metadata, DESIGN.md), and binds every call's saved fields with the node's
// bind(). Also picks up "%name" grads and "@name" initial .grads from
// `tensors` when present. Errors name the declaration or the instruction.
BoundProgram bind(Bytecode bytecode, const TensorMap& tensors = {});

}  // namespace refgrad
