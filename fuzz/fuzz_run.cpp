// libFuzzer harness for execution: each input becomes a small program around
// one node of the registry (generate.hpp), which is verified, printed and
// parsed back, bound and run by a Machine, and its node also called directly.
// Whatever the program, running it must end either normally or with
// refgrad::Error; a crash, a sanitizer report, a hang, an allocation over
// the limit or any other exception is a finding.
//
// REFGRAD_FUZZ_PRINT=1 prints each case's program to stderr, and the error
// it ended with (to turn a finding into a .bwd regression test);
// REFGRAD_FUZZ_STATS=1 prints, at exit, how many cases of each mode ran
// without an error (REFGRAD_FUZZ_STATS_PER_NODE=1: also per node).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <variant>

#include "generate.hpp"
#include "refgrad/interpreter.hpp"

namespace {

using namespace refgrad;

// Far below the machine's memory: a case whose sizes ask for more must be refused with an Error.
constexpr std::size_t kMemoryLimit = std::size_t{16} << 20;

struct Outcome {
  std::size_t runs = 0, completed = 0;
};

struct Stats {
  Outcome consistent, wild;
  std::map<std::string, Outcome> per_node;  // over both modes
};

Stats& stats() {
  static Stats* instance = new Stats;  // never destroyed: read by the atexit handler
  return *instance;
}

bool flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' && value[0] != '0';
}

void print_stats() {
  const Stats& s = stats();
  const auto percent = [](const Outcome& o) { return o.runs ? 100.0 * o.completed / o.runs : 0.0; };
  std::fprintf(stderr, "fuzz_run: consistent cases %zu, %.1f%% ran without an error; wild cases %zu, %.1f%%\n",
               s.consistent.runs, percent(s.consistent), s.wild.runs, percent(s.wild));
  if (!flag("REFGRAD_FUZZ_STATS_PER_NODE")) return;
  for (const auto& [node, outcome] : s.per_node) {
    std::fprintf(stderr, "  %-40s %6zu cases, %5.1f%% without an error\n", node.c_str(), outcome.runs,
                 percent(outcome));
  }
}

// Anything but a refgrad::Error escaping is a finding: say what, then stop.
[[noreturn]] void finding(const char* where, const char* what) {
  std::fprintf(stderr, "fuzz_run: %s raised an exception that is not refgrad::Error: %s\n", where, what);
  std::abort();
}

// A saved field as the node takes it: `$` references replaced by the saved declarations' values.
FieldValue field_value(const AttrValue& value, const Program& program) {
  const auto saved = [&](const SavedRef& ref) { return *program.find_saved(ref.name)->value; };
  return std::visit(
      [&](const auto& alternative) -> FieldValue {
        using V = std::decay_t<decltype(alternative)>;
        if constexpr (std::is_same_v<V, SavedRef>) {
          return saved(alternative);
        } else if constexpr (std::is_same_v<V, std::vector<SavedRef>>) {
          TensorList tensors;
          for (const SavedRef& ref : alternative) tensors.push_back(saved(ref));
          return tensors;
        } else if constexpr (std::is_same_v<V, std::vector<std::optional<SavedRef>>>) {
          std::vector<OptionalTensor> tensors;
          for (const auto& ref : alternative) tensors.push_back(ref ? std::optional(saved(*ref)) : std::nullopt);
          return tensors;
        } else {
          return alternative;
        }
      },
      value);
}

// Calls the case's node directly on the declared grads and its saved fields, as refgrad.call_node
// does: its errors must be refgrad::Error too (the Machine turns any std::exception into one, which
// would hide them from the fuzzer).
void call_node_directly(const Program& program) {
  for (const Instr& instr : program.code) {
    if (instr.op != Opcode::Call || !find_node(instr.node)) continue;
    Grads grads;
    for (const auto& operand : instr.operands) {
      const GradDecl* grad = operand ? program.find_grad(*operand) : nullptr;
      grads.push_back(grad ? grad->value : std::nullopt);
    }
    std::map<std::string, FieldValue> saved;
    for (const Attr& attr : instr.attrs) saved[attr.name] = field_value(attr.value, program);
    try {
      const MemoryLimitScope limit(kMemoryLimit);
      call_node(instr.node, grads, instr.need, saved);
    } catch (const Error&) {
    } catch (const std::exception& error) {
      finding(("calling " + instr.node + " directly").c_str(), error.what());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (flag("REFGRAD_FUZZ_STATS")) std::atexit(print_stats);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzzing::GeneratedCase generated = fuzzing::generate_case(std::span(data, size));
  const Program& program = generated.program;
  if (flag("REFGRAD_FUZZ_PRINT")) std::fprintf(stderr, "%s", print_program(program).c_str());

  // The verifier and the text form must cope with any program the generator makes.
  verify(program);
  const std::string text = print_program(program);
  if (!(parse_program(text, "fuzz.bwd") == program)) {
    std::fprintf(stderr, "fuzz_run: the printed program does not parse back to itself:\n%s", text.c_str());
    std::abort();
  }

  Outcome& mode = generated.consistent ? stats().consistent : stats().wild;
  Outcome& node = stats().per_node[generated.node];
  ++mode.runs;
  ++node.runs;
  try {
    BoundProgram bound = bind(assemble(program));
    MachineOptions options;
    options.memory_limit = kMemoryLimit;
    options.check_finite = !generated.consistent && size % 7 == 3;  // sometimes, without a decision byte
    Machine machine(bound, {}, options);
    machine.run();
    ++mode.completed;
    ++node.completed;
  } catch (const Error& error) {
    // A clear error is what a bad program should get.
    if (flag("REFGRAD_FUZZ_PRINT")) std::fprintf(stderr, "error: %s\n", error.what());
  } catch (const std::exception& error) {
    finding("binding or running the program", error.what());
  }
  call_node_directly(program);
  return 0;
}
