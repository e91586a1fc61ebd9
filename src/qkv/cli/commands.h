// Registration of the CLI's subcommands. Each cmd_*.cpp adds one subcommand and the function that
// runs it; main() dispatches to the one the user picked.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>
#include <string>

namespace qkv::cli {

using Runner = std::function<int()>;

// Limits shared by several commands' flags.
inline constexpr double kMaxThreads = 4096;               // --threads (0: $QKV_THREADS or all cores)
inline constexpr double kMaxBatchSentences = 1 << 20;     // --batch-size of translate and score

// Adds every subcommand, then guards every integer and floating-point option of all of them (see
// guard_numeric_options): a flag added by any cmd_*.cpp is covered without that file doing anything.
void register_commands(CLI::App& app);
// Runs the subcommand the user picked; returns the process exit code.
int run_selected(CLI::App& app);

// CLI11 2.1.2 converts integers with strtoll/strtoull in base 0, so "010" is octal 8, "-1" wraps to
// 2^64 - 1 for unsigned flags and values past the type's range are clamped; floats accept "nan" and
// "inf". This puts a check in front of every INT/UINT/FLOAT option of `app` and its subcommands:
// integers must be plain decimal and fit 64 bits (unsigned ones non-negative), floats finite and
// within float's range; the message names the flag. Call after all options are added.
void guard_numeric_options(CLI::App& app);

// A wrong flag value found only when the command runs (e.g. --beam larger than the checkpoint's
// vocabulary): main() reports it like a parse error, exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws qkv::Error if `dir` exists but is not a directory; a missing directory is left to the
// loader, whose message says so.
void check_checkpoint_argument(const std::string& dir);

// One per subcommand: add the options to `app` and return the runner.
Runner add_init_command(CLI::App& app);
Runner add_train_command(CLI::App& app);
Runner add_score_command(CLI::App& app);
Runner add_translate_command(CLI::App& app);
Runner add_generate_command(CLI::App& app);
Runner add_bleu_command(CLI::App& app);
Runner add_chrf_command(CLI::App& app);
Runner add_average_command(CLI::App& app);
Runner add_info_command(CLI::App& app);
Runner add_import_command(CLI::App& app);
Runner add_export_command(CLI::App& app);
Runner add_embed_command(CLI::App& app);
Runner add_similar_command(CLI::App& app);
Runner add_tokenize_command(CLI::App& app);
Runner add_classify_command(CLI::App& app);
Runner add_plot_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);

}  // namespace qkv::cli
