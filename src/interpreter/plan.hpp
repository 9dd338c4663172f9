// L3, internal: what the machine works out about a program once, when it is
// made, so that running an instruction does no lookup by name: register
// liveness, the node each `validate` names in its errors, need masks, and
// the host functions that hooks and call_backward call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "refgrad/interpreter.hpp"

namespace refgrad::interpreter {

inline constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();

// The host function an instruction calls, resolved by name; every pointer is
// null when the host has none (the instruction raises when it runs).
struct HostCall {
  const TensorPreHook* tensor_pre = nullptr;
  const PreHook* pre = nullptr;
  const PostHook* post = nullptr;
  const PostAccGradHook* post_acc_grad = nullptr;
  const BackwardFunction* function = nullptr;
};

struct InstrPlan {
  Need need;                                          // Call, CopySlices, CallBackward (all 1 when not written)
  std::vector<std::optional<InputMetadata>> metadata;  // Validate, Zeros
  std::string validate_node;  // Validate: the node its messages name; "" for the roots' form
  std::string node_name;      // what a node breakpoint matches: the (wrapped) node or the function
  HostCall host;              // Hook, CallBackward
  std::vector<std::uint32_t> dead;  // registers to free once this instruction has run
  // Per operand: the register's last read (it is dead after this
  // instruction), so its tensor is moved out rather than copied.
  std::vector<bool> last_read;
};

struct RegisterPlan {
  std::size_t defined_at = kNever;  // the defining instruction; kNever for a grad input
  std::size_t last_use = kNever;    // the last instruction reading it; kNever: never read
  std::optional<std::size_t> grad;  // the grad declaration it holds, for a grad input
};

struct Plan {
  std::vector<InstrPlan> instrs;
  std::vector<RegisterPlan> registers;
  std::vector<std::uint32_t> definition_order;  // grad inputs first, then by defining instruction
  std::vector<std::uint32_t> grad_registers;    // per grad declaration: its register, kNoRegister if unread
  std::map<std::string, std::uint32_t, std::less<>> register_index;
};

// Checks what the machine needs to run the program safely (operand and
// result counts, indices, need lengths) and plans it. Errors name the
// instruction with `label(pc)`.
Plan make_plan(const BoundProgram& program, const Host& host, bool keep_values,
               const std::function<std::string(std::size_t pc)>& label);

}  // namespace refgrad::interpreter
