// L3: the interpreter — a Machine runs a bound program one instruction at a
// time (include/refgrad/interpreter.hpp; docs/program.md, "What each
// instruction does", is the semantics).
//
// Every instruction runs in three parts: take_operands() gathers its
// operands (moving a tensor out of its register at the register's last read,
// copying it otherwise), dispatch() computes the results from them, and
// commit() writes the results (registers, a leaf's .grad, an output), frees
// the registers that are dead from then on and moves to the next
// instruction. An error or a non-finite value found before commit() gives
// the operands back, leaving the machine as it was, at that instruction.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "plan.hpp"
#include "refgrad/interpreter.hpp"
#include "refgrad/ops.hpp"

namespace refgrad {

using interpreter::InstrPlan;
using interpreter::kNever;
using interpreter::Plan;

namespace {

using Clock = std::chrono::steady_clock;

std::size_t bytes_of(const Tensor& tensor) {
  return tensor.defined() ? static_cast<std::size_t>(tensor.numel()) * element_size(tensor.dtype()) : 0;
}

bool holds_tensor(const std::optional<Tensor>& grad) { return grad && grad->defined(); }

ValueInfo info_of(const std::optional<Tensor>& grad) {
  if (!holds_tensor(grad)) return {};
  return {true, type_of(*grad)};
}

struct NonFiniteCount {
  std::int64_t nan = 0, inf = 0;
};

template <class T>
NonFiniteCount count_non_finite_of(const Tensor& contiguous_tensor) {
  NonFiniteCount count;
  const T* data = contiguous_tensor.data_ptr<T>();
  for (std::int64_t i = 0; i < contiguous_tensor.numel(); ++i) {
    if (std::isnan(data[i])) ++count.nan;
    else if (std::isinf(data[i])) ++count.inf;
  }
  return count;
}

NonFiniteCount count_non_finite(const Tensor& tensor) {
  switch (tensor.dtype()) {
    case DType::Float32: return count_non_finite_of<float>(contiguous(tensor));
    case DType::Float64: return count_non_finite_of<double>(contiguous(tensor));
    // float16 and bfloat16 widen to float exactly, infinities and NaN included.
    case DType::Float16:
    case DType::BFloat16: return count_non_finite_of<float>(to(tensor, DType::Float32));
    case DType::ComplexHalf:
    case DType::ComplexFloat:
    case DType::ComplexDouble: {  // an element counts once, as NaN when either part is NaN
      const Tensor wide = to(tensor, DType::ComplexDouble).contiguous();
      const auto* data = static_cast<const std::complex<double>*>(wide.raw_data());
      NonFiniteCount count;
      for (std::int64_t i = 0; i < wide.numel(); ++i) {
        if (std::isnan(data[i].real()) || std::isnan(data[i].imag())) ++count.nan;
        else if (std::isinf(data[i].real()) || std::isinf(data[i].imag())) ++count.inf;
      }
      return count;
    }
    default: return {};  // integers and bool are always finite
  }
}

// "%3 (f32[3]: 1 NaN, 0 Inf)" when `grad` holds a non-finite value.
std::optional<std::string> non_finite_in(const std::optional<Tensor>& grad, const std::string& name) {
  if (!holds_tensor(grad)) return std::nullopt;
  const NonFiniteCount count = count_non_finite(*grad);
  if (count.nan == 0 && count.inf == 0) return std::nullopt;
  return fmt::format("{} ({}: {} NaN, {} Inf)", name, to_string(type_of(*grad)), count.nan, count.inf);
}

// Input-buffer accumulation: an undefined operand is skipped.
std::optional<Tensor> add_grads(const std::optional<Tensor>& a, const std::optional<Tensor>& b) {
  if (!a) return b;
  if (!b) return a;
  return add(*a, *b);
}

Tensor zeros_of(const InputMetadata& metadata) {
  return zeros(metadata.shape, metadata.grad_dtype.value_or(metadata.dtype));
}

// A node's or host function's grads, one per result slot.
Grads expect_grads(Grads grads, std::size_t count, std::string_view who) {
  check(grads.size() == count, who, " returned ", grads.size(), " gradients, expected ", count);
  return grads;
}

// A hook's grads: nullopt (Python's None) leaves them as they were.
Grads replaced(std::optional<Grads> returned, Grads unchanged, std::string_view who) {
  if (!returned) return unchanged;
  return expect_grads(std::move(*returned), unchanged.size(), who);
}

// dtype and sizes as declared; the device is metadata (bind() does the same).
void check_declared_type(const Tensor& value, const TensorType& type, const std::string& what) {
  check(value.defined(), what, ": the value is an undefined tensor");
  check(value.dtype() == type.dtype && value.sizes() == type.sizes, what, " is declared ",
        to_string(TensorType{type.dtype, type.sizes}), " but the value is ",
        to_string(TensorType{value.dtype(), value.sizes()}));
}

template <class Decl>
std::size_t declaration_index(const std::vector<Decl>& decls, std::string_view name, std::string_view kind) {
  const auto it = std::find_if(decls.begin(), decls.end(), [&](const Decl& decl) { return decl.name == name; });
  check(it != decls.end(), "the program declares no ", kind, name);
  return static_cast<std::size_t>(it - decls.begin());
}

}  // namespace

// ------------------------------------------------------------------- state ---

struct Machine::Impl {
  BoundProgram bound;
  Host host;
  MachineOptions options;
  Program program;  // the readable form, for instruction texts
  Plan plan;
  // Inputs, kept across reset(): per grad declaration, set_grad's value or its default.
  std::vector<std::optional<Tensor>> grad_inputs;
  std::vector<std::optional<Tensor>> initial_leaf_grads;

