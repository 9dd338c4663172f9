// Bundles: a program, its tensors and optionally results in one safetensors file
// (bundle.hpp says what goes where; docs/program.md shows an example header), and
// loading a program from any of the files it comes in.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "json_io.hpp"
#include "refgrad/bundle.hpp"

namespace refgrad {
namespace {

using nlohmann::json;

constexpr std::string_view kFormatKey = "refgrad.bundle";
constexpr std::string_view kFormatVersion = "1";

// ------------------------------------------------------------ program values ---

// The declared type of a program value by sigiled name: "$x" a saved tensor, "%g0" an
// incoming grad, "@w" a leaf's initial .grad. nullptr when the program declares no such value.
const TensorType* declared_type(const Program& program, std::string_view name) {
  if (name.empty()) return nullptr;
  const auto type_of_decl = [](const auto* decl) -> const TensorType* { return decl ? &decl->type : nullptr; };
  const std::string_view bare = name.substr(1);
  switch (name[0]) {
    case '$': return type_of_decl(program.find_saved(bare));
    case '%': return type_of_decl(program.find_grad(bare));
    case '@': return type_of_decl(program.find_leaf(bare));
    default: return nullptr;
  }
}

void check_declared(const Program& program, std::string_view name, std::string_view what) {
  check(declared_type(program, name) != nullptr, what, ": tensor '", name, "' is not a value that program '",
        program.name, "' declares (a $saved, %grad or @leaf name)");
}

std::string result_tensor_name(std::size_t result, std::string_view name) {
  return concat("result.", result, ".", name);
}

// --------------------------------------------------------------- comparison ---

// The rules of bundle.hpp's Comparison. Checked when writing too, so that no file is
// written that reading would refuse.
void check_comparison(const Comparison& comparison, std::string_view what) {
  check(comparison.rule == "reference" || comparison.rule == "plain" || comparison.rule == "allclose", what,
        ": rule '", comparison.rule, "' is not 'reference', 'plain' or 'allclose'");
  for (const auto& [name, tolerance] : {std::pair{"rtol", comparison.rtol}, std::pair{"atol", comparison.atol}}) {
    const double value = tolerance.value_or(0.0);
    check(std::isfinite(value) && value >= 0, what, ": ", name, " ", value, " is not a finite number >= 0");
  }
}

json comparison_json(const Comparison& comparison) {
  auto tolerance = [](const std::optional<double>& value) { return value ? json(*value) : json(nullptr); };
  return {{"rule", comparison.rule},
          {"reference", comparison.reference},
          {"rtol", tolerance(comparison.rtol)},
          {"atol", tolerance(comparison.atol)}};
}

std::optional<double> parse_tolerance(const json& value, std::string_view what) {
  if (value.is_null()) return std::nullopt;
  check(value.is_number(), what, ": ", detail::json_excerpt(value), " is not a number or null");
  return value.get<double>();
}

std::string parse_string(const json& value, std::string_view what) {
  check(value.is_string(), what, ": ", detail::json_excerpt(value), " is not a string");
  return value.get<std::string>();
}

Comparison parse_comparison(std::string_view text, std::string_view origin) {
  const std::string what = concat(origin, ": comparison");
  const json value = detail::parse_json(text, what);
  detail::check_keys(value, {"rule", "reference", "rtol", "atol"}, what);
  Comparison comparison{parse_string(value["rule"], what + ": rule"),
                        parse_string(value["reference"], what + ": reference"),
                        parse_tolerance(value["rtol"], what + ": rtol"),
                        parse_tolerance(value["atol"], what + ": atol")};
  check_comparison(comparison, what);
  return comparison;
}

// ------------------------------------------------------------------ results ---

json results_json(const std::vector<ResultSet>& results) {
  json list = json::array();
  for (const ResultSet& result : results) {
    json names = json::array();
    for (const auto& entry : result.tensors) names.push_back(entry.first);
    list.push_back({{"engine", result.engine}, {"config", result.config}, {"tensors", names}});
  }
  return list;
}

// Result `index`, with its tensors taken out of `tensors` ("result.<index>.<name>").
ResultSet parse_result(const json& value, std::size_t index, TensorMap& tensors, std::string_view what) {
  detail::check_keys(value, {"engine", "config", "tensors"}, what);
  ResultSet result;
  result.engine = parse_string(value["engine"], concat(what, ": engine"));
  result.config = detail::string_map(value["config"], concat(what, ": config"));
  const json& names = value["tensors"];
  check(names.is_array(), what, ": tensors ", detail::json_excerpt(names), " is not a list of names");
  for (const json& name_json : names) {
    const std::string name = parse_string(name_json, concat(what, ": tensors entry"));
    check(!result.tensors.contains(name), what, ": tensor '", name, "' is listed twice");
    auto stored = tensors.extract(result_tensor_name(index, name));
    check(!stored.empty(), what, ": tensor '", name, "' is listed, but the file has no tensor '",
          result_tensor_name(index, name), "'");
    result.tensors.emplace(name, std::move(stored.mapped()));
  }
  return result;
}

std::vector<ResultSet> parse_results(std::string_view text, TensorMap& tensors, std::string_view origin) {
  const std::string what = concat(origin, ": results");
  const json list = detail::parse_json(text, what);
  check(list.is_array(), what, ": ", detail::json_excerpt(list), " is not a list");
  std::vector<ResultSet> results;
  for (std::size_t i = 0; i < list.size(); ++i) {
    results.push_back(parse_result(list[i], i, tensors, concat(what, "[", i, "]")));
  }
  return results;
}

// ----------------------------------------------------------------- metadata ---

void check_bundle_metadata(const std::map<std::string, std::string>& metadata, std::string_view origin) {
  const auto version = metadata.find(std::string(kFormatKey));
  check(version != metadata.end(), origin, ": not a refgrad bundle (its __metadata__ has no '", kFormatKey, "')");
  check(version->second == kFormatVersion, origin, ": bundle format version '", version->second,
        "' is not supported (this refgrad reads version ", kFormatVersion, ")");
  check(metadata.contains("program"), origin, ": the bundle's __metadata__ has no 'program'");
  for (const auto& entry : metadata) {
    const std::string& key = entry.first;
    check(key == kFormatKey || key == "program" || key == "results" || key == "comparison" || key == "provenance",
          origin, ": unknown __metadata__ key '", key, "'");
  }
}

// ---------------------------------------------------------------------- files ---

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.is_open(), "cannot open '", path, "'");
  std::string contents{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  check(!in.bad(), "cannot read '", path, "'");
  return contents;
}

std::span<const std::byte> as_bytes(const std::string& contents) {
  return std::as_bytes(std::span(contents.data(), contents.size()));
}

// `x.bwd`, with the tensors of `x.safetensors` when that file exists.
Bundle load_text_program(const std::string& path) {
  Bundle bundle;
  bundle.program = parse_program(read_file(path), path);
  const std::string tensors_path = std::filesystem::path(path).replace_extension(".safetensors").string();
  std::error_code no_such_file;
  if (!std::filesystem::exists(tensors_path, no_such_file)) return bundle;
  bundle.tensors = read_safetensors(as_bytes(read_file(tensors_path)), tensors_path);
  for (const auto& entry : bundle.tensors) check_declared(bundle.program, entry.first, tensors_path);
  return bundle;
}

}  // namespace

