// Registration of the CLI's subcommands. Each subcommand adds itself to the app and runs when selected.
#pragma once
#include <CLI/CLI.hpp>

namespace qkv::cli {

void register_commands(CLI::App& app);
// Runs the subcommand the user picked; returns the process exit code.
int run_selected(CLI::App& app);

}  // namespace qkv::cli