  std::size_t pc = 0;
  std::vector<std::optional<Tensor>> registers;  // nullopt: holds nothing; an undefined Tensor: `none`
  std::vector<std::optional<Tensor>> leaf_grads;  // nullopt: None
  std::vector<std::optional<Tensor>> outputs;     // nullopt: not written
  std::vector<std::size_t> held_bytes;  // per register: the bytes of its value
  std::size_t register_bytes = 0, peak_register_bytes = 0;
  Grads inputs;  // the operands of the instruction being run (kept to reuse its capacity)
  std::vector<TraceEntry> trace;
  std::size_t resume_pc = kNever;  // run_until() stopped before this instruction at a breakpoint

  Impl(BoundProgram program_in, Host host_in, MachineOptions options_in)
      : bound(std::move(program_in)),
        host(std::move(host_in)),
        options(options_in),
        program(disassemble(bound.bytecode)),
        plan(interpreter::make_plan(bound, host, options.keep_values, [this](std::size_t at) { return label(at); })),
        grad_inputs(bound.grad_defaults),
        initial_leaf_grads(bound.leaf_grads) {
    if (options.rounding_noise) {
      check(options.rounding_noise->unit_roundoff.size() == bound.bytecode.code.size(), "Machine: the rounding noise has ",
            options.rounding_noise->unit_roundoff.size(), " unit roundoffs for a program of ", bound.bytecode.code.size(),
            " instructions (make it with rounding_noise_of(program) of this very program)");
    }
    reset();
  }

  const BytecodeInstr& instruction() const { return bound.bytecode.code[pc]; }
  std::uint32_t operand_register(const BytecodeInstr& code, std::size_t i) const {
    return bound.bytecode.registers[code.first_operand + i];
  }
  std::uint32_t result_register(const BytecodeInstr& code, std::size_t i) const {
    return bound.bytecode.registers[code.first_result + i];
  }
  const std::string& register_name(std::uint32_t reg) const { return bound.bytecode.register_names[reg]; }

  // "instruction 3 (%4 = add %1, %2)"
  std::string label(std::size_t at) const {
    return fmt::format("instruction {} ({})", at, print_instruction(program.code[at]));
  }

  void reset() {
    pc = 0;
    resume_pc = kNever;
    registers.assign(bound.bytecode.register_names.size(), std::nullopt);
    held_bytes.assign(registers.size(), 0);
    register_bytes = peak_register_bytes = 0;
    leaf_grads = initial_leaf_grads;
    outputs.assign(bound.bytecode.outputs.size(), std::nullopt);
    trace.clear();
    for (std::size_t g = 0; g < grad_inputs.size(); ++g) {
      const std::uint32_t reg = plan.grad_registers[g];
      if (grad_inputs[g] && reg != kNoRegister) write(reg, *grad_inputs[g]);
    }
  }

