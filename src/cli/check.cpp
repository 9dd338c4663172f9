// `refgrad check BUNDLE`: runs the bundle's program and compares every result
// set the bundle stores with it, under the bundle's comparison rule
// (bundle.hpp's Comparison; DESIGN.md, "Numbers and precision"):
//   reference  R is refgrad's run in float64, R' its run as written (float32, say), R~
//              the float64 run with values and results moved by one rounding of their dtypes,
//              noise = max(max|R' - R|, max|R~ - R| where linear in the move: the
//              linear_sensitivity of interpreter.hpp). Engine E passes when
//              max|E - R| <= rtol max|R| + 32 max(noise, max|eager - R|); eager when
//              max|eager - R| <= rtol max|R| + 32 noise (docs/check.md, "The rule").
//              A float64 gradient (no noise to measure), or an atol given, keeps the
//              rule before it: max|E - R| <= 2 max|eager - R| + atol + rtol max|R|.
//   allclose   R is refgrad's run as written; |E - R| <= atol + rtol |R| elementwise.
// rtol and atol are the bundle's (or --rtol/--atol), else
// torch.testing.assert_close's defaults for E's dtype.
#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"

namespace refgrad::cli {

namespace {

struct CheckOptions {
  std::string file;
  std::optional<double> rtol, atol;
  std::vector<std::string> hooks;
  std::optional<std::size_t> memory_limit;
};

struct Tolerance {
  double rtol = 0.0, atol = 0.0;
};

// torch.testing.assert_close's defaults: float32 rtol 1.3e-6 atol 1e-5, float64 rtol 1e-7 atol 1e-7.
Tolerance tolerance_for(DType dtype, const Comparison& comparison) {
  Tolerance tolerance;
  if (dtype == DType::Float32 || dtype == DType::ComplexFloat) tolerance = {1.3e-6, 1e-5};
  if (dtype == DType::Float64 || dtype == DType::ComplexDouble) tolerance = {1e-7, 1e-7};
  if (dtype == DType::Float16 || dtype == DType::ComplexHalf) tolerance = {1e-3, 1e-5};
  if (dtype == DType::BFloat16) tolerance = {1.6e-2, 1e-5};
  return {comparison.rtol.value_or(tolerance.rtol), comparison.atol.value_or(tolerance.atol)};
}

// How far E is from R, in float64: max|E - R|, and max|E - R| / max|R| (the
// error in units of the gradient's scale, the scale the rule uses; an
// element-wise ratio would be infinite wherever R is an exact zero). NaN
// anywhere makes every figure NaN, so it never passes.
struct Difference {
  double max_abs = 0.0, max_rel = 0.0, max_reference = 0.0;
  bool allclose = true;  // |E - R| <= atol + rtol |R| at every element
};

// `overflowed`: the elements where refgrad's own run in the captured dtypes has a NaN or an Inf and R a
// finite number (an intermediate overflowed the dtype, as any computation in it may); a NaN or an Inf of E
// there counts as equal.
Difference difference(const Tensor& actual, const Tensor& reference, const Tolerance& tolerance,
                      const std::vector<bool>& overflowed = {}) {
  const std::vector<double> e = actual.to_vector<double>(), r = reference.to_vector<double>();
  Difference d;
  bool any_nan = false;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const bool shared_overflow = i < overflowed.size() && overflowed[i] && !std::isfinite(e[i]);
    const double abs = e[i] == r[i] || shared_overflow ? 0.0 : std::abs(e[i] - r[i]);  // equal infinities count as equal
    any_nan = any_nan || std::isnan(abs);
    d.max_abs = std::max(d.max_abs, abs);
    d.max_reference = std::max(d.max_reference, std::abs(r[i]));
    d.allclose = d.allclose && abs <= tolerance.atol + tolerance.rtol * std::abs(r[i]);
  }
  if (d.max_abs > 0.0) d.max_rel = d.max_abs / d.max_reference;
  if (any_nan) d.max_abs = d.max_rel = std::nan("");
  return d;
}

// The names of the results that a sensitivity run (`moved`) has not finite where R (`reference`) has them
// finite. Moving the numbers a program starts from one by one can break an equality the forward made exactly
// and a node relies on: amax's saved result is one of its saved input's numbers, and its backward sends the
// grad where the two are equal; moved apart, no number is, and the run gives NaN.
std::set<std::string> broken_by_moving(const Results& moved, const Results& reference) {
  std::set<std::string> broken;
  for (const auto& [name, value] : moved) {
    const auto exact = std::find_if(reference.begin(), reference.end(), [&](const auto& r) { return r.first == name; });
    if (value && exact != reference.end() && exact->second && not_finite_where_finite(*value, *exact->second)) {
      broken.insert(name);
    }
  }
  return broken;
}

// One table row: one gradient of one result set.
struct Row {
  std::string result, engine, config, grad, max_abs = "-", max_rel = "-", bound = "-", verdict;
  bool pass = false;
};

std::string config_text(const std::map<std::string, std::string>& config) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : config) parts.push_back(key + "=" + value);
  return parts.empty() ? "-" : fmt::format("{}", fmt::join(parts, ","));
}

