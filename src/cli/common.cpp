#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "refgrad/ops.hpp"

namespace refgrad::cli {

// ------------------------------------------------------------------ files ---

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.is_open(), "cannot open '", path, "'");
  std::string contents{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  check(!in.bad(), "cannot read '", path, "'");
  return contents;
}

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  check(out.is_open(), "cannot write '", path, "'");
  out << contents;
  out.close();
  check(out.good(), "cannot write '", path, "'");
}

std::string extension_of(const std::string& path) { return std::filesystem::path(path).extension().string(); }

Bundle load_checked(const std::string& path) {
  Bundle bundle = load_program_file(path);
  for (const Diagnostic& warning : check_program(bundle.program)) std::cerr << to_string(warning) << '\n';
  return bundle;
}

// --------------------------------------------------------------- run inputs ---

std::string precision_name(Precision precision) {
  return precision == Precision::Float64 ? "float64" : "float32";
}

Precision precision_of(const Comparison& comparison) {
  return comparison.rule == "allclose" ? Precision::AsWritten : Precision::Float64;
}

void add_hook_option(CLI::App& command, std::vector<std::string>& hooks) {
  command.add_option("--hook", hooks,
                     "a host function for a hook the program calls: NAME=scale:K (a tensor_pre hook that "
                     "multiplies the grad by K) or NAME=print (any kind: prints what it receives, returns None)")
      ->type_name("NAME=scale:K|NAME=print");
}

void add_input_options(CLI::App& command, InputOptions& options, bool allow_both) {
  command.add_option("FILE", options.file, "the program: .bwd text, .rgbc bytecode or .safetensors bundle")
      ->required();
  command.add_option("--grad", options.grads,
                     "an incoming grad from a safetensors file: --grad g=grads.safetensors:g0 sets %g to tensor g0")
      ->type_name("NAME=FILE:TENSOR");
  add_hook_option(command, options.hooks);
  std::vector<std::string> precisions{"float32", "float64"};
  if (allow_both) precisions.emplace_back("both");
  const bool chosen_later = options.precision.empty();
  CLI::Option* precision = command.add_option(
      "--precision", options.precision,
      "float32: the program as written; float64: promoted to float64" +
          std::string(allow_both ? "; both: run both and compare" : "") +
          (chosen_later ? "; default: the precision the bundle's comparison compares in (float64 for the rules "
                          "reference and plain, as refgrad check runs), else float32"
                        : ""));
  precision->check(CLI::IsMember(precisions));
  if (!chosen_later) precision->capture_default_str();
  command.add_flag("--check-finite", options.check_finite,
                   "stop at the first instruction that makes a NaN or Inf, say which (exit code 1)");
  add_memory_limit_option(command, options.memory_limit);
  add_threads_option(command);
}

void add_threads_option(CLI::App& command) {
  command
      .add_option_function<int>(
          "--threads", [](int threads) { set_num_threads(threads); },
          fmt::format("the threads the kernels use, BLAS included (default: every core, {}); results are the same "
                      "bits for any count",
                      default_num_threads()))
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
}

void add_memory_limit_option(CLI::App& command, std::optional<std::size_t>& memory_limit) {
  command
      .add_option_function<std::string>(
          "--memory-limit", [&memory_limit](const std::string& text) { memory_limit = parse_byte_count(text); },
          fmt::format("the most bytes one tensor of the run may hold: a larger one stops the run with an error "
                      "naming the instruction and the shape (default: this machine's memory, {} bytes)",
                      default_memory_limit()))
      ->type_name("SIZE[K|M|G|T]");
}

std::size_t parse_byte_count(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string suffix = text.substr(digits);
  const std::vector<std::pair<std::string, int>> scales = {{"", 0}, {"K", 10}, {"M", 20}, {"G", 30}, {"T", 40}};
  const auto scale = std::find_if(scales.begin(), scales.end(), [&](const auto& s) { return s.first == suffix; });
  check(digits > 0 && digits <= 15 && scale != scales.end(), "--memory-limit ", text,
        ": expected a number of bytes, optionally with a suffix K, M, G or T (powers of 1024), e.g. 512M");
  const std::size_t count = std::stoull(text.substr(0, digits));
  check(count <= (std::numeric_limits<std::size_t>::max() >> scale->second), "--memory-limit ", text, " is too large");
  return count << scale->second;
}

