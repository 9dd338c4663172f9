// tools/fuzz_seeds EXAMPLES_DIR CORPUS_DIR: writes the fuzzers' seed corpus
// (`make fuzz-seeds`) from the example programs: each program's text as
// written, its binary bytecode, and a bundle with its saved tensors stored
// as tensors, one result set, a comparison and provenance, so that every
// part of each loader is reached from the start.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "refgrad/bundle.hpp"

namespace fs = std::filesystem;
using namespace refgrad;

namespace {

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  check(out.good(), "fuzz_seeds: cannot write ", path.string());
}

Bundle seed_bundle(const Program& program) {
  TensorMap values;
  for (const SavedDecl& saved : program.saved) values["$" + saved.name] = *saved.value;
  Bundle bundle = make_bundle(program, values, /*inline_limit=*/0);
  ResultSet eager;
  eager.engine = "eager";
  for (const LeafDecl& leaf : program.leaves) eager.tensors["@" + leaf.name] = zeros(leaf.type.sizes, leaf.type.dtype);
  eager.config["device"] = "cpu";
  bundle.results.push_back(eager);
  bundle.comparison = Comparison{};
  bundle.provenance["refgrad_version"] = "seed";
  return bundle;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fuzz_seeds EXAMPLES_DIR CORPUS_DIR\n";
    return 2;
  }
  try {
    const fs::path examples = argv[1], corpus = argv[2];
    for (const char* harness : {"text", "bytecode", "bundle"}) fs::create_directories(corpus / harness);
    for (const auto& entry : fs::directory_iterator(examples)) {
      if (entry.path().extension() != ".bwd") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const Program program = parse_program(text.str(), entry.path().string());
      const std::string stem = entry.path().stem().string();
      write_file(corpus / "text" / (stem + ".bwd"), text.str());
      write_file(corpus / "bytecode" / (stem + ".rgbc"), write_bytecode(assemble(program)));
      write_file(corpus / "bundle" / (stem + ".safetensors"), write_bundle(seed_bundle(program)));
      std::cout << "fuzz_seeds: " << stem << "\n";
    }
  } catch (const Error& error) {
    std::cerr << error.what() << "\n";
    return 2;
  }
  return 0;
}