std::string figure(double value) { return fmt::format("{:.3g}", value); }

// How many times the measured float32 noise a correct engine may be off by
// (refgrad/check/rule.py's NOISE_FACTOR, which says why).
constexpr double kNoiseFactor = 32.0;

// The sensitivity runs R~ and R~', one pair per seed (refgrad/check/rule.py's SENSITIVITY_SEEDS and
// SENSITIVITY_RATIO, which say why).
constexpr std::array<std::uint64_t, 3> kSensitivitySeeds = {0, 1, 2};
constexpr double kSensitivityRatio = 16.0;

// The smallest normal number of a floating dtype: the bound's floor, so that 0 agrees with 0.
double smallest_normal(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 2.2250738585072014e-308;
    case DType::Float16: return 6.103515625e-05;  // 2^-14
    default: return 1.1754943508222875e-38;      // float32's, and bfloat16's (the same exponent range)
  }
}

// The results of one seed's pair of sensitivity runs: the float64 runs with values and results moved by one
// rounding (R~) and by 1/16 of one (R~').
struct SensitivityRuns {
  Results moved, moved_less;
};

// How many times a sensitivity run is made again holding still more values (refgrad/check/rule.py's
// HOLD_ROUNDS): each round holds the nodes a move broke first, and a node further down may break next.
constexpr int kHoldRounds = 3;

