// `refgrad step FILE`: an interactive stepper. It reads one command a line
// from stdin, at a terminal or from a pipe; from a pipe it echoes each
// command after the prompt, so that a session's output reads as a
// transcript. A command that fails prints its error and the session goes on.
//
// A bundle may hold engines' results; one of them can be shown beside
// refgrad's values: its leaf grads and outputs, and its values of registers
// ("%12": what refgrad.check recorded at a divergence). By default the
// program runs in the precision the bundle's comparison compares in, so
// that refgrad's values are the R that `refgrad check` compares with.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"

namespace refgrad::cli {

namespace {

constexpr const char* kPrompt = "(refgrad) ";

using Args = std::vector<std::string>;

// The name a node breakpoint matches: the node (CopySlices: the wrapped one)
// or the autograd.Function.
std::string called_name(const Instr& instr) {
  switch (instr.op) {
    case Opcode::Call:
    case Opcode::CopySlices: return instr.node;
    case Opcode::CallBackward: return instr.target;
    default: return "";
  }
}

std::size_t parse_count(const std::string& text, const std::string& what) {
  const std::optional<std::size_t> count = parse_number<std::size_t>(text);
  check(count.has_value(), what, " must be a number, got '", text, "'");
  return *count;
}

// The accumulate_grad of each leaf that runs last: the one after which the leaf's .grad is final, as
// an engine's result set holds it.
std::map<std::string, std::size_t> last_accumulations(const Program& program) {
  std::map<std::string, std::size_t> last;
  for (std::size_t pc = 0; pc < program.code.size(); ++pc) {
    if (program.code[pc].op == Opcode::AccumulateGrad) last[program.code[pc].target] = pc;
  }
  return last;
}

std::size_t register_count(const ResultSet& set) {
  return static_cast<std::size_t>(
      std::count_if(set.tensors.begin(), set.tensors.end(), [](const auto& entry) { return entry.first.starts_with('%'); }));
}

// "1 register", "2 registers"
std::string counted(std::size_t count, const std::string& noun) {
  return fmt::format("{} {}{}", count, noun, count == 1 ? "" : "s");
}

class Stepper {
 public:
  // `results`: the bundle's result sets; `shown`: the one whose values are shown beside refgrad's.
  Stepper(Machine& machine, std::ostream& out, const std::vector<ResultSet>& results, std::optional<std::size_t> shown)
      : machine_(machine), out_(out), results_(results), shown_(shown),
        last_accumulation_(last_accumulations(machine.program())) {}