namespace {

// "g=grads.safetensors:g0" -> {"g", "grads.safetensors", "g0"}. The file name
// may itself hold ':' (the last one separates the tensor name).
struct GradSpec {
  std::string name, file, tensor;
};

GradSpec parse_grad_spec(const std::string& spec) {
  const std::size_t equals = spec.find('=');
  const std::size_t colon = spec.rfind(':');
  check(equals != std::string::npos && colon != std::string::npos && colon > equals + 1 && equals > 0 &&
            colon + 1 < spec.size(),
        "--grad ", spec, ": expected NAME=FILE:TENSOR, e.g. g=grads.safetensors:g0");
  std::string name = spec.substr(0, equals);
  if (name.front() == '%') name.erase(0, 1);
  return {name, spec.substr(equals + 1, colon - equals - 1), spec.substr(colon + 1)};
}

Tensor read_grad(const Program& program, const std::string& spec, const GradSpec& grad) {
  const GradDecl* decl = program.find_grad(grad.name);
  check(decl != nullptr, "--grad ", spec, ": the program declares no grad %", grad.name);
  const std::string contents = read_file(grad.file);
  const TensorMap tensors = read_safetensors(std::as_bytes(std::span(contents.data(), contents.size())), grad.file);
  const auto found = tensors.find(grad.tensor);
  check(found != tensors.end(), "--grad ", spec, ": ", grad.file, " holds no tensor '", grad.tensor, "'");
  const TensorType type = type_of(found->second);
  check(type.dtype == decl->type.dtype && type.sizes == decl->type.sizes, "--grad ", spec, ": %", grad.name,
        " is declared ", to_string(decl->type), " but tensor '", grad.tensor, "' is ", to_string(type));
  return found->second;
}

}  // namespace

void add_grad_inputs(Bundle& bundle, const std::vector<std::string>& specs) {
  for (const std::string& spec : specs) {
    const GradSpec grad = parse_grad_spec(spec);
    bundle.tensors["%" + grad.name] = read_grad(bundle.program, spec, grad);
  }
  for (const GradDecl& decl : bundle.program.grads) {
    check(decl.value || bundle.tensors.contains("%" + decl.name), "grad %", decl.name, " (", to_string(decl.type),
          ") has no value: the program gives no default; give one with --grad ", decl.name, "=FILE:TENSOR");
  }
}

// ------------------------------------------------------------------ hooks ---

namespace {

void print_value(std::ostream& out, const std::string& who, const std::string& what,
                 const std::optional<Tensor>& value) {
  out << who << ": " << what << " = " << summarize(value) << '\n';
}

void print_grads(std::ostream& out, const std::string& who, const std::string& what, const Grads& grads) {
  for (std::size_t i = 0; i < grads.size(); ++i) print_value(out, who, fmt::format("{}[{}]", what, i), grads[i]);
}

// A `print` hook of the declared kind: shows what it receives, changes nothing.
void add_print_hook(Host& host, const HookDecl& hook, std::ostream& out) {
  const std::string who = fmt::format("hook &{} ({})", hook.name, to_string(hook.kind));
  std::ostream* sink = &out;
  switch (hook.kind) {
    case HookKind::TensorPre:
      host.tensor_pre_hooks[hook.name] = [who, sink](const Tensor& grad) -> std::optional<Tensor> {
        print_value(*sink, who, "grad", grad);
        return std::nullopt;
      };
      break;
    case HookKind::Pre:
      host.pre_hooks[hook.name] = [who, sink](const Grads& grad_outputs) -> std::optional<Grads> {
        print_grads(*sink, who, "grad_outputs", grad_outputs);
        return std::nullopt;
      };
      break;
    case HookKind::Post:
      host.post_hooks[hook.name] = [who, sink](const Grads& grad_inputs,
                                               const Grads& grad_outputs) -> std::optional<Grads> {
        print_grads(*sink, who, "grad_inputs", grad_inputs);
        print_grads(*sink, who, "grad_outputs", grad_outputs);
        return std::nullopt;
      };
      break;
    case HookKind::PostAccGrad:
      host.post_acc_grad_hooks[hook.name] = [who, sink](const std::string& leaf, const std::optional<Tensor>& grad) {
        print_value(*sink, who, "@" + leaf + ".grad", grad);
      };
      break;
  }
}

// A `scale:K` hook: a tensor_pre hook returning K * grad.
void add_scale_hook(Host& host, const HookDecl& hook, const std::string& spec, const std::string& factor_text) {
  check(hook.kind == HookKind::TensorPre, "--hook ", spec, ": &", hook.name, " is a ", to_string(hook.kind),
        " hook; scale:K is for tensor_pre hooks (use print)");
  const std::optional<double> factor = parse_number<double>(factor_text);
  check(factor.has_value(), "--hook ", spec, ": '", factor_text, "' is not a number");
  host.tensor_pre_hooks[hook.name] = [factor = *factor](const Tensor& grad) -> std::optional<Tensor> {
    if (!grad.defined()) return std::nullopt;
    return mul(grad, Scalar(factor));
  };
}

// Every hook and function an instruction calls must have a host function.
void check_host_covers(const Program& program, const Host& host) {
  for (const Instr& instr : program.code) {
    if (instr.op == Opcode::CallBackward) {
      fail(fmt::format("the program calls function &{} (an autograd.Function's backward, `call_backward`), which "
                       "only a host program can provide (C++ Host::functions or Python); the command line cannot "
                       "run it",
                       instr.target));
    }
    if (instr.op != Opcode::Hook) continue;
    const HookDecl* hook = program.find_hook(instr.target);
    if (hook == nullptr) continue;  // the verifier has said so
    const bool given = host.tensor_pre_hooks.contains(hook->name) || host.pre_hooks.contains(hook->name) ||
                       host.post_hooks.contains(hook->name) || host.post_acc_grad_hooks.contains(hook->name);
    check(given, "the program calls hook &", hook->name, " (", to_string(hook->kind),
          "), a host function: give one with --hook ", hook->name, "=print",
          hook->kind == HookKind::TensorPre ? " or --hook " + hook->name + "=scale:K" : std::string(),
          " (docs/cli.md)");
  }
}

}  // namespace