// One SensitivityRuns per seed of kSensitivitySeeds; none where a node refuses moved values (a saved float
// tensor of marks: multilabel margin loss's is_target must hold 0 and 1): then R' alone is the noise, the
// stricter rule. Where moving the starting values broke a result (broken_by_moving), the runs are made again
// with the saved values of the nodes that broke held still (saved_values_broken_by_moving); where that does
// not mend a result either, R~ and R~' of it are the runs with the instructions' rounding noise alone.
std::vector<SensitivityRuns> sensitivity_runs(const Bundle& bundle, const Host& host, const Results& reference,
                                              const std::vector<TraceEntry>& as_captured, MachineOptions options) {
  const auto machine = [&](std::uint64_t seed, double scale, bool move_values, const std::set<std::string>& held,
                           bool keep_values) {
    MachineOptions run_options = options;
    run_options.keep_values = keep_values;
    Machine run = make_perturbed_machine(bundle, host, seed, scale, run_options, move_values, held, as_captured);
    run.run();
    return run;
  };
  const auto broken_in = [&](const SensitivityRuns& pair) {
    std::set<std::string> broken = broken_by_moving(pair.moved, reference);
    broken.merge(broken_by_moving(pair.moved_less, reference));
    return broken;
  };
  std::optional<Machine> exact;  // the float64 run keeping its values, made where a move broke something
  std::vector<SensitivityRuns> runs;
  for (const std::uint64_t seed : kSensitivitySeeds) {
    SensitivityRuns pair;
    try {
      pair = {results_of(machine(seed, 1.0, true, {}, false)),
              results_of(machine(seed, 1.0 / kSensitivityRatio, true, {}, false))};
      std::set<std::string> held;
      for (int round = 0; round < kHoldRounds && !broken_in(pair).empty(); ++round) {
        if (!exact) {
          exact.emplace(make_machine(bundle, host, Precision::Float64, {.keep_values = true,
                                                                        .memory_limit = options.memory_limit}));
          exact->run();
        }
        const Machine moved = machine(seed, 1.0, true, held, true);
        const Machine moved_less = machine(seed, 1.0 / kSensitivityRatio, true, held, true);
        std::set<std::string> more = saved_values_broken_by_moving(*exact, moved);
        more.merge(saved_values_broken_by_moving(*exact, moved_less));
        if (std::includes(held.begin(), held.end(), more.begin(), more.end())) break;  // nothing new to hold
        held.merge(more);
        pair = {results_of(machine(seed, 1.0, true, held, false)),
                results_of(machine(seed, 1.0 / kSensitivityRatio, true, held, false))};
      }
    } catch (const Error&) {
      return {};
    }
    const std::set<std::string> broken = broken_in(pair);
    if (!broken.empty()) {
      const SensitivityRuns rounded = {results_of(machine(seed, 1.0, false, {}, false)),
                                       results_of(machine(seed, 1.0 / kSensitivityRatio, false, {}, false))};
      for (auto [moved, replacements] : {std::pair{&pair.moved, &rounded.moved}, std::pair{&pair.moved_less, &rounded.moved_less}}) {
        for (std::size_t i = 0; i < moved->size(); ++i) {
          if (broken.contains((*moved)[i].first)) (*moved)[i].second = (*replacements)[i].second;
        }
      }
    }
    runs.push_back(std::move(pair));
  }
  return runs;
}

class Checker {
 public:
  // as_written: the program's results as written (R'); sensitivity: the sensitivity runs' (R~, R~'), for the
  // noise; empty under other rules.
  Checker(const Comparison& comparison, const Results& reference, const Results& as_written,
          const std::vector<SensitivityRuns>& sensitivity, const ResultSet* eager)
      : comparison_(comparison), reference_(defined_results(reference)), as_written_(defined_results(as_written)),
        eager_(eager) {
    for (const SensitivityRuns& runs : sensitivity) {
      sensitivity_.emplace_back(defined_results(runs.moved), defined_results(runs.moved_less));
    }
    for (const auto& [name, value] : reference) {
      if (value) names_.push_back(name);
    }
  }

  // The rows for result set `index`: every gradient either side has, refgrad's in declaration order.
  // An engine's values of registers ("%12", recorded where refgrad.check localized a divergence) are
  // not results of the program: they are shown with the divergence, not judged.
  std::vector<Row> rows(std::size_t index, const ResultSet& set) const {
    std::vector<std::string> names = names_;
    for (const auto& [name, value] : set.tensors) {
      if (!reference_.contains(name) && !name.starts_with('%')) names.push_back(name);
    }
    std::vector<Row> rows;
    for (const std::string& name : names) {
      Row row;
      row.result = std::to_string(index);
      row.engine = set.engine;
      row.config = config_text(set.config);
      row.grad = name;
      judge(row, set, name);
      rows.push_back(row);
    }
    return rows;
  }

