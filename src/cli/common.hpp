// L5, the `refgrad` command: what several subcommands share — loading a
// program file, the options that feed a run (--grad, --hook, --precision,
// --check-finite), making a Machine, and printing tensors and results.
#pragma once

#include <charconv>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "refgrad/bundle.hpp"
#include "refgrad/interpreter.hpp"

namespace refgrad::cli {

// Exit codes: 0 ok; 1 a check failed (a mismatch in `check`, a NaN or Inf
// under --check-finite); 2 a usage, input or run-time error.
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitError = 2;

// ---------------------------------------------------------------- numbers ---

// The whole of `text` as a number, or nullopt ("", "12x", "-1" for an unsigned type).
template <class Number>
std::optional<Number> parse_number(std::string_view text) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end) return std::nullopt;
  return value;
}

// ------------------------------------------------------------------ files ---

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& contents);
std::string extension_of(const std::string& path);  // ".bwd", ".rgbc", ".safetensors", ...

// load_program_file, then the verifier: errors raise, warnings go to stderr.
Bundle load_checked(const std::string& path);

// --------------------------------------------------------------- run inputs ---

// Precisions a run can use: the program as written, or promoted to float64
// (promote_to_float64, DESIGN.md's "reference precision").
enum class Precision { AsWritten, Float64 };
std::string precision_name(Precision precision);  // "float32", "float64"
// The precision of refgrad's run that a comparison's rule compares with (R): float64 (reference
// precision) under "reference" and "plain", the program as written under "allclose".
Precision precision_of(const Comparison& comparison);

// The options of `run` and `step` that say how to run the program.
struct InputOptions {
  std::string file;
  std::vector<std::string> grads;  // NAME=FILE:TENSOR
  std::vector<std::string> hooks;  // NAME=scale:K, NAME=print
  std::string precision = "float32";  // "" (step): the bundle's comparison's (precision_of)
  bool check_finite = false;
  std::optional<std::size_t> memory_limit;  // --memory-limit, in bytes
};
// Adds FILE, --grad, --hook, --precision (float32, float64, and `both` when
// `allow_both`), --check-finite and --memory-limit to `command`. An empty
// options.precision is a default that the command chooses (step: the bundle's).
void add_input_options(CLI::App& command, InputOptions& options, bool allow_both);
void add_hook_option(CLI::App& command, std::vector<std::string>& hooks);
// --memory-limit SIZE (MachineOptions::memory_limit): bytes, or with a suffix K, M, G, T (powers of 1024).
void add_memory_limit_option(CLI::App& command, std::optional<std::size_t>& memory_limit);
// --threads N: the threads the kernels use (refgrad::set_num_threads; default every core). Results do not
// depend on it.
void add_threads_option(CLI::App& command);
// "512M" -> 536870912; raises on anything else than digits and one optional suffix.
std::size_t parse_byte_count(const std::string& text);

// Reads each --grad NAME=FILE:TENSOR into bundle.tensors["%NAME"], checked
// against the declaration, then checks that every grad has a value.
void add_grad_inputs(Bundle& bundle, const std::vector<std::string>& specs);

// The host functions the command line offers (--hook NAME=scale:K, NAME=print;
// docs/cli.md). Raises when the program calls a hook or function the specs
// do not provide. `print` hooks write to `hook_out`.
Host make_host(const Program& program, const std::vector<std::string>& specs, std::ostream& hook_out);

// A machine for the bundle's program and tensors at `precision`.
Machine make_machine(const Bundle& bundle, const Host& host, Precision precision, MachineOptions options = {});
// The float64 program with the values it starts from moved by `scale` roundings of their dtypes
// (perturbed_to_float64), and every instruction's results by `scale` roundings of the dtype it computes in
// (rounding_noise_of): the check rule's sensitivity runs. move_values=false: the instructions' rounding noise
// alone, from the values as captured; `held`: the values not moved (saved_values_broken_by_moving);
// `as_captured`: the trace of a run as captured, whose narrowing casts round too (rounding_noise_of).
Machine make_perturbed_machine(const Bundle& bundle, const Host& host, std::uint64_t seed, double scale,
                               MachineOptions options = {}, bool move_values = true,
                               const std::set<std::string>& held = {},
                               const std::vector<TraceEntry>& as_captured = {});

// ---------------------------------------------------------------- results ---

// A run's leaf grads ("@w") and outputs ("^x") in declaration order; nullopt: None.
using Results = std::vector<std::pair<std::string, std::optional<Tensor>>>;
Results results_of(const Machine& machine);
TensorMap defined_results(const Results& results);  // as a bundle's result set holds them

// Runs the machine to the end. Under `check_finite` it stops after the first
// instruction that makes a NaN or Inf and returns a description of it.
std::optional<std::string> run_to_end(Machine& machine, bool check_finite);

// ---------------------------------------------------- an engine's results ---

// The result set `choice` names: its index ("1") or its engine ("eager"); raises naming the sets there are.
std::size_t find_result_set(const std::vector<ResultSet>& results, const std::string& choice);
// max|E - R| in float64 for two tensors of the same shape (equal infinities count as equal, a NaN
// anywhere makes it NaN); nullopt when the shapes differ.
std::optional<double> max_abs_error(const Tensor& engine, const Tensor& reference);
// "max|E - R| 0.0019" ("max|E - R| n/a (shapes differ)", "... (refgrad has None)").
std::string error_text(const Tensor& engine, const std::optional<Tensor>& reference);

// "f32[3]  norm=13.60147  [4.0, 5.0, 12.0]": type, 2-norm (computed in float64,
// spelled in the tensor's dtype) and the first six values; "None" for nullopt.
std::string summarize(const std::optional<Tensor>& value);
// The first `count` elements in row-major order, as a 1-d tensor.
Tensor leading_elements(const Tensor& tensor, std::size_t count = 6);
// The first `count` values (row-major) as a literal: "[4.0, 5.0, ...]"; a 0-dim tensor: "1.0".
std::string first_values(const Tensor& tensor, std::size_t count = 6);
double norm_of(const Tensor& tensor);
// The shortest spelling of `value` in `dtype` that reads back exactly: "13.60147" for float32.
std::string shortest(double value, DType dtype);

}  // namespace refgrad::cli