// ------------------------------------------------------------------- bundles ---

std::string write_bundle(const Bundle& bundle) {
  for (const auto& entry : bundle.tensors) check_declared(bundle.program, entry.first, "write_bundle");
  std::map<std::string, std::string> metadata{{std::string(kFormatKey), std::string(kFormatVersion)},
                                              {"program", print_program(bundle.program)}};
  TensorMap tensors = bundle.tensors;
  if (!bundle.results.empty()) {
    metadata["results"] = detail::dump_json(results_json(bundle.results), "write_bundle: results");
    for (std::size_t i = 0; i < bundle.results.size(); ++i) {
      for (const auto& [name, tensor] : bundle.results[i].tensors) tensors.emplace(result_tensor_name(i, name), tensor);
    }
  }
  if (bundle.comparison) {
    check_comparison(*bundle.comparison, "write_bundle: comparison");
    metadata["comparison"] = detail::dump_json(comparison_json(*bundle.comparison), "write_bundle: comparison");
  }
  if (!bundle.provenance.empty()) {
    metadata["provenance"] = detail::dump_json(json(bundle.provenance), "write_bundle: provenance");
  }
  return write_safetensors(tensors, metadata);
}

Bundle read_bundle(std::span<const std::byte> bytes, std::string_view origin) {
  std::map<std::string, std::string> metadata;
  TensorMap tensors = read_safetensors(bytes, origin, &metadata);
  check_bundle_metadata(metadata, origin);

  Bundle bundle;
  bundle.program = parse_program(metadata.at("program"), concat(origin, ":program"));
  if (metadata.contains("results")) bundle.results = parse_results(metadata.at("results"), tensors, origin);
  if (metadata.contains("comparison")) bundle.comparison = parse_comparison(metadata.at("comparison"), origin);
  if (metadata.contains("provenance")) {
    const std::string what = concat(origin, ": provenance");
    bundle.provenance = detail::string_map(detail::parse_json(metadata.at("provenance"), what), what);
  }
  // What the results did not take are the program's values.
  for (const auto& entry : tensors) {
    check(!entry.first.starts_with("result."), origin, ": tensor '", entry.first, "' is not listed in results");
    check_declared(bundle.program, entry.first, origin);
  }
  bundle.tensors = std::move(tensors);
  return bundle;
}