  void check_not_started(std::string_view what) const {
    check(pc == 0, what, ": the machine has run up to instruction ", pc, "; reset() it first");
  }

  // ------------------------------------------------------------- registers ---

  // The bytes a register holds are counted from write() to free(), also
  // while take_operands() has moved its tensor out for its last read.
  void write(std::uint32_t reg, Tensor value) {
    free(reg);
    held_bytes[reg] = bytes_of(value);
    register_bytes += held_bytes[reg];
    peak_register_bytes = std::max(peak_register_bytes, register_bytes);
    registers[reg] = std::move(value);
  }

  void free(std::uint32_t reg) {
    register_bytes -= held_bytes[reg];
    held_bytes[reg] = 0;
    registers[reg].reset();
  }

  std::string why_empty(std::uint32_t reg) const {
    const interpreter::RegisterPlan& slot = plan.registers[reg];
    const std::string& name = register_name(reg);
    if (slot.grad) {
      return fmt::format("grad %{} has no value: give it with set_grad (refgrad run: --grad), or a default value in "
                         "its declaration", name);
    }
    if (slot.defined_at == kNever) return fmt::format("register %{} is never defined", name);
    if (slot.defined_at >= pc) {
      return fmt::format("register %{} is read before instruction {} defines it", name, slot.defined_at);
    }
    return fmt::format("register %{} holds no value", name);
  }

  // Fills `inputs` (nullopt for `none` and for a register holding an
  // undefined tensor). Raises before changing anything when a register holds
  // nothing.
  void take_operands(const BytecodeInstr& code, const InstrPlan& step) {
    for (std::size_t i = 0; i < code.operand_count; ++i) {
      const std::uint32_t reg = operand_register(code, i);
      if (reg != kNoRegister && !registers[reg] && !is_saved_operand(code, i)) fail(why_empty(reg));
    }
    inputs.resize(code.operand_count);
    for (std::size_t i = 0; i < code.operand_count; ++i) {
      const std::uint32_t reg = operand_register(code, i);
      if (reg == kNoRegister || is_saved_operand(code, i) || !registers[reg]->defined()) {
        inputs[i].reset();
      } else if (step.last_read[i]) {
        inputs[i] = std::move(*registers[reg]);
        registers[reg].reset();
      } else {
        inputs[i] = *registers[reg];
      }
    }
  }

  // An aten instruction's operand that names a saved tensor ("$x"): bound with the program, no register.
  bool is_saved_operand(const BytecodeInstr& code, std::size_t i) const {
    return code.op == Opcode::Aten && !bound.aten[pc].operands[i].from_register;
  }

  void give_back_operands(const BytecodeInstr& code, const InstrPlan& step) {
    for (std::size_t i = 0; i < code.operand_count; ++i) {
      const std::uint32_t reg = operand_register(code, i);
      if (step.last_read[i] && reg != kNoRegister && !registers[reg]) {
        registers[reg] = std::move(inputs[i]).value_or(Tensor());
      }
    }
  }

  // "f32[2,3], none": the operands as an error message shows them.
  std::string describe_operands(const BytecodeInstr& code) const {
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < code.operand_count; ++i) {
      const std::uint32_t reg = operand_register(code, i);
      if (reg != kNoRegister && !registers[reg]) parts.emplace_back("no value");
      else if (reg == kNoRegister || !registers[reg]->defined()) parts.emplace_back("none");
      else parts.push_back(to_string(type_of(*registers[reg])));
    }
    return fmt::format("{}", fmt::join(parts, ", "));
  }

  // ----------------------------------------------------------- instructions ---

