// refgrad: the command line (docs/cli.md). Each command group lives in its
// own file (commands.hpp); this file parses the command line and turns
// errors into messages and exit codes: 0 ok, 1 a check failed, 2 a usage,
// input or run-time error.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "refgrad/version.hpp"

namespace {

// "refgrad: error: " before the first line of a message; the lines after it
// (a verifier's list, a parse error's source line and caret) as they are.
void print_error(const std::string& message) { std::cerr << "refgrad: error: " << message << '\n'; }

}  // namespace

int main(int argc, char** argv) {
  using namespace refgrad::cli;
  CLI::App app{"refgrad: run, step through and inspect PyTorch backward programs (docs/cli.md)", "refgrad"};
  app.set_version_flag("--version", refgrad::version);
  // At most one command; none is refused after parsing, so that an unknown
  // command reads "The following argument was not expected: frob".
  app.require_subcommand(0, 1);
  int exit_code = kExitOk;
  add_run_command(app, exit_code);
  add_step_command(app, exit_code);
  add_check_command(app, exit_code);
  add_program_commands(app, exit_code);
  add_dot_command(app, exit_code);
  add_nodes_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    app.exit(error);  // CLI11's message, on stderr
    return kExitError;
  } catch (const refgrad::Error& error) {
    print_error(error.what());
    return kExitError;
  } catch (const std::exception& error) {  // a file system error, memory
    print_error(error.what());
    return kExitError;
  }
  if (app.get_subcommands().empty()) {
    std::cerr << "A command is required\n" << app.help();
    return kExitError;
  }
  return exit_code;
}