  // Runs one command line; false when it asks to quit.
  bool execute(const std::string& line) {
    std::istringstream words(line);
    Args args{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    if (args.empty()) return true;
    const std::string name = args.front();
    args.erase(args.begin());
    if (name == "quit" || name == "q") return false;
    const Command* command = find_command(name);
    try {
      check(command != nullptr, "unknown command '", name, "'; type help for the list");
      (this->*command->run)(args);
    } catch (const std::exception& error) {
      out_ << "error: " << error.what() << '\n';
    }
    return true;
  }

  void show_position() {
    if (machine_.finished()) {
      out_ << fmt::format("finished: all {} instructions ran\n", machine_.size());
      show_results();
    } else {
      out_ << fmt::format("=> {:>3}  {}\n", machine_.pc(), machine_.instruction_text(machine_.pc()));
    }
  }

 private:
  struct Command {
    std::vector<std::string> names;
    std::string usage, help;
    void (Stepper::*run)(const Args&);
  };

  static const std::vector<Command>& commands() {
    static const std::vector<Command> table{
        {{"step", "s"}, "step [N]", "run the next N instructions (default 1) and show what each made", &Stepper::step},
        {{"next", "n"}, "next [N]", "the same as step for now (a program has no calls to step over)", &Stepper::step},
        {{"continue", "c"}, "continue", "run to the next breakpoint or to the end", &Stepper::continue_},
        {{"break", "b"}, "break [PC|NODE|nan]",
         "stop before instruction PC, before each call of NODE, or after an instruction that makes a NaN or Inf; "
         "without an argument, list the breakpoints",
         &Stepper::break_},
        {{"delete", "d"}, "delete [N]", "delete breakpoint N, or all of them", &Stepper::delete_},
        {{"print", "p"}, "print %REG|$SAVED|@LEAF|^OUTPUT",
         "print a register, saved tensor, leaf's .grad or output in full", &Stepper::print},
        {{"regs"}, "regs", "the registers that hold a value, with their types", &Stepper::regs},
        {{"engine", "e"}, "engine [N|NAME|off]",
         "show result set N (or engine NAME) beside refgrad's values, or none; without an argument, list the "
         "result sets",
         &Stepper::engine},
        {{"list", "l"}, "list [PC]",
         "the instructions around PC (default: the next one); => marks the next, * a breakpoint", &Stepper::list},
        {{"where"}, "where", "the next instruction", &Stepper::where},
        {{"trace"}, "trace [on|off]",
         "show the trace so far (operand and result types, time); on/off: continue shows each instruction it runs",
         &Stepper::trace},
        {{"reset"}, "reset", "back to instruction 0 with the same inputs", &Stepper::reset},
        {{"help", "h"}, "help", "this list", &Stepper::help},
        {{"quit", "q"}, "quit", "leave the stepper (so does the end of the input)", nullptr},
    };
    return table;
  }

  static const Command* find_command(const std::string& name) {
    for (const Command& command : commands()) {
      const bool named = std::find(command.names.begin(), command.names.end(), name) != command.names.end();
      if (named && command.run) return &command;
    }
    return nullptr;
  }

  static void expect_at_most(const Args& args, std::size_t count, const char* usage) {
    check(args.size() <= count, "too many arguments; usage: ", usage);
  }

  // ------------------------------------------------------------- running ---

  void step(const Args& args) {
    expect_at_most(args, 1, "step [N]");
    const std::size_t count = args.empty() ? 1 : parse_count(args[0], "step's N");
    for (std::size_t i = 0; i < count; ++i) {
      if (machine_.finished()) {
        out_ << "the program has finished; reset starts it again\n";
        return;
      }
      const std::size_t pc = machine_.pc();
      machine_.step();
      show_executed(pc);
    }
    show_position();
  }

  void continue_(const Args& args) {
    expect_at_most(args, 0, "continue");
    check(!machine_.finished(), "the program has finished; reset starts it again");
    const std::size_t start = machine_.pc();
    std::vector<Breakpoint> breakpoints;
    for (const auto& [number, breakpoint] : breakpoints_) breakpoints.push_back(breakpoint);
    const StopReason reason = machine_.run_until(breakpoints);
    if (echo_trace_) {
      for (std::size_t pc = start; pc < machine_.pc(); ++pc) show_executed(pc);
    }
    if (reason == StopReason::Breakpoint) {
      out_ << fmt::format("stopped at breakpoint {} before instruction {}\n", breakpoints_hit(machine_.pc()),
                          machine_.pc());
    } else if (reason == StopReason::NonFinite) {
      out_ << fmt::format("stopped: instruction {} made a NaN or Inf\n", machine_.pc() - 1);
      if (!echo_trace_) show_executed(machine_.pc() - 1);
    }
    show_position();
  }

  void reset(const Args& args) {
    expect_at_most(args, 0, "reset");
    machine_.reset();
    show_position();
  }

  // --------------------------------------------------------- breakpoints ---

  void break_(const Args& args) {
    expect_at_most(args, 1, "break [PC|NODE|nan]");
    if (args.empty()) {
      if (breakpoints_.empty()) out_ << "no breakpoints\n";
      for (const auto& [number, breakpoint] : breakpoints_) {
        out_ << fmt::format("{}: {}\n", number, describe(breakpoint));
      }
      return;
    }
    const Breakpoint breakpoint = parse_breakpoint(args[0]);
    breakpoints_.emplace_back(next_number_, breakpoint);
    out_ << fmt::format("breakpoint {}: {}\n", next_number_++, describe(breakpoint));
  }

  void delete_(const Args& args) {
    expect_at_most(args, 1, "delete [N]");
    if (args.empty()) {
      breakpoints_.clear();
      out_ << "deleted all breakpoints\n";
      return;
    }
    const std::size_t number = parse_count(args[0], "delete's N");
    const auto it = std::find_if(breakpoints_.begin(), breakpoints_.end(),
                                 [&](const auto& entry) { return entry.first == number; });
    check(it != breakpoints_.end(), "no breakpoint ", number);
    breakpoints_.erase(it);
    out_ << fmt::format("deleted breakpoint {}\n", number);
  }

  Breakpoint parse_breakpoint(const std::string& text) const {
    if (text == "nan") return Breakpoint::non_finite();
    if (const std::optional<std::size_t> pc = parse_number<std::size_t>(text)) {
      check(*pc < machine_.size(), "no instruction ", *pc, " (the program has ", machine_.size(), ")");
      return Breakpoint::at_pc(*pc);
    }
    const std::vector<Instr>& code = machine_.program().code;
    check(std::any_of(code.begin(), code.end(), [&](const Instr& instr) { return called_name(instr) == text; }),
          "no instruction calls '", text, "' (break takes a pc, a node name or nan)");
    return Breakpoint::at_node(text);
  }

  static std::string describe(const Breakpoint& breakpoint) {
    switch (breakpoint.kind) {
      case Breakpoint::Kind::Pc: return fmt::format("before instruction {}", breakpoint.pc);
      case Breakpoint::Kind::Node: return fmt::format("before each call of {}", breakpoint.node);
      case Breakpoint::Kind::NonFinite: return "after an instruction that makes a NaN or Inf";
    }
    return "";
  }

  bool stops_before(const Breakpoint& breakpoint, std::size_t pc) const {
    if (breakpoint.kind == Breakpoint::Kind::Pc) return breakpoint.pc == pc;
    return breakpoint.kind == Breakpoint::Kind::Node && called_name(machine_.program().code[pc]) == breakpoint.node;
  }

  std::string breakpoints_hit(std::size_t pc) const {
    std::vector<std::size_t> numbers;
    for (const auto& [number, breakpoint] : breakpoints_) {
      if (stops_before(breakpoint, pc)) numbers.push_back(number);
    }
    return fmt::format("{}", fmt::join(numbers, ", "));
  }

  // -------------------------------------------------------------- values ---

  void print(const Args& args) {
    check(args.size() == 1, "usage: print %REG|$SAVED|@LEAF|^OUTPUT");
    const std::string& what = args[0];
    const std::string name = what.substr(1);
    check(what.size() > 1, "print what? %register, $saved, @leaf or ^output");
    switch (what.front()) {
      case '%': {
        const std::optional<Tensor> value = machine_.register_value(name);
        if (!value) out_ << what << " holds no value yet\n";
        else out_ << what << " = " << repr(*value) << '\n';
        print_engine_value(what, what, value);
        return;
      }
      case '$': out_ << what << " = " << repr(machine_.saved_value(name)) << '\n'; return;
      case '@': {
        const std::optional<Tensor> value = machine_.leaf_grad(name);
        out_ << what << ".grad = " << repr(value.value_or(Tensor())) << '\n';
        print_engine_value(what, what + ".grad at the end of its run", value);
        return;
      }
      case '^': {
        const std::optional<Tensor> value = machine_.output(name);
        if (!value) out_ << what << " is not written yet\n";
        else out_ << what << " = " << repr(*value) << '\n';
        print_engine_value(what, what, value);
        return;
      }
      default: fail(concat("print what? '", what, "': %register, $saved, @leaf or ^output"));
    }
  }

  static std::string repr(const Tensor& value) { return value.defined() ? value.repr() : "None"; }

  // The shown engine's value of `name` ("%12", "@w", "^x") in full, and max|E - R| with refgrad's `value`.
  void print_engine_value(const std::string& name, const std::string& what, const std::optional<Tensor>& value) {
    const Tensor* engine = engine_value(name);
    if (engine == nullptr) return;
    out_ << fmt::format("{}'s {} = {}\n", shown_engine(), what, repr(*engine));
    if (value && value->defined()) out_ << error_text(*engine, value) << '\n';
  }

  // The shown result set's tensor `name`, or nullptr (no set shown, or it has no such tensor).
  const Tensor* engine_value(const std::string& name) const {
    if (!shown_) return nullptr;
    const TensorMap& tensors = results_[*shown_].tensors;
    const auto found = tensors.find(name);
    return found == tensors.end() ? nullptr : &found->second;
  }

  const std::string& shown_engine() const { return results_[*shown_].engine; }

  void engine(const Args& args) {
    expect_at_most(args, 1, "engine [N|NAME|off]");
    if (args.empty()) {
      if (results_.empty()) out_ << "the program holds no result sets (a bundle of refgrad.check or run -o does)\n";
      for (std::size_t i = 0; i < results_.size(); ++i) {
        const ResultSet& set = results_[i];
        const std::size_t registers = register_count(set);
        out_ << fmt::format("{} {}  {}  {}{}\n", shown_ == i ? "=>" : "  ", i, set.engine,
                            counted(set.tensors.size() - registers, "result"),
                            registers == 0 ? "" : fmt::format(", {} recorded", counted(registers, "register")));
      }
      return;
    }
    if (args[0] == "off") {
      shown_.reset();
      out_ << "no engine's values are shown\n";
      return;
    }
    shown_ = find_result_set(results_, args[0]);
    out_ << fmt::format("showing result set {} ({}) beside refgrad's values\n", *shown_, shown_engine());
  }

  void regs(const Args& args) {
    expect_at_most(args, 0, "regs");
    const std::vector<std::string> names = machine_.live_registers();
    if (names.empty()) out_ << "no register holds a value\n";
    std::size_t width = 0;
    for (const std::string& name : names) width = std::max(width, name.size() + 1);
    for (const std::string& name : names) {
      const Tensor value = machine_.register_value(name).value_or(Tensor());
      out_ << fmt::format("{:<{}}  {}\n", "%" + name, width, value.defined() ? to_string(type_of(value)) : "None");
    }
  }

  // --------------------------------------------------------------- where ---

  void list(const Args& args) {
    expect_at_most(args, 1, "list [PC]");
    const std::size_t center = args.empty() ? machine_.pc() : parse_count(args[0], "list's PC");
    const std::size_t first = center < 3 ? 0 : center - 3;
    const std::size_t last = std::min(machine_.size(), center + 4);
    check(first < last, "no instruction ", center, " (the program has ", machine_.size(), ")");
    for (std::size_t pc = first; pc < last; ++pc) {
      const bool breaks = std::any_of(breakpoints_.begin(), breakpoints_.end(),
                                      [&](const auto& entry) { return stops_before(entry.second, pc); });
      const char* marker = pc == machine_.pc() ? "=>" : breaks ? "* " : "  ";
      out_ << fmt::format("{} {:>3}  {}\n", marker, pc, machine_.instruction_text(pc));
    }
  }

  void where(const Args& args) {
    expect_at_most(args, 0, "where");
    if (machine_.finished()) {
      out_ << fmt::format("finished (all {} instructions ran)\n", machine_.size());
    } else {
      const std::size_t pc = machine_.pc();
      out_ << fmt::format("pc {} of {}: {}\n", pc, machine_.size(), machine_.instruction_text(pc));
    }
  }

  void trace(const Args& args) {
    expect_at_most(args, 1, "trace [on|off]");
    if (!args.empty()) {
      check(args[0] == "on" || args[0] == "off", "usage: trace [on|off]");
      echo_trace_ = args[0] == "on";
      out_ << (echo_trace_ ? "trace on: continue shows each instruction it runs\n" : "trace off\n");
      return;
    }
    if (machine_.trace().empty()) out_ << "no instruction has run yet\n";
    for (const TraceEntry& entry : machine_.trace()) {
      out_ << fmt::format("{:>4}  {}\n        in: {}  out: {}  {:.1f} us\n", entry.pc, entry.text, types(entry.inputs),
                          types(entry.outputs), static_cast<double>(entry.time.count()) / 1000.0);
    }
  }

  static std::string types(const std::vector<ValueInfo>& values) {
    std::vector<std::string> parts;
    for (const ValueInfo& value : values) parts.push_back(value.defined ? to_string(value.type) : "none");
    return parts.empty() ? "-" : fmt::format("{}", fmt::join(parts, ", "));
  }

  void help(const Args&) {
    for (const Command& command : commands()) {
      std::string names = command.names.size() > 1 ? " (" + command.names[1] + ")" : "";
      out_ << fmt::format("  {:<36} {}\n", command.usage + names, command.help);
    }
  }

  // --------------------------------------------------------------- shows ---

  // An instruction that ran, and what it made.
  void show_executed(std::size_t pc) {
    const Instr& instr = machine_.program().code[pc];
    out_ << fmt::format("   {:>3}  {}\n", pc, machine_.instruction_text(pc));
    for (const std::optional<std::string>& result : instr.results) {
      if (!result) continue;
      const std::optional<Tensor> value = machine_.register_value(*result);
      out_ << fmt::format("          %{} = {}\n", *result, summarize(value));
      show_engine_value("%" + *result, value);
    }
    if (instr.op == Opcode::AccumulateGrad) {
      const std::optional<Tensor> grad = machine_.leaf_grad(instr.target);
      out_ << fmt::format("          @{}.grad = {}\n", instr.target, summarize(grad));
      // the engine's result is the final .grad: compare it after the leaf's last accumulation only
      if (last_accumulation_.at(instr.target) == pc) show_engine_value("@" + instr.target, grad);
    }
    if (instr.op == Opcode::Output) {
      const std::optional<Tensor> value = machine_.output(instr.target);
      out_ << fmt::format("          ^{} = {}\n", instr.target, summarize(value));
      show_engine_value("^" + instr.target, value);
    }
  }

  // Under a line that shows refgrad's value of `name`: the shown engine's, and max|E - R|.
  void show_engine_value(const std::string& name, const std::optional<Tensor>& value) {
    const Tensor* engine = engine_value(name);
    if (engine == nullptr) return;
    out_ << fmt::format("            {}: {}  {}\n", shown_engine(), summarize(*engine), error_text(*engine, value));
  }

  void show_results() {
    const Results results = results_of(machine_);
    std::size_t width = 0;
    for (const auto& [name, value] : results) width = std::max(width, name.size());
    for (const auto& [name, value] : results) {
      out_ << fmt::format("{:<{}}  {}\n", name, width, summarize(value));
      show_engine_value(name, value);
    }
  }

  Machine& machine_;
  std::ostream& out_;
  const std::vector<ResultSet>& results_;
  std::optional<std::size_t> shown_;  // the result set shown beside refgrad's values
  std::map<std::string, std::size_t> last_accumulation_;
  std::vector<std::pair<std::size_t, Breakpoint>> breakpoints_;  // by number
  std::size_t next_number_ = 1;
  bool echo_trace_ = false;
};

struct StepOptions : InputOptions {
  std::string engine;  // --engine N|NAME|off; "": the default (default_result_set)
};

// The result set shown by default: the one holding an engine's values of registers, preferring the
// engine the bundle was written for (provenance "engine"); none when no set holds registers.
std::optional<std::size_t> default_result_set(const Bundle& bundle) {
  std::optional<std::size_t> shown;
  const auto engine = bundle.provenance.find("engine");
  for (std::size_t i = 0; i < bundle.results.size(); ++i) {
    if (register_count(bundle.results[i]) == 0) continue;
    if (!shown) shown = i;
    if (engine != bundle.provenance.end() && bundle.results[i].engine == engine->second) return i;
  }
  return shown;
}

// How the run's precision was chosen, for the first line.
std::string precision_text(const Bundle& bundle, const std::string& option, Precision precision) {
  if (!option.empty() || !bundle.comparison) return precision_name(precision);
  return fmt::format("{}, as refgrad check compares under the bundle's rule {} (--precision {} runs it {})",
                     precision_name(precision), bundle.comparison->rule,
                     precision == Precision::Float64 ? "float32" : "float64",
                     precision == Precision::Float64 ? "as written" : "in float64");
}

int step_command(const StepOptions& options) {
  Bundle bundle = load_checked(options.file);
  add_grad_inputs(bundle, options.grads);
  const Host host = make_host(bundle.program, options.hooks, std::cout);
  // As refgrad check compares: a bundle with a comparison runs in its precision, anything else as written.
  const Precision precision = !options.precision.empty()
                                  ? (options.precision == "float64" ? Precision::Float64 : Precision::AsWritten)
                                  : (bundle.comparison ? precision_of(*bundle.comparison) : Precision::AsWritten);
  std::optional<std::size_t> shown = default_result_set(bundle);
  if (options.engine == "off") shown.reset();
  else if (!options.engine.empty()) shown = find_result_set(bundle.results, options.engine);
  Machine machine = make_machine(bundle, host, precision,
                                 {.keep_values = true,
                                  .trace = true,
                                  .check_finite = options.check_finite,
                                  .memory_limit = options.memory_limit});
  const bool echo = isatty(STDIN_FILENO) == 0;
  Stepper stepper(machine, std::cout, bundle.results, shown);
  std::cout << fmt::format("program {}: {} instructions, {}; type help for the commands\n", bundle.program.name,
                           machine.size(), precision_text(bundle, options.precision, precision));
  if (shown) {
    const ResultSet& set = bundle.results[*shown];
    const std::size_t registers = register_count(set);
    std::cout << fmt::format("showing {}'s values (result set {}: {}{}) beside refgrad's; engine lists the "
                             "result sets\n",
                             set.engine, *shown, counted(set.tensors.size() - registers, "result"),
                             registers == 0 ? "" : fmt::format(" and {} it recorded", counted(registers, "register")));
  }
  stepper.show_position();
  std::string line;
  while (true) {
    if (!echo) std::cout << kPrompt << std::flush;
    if (!std::getline(std::cin, line)) {
      if (!echo) std::cout << '\n';
      break;
    }
    if (echo) std::cout << kPrompt << line << '\n';
    if (!stepper.execute(line)) break;
  }
  return kExitOk;
}

}  // namespace

void add_step_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<StepOptions>();
  CLI::App* command = app.add_subcommand(
      "step", "step through a program: commands on stdin (a terminal or a pipe); type help for them");
  options->precision = "";  // the bundle's comparison chooses (step_command)
  add_input_options(*command, *options, /*allow_both=*/false);
  command->add_option("--engine", options->engine,
                      "the result set shown beside refgrad's values: its index or engine name, or off (default: "
                      "the one holding an engine's recorded register values)")
      ->type_name("N|NAME|off");
  command->callback([options, &exit_code] { exit_code = step_command(*options); });
}

}  // namespace refgrad::cli