  // The instruction's results from `inputs`, one per result slot
  // (AccumulateGrad: the leaf's new .grad; Output: the value stored).
  // Changes no state.
  Grads dispatch(const BytecodeInstr& code, const InstrPlan& step) {
    switch (code.op) {
      case Opcode::Call: {
        const BoundCall& call = bound.calls[pc];
        check_complex_supported(call.node->schema, inputs);
        if (call.one_kernel) return call_one_kernel(code, call, step);
        return expect_grads(call.node->apply(inputs, call.saved.get(), step.need), code.result_count,
                            call.node->schema.name);
      }
      case Opcode::CopySlices: {
        const BoundCall& call = bound.calls[pc];
        check_complex_supported(call.node->schema, inputs);
        return copy_slices(inputs, call.base, call.view, *call.node, call.saved, step.need);
      }
      case Opcode::Validate: return validate_outputs(inputs, step.metadata, step.validate_node);
      case Opcode::Add: return {add_grads(inputs[0], inputs[1])};
      case Opcode::Zeros: return {zeros_of(*step.metadata[0])};
      case Opcode::AccumulateGrad: {
        const Tensor updated = accumulate_grad(leaf_grads[code.arg], inputs[0].value_or(Tensor()));
        return {updated.defined() ? std::optional<Tensor>(updated) : std::nullopt};
      }
      case Opcode::Hook: return call_hook(code, step.host);
      case Opcode::CallBackward: return call_backward(code, step);
      case Opcode::Output: return {inputs[0]};
      case Opcode::Aten: return call_aten(code, bound.aten[pc]);
    }
    fail(fmt::format("unknown opcode {}", static_cast<int>(code.op)));
  }

  // The op on its bound arguments, with each register operand put in its place.
  Grads call_aten(const BytecodeInstr& code, const BoundAten& call) {
    std::vector<FieldValue> arguments = call.arguments;
    for (std::size_t i = 0; i < call.operands.size(); ++i) {
      const BoundAten::Slot& slot = call.operands[i];
      if (!slot.from_register) continue;
      FieldValue& argument = arguments[slot.argument];
      if (!slot.element) {
        argument = inputs[i] ? FieldValue(*inputs[i]) : FieldValue(None{});
      } else if (auto* list = std::get_if<TensorList>(&argument)) {
        check(inputs[i].has_value(), call.op->schema.name, ": element ", *slot.element, " of a Tensor[] is none");
        (*list)[*slot.element] = *inputs[i];
      } else {
        std::get<std::vector<OptionalTensor>>(argument)[*slot.element] = inputs[i];
      }
    }
    const AtenResults results = call.op->run(AtenArgs(call.op->schema.name, arguments));
    return expect_grads(Grads(results.begin(), results.end()), code.result_count, call.op->schema.name);
  }

  // A node ATen computes as one kernel (computes_in_one_kernel): float16/bfloat16 grads are read into
  // float32 (its saved tensors already were, when bound), the node computes there, and its results are
  // rounded back once to the dtype its inputs were stored in.
  Grads call_one_kernel(const BytecodeInstr& code, const BoundCall& call, const InstrPlan& step) {
    std::optional<DType> stored = call.stored_dtype;
    Grads grads = inputs;
    for (std::optional<Tensor>& grad : grads) {
      if (!grad || !grad->defined() || (grad->dtype() != DType::Float16 && grad->dtype() != DType::BFloat16)) continue;
      if (!stored) stored = grad->dtype();
      grad = to(*grad, DType::Float32);
    }
    Grads results =
        expect_grads(call.node->apply(grads, call.saved.get(), step.need), code.result_count, call.node->schema.name);
    if (!stored) return results;
    for (std::optional<Tensor>& result : results) {
      if (result && result->defined() && result->dtype() == DType::Float32) result = to(*result, *stored);
    }
    return results;
  }

  Grads call_hook(const BytecodeInstr& code, const interpreter::HostCall& call) {
    const HookDecl& hook = bound.bytecode.hooks[code.arg];
    const std::string who = fmt::format("{} hook &{}", to_string(hook.kind), hook.name);
    const auto missing = [&] { fail(fmt::format("the host has no {} (Host::{}_hooks)", who, to_string(hook.kind))); };
    switch (hook.kind) {
      case HookKind::TensorPre: {
        if (!call.tensor_pre) missing();
        const std::optional<Tensor> result = (*call.tensor_pre)(inputs[0].value_or(Tensor()));
        return {result ? result : inputs[0]};
      }
      case HookKind::Pre: {
        if (!call.pre) missing();
        return replaced((*call.pre)(inputs), inputs, who);
      }
      case HookKind::Post: {
        if (!call.post) missing();
        const Grads grad_inputs(inputs.begin(), inputs.begin() + code.result_count);
        const Grads grad_outputs(inputs.begin() + code.result_count, inputs.end());
        return replaced((*call.post)(grad_inputs, grad_outputs), grad_inputs, who);
      }
      case HookKind::PostAccGrad: {  // its one result: the leaf's .grad after the hook (commit writes it)
        if (!call.post_acc_grad) missing();
        const LeafDecl& leaf = bound.bytecode.leaves[code.leaf];
        std::optional<Tensor> grad = leaf_grads[code.leaf];
        (*call.post_acc_grad)(leaf.name, grad);
        if (grad && !grad->defined()) grad.reset();
        if (grad) check_declared_type(*grad, leaf.type, fmt::format("{} set @{}.grad", who, leaf.name));
        return {grad};
      }
    }
    fail("unknown hook kind");
  }

