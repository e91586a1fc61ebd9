// Registration of the CLI's subcommands. Each cmd_*.cpp adds one subcommand and the function that
// runs it; main() dispatches to the one the user picked.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace qkv::cli {

using Runner = std::function<int()>;

void register_commands(CLI::App& app);
// Runs the subcommand the user picked; returns the process exit code.
int run_selected(CLI::App& app);

// One per subcommand: add the options to `app` and return the runner.
Runner add_init_command(CLI::App& app);
Runner add_train_command(CLI::App& app);
Runner add_score_command(CLI::App& app);
Runner add_translate_command(CLI::App& app);
Runner add_bleu_command(CLI::App& app);
Runner add_chrf_command(CLI::App& app);
Runner add_average_command(CLI::App& app);

}  // namespace qkv::cli
