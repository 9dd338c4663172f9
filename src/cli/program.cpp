// The commands that read a program without running it: `dis` (the canonical
// text with instruction numbers), `asm` (write it in another form) and
// `verify` (the verifier's diagnostics).
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"

namespace refgrad::cli {

namespace {

// dis shows any program that loads, even one the verifier refuses: seeing it
// is how one finds what is wrong.
int dis_command(const std::string& file) {
  std::cout << print_program(load_program_file(file).program, PrintOptions{.pc = true});
  return kExitOk;
}

// OUT.rgbc: bytecode, every value inline. OUT.safetensors: a bundle (small
// values inline, large ones as tensors), keeping the source bundle's results.
// OUT.bwd: the canonical text, and OUT.safetensors beside it when some value
// is not inline (load_program_file reads the pair back).
int asm_command(const std::string& file, const std::string& out) {
  const Bundle source = load_checked(file);
  const std::string extension = extension_of(out);
  if (extension == ".rgbc") {
    const Bundle all_inline = make_bundle(source.program, source.tensors, std::numeric_limits<std::size_t>::max());
    write_file(out, write_bytecode(assemble(all_inline.program)));
  } else if (extension == ".safetensors") {
    Bundle bundle = make_bundle(source.program, source.tensors);
    bundle.results = source.results;
    bundle.comparison = source.comparison;
    bundle.provenance = source.provenance;
    save_bundle(bundle, out);
  } else if (extension == ".bwd") {
    write_file(out, print_program(source.program));
    if (!source.tensors.empty()) {
      const std::string beside = std::filesystem::path(out).replace_extension(".safetensors").string();
      write_file(beside, write_safetensors(source.tensors));
    }
  } else {
    fail(concat("asm: -o ", out, ": write .rgbc (bytecode), .safetensors (a bundle) or .bwd (text)"));
  }
  return kExitOk;
}

int verify_command(const std::string& file) {
  const std::vector<Diagnostic> diagnostics = verify(load_program_file(file).program);
  std::size_t errors = 0;
  for (const Diagnostic& diagnostic : diagnostics) {
    std::cout << to_string(diagnostic) << '\n';
    if (diagnostic.severity == Diagnostic::Severity::Error) ++errors;
  }
  const std::size_t warnings = diagnostics.size() - errors;
  std::cout << fmt::format("{}: {} error{}, {} warning{}\n", file, errors, errors == 1 ? "" : "s", warnings,
                           warnings == 1 ? "" : "s");
  return errors == 0 ? kExitOk : kExitError;
}

}  // namespace

void add_program_commands(CLI::App& app, int& exit_code) {
  auto file = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  const char* file_help = "the program: .bwd text, .rgbc bytecode or .safetensors bundle";

  CLI::App* dis = app.add_subcommand("dis", "print the program's canonical text, with instruction numbers");
  dis->add_option("FILE", *file, file_help)->required();
  dis->callback([file, &exit_code] { exit_code = dis_command(*file); });

  CLI::App* assemble = app.add_subcommand("asm", "verify a program and write it as bytecode, a bundle or text");
  assemble->add_option("FILE", *file, file_help)->required();
  assemble->add_option("-o,--output", *out, "OUT.rgbc (bytecode), OUT.safetensors (a bundle) or OUT.bwd (text)")
      ->required();
  assemble->callback([file, out, &exit_code] { exit_code = asm_command(*file, *out); });

  CLI::App* check = app.add_subcommand("verify", "print the verifier's errors and warnings (exit code 2 on errors)");
  check->add_option("FILE", *file, file_help)->required();
  check->callback([file, &exit_code] { exit_code = verify_command(*file); });
}

}  // namespace refgrad::cli