Host make_host(const Program& program, const std::vector<std::string>& specs, std::ostream& hook_out) {
  Host host;
  for (const std::string& spec : specs) {
    const std::size_t equals = spec.find('=');
    check(equals != std::string::npos && equals > 0, "--hook ", spec, ": expected NAME=scale:K or NAME=print");
    std::string name = spec.substr(0, equals);
    if (name.front() == '&') name.erase(0, 1);
    const std::string action = spec.substr(equals + 1);
    const HookDecl* hook = program.find_hook(name);
    check(hook != nullptr, "--hook ", spec, ": the program declares no hook &", name);
    if (action == "print") add_print_hook(host, *hook, hook_out);
    else if (action.starts_with("scale:")) add_scale_hook(host, *hook, spec, action.substr(6));
    else fail(concat("--hook ", spec, ": expected NAME=scale:K or NAME=print"));
  }
  check_host_covers(program, host);
  return host;
}

Machine make_machine(const Bundle& bundle, const Host& host, Precision precision, MachineOptions options) {
  if (precision == Precision::AsWritten) return Machine(bind(bundle), host, options);
  Bundle promoted;
  promoted.program = promote_to_float64(bundle.program);
  promoted.tensors = promote_to_float64(bundle.tensors);
  return Machine(bind(promoted), host, options);
}

Machine make_perturbed_machine(const Bundle& bundle, const Host& host, std::uint64_t seed, double scale,
                               MachineOptions options, bool move_values, const std::set<std::string>& held,
                               const std::vector<TraceEntry>& as_captured) {
  Bundle perturbed;
  perturbed.program =
      move_values ? perturbed_to_float64(bundle.program, seed, scale, held) : promote_to_float64(bundle.program);
  perturbed.tensors =
      move_values ? perturbed_to_float64(bundle.tensors, seed, scale, held) : promote_to_float64(bundle.tensors);
  options.rounding_noise = rounding_noise_of(bundle.program, seed, scale, as_captured);
  return Machine(bind(perturbed), host, options);
}

// ---------------------------------------------------------------- results ---

Results results_of(const Machine& machine) {
  Results results;
  for (const LeafDecl& leaf : machine.program().leaves) {
    results.emplace_back("@" + leaf.name, machine.leaf_grad(leaf.name));
  }
  for (const OutputDecl& output : machine.program().outputs) {
    std::optional<Tensor> value = machine.output(output.name);
    if (value && !value->defined()) value.reset();
    results.emplace_back("^" + output.name, value);
  }
  return results;
}

TensorMap defined_results(const Results& results) {
  TensorMap tensors;
  for (const auto& [name, value] : results) {
    if (value) tensors[name] = *value;
  }
  return tensors;
}

