// tools/fuzz_seeds EXAMPLES_DIR CORPUS_DIR: writes the fuzzers' seed corpus
// (`make fuzz-seeds`) from the example programs: each program's text as
// written, its binary bytecode, and a bundle with its saved tensors stored
// as tensors, one result set, a comparison and provenance, so that every
// part of each loader is reached from the start. For the execution fuzzer
// (fuzz_run), two inputs per node of the registry and per ATen op, one for
// each mode of its generator (fuzz/generate.hpp): "NodeName\n" (or
// "aten.mul.Tensor\n"), the mode byte, and decision bytes from a generator
// seeded by the name, so that the seeds do not change unless the registries do.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
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

// "NodeName\n", the mode byte (0 consistent, 1 wild), then 192 decision bytes.
std::string run_seed(const std::string& node, std::uint8_t mode) {
  std::seed_seq seed(node.begin(), node.end());
  std::mt19937 generator(seed);
  std::string bytes = node + "\n";
  bytes.push_back(static_cast<char>(mode));
  for (int i = 0; i < 192; ++i) bytes.push_back(static_cast<char>(generator() & 0xFF));
  return bytes;
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
    fs::create_directories(corpus / "run");
    for (const NodeDef* node : all_nodes()) {
      const std::string& name = node->schema.name;
      write_file(corpus / "run" / (name + ".consistent"), run_seed(name, 0));
      write_file(corpus / "run" / (name + ".wild"), run_seed(name, 1));
    }
    for (const AtenOpDef* op : all_aten_ops()) {
      const std::string& name = op->schema.name;
      write_file(corpus / "run" / (name + ".consistent"), run_seed(name, 0));
      write_file(corpus / "run" / (name + ".wild"), run_seed(name, 1));
    }
    std::cout << "fuzz_seeds: run: two inputs for each of " << all_nodes().size() << " nodes and "
              << all_aten_ops().size() << " ATen ops\n";
  } catch (const Error& error) {
    std::cerr << error.what() << "\n";
    return 2;
  }
  return 0;
}
