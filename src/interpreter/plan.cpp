// L3, internal: planning a program before it runs (plan.hpp).
#include "plan.hpp"

#include <algorithm>
#include <span>

#include <fmt/format.h>

namespace refgrad::interpreter {
namespace {

std::string counted(std::size_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

// A run of register indices, checked against the pools (a BoundProgram may
// be built by hand, not only read by the checking bytecode reader).
std::span<const std::uint32_t> register_run(const Bytecode& bytecode, std::uint32_t first, std::uint32_t count) {
  check(std::uint64_t{first} + count <= bytecode.registers.size(), "register run [", first, ", +", count,
        ") is out of range (", bytecode.registers.size(), " entries)");
  const std::span<const std::uint32_t> run(bytecode.registers.data() + first, count);
  for (std::uint32_t reg : run) {
    check(reg == kNoRegister || reg < bytecode.register_names.size(), "register index ", reg,
          " is out of range (", bytecode.register_names.size(), " registers)");
  }
  return run;
}

std::span<const std::uint32_t> operands(const Bytecode& bytecode, const BytecodeInstr& code) {
  return register_run(bytecode, code.first_operand, code.operand_count);
}

std::span<const std::uint32_t> results(const Bytecode& bytecode, const BytecodeInstr& code) {
  return register_run(bytecode, code.first_result, code.result_count);
}

void expect_counts(const BytecodeInstr& code, std::string_view what, std::size_t operand_count,
                   std::size_t result_count) {
  check(code.operand_count == operand_count && code.result_count == result_count, what, " takes ",
        counted(operand_count, "operand"), " and ", counted(result_count, "result"), ", got ", code.operand_count,
        " and ", code.result_count);
}

void expect_index(std::uint32_t index, std::size_t size, std::string_view pool) {
  check(index < size, pool, " index ", index, " is out of range (", size, " entries)");
}

// The saved fields of a Call, CopySlices or CallBackward (none without a block).
std::span<const Attr> attribute_block(const Bytecode& bytecode, const BytecodeInstr& code) {
  if (code.attrs == kNoIndex) return {};
  expect_index(code.attrs, bytecode.attribute_blocks.size(), "attribute block");
  return bytecode.attribute_blocks[code.attrs];
}

// One result per node input, or per element of a Tensor[] input (its length
// read from the call's list_length_field).
void check_result_count(const Bytecode& bytecode, const BytecodeInstr& code, const NodeSchema& schema) {
  const std::optional<std::size_t> results = call_result_count(schema, attribute_block(bytecode, code));
  check(results.has_value(), schema.name, ": field '", schema.list_length_field,
        "' (one entry per element of its Tensor[] input) is missing or not a list");
  const std::string per = schema.list_length_field.empty() ? counted(schema.inputs.size(), "input")
                                                            : counted(*results, "list element");
  check(code.result_count == *results, schema.name, " has ", per, ", so ", counted(*results, "result"), ", got ",
        code.result_count);
}

// The node a Call or CopySlices runs (for CopySlices, the wrapped one), with
// its operand and result counts checked against the schema.
const NodeDef& checked_node(const BoundProgram& program, std::size_t pc) {
  const BytecodeInstr& code = program.bytecode.code[pc];
  const NodeDef* node = program.calls[pc].node;
  check(node != nullptr, "the call is not bound (bind() binds every node call)");
  const NodeSchema& schema = node->schema;
  const std::size_t grads = code.op == Opcode::CopySlices ? 1 : schema.num_grads;
  check_result_count(program.bytecode, code, schema);
  if (grads == kVariadic) {
    check(code.operand_count > 0, schema.name, " takes at least one incoming grad");
  } else {
    check(code.operand_count == grads, code.op == Opcode::CopySlices ? "CopySlices" : schema.name, " takes ",
          counted(grads, "incoming grad"), ", got ", code.operand_count);
  }
  return *node;
}

Need need_mask(const Bytecode& bytecode, const BytecodeInstr& code, std::size_t length) {
  if (code.need == kNoIndex) return Need(length, true);
  expect_index(code.need, bytecode.need_masks.size(), "need mask");
  const Need& need = bytecode.need_masks[code.need];
  check(need.size() == length, "need has ", need.size(), " bits, expected ", length);
  return need;
}

std::vector<std::optional<InputMetadata>> metadata_run(const Bytecode& bytecode, const BytecodeInstr& code) {
  if (code.metadata_count == 0) return {};
  check(std::uint64_t{code.metadata} + code.metadata_count <= bytecode.metadata.size(), "metadata run [",
        code.metadata, ", +", code.metadata_count, ") is out of range (", bytecode.metadata.size(), " entries)");
  const auto first = bytecode.metadata.begin() + code.metadata;
  return {first, first + code.metadata_count};
}

template <class Map>
const typename Map::mapped_type* find_host(const Map& functions, const std::string& name) {
  const auto it = functions.find(name);
  return it == functions.end() ? nullptr : &it->second;
}

HostCall hook_call(const Host& host, const HookDecl& hook) {
  HostCall call;
  switch (hook.kind) {
    case HookKind::TensorPre: call.tensor_pre = find_host(host.tensor_pre_hooks, hook.name); break;
    case HookKind::Pre: call.pre = find_host(host.pre_hooks, hook.name); break;
    case HookKind::Post: call.post = find_host(host.post_hooks, hook.name); break;
    case HookKind::PostAccGrad: call.post_acc_grad = find_host(host.post_acc_grad_hooks, hook.name); break;
  }
  return call;
}

void check_hook_counts(const BytecodeInstr& code, const HookDecl& hook) {
  switch (hook.kind) {
    case HookKind::TensorPre: expect_counts(code, "a tensor_pre hook", 1, 1); break;
    case HookKind::Pre:
      check(code.operand_count == code.result_count, "a pre hook has one result per operand, got ",
            code.operand_count, " operands and ", code.result_count, " results");
      break;
    case HookKind::Post:
      check(code.operand_count >= code.result_count, "a post hook's operands are its ", code.result_count,
            " results' grad_inputs and then grad_outputs, got only ", code.operand_count);
      break;
    case HookKind::PostAccGrad: expect_counts(code, "a post_acc_grad hook", 0, 0); break;
  }
}

// Checks one instruction's shape and fills in what its opcode needs.
InstrPlan plan_instruction(const BoundProgram& program, const Host& host, std::size_t pc) {
  const Bytecode& bytecode = program.bytecode;
  const BytecodeInstr& code = bytecode.code[pc];
  operands(bytecode, code);  // checks the runs, for plan_registers
  results(bytecode, code);
  InstrPlan plan;
  plan.last_read.assign(code.operand_count, false);  // plan_frees marks them
  switch (code.op) {
    case Opcode::Call:
    case Opcode::CopySlices: {
      const NodeDef& node = checked_node(program, pc);
      plan.need = need_mask(bytecode, code, node.schema.inputs.size());
      plan.node_name = node.schema.name;
      break;
    }
    case Opcode::Validate:
      plan.metadata = metadata_run(bytecode, code);
      check(code.operand_count == code.result_count && code.metadata_count == code.operand_count,
            "validate takes one operand, result and metadata per slot, got ", code.operand_count, ", ",
            code.result_count, " and ", code.metadata_count);
      break;
    case Opcode::Add: expect_counts(code, "add", 2, 1); break;
    case Opcode::Zeros:
      expect_counts(code, "zeros", 0, 1);
      plan.metadata = metadata_run(bytecode, code);
      check(plan.metadata.size() == 1 && plan.metadata[0].has_value(), "zeros takes one type");
      break;
    case Opcode::AccumulateGrad:
      expect_counts(code, "accumulate_grad", 1, 0);
      expect_index(code.arg, bytecode.leaves.size(), "leaf");
      break;
    case Opcode::Hook: {
      expect_index(code.arg, bytecode.hooks.size(), "hook");
      const HookDecl& hook = bytecode.hooks[code.arg];
      check_hook_counts(code, hook);
      if (hook.kind == HookKind::PostAccGrad) expect_index(code.leaf, bytecode.leaves.size(), "leaf");
      plan.host = hook_call(host, hook);
      break;
    }
    case Opcode::CallBackward:
      expect_index(code.arg, bytecode.functions.size(), "function");
      plan.need = need_mask(bytecode, code, code.result_count);
      plan.node_name = bytecode.functions[code.arg].name;
      plan.host.function = find_host(host.functions, plan.node_name);
      break;
    case Opcode::Output:
      expect_counts(code, "output", 1, 0);
      expect_index(code.arg, bytecode.outputs.size(), "output");
      break;
    case Opcode::Aten: {
      const BoundAten& call = program.aten.at(pc);
      check(call.op != nullptr, "the ATen op is not bound (bind() binds every aten instruction)");
      const AtenSchema& schema = call.op->schema;
      check(call.operands.size() == code.operand_count, schema.name, ": ", code.operand_count,
            " operands, its arguments read ", call.operands.size());
      if (schema.num_results != kVariadic) {
        check(code.result_count == schema.num_results, schema.name, " has ", counted(schema.num_results, "result"),
              ", got ", code.result_count);
      }
      plan.node_name = schema.name;
      break;
    }
  }
  return plan;
}

// Where each register is defined and last read, and which registers are
// grad inputs (read, never defined, named as a grad declaration).
void plan_registers(Plan& plan, const Bytecode& bytecode, const std::function<std::string(std::size_t)>& label) {
  plan.registers.resize(bytecode.register_names.size());
  for (std::size_t r = 0; r < bytecode.register_names.size(); ++r) {
    plan.register_index.emplace(bytecode.register_names[r], static_cast<std::uint32_t>(r));
  }
  std::vector<std::uint32_t> defined_by_code;
  for (std::size_t pc = 0; pc < bytecode.code.size(); ++pc) {
    const BytecodeInstr& code = bytecode.code[pc];
    for (std::uint32_t reg : operands(bytecode, code)) {
      if (reg != kNoRegister) plan.registers[reg].last_use = pc;
    }
    for (std::uint32_t reg : results(bytecode, code)) {
      if (reg == kNoRegister) continue;
      RegisterPlan& slot = plan.registers[reg];
      if (slot.defined_at != kNever) {
        fail(fmt::format("{}: register %{} is defined a second time (first by instruction {})", label(pc),
                         bytecode.register_names[reg], slot.defined_at));
      }
      slot.defined_at = pc;
      defined_by_code.push_back(reg);
    }
  }
  plan.grad_registers.assign(bytecode.grads.size(), kNoRegister);
  for (std::size_t g = 0; g < bytecode.grads.size(); ++g) {
    const auto it = plan.register_index.find(bytecode.grads[g].name);
    if (it == plan.register_index.end() || plan.registers[it->second].defined_at != kNever) continue;
    plan.registers[it->second].grad = g;
    plan.grad_registers[g] = it->second;
    plan.definition_order.push_back(it->second);
  }
  plan.definition_order.insert(plan.definition_order.end(), defined_by_code.begin(), defined_by_code.end());
}

// Each register is freed after the instruction that reads it last; a result
// nobody reads, right after the instruction that makes it.
void plan_frees(Plan& plan, const Bytecode& bytecode) {
  for (std::uint32_t reg = 0; reg < plan.registers.size(); ++reg) {
    const RegisterPlan& slot = plan.registers[reg];
    const bool defined = slot.defined_at != kNever || slot.grad;
    if (!defined) continue;
    if (slot.last_use == kNever) {
      if (slot.defined_at != kNever) plan.instrs[slot.defined_at].dead.push_back(reg);
    } else if (slot.defined_at == kNever || slot.last_use > slot.defined_at) {
      plan.instrs[slot.last_use].dead.push_back(reg);
    }
  }
  for (std::size_t pc = 0; pc < bytecode.code.size(); ++pc) {
    const auto read = operands(bytecode, bytecode.code[pc]);
    InstrPlan& instr = plan.instrs[pc];
    for (std::uint32_t reg : instr.dead) {
      const auto last = std::find(read.rbegin(), read.rend(), reg);  // `add %a, %a` reads %a twice
      if (last != read.rend()) instr.last_read[static_cast<std::size_t>(read.rend() - last) - 1] = true;
    }
  }
}

// The node whose outputs a `validate` checks: the one whose call defined its
// first defined operand, looking through the hooks that stand between a node
// and its validate (a post hook's result i replaces the node's result i).
// "" (the roots' form) when no node call defined it.
std::string validate_node(const Plan& plan, const Bytecode& bytecode, const BytecodeInstr& validate) {
  std::uint32_t reg = kNoRegister;
  for (std::uint32_t operand : operands(bytecode, validate)) {
    if (operand != kNoRegister) {
      reg = operand;
      break;
    }
  }
  std::size_t before = bytecode.code.size();  // definitions go strictly backwards, so the walk ends
  while (reg != kNoRegister && plan.registers[reg].defined_at < before) {
    before = plan.registers[reg].defined_at;
    const BytecodeInstr& code = bytecode.code[before];
    switch (code.op) {
      case Opcode::Call: return bytecode.nodes[code.arg];
      case Opcode::CopySlices: return "CopySlices";
      case Opcode::CallBackward: return bytecode.functions[code.arg].name;
      case Opcode::Hook: {
        const auto defined = results(bytecode, code);
        const auto slot = static_cast<std::size_t>(std::find(defined.begin(), defined.end(), reg) - defined.begin());
        reg = operands(bytecode, code)[slot];
        break;
      }
      default: return "";
    }
  }
  return "";
}

}  // namespace

Plan make_plan(const BoundProgram& program, const Host& host, bool keep_values,
               const std::function<std::string(std::size_t pc)>& label) {
  const Bytecode& bytecode = program.bytecode;
  check(program.calls.size() == bytecode.code.size() && program.aten.size() == bytecode.code.size() &&
            program.backward_saved.size() == bytecode.code.size() &&
            program.saved_values.size() == bytecode.saved.size() &&
            program.grad_defaults.size() == bytecode.grads.size() &&
            program.leaf_grads.size() == bytecode.leaves.size(),
        "the program is not bound: use bind() to make a BoundProgram");
  Plan plan;
  plan.instrs.reserve(bytecode.code.size());
  for (std::size_t pc = 0; pc < bytecode.code.size(); ++pc) {
    try {
      plan.instrs.push_back(plan_instruction(program, host, pc));
    } catch (const Error& error) {
      fail(fmt::format("{}: {}", label(pc), error.what()));
    }
  }
  plan_registers(plan, bytecode, label);
  if (!keep_values) plan_frees(plan, bytecode);
  for (std::size_t pc = 0; pc < bytecode.code.size(); ++pc) {
    const BytecodeInstr& code = bytecode.code[pc];
    if (code.op == Opcode::Validate) plan.instrs[pc].validate_node = validate_node(plan, bytecode, code);
  }
  return plan;
}

}  // namespace refgrad::interpreter
