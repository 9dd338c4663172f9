// `refgrad run FILE`: runs a program and prints its leaf grads and outputs,
// as text or JSON, at one precision or both; -o writes them to a bundle.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "refgrad/version.hpp"

namespace refgrad::cli {

namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

struct RunOptions : InputOptions {
  bool json = false;
  std::string out;
};

// One run of the program at one precision.
struct Run {
  Precision precision;
  Results results;
};

std::vector<Precision> precisions_of(const std::string& option) {
  if (option == "both") return {Precision::AsWritten, Precision::Float64};
  if (option == "float64") return {Precision::Float64};
  return {Precision::AsWritten};
}

// max |a - b| in float64; nullopt when one is None or the shapes differ.
std::optional<double> max_abs_difference(const std::optional<Tensor>& a, const std::optional<Tensor>& b) {
  if (!a || !b || a->sizes() != b->sizes()) return std::nullopt;
  const std::vector<double> x = a->to_vector<double>(), y = b->to_vector<double>();
  double largest = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) largest = std::max(largest, std::abs(x[i] - y[i]));
  return largest;
}

// ------------------------------------------------------------------ text ---

void print_text(const std::vector<Run>& runs) {
  std::size_t width = 0;
  for (const auto& [name, value] : runs.front().results) width = std::max(width, name.size());
  for (std::size_t i = 0; i < runs.front().results.size(); ++i) {
    for (std::size_t r = 0; r < runs.size(); ++r) {
      const std::string name = r == 0 ? runs[r].results[i].first : "";
      std::cout << fmt::format("{:<{}}  {}\n", name, width, summarize(runs[r].results[i].second));
    }
    if (runs.size() == 2) {
      const std::optional<double> difference = max_abs_difference(runs[0].results[i].second, runs[1].results[i].second);
      const std::string text = difference ? fmt::format("{:.3g}", *difference) : "n/a (None or shapes differ)";
      std::cout << fmt::format("{:<{}}  max abs difference {}\n", "", width, text);
    }
  }
}

// ------------------------------------------------------------------ JSON ---

// A number as JSON holds it: the shortest spelling in the tensor's dtype
// (4.5, not 4.5000000001), and "nan", "inf", "-inf" as strings.
Json json_number(double value, DType dtype) {
  const std::string spelled = shortest(value, dtype);
  if (!std::isfinite(value)) return spelled;
  return std::stod(spelled);
}

Json json_tensor(const std::optional<Tensor>& value) {
  if (!value) return nullptr;
  const Tensor& tensor = *value;
  Json values = Json::array();
  for (double x : leading_elements(tensor).to_vector<double>()) values.push_back(json_number(x, tensor.dtype()));
  return {{"dtype", dtype_name(tensor.dtype())},
          {"shape", tensor.sizes()},
          {"numel", tensor.numel()},
          {"norm", json_number(norm_of(tensor), tensor.dtype())},
          {"values", values}};
}

Json to_json(const std::string& program, const std::vector<Run>& runs) {
  Json out{{"program", program}, {"runs", Json::object()}};
  for (const Run& run : runs) {
    Json& results = out["runs"][precision_name(run.precision)] = Json::object();
    for (const auto& [name, value] : run.results) results[name] = json_tensor(value);
  }
  if (runs.size() == 2) {
    Json& differences = out["max_abs_difference"] = Json::object();
    for (std::size_t i = 0; i < runs[0].results.size(); ++i) {
      const std::optional<double> difference = max_abs_difference(runs[0].results[i].second, runs[1].results[i].second);
      differences[runs[0].results[i].first] = difference ? Json(*difference) : Json(nullptr);
    }
  }
  return out;
}

// ------------------------------------------------------------------- -o ---

// The program, its inputs (saved tensors, grads, leaves' .grad) and one
// result set per run: a self-contained bundle that `refgrad check` reads.
void save_results(const Bundle& source, const std::vector<Run>& runs, const std::string& path) {
  check(extension_of(path) == ".safetensors", "-o ", path,
        ": results are written as a bundle, a .safetensors file (docs/cli.md)");
  Bundle out = make_bundle(source.program, source.tensors);
  out.comparison = source.comparison;
  out.provenance = source.provenance;
  out.provenance["refgrad_version"] = version;
  for (const Run& run : runs) {
    out.results.push_back({"refgrad", defined_results(run.results), {{"precision", precision_name(run.precision)}}});
  }
  save_bundle(out, path);
}

int run_command(const RunOptions& options) {
  Bundle bundle = load_checked(options.file);
  add_grad_inputs(bundle, options.grads);
  // Hooks that print write to stderr under --json, so that stdout stays one JSON document.
  const Host host = make_host(bundle.program, options.hooks, options.json ? std::cerr : std::cout);
  std::vector<Run> runs;
  for (Precision precision : precisions_of(options.precision)) {
    Machine machine = make_machine(bundle, host, precision,
                                   {.keep_values = options.check_finite, .memory_limit = options.memory_limit});
    if (const std::optional<std::string> non_finite = run_to_end(machine, options.check_finite)) {
      std::cerr << "refgrad: check-finite: " << precision_name(precision) << " run: " << *non_finite << '\n';
      return kExitCheckFailed;
    }
    runs.push_back({precision, results_of(machine)});
  }
  if (options.json) std::cout << to_json(bundle.program.name, runs).dump(2) << '\n';
  else print_text(runs);
  if (!options.out.empty()) save_results(bundle, runs, options.out);
  return kExitOk;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = app.add_subcommand("run", "run a program; print each leaf grad and output");
  add_input_options(*command, *options, /*allow_both=*/true);
  command->add_flag("--json", options->json, "print a JSON object instead of text");
  command->add_option("-o,--output", options->out,
                      "write a bundle (.safetensors): the program, its inputs and one result set per precision");
  command->callback([options, &exit_code] { exit_code = run_command(*options); });
}

}  // namespace refgrad::cli
