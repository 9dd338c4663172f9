// The example programs in examples/programs/: each parses, verifies without
// errors or warnings, has a canonical text that is a fixed point of
// print(parse(.)), and survives the binary file and a bundle unchanged.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "refgrad/bundle.hpp"
#include "refgrad/bytecode.hpp"
#include "refgrad/program.hpp"

using namespace refgrad;

namespace {

const std::filesystem::path kExamples = std::filesystem::path(REFGRAD_SOURCE_ROOT) / "examples" / "programs";

std::vector<std::filesystem::path> example_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kExamples)) {
    if (entry.path().extension() == ".bwd") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::span<const std::byte> as_bytes(const std::string& bytes) {
  return {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()};
}

}  // namespace

TEST_CASE("examples: the six teaching programs are there") {
  std::vector<std::string> names;
  for (const auto& file : example_files()) names.push_back(file.stem().string());
  CHECK(names == std::vector<std::string>{"aten_mlp", "broadcast_add", "diamond", "leaf_twice", "mlp", "mul"});
}

TEST_CASE("examples: parse, verify, print, binary and bundle round trips") {
  for (const auto& file : example_files()) {
    CAPTURE(file);
    const Program program = parse_program(read_text(file), file.string());
    CHECK(program.name == file.stem().string());

    std::string diagnostics;
    for (const Diagnostic& diagnostic : verify(program)) diagnostics += to_string(diagnostic) + "\n";
    CHECK(diagnostics == "");

    const std::string canonical = print_program(program);
    const Program reparsed = parse_program(canonical, "canonical");
    CHECK(reparsed == program);
    CHECK(print_program(reparsed) == canonical);

    const Bytecode bytecode = assemble(program);
    const std::string binary = write_bytecode(bytecode);
    CHECK(disassemble(read_bytecode(as_bytes(binary), file.string())) == program);

    // Every value moved out of the text into the bundle's tensors and back.
    TensorMap values;
    for (const SavedDecl& saved : program.saved) values["$" + saved.name] = *saved.value;
    Bundle bundle = make_bundle(program, values, /*inline_limit=*/0);
    for (const SavedDecl& saved : bundle.program.saved) CHECK_FALSE(saved.value.has_value());
    const Bundle loaded = read_bundle(as_bytes(write_bundle(bundle)), file.string());
    CHECK(loaded.program == bundle.program);
    CHECK(bind(loaded).saved_values.size() == program.saved.size());
  }
}