 private:
  void judge(Row& row, const ResultSet& set, const std::string& name) const {
    const auto actual = set.tensors.find(name);
    const auto expected = reference_.find(name);
    if (actual == set.tensors.end() || expected == reference_.end()) {
      row.verdict = actual == set.tensors.end() ? "FAIL (missing in this result set)" : "FAIL (refgrad computes None)";
      return;
    }
    if (actual->second.sizes() != expected->second.sizes()) {
      row.verdict =
          fmt::format("FAIL (shape {}, refgrad's {})", str(actual->second.sizes()), str(expected->second.sizes()));
      return;
    }
    const Tolerance tolerance = tolerance_for(actual->second.dtype(), comparison_);
    const Difference d = difference(actual->second, expected->second, tolerance, overflowed(name));
    row.max_abs = figure(d.max_abs);
    row.max_rel = figure(d.max_rel);
    if (comparison_.rule == "allclose") {
      row.pass = d.allclose;
    } else {
      // "plain", and eager under "reference", get no eager term.
      const bool widened = comparison_.rule == "reference" && set.engine != "eager";
      // An atol given (the bundle's or --atol) keeps its meaning: the rule with atol, not the noise.
      const bool scaled = comparison_.rule == "reference" && !comparison_.atol;
      const std::optional<double> measured = scaled ? noise(name) : std::nullopt;
      double bound = (widened ? 2 * eager_error(name) : 0.0) + tolerance.atol + tolerance.rtol * d.max_reference;
      if (measured) {
        const double spread = widened ? std::max(*measured, eager_error(name)) : *measured;
        bound = tolerance.rtol * d.max_reference + kNoiseFactor * spread + smallest_normal(actual->second.dtype());
      }
      row.bound = figure(bound);
      row.pass = d.max_abs <= bound;
    }
    row.verdict = row.pass ? "pass" : "FAIL";
  }

  // max(max|R' - R|, max|R~ - R|) for a gradient; none for a float64 one (R' is R) or where max|R' - R| is
  // not finite.
  std::optional<double> noise(const std::string& name) const {
    const auto other = as_written_.find(name);
    const auto expected = reference_.find(name);
    if (other == as_written_.end() || !is_floating_point(other->second.dtype()) || other->second.dtype() == DType::Float64) {
      return std::nullopt;
    }
    const double measured = difference(other->second, expected->second, {}).max_abs;
    if (!std::isfinite(measured)) return std::nullopt;
    double largest = measured;
    for (const auto& [perturbed, perturbed_less] : sensitivity_) {
      const auto moved = perturbed.find(name), moved_less = perturbed_less.find(name);
      if (moved == perturbed.end() || moved_less == perturbed_less.end() ||
          moved->second.sizes() != expected->second.sizes() || moved_less->second.sizes() != expected->second.sizes()) {
        continue;
      }
      largest = std::max(largest, linear_sensitivity(expected->second, moved->second, moved_less->second, kSensitivityRatio));
    }
    return largest;
  }

  // Where refgrad's run as written (R') has a NaN or an Inf and R a finite number (empty: nowhere).
  std::vector<bool> overflowed(const std::string& name) const {
    const auto other = as_written_.find(name);
    const auto expected = reference_.find(name);
    if (other == as_written_.end() || expected == reference_.end() || other->second.sizes() != expected->second.sizes() ||
        other->second.dtype() == DType::Float64) {
      return {};
    }
    const std::vector<double> r_prime = other->second.to_vector<double>(), r = expected->second.to_vector<double>();
    std::vector<bool> mask(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) mask[i] = !std::isfinite(r_prime[i]) && std::isfinite(r[i]);
    return mask;
  }

  // max|eager - R| for a gradient; 0 when the bundle holds no eager result for it.
  double eager_error(const std::string& name) const {
    if (eager_ == nullptr) return 0.0;
    const auto eager = eager_->tensors.find(name);
    const auto expected = reference_.find(name);
    if (eager == eager_->tensors.end() || eager->second.sizes() != expected->second.sizes()) return 0.0;
    return difference(eager->second, expected->second, {}).max_abs;
  }

  Comparison comparison_;
  TensorMap reference_;
  TensorMap as_written_;
  std::vector<std::pair<TensorMap, TensorMap>> sensitivity_;  // (R~, R~') per seed
  std::vector<std::string> names_;  // reference_'s, in declaration order
  const ResultSet* eager_;
};

