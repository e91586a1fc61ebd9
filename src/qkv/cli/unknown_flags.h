// Unknown flags, found before CLI11's own complaint: CLI11 reports a missing required flag before
// an unknown one (`--chekpoint x` read as "--checkpoint is required") and lists unexpected
// arguments last-first ("4 --beam-size"). The first flag of the command line that the command does
// not know is named instead, with the nearest known flag when one is close.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace qkv::cli {

// "unknown flag --beam-size for qkv translate (did you mean --beam?)", or nothing when every flag
// of `args` (argv without the program name) is known to the command it selects (or to `app` when
// it selects none).
std::optional<std::string> unknown_flag_message(CLI::App& app, const std::vector<std::string>& args);

// The edit distance of a and b (insertions, deletions, substitutions, adjacent swaps).
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace qkv::cli