  Grads call_backward(const BytecodeInstr& code, const InstrPlan& step) {
    check(step.host.function != nullptr, "the host has no function &", step.node_name, " (Host::functions)");
    Grads grads = (*step.host.function)(bound.backward_saved[pc], step.need, inputs);
    check(grads.size() == code.result_count, "function ", step.node_name,
          " returned an incorrect number of gradients (expected ", code.result_count, ", got ", grads.size(), ")");
    return grads;
  }

  // The leaf whose .grad the instruction writes (accumulate_grad, a post_acc_grad hook), or kNoIndex.
  std::uint32_t leaf_written(const BytecodeInstr& code) const {
    if (code.op == Opcode::AccumulateGrad) return code.arg;
    if (code.op == Opcode::Hook && bound.bytecode.hooks[code.arg].kind == HookKind::PostAccGrad) return code.leaf;
    return kNoIndex;
  }

  // The first value the instruction made that is NaN or Inf, described.
  std::optional<std::string> find_non_finite(const BytecodeInstr& code, const Grads& results) const {
    if (const std::uint32_t leaf = leaf_written(code); leaf != kNoIndex) {
      return non_finite_in(results[0], "@" + bound.bytecode.leaves[leaf].name);
    }
    if (code.op == Opcode::Output) return std::nullopt;  // a register's value, checked when it was made
    for (std::size_t i = 0; i < results.size(); ++i) {
      const std::uint32_t reg = result_register(code, i);
      if (reg == kNoRegister) continue;
      if (auto found = non_finite_in(results[i], "%" + register_name(reg))) return found;
    }
    return std::nullopt;
  }

  void commit(const BytecodeInstr& code, Grads& results) {
    if (const std::uint32_t leaf = leaf_written(code); leaf != kNoIndex) {
      leaf_grads[leaf] = std::move(results[0]);
    } else if (code.op == Opcode::Output) {
      outputs[code.arg] = results[0].value_or(Tensor());
    } else {
      for (std::size_t i = 0; i < results.size(); ++i) {
        const std::uint32_t reg = result_register(code, i);
        if (reg != kNoRegister) write(reg, std::move(results[i]).value_or(Tensor()));
      }
    }
    for (std::uint32_t reg : plan.instrs[pc].dead) free(reg);
    inputs.clear();
    ++pc;
  }

  void record_trace(const Grads& results, Clock::duration time) {
    TraceEntry entry;
    entry.pc = pc;
    entry.text = print_instruction(program.code[pc]);
    for (const std::optional<Tensor>& input : inputs) entry.inputs.push_back(info_of(input));
    for (const std::optional<Tensor>& result : results) entry.outputs.push_back(info_of(result));
    entry.time = std::chrono::duration_cast<std::chrono::nanoseconds>(time);
    trace.push_back(std::move(entry));
  }

  // Under rounding noise, the results of a validate that cast them to a narrower dtype as captured round
  // once more, as the cast did (RoundingNoise::casts): relatively, and near 0 by half the dtype's smallest
  // subnormal. In the float64 run the cast itself changes nothing.
  void round_casts(Grads& results) const {
    const RoundingNoise& rounding = *options.rounding_noise;
    const auto casts = rounding.casts.find(pc);
    if (casts == rounding.casts.end()) return;
    for (std::size_t i = 0; i < results.size() && i < casts->second.size(); ++i) {
      const std::optional<DType>& dtype = casts->second[i];
      if (!dtype || !results[i] || !results[i]->defined()) continue;
      const RoundingNoiseScope cast(splitmix64(rounding.seed ^ splitmix64(pc) ^ splitmix64(~i)),
                                    rounding.scale * unit_roundoff(*dtype),
                                    rounding.scale * smallest_subnormal(*dtype) / 2);
      results[i] = with_rounding_noise(results[i]->clone());
    }
  }