void print_table(const std::vector<Row>& rows) {
  std::vector<std::array<std::string, 8>> table{
      {"result", "engine", "config", "grad", "max abs", "max rel", "bound", ""}};
  for (const Row& row : rows) {
    table.push_back({row.result, row.engine, row.config, row.grad, row.max_abs, row.max_rel, row.bound, row.verdict});
  }
  std::array<std::size_t, 8> widths{};
  for (const auto& line : table) {
    for (std::size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  }
  for (const auto& line : table) {
    std::string text;
    for (std::size_t c = 0; c < line.size(); ++c) text += fmt::format("{:<{}}  ", line[c], widths[c]);
    text.erase(text.find_last_not_of(' ') + 1);
    std::cout << text << '\n';
  }
}

// What R is, the rule and the tolerances, in three lines.
std::string header(const std::string& file, const Comparison& comparison, bool has_eager) {
  const std::string tolerances =
      comparison.rtol || comparison.atol
          ? fmt::format("rtol {}, atol {}", comparison.rtol ? figure(*comparison.rtol) : "per dtype",
                        comparison.atol ? figure(*comparison.atol) : "per dtype")
          : "torch.testing.assert_close's for E's dtype "
            "(float32: rtol 1.3e-06, atol 1e-05; float64: rtol 1e-07, atol 1e-07)";
  if (comparison.rule == "plain") {
    return fmt::format("check {}\n  rule plain: R = refgrad's run in float64; E passes when max|E - R| <= bound = "
                       "atol + rtol max|R|\n  tolerances: {}",
                       file, tolerances);
  }
  const std::string rule =
      comparison.rule == "allclose"
          ? "allclose: R = refgrad's run as written; E passes when |E - R| <= atol + rtol |R| at every element"
          : fmt::format("reference: R = refgrad's run in float64, R' as written, R~ with values and results "
                        "moved by one rounding, noise = max(max|R' - R|, max|R~ - R| where linear); "
                        "E passes when max|E - R| <= bound = rtol max|R| + 32 {} "
                        "(float64 gradients, or atol given: {}atol + rtol max|R|)",
                        has_eager ? "max(noise, max|eager - R|)" : "noise", has_eager ? "2 max|eager - R| + " : "");
  return fmt::format("check {}\n  rule {}\n  tolerances: {}", file, rule, tolerances);
}

// The divergence refgrad.check found, from the bundle's provenance: the node and its instruction, and
// the engine's recorded value of the divergent register beside R's (`reference`, refgrad's value of it
// at `precision`): a few numbers and max|E - R|.
void print_divergence(const Bundle& bundle, const std::optional<Tensor>& reference, Precision precision) {
  const auto& provenance = bundle.provenance;
  const auto engine = provenance.find("engine");
  const std::string engine_name = engine == provenance.end() ? "" : engine->second;
  std::cout << fmt::format("first divergence found by refgrad.check{}: {}\n",
                           engine_name.empty() ? "" : " for " + engine_name, provenance.at("divergence"));
  if (const auto instruction = provenance.find("divergence_instruction"); instruction != provenance.end()) {
    std::cout << "    " << instruction->second << '\n';
  }
  const auto register_name = provenance.find("divergence_register");
  const auto set = std::find_if(bundle.results.begin(), bundle.results.end(),
                                [&](const ResultSet& result) { return result.engine == engine_name; });
  if (register_name == provenance.end() || set == bundle.results.end()) return;
  const auto value = set->tensors.find(register_name->second);
  if (value == set->tensors.end()) return;
  const std::string& name = register_name->second;
  const std::size_t width = std::max(engine_name.size(), std::string("refgrad").size());
  std::cout << fmt::format("    {}: {}'s value (result {}) beside refgrad's ({}):\n", name, engine_name,
                           set - bundle.results.begin(), precision_name(precision));
  std::cout << fmt::format("      {:<{}}  {}\n", engine_name, width, summarize(value->second));
  std::cout << fmt::format("      {:<{}}  {}\n", "refgrad", width,
                           reference ? summarize(reference) : "(not kept by this run)");
  if (reference) std::cout << fmt::format("      {}\n", error_text(value->second, reference));
}

// Runs `machine` to the end, keeping refgrad's value of `name` on the way: "%12" is read just after
// the instruction that makes it (the machine frees a register after its last use), "@w" at the end.
std::optional<Tensor> run_keeping(Machine& machine, const std::string& name) {
  std::optional<Tensor> value;
  if (name.starts_with('%')) {
    const std::vector<Instr>& code = machine.program().code;
    const auto makes = [&](const Instr& instr) {
      return std::any_of(instr.results.begin(), instr.results.end(),
                         [&](const std::optional<std::string>& result) { return result && *result == name.substr(1); });
    };
    const auto maker = std::find_if(code.begin(), code.end(), makes);
    if (maker != code.end()) {
      const auto after = static_cast<std::size_t>(maker - code.begin()) + 1;
      machine.run_until([after](const Machine& m) { return m.pc() == after; });
      value = machine.register_value(name.substr(1));
    }
  }
  machine.run();
  if (name.starts_with('@')) value = machine.leaf_grad(name.substr(1));
  if (value && !value->defined()) value.reset();
  return value;
}

int check_command(const CheckOptions& options) {
  Bundle bundle = load_checked(options.file);
  check(!bundle.results.empty(), options.file, " holds no result sets to check (refgrad run -o writes one)");
  Comparison comparison = bundle.comparison.value_or(Comparison{});
  if (options.rtol) comparison.rtol = options.rtol;
  if (options.atol) comparison.atol = options.atol;
  check(comparison.rule == "reference" || comparison.rule == "plain" || comparison.rule == "allclose", options.file,
        ": unknown comparison rule '", comparison.rule, "' (reference, plain or allclose)");
  check(comparison.reference == "refgrad", options.file, ": the comparison's reference engine is '",
        comparison.reference, "'; refgrad check computes the reference itself, so it must be 'refgrad'");
  add_grad_inputs(bundle, {});
  const Host host = make_host(bundle.program, options.hooks, std::cout);
  const Precision precision = precision_of(comparison);
  Machine machine = make_machine(bundle, host, precision, {.memory_limit = options.memory_limit});
  const auto divergent = bundle.provenance.find("divergence_register");
  const std::optional<Tensor> divergent_value =
      run_keeping(machine, divergent == bundle.provenance.end() ? "" : divergent->second);
  const auto eager = std::find_if(bundle.results.begin(), bundle.results.end(),
                                  [](const ResultSet& set) { return set.engine == "eager"; });
  const ResultSet* eager_set = eager == bundle.results.end() ? nullptr : &*eager;
  Results as_written;
  std::vector<SensitivityRuns> sensitivity;
  if (comparison.rule == "reference") {
    Machine other = make_machine(bundle, host, Precision::AsWritten, {.trace = true, .memory_limit = options.memory_limit});
    other.run();
    as_written = results_of(other);
    sensitivity =
        sensitivity_runs(bundle, host, results_of(machine), other.trace(), {.memory_limit = options.memory_limit});
  }
  const Checker checker(comparison, results_of(machine), as_written, sensitivity, eager_set);
  std::vector<Row> rows;
  for (std::size_t i = 0; i < bundle.results.size(); ++i) {
    for (Row& row : checker.rows(i, bundle.results[i])) rows.push_back(std::move(row));
  }
  std::cout << header(options.file, comparison, eager_set != nullptr) << '\n';
  print_table(rows);
  const auto failed =
      static_cast<std::size_t>(std::count_if(rows.begin(), rows.end(), [](const Row& row) { return !row.pass; }));
  std::cout << fmt::format("{} of {} gradients pass\n", rows.size() - failed, rows.size());
  // refgrad.check writes the first divergent node it found into the provenance of the bundle
  if (bundle.provenance.contains("divergence")) print_divergence(bundle, divergent_value, precision);
  return failed == 0 ? kExitOk : kExitCheckFailed;
}

}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* command = app.add_subcommand(
      "check",
      "run a bundle's program and compare it with the result sets the bundle stores (exit code 1 on a mismatch)");
  command->add_option("BUNDLE", options->file, "a .safetensors bundle with result sets")->required();
  command->add_option("--rtol", options->rtol, "relative tolerance (default: the bundle's, else per dtype)");
  command->add_option("--atol", options->atol, "absolute tolerance (default: the bundle's, else per dtype)");
  add_hook_option(*command, options->hooks);
  add_memory_limit_option(*command, options->memory_limit);
  add_threads_option(*command);
  command->callback([options, &exit_code] { exit_code = check_command(*options); });
}

}  // namespace refgrad::cli
