// L5, the `refgrad` command: one function per command group adds its
// subcommands to the app. A subcommand's callback runs it and stores its exit
// code in `exit_code`; refgrad::Error escapes to main(), which prints it and
// exits with 2.
#pragma once

#include <CLI/CLI.hpp>

namespace refgrad::cli {

void add_run_command(CLI::App& app, int& exit_code);      // run.cpp
void add_step_command(CLI::App& app, int& exit_code);     // step.cpp
void add_check_command(CLI::App& app, int& exit_code);    // check.cpp
void add_program_commands(CLI::App& app, int& exit_code); // program.cpp: dis, asm, verify
void add_dot_command(CLI::App& app, int& exit_code);      // dot.cpp
void add_nodes_command(CLI::App& app, int& exit_code);    // nodes.cpp

}  // namespace refgrad::cli