  std::string error_message(std::string_view what) const {
    const BytecodeInstr& code = instruction();
    if (code.operand_count == 0) return fmt::format("{}: {}", label(pc), what);
    return fmt::format("{}: {}; operands: {}", label(pc), what, describe_operands(code));
  }

  // Runs the instruction at pc. Returns whether it made a non-finite value
  // (looked for only under check_finite or `stop_on_non_finite`; check_finite
  // without it raises instead, leaving the machine at the instruction).
  bool execute(bool stop_on_non_finite) {
    const BytecodeInstr& code = instruction();
    const InstrPlan& step = plan.instrs[pc];
    try {
      take_operands(code, step);
    } catch (const Error& error) {
      fail(error_message(error.what()));
    }
    const Clock::time_point start = options.trace ? Clock::now() : Clock::time_point{};
    Grads results;
    try {
      const MemoryLimitScope limit(options.memory_limit.value_or(memory_limit()));
      const NumThreadsScope threads(options.threads.value_or(num_threads()));
      std::optional<RoundingNoiseScope> noise;
      if (const std::optional<RoundingNoise>& rounding = options.rounding_noise) {
        noise.emplace(splitmix64(rounding->seed ^ splitmix64(pc)), rounding->scale * rounding->unit_roundoff[pc]);
      }
      results = dispatch(code, step);
      if (noise) round_casts(results);
    } catch (const std::exception& error) {
      give_back_operands(code, step);
      fail(error_message(error.what()));
    } catch (...) {
      give_back_operands(code, step);
      fail(error_message("an exception that is not a std::exception"));
    }
    const Clock::duration time = options.trace ? Clock::now() - start : Clock::duration{};
    std::optional<std::string> non_finite;
    if (options.check_finite || stop_on_non_finite) non_finite = find_non_finite(code, results);
    if (non_finite && !stop_on_non_finite) {
      give_back_operands(code, step);
      fail(fmt::format("{}: produced a non-finite value in {}", label(pc), *non_finite));
    }
    if (options.trace) record_trace(results, time);
    commit(code, results);
    resume_pc = kNever;
    return non_finite.has_value();
  }

  // Runs until `stop_before(pc)` or, with `stop_on_non_finite`, after an
  // instruction that made a non-finite value. Resuming at the instruction it
  // last stopped before runs that instruction first.
  template <class StopBefore>
  StopReason run_until(const StopBefore& stop_before, bool stop_on_non_finite) {
    bool resuming = resume_pc == pc;
    while (pc < bound.bytecode.code.size()) {
      if (!resuming && stop_before(pc)) {
        resume_pc = pc;
        return StopReason::Breakpoint;
      }
      resuming = false;
      if (execute(stop_on_non_finite)) return StopReason::NonFinite;
    }
    return StopReason::Finished;
  }
};

// ----------------------------------------------------------------- machine ---

Machine::Machine(BoundProgram program, Host host, MachineOptions options)
    : impl_(std::make_unique<Impl>(std::move(program), std::move(host), options)) {}
Machine::~Machine() = default;
Machine::Machine(Machine&&) noexcept = default;
Machine& Machine::operator=(Machine&&) noexcept = default;

void Machine::set_grad(std::string_view name, const Tensor& value) {
  Impl& m = *impl_;
  const std::size_t g = declaration_index(m.bound.bytecode.grads, name, "grad %");
  m.check_not_started("set_grad");
  check_declared_type(value, m.bound.bytecode.grads[g].type, fmt::format("set_grad: grad %{}", name));
  m.grad_inputs[g] = value;
  m.reset();
}

