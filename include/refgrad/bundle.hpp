// L2: bundles — a program with its tensors in one .safetensors file, and
// optionally results to compare against, so that a failing comparison is a
// single self-contained reproducer.
//
// The file is plain safetensors (8-byte little-endian header length, a JSON
// header, the tensor bytes); nothing is executed on load. The header's
// __metadata__ (string -> string, as safetensors requires) holds
//   "refgrad.bundle"  the bundle format version, "1"
//   "program"         the program's canonical text
//   "results"         JSON: [{"engine": ..., "config": {...}, "tensors": [...]}, ...]
//   "comparison"      JSON: {"rule": ..., "reference": ..., "rtol": ..., "atol": ...}
//   "provenance"      JSON: {"refgrad_version": ..., "torch_version": ..., "order": ..., ...}
// and tensors are stored by name: the program's values under their sigiled
// names ("$x", "%g0", "@w"), result i's tensors as "result.<i>.<name>"
// ("result.0.@w"). docs/program.md has an example header.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "refgrad/bytecode.hpp"
#include "refgrad/program.hpp"

namespace refgrad {

// What one engine computed: leaf grads by "@name", outputs by "^name", and
// its values of the program's registers by "%name" (what refgrad.check
// recorded at a divergence; shown beside refgrad's, not judged as results).
struct ResultSet {
  std::string engine;                         // "refgrad", "eager", "compiled_autograd:inductor", ...
  TensorMap tensors;
  std::map<std::string, std::string> config;  // the engine's configuration, as its owner wrote it
};

// How results are compared (DESIGN.md "Numbers and precision").
struct Comparison {
  // "reference": engine E passes when max|E - R| <= rtol max|R| + 32 max(noise, max|eager - R|), eager
  // when max|eager - R| <= rtol max|R| + 32 noise, noise = max|R' - R| with R' the run as written (a float64
  // gradient, or an atol given: 2 max|eager - R| + atol + rtol max|R|); "plain": every engine, eager included, when
  // max|E - R| <= atol + rtol max|R| (the rule with rtol and atol given); R is refgrad's run in float64
  // for both. "allclose": |E - R| <= atol + rtol |R| elementwise, R refgrad's run as written.
  std::string rule = "reference";
  std::string reference = "refgrad";  // the engine R whose results the others are compared with
  std::optional<double> rtol, atol;   // nullopt: torch.testing.assert_close's per-dtype defaults
  bool operator==(const Comparison& other) const = default;
};

struct Bundle {
  Program program;
  TensorMap tensors;  // the program's values that are not inline ("$x", "%g0", "@w")
  std::vector<ResultSet> results;
  std::optional<Comparison> comparison;
  // Where the bundle came from: "refgrad_version", "torch_version", "order" ("eager" or
  // "compiled_autograd"), "seed", "device", ... Free-form; written as given.
  std::map<std::string, std::string> provenance;
};

// The .safetensors bytes, and back. read_bundle checks the header length, the
// JSON, every tensor's dtype, shape and byte range (inside the data, not
// overlapping, covering it), the metadata's format version and JSON, and
// parses the program; it raises refgrad::Error naming `origin` and the part.
std::string write_bundle(const Bundle& bundle);
Bundle read_bundle(std::span<const std::byte> bytes, std::string_view origin = "<bytes>");

// Plain safetensors: tensors and string metadata, for the `.bwd` + `.safetensors` pair.
std::string write_safetensors(const TensorMap& tensors, const std::map<std::string, std::string>& metadata = {});
TensorMap read_safetensors(std::span<const std::byte> bytes, std::string_view origin = "<bytes>",
                           std::map<std::string, std::string>* metadata = nullptr);

// Files. load_program_file reads any form a program comes in:
//   x.safetensors  a bundle;
//   x.rgbc         binary bytecode (tensors inline);
//   x.bwd          program text, with the tensors of x.safetensors beside it when that file exists.
void save_bundle(const Bundle& bundle, const std::string& path);
Bundle load_bundle(const std::string& path);
Bundle load_program_file(const std::string& path);

// Puts a program and its values in a bundle: each value with at most
// `inline_limit` elements is written inline in the program text, the rest go
// to bundle.tensors. `values` by sigiled name, as in TensorMap; a saved
// declaration with neither an inline value nor an entry in `values` raises.
Bundle make_bundle(Program program, const TensorMap& values, std::size_t inline_limit = 16);

// The bundle's program bound to its tensors (bind() with bundle.tensors).
BoundProgram bind(const Bundle& bundle);

}  // namespace refgrad