namespace {

bool has_non_finite(const std::optional<Tensor>& value) {
  if (!value || !value->defined() || !value->is_floating_point()) return false;
  for (double x : value->to_vector<double>()) {
    if (!std::isfinite(x)) return true;
  }
  return false;
}

// "instruction 3 (%4 = ExpBackward0 %3  result=$a) made a NaN or Inf: %4 = f32[3] ..."
std::string describe_non_finite(const Machine& machine, std::size_t pc) {
  const Instr& instr = machine.program().code[pc];
  std::vector<std::string> found;
  const auto note = [&](const std::string& name, const std::optional<Tensor>& value) {
    if (has_non_finite(value)) found.push_back(name + " = " + summarize(value));
  };
  for (const std::optional<std::string>& result : instr.results) {
    if (result) note("%" + *result, machine.register_value(*result));
  }
  if (instr.op == Opcode::AccumulateGrad) note("@" + instr.target + ".grad", machine.leaf_grad(instr.target));
  if (found.empty()) found.emplace_back("(the value is no longer held)");
  return fmt::format("instruction {} ({}) made a NaN or Inf: {}", pc, machine.instruction_text(pc),
                     fmt::join(found, "; "));
}

}  // namespace

std::optional<std::string> run_to_end(Machine& machine, bool check_finite) {
  if (!check_finite) {
    machine.run();
    return std::nullopt;
  }
  if (machine.run_until({Breakpoint::non_finite()}) != StopReason::NonFinite) return std::nullopt;
  return describe_non_finite(machine, machine.pc() - 1);
}

// ---------------------------------------------------- an engine's results ---

std::size_t find_result_set(const std::vector<ResultSet>& results, const std::string& choice) {
  std::vector<std::string> sets;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (choice == std::to_string(i) || choice == results[i].engine) return i;
    sets.push_back(fmt::format("{} ({})", i, results[i].engine));
  }
  fail(results.empty() ? concat("no result set '", choice, "': the bundle holds none")
                       : concat("no result set '", choice, "'; the bundle holds ", fmt::format("{}", fmt::join(sets, ", "))));
}

std::optional<double> max_abs_error(const Tensor& engine, const Tensor& reference) {
  if (engine.sizes() != reference.sizes()) return std::nullopt;
  const std::vector<double> e = engine.to_vector<double>(), r = reference.to_vector<double>();
  double largest = 0.0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const double error = e[i] == r[i] ? 0.0 : std::abs(e[i] - r[i]);  // equal infinities count as equal
    if (std::isnan(error)) return std::nan("");
    largest = std::max(largest, error);
  }
  return largest;
}

std::string error_text(const Tensor& engine, const std::optional<Tensor>& reference) {
  if (!reference || !reference->defined()) return "max|E - R| n/a (refgrad has None)";
  const std::optional<double> error = max_abs_error(engine, *reference);
  if (!error) {
    return fmt::format("max|E - R| n/a (shapes differ: {}, refgrad's {})", str(engine.sizes()), str(reference->sizes()));
  }
  return fmt::format("max|E - R| {:.3g}", *error);
}

// ---------------------------------------------------------------- printing ---

double norm_of(const Tensor& tensor) {
  double sum = 0.0;
  for (double x : tensor.to_vector<double>()) sum += x * x;
  return std::sqrt(sum);
}

std::string shortest(double value, DType dtype) {
  return print_tensor_literal(scalar_tensor(Scalar(value), is_floating_point(dtype) ? dtype : DType::Float64));
}

Tensor leading_elements(const Tensor& tensor, std::size_t count) {
  const Tensor flat = reshape(contiguous(tensor), {tensor.numel()});
  return slice(flat, 0, 0, static_cast<std::int64_t>(count));
}

std::string first_values(const Tensor& tensor, std::size_t count) {
  if (tensor.dim() == 0) return print_tensor_literal(tensor);
  std::string literal = print_tensor_literal(leading_elements(tensor, count));
  if (tensor.numel() > static_cast<std::int64_t>(count)) literal.insert(literal.size() - 1, ", ...");
  return literal;
}

std::string summarize(const std::optional<Tensor>& value) {
  if (!value || !value->defined()) return "None";
  const Tensor& tensor = *value;
  return fmt::format("{}  norm={}  {}", to_string(type_of(tensor)), shortest(norm_of(tensor), tensor.dtype()),
                     first_values(tensor));
}

}  // namespace refgrad::cli