void save_bundle(const Bundle& bundle, const std::string& path) {
  const std::string bytes = write_bundle(bundle);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  check(out.is_open(), "cannot open '", path, "' for writing");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  check(!out.fail(), "cannot write '", path, "'");
}

Bundle load_bundle(const std::string& path) { return read_bundle(as_bytes(read_file(path)), path); }

Bundle load_program_file(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension == ".safetensors") return load_bundle(path);
  if (extension == ".rgbc") {
    Bundle bundle;
    bundle.program = disassemble(read_bytecode(as_bytes(read_file(path)), path));
    return bundle;
  }
  if (extension == ".bwd") return load_text_program(path);
  fail(concat("load_program_file: '", path, "' is not .safetensors (a bundle), .rgbc (bytecode) or .bwd (text)"));
}

Bundle make_bundle(Program program, const TensorMap& values, std::size_t inline_limit) {
  for (const auto& [name, value] : values) {
    check_declared(program, name, "make_bundle");
    const TensorType& declared = *declared_type(program, name);
    check(value.defined() && value.dtype() == declared.dtype && value.sizes() == declared.sizes, "make_bundle: ",
          name, " is declared ", to_string(declared), ", but its value is ",
          value.defined() ? to_string(type_of(value)) : "undefined");
  }
  Bundle bundle;
  // A given value replaces an inline one: inline when small, else a bundle tensor.
  auto place = [&](std::optional<Tensor>& inline_value, const std::string& name) {
    const auto found = values.find(name);
    if (found == values.end()) return;
    if (static_cast<std::size_t>(found->second.numel()) <= inline_limit) {
      inline_value = found->second;
    } else {
      inline_value.reset();
      bundle.tensors.emplace(name, found->second);
    }
  };
  for (SavedDecl& decl : program.saved) {
    place(decl.value, "$" + decl.name);
    check(decl.value || bundle.tensors.contains("$" + decl.name), "make_bundle: saved tensor $", decl.name,
          " has no value (neither inline nor in the values given)");
  }
  for (GradDecl& decl : program.grads) place(decl.value, "%" + decl.name);
  for (LeafDecl& decl : program.leaves) place(decl.grad, "@" + decl.name);
  bundle.program = std::move(program);
  return bundle;
}

BoundProgram bind(const Bundle& bundle) { return bind(assemble(bundle.program), bundle.tensors); }

}  // namespace refgrad