void Machine::set_leaf_grad(std::string_view name, const std::optional<Tensor>& grad) {
  Impl& m = *impl_;
  const std::size_t l = declaration_index(m.bound.bytecode.leaves, name, "leaf @");
  m.check_not_started("set_leaf_grad");
  const bool none = !grad || !grad->defined();
  if (!none) check_declared_type(*grad, m.bound.bytecode.leaves[l].type, fmt::format("set_leaf_grad: leaf @{}", name));
  m.initial_leaf_grads[l] = none ? std::nullopt : grad;
  m.reset();
}

void Machine::step() {
  check(!finished(), "step: the program has finished (", size(), " instructions); reset() to run it again");
  impl_->execute(false);
}

void Machine::run() {
  while (!finished()) impl_->execute(false);
}

StopReason Machine::run_until(const std::vector<Breakpoint>& breakpoints) {
  const Impl& m = *impl_;
  std::vector<bool> stop_at(size(), false);
  bool on_non_finite = false;
  for (const Breakpoint& breakpoint : breakpoints) {
    on_non_finite = on_non_finite || breakpoint.kind == Breakpoint::Kind::NonFinite;
    for (std::size_t at = 0; at < size(); ++at) {
      if ((breakpoint.kind == Breakpoint::Kind::Pc && breakpoint.pc == at) ||
          (breakpoint.kind == Breakpoint::Kind::Node && m.plan.instrs[at].node_name == breakpoint.node)) {
        stop_at[at] = true;
      }
    }
  }
  return impl_->run_until([&](std::size_t at) { return stop_at[at]; }, on_non_finite);
}

StopReason Machine::run_until(const std::function<bool(const Machine&)>& stop_before) {
  return impl_->run_until([&](std::size_t) { return stop_before(*this); }, false);
}

bool Machine::finished() const { return impl_->pc == size(); }
void Machine::reset() { impl_->reset(); }

std::size_t Machine::pc() const { return impl_->pc; }
std::size_t Machine::size() const { return impl_->bound.bytecode.code.size(); }

std::string Machine::instruction_text(std::size_t at) const {
  check(at < size(), "instruction_text: pc ", at, " is past the end (", size(), " instructions)");
  return print_instruction(impl_->program.code[at]);
}

const Program& Machine::program() const { return impl_->program; }

std::optional<Tensor> Machine::register_value(std::string_view name) const {
  const auto it = impl_->plan.register_index.find(name);
  check(it != impl_->plan.register_index.end(), "the program has no register %", name);
  return impl_->registers[it->second];
}

std::vector<std::string> Machine::live_registers() const {
  std::vector<std::string> names;
  for (std::uint32_t reg : impl_->plan.definition_order) {
    if (impl_->registers[reg]) names.push_back(impl_->register_name(reg));
  }
  return names;
}

const Tensor& Machine::saved_value(std::string_view name) const {
  return impl_->bound.saved_values[declaration_index(impl_->bound.bytecode.saved, name, "saved $")];
}

std::optional<Tensor> Machine::leaf_grad(std::string_view name) const {
  return impl_->leaf_grads[declaration_index(impl_->bound.bytecode.leaves, name, "leaf @")];
}

std::optional<Tensor> Machine::output(std::string_view name) const {
  return impl_->outputs[declaration_index(impl_->bound.bytecode.outputs, name, "output ^")];
}

const std::vector<TraceEntry>& Machine::trace() const { return impl_->trace; }
std::size_t Machine::peak_register_bytes() const { return impl_->peak_register_bytes; }

// -------------------------------------------------------------- run_program ---

TensorMap run_program(BoundProgram program, const TensorMap& grads, Host host, MachineOptions options) {
  Machine machine(std::move(program), std::move(host), options);
  for (const auto& [key, value] : grads) {
    check(key.size() > 1 && key[0] == '%', "run_program: grads are named with their sigil (\"%g0\"), got \"", key,
          "\"");
    machine.set_grad(std::string_view(key).substr(1), value);
  }
  machine.run();
  TensorMap results;
  for (const LeafDecl& leaf : machine.program().leaves) {
    if (std::optional<Tensor> grad = machine.leaf_grad(leaf.name)) results["@" + leaf.name] = *grad;
  }
  for (const OutputDecl& output : machine.program().outputs) {
    const std::optional<Tensor> value = machine.output(output.name);
    if (holds_tensor(value)) results["^" + output.name] = *value;
  }
  return results;
}

}  // namespace refgrad
