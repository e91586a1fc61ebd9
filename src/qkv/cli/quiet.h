// --quiet, which every command takes: no progress, summary, log or note lines on stderr, only
// errors. A command with progress of its own reads its flag's variable; lines printed outside a
// command's runner (a renamed flag's note, a compute type's note) ask quiet_requested(), which
// main() sets from the flag of the command the user picked.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace qkv::cli {

// Adds `--quiet` to `app`, storing into `quiet`; `silenced` says what it silences ("No progress
// or summary on stderr").
CLI::Option* add_quiet_flag(CLI::App& app, bool& quiet, const std::string& silenced);

// Gives every subcommand of `app` that has no --quiet of its own one that silences notes: so a
// script can pass --quiet to any command, and a new command cannot miss it.
void add_missing_quiet_flags(CLI::App& app);

// Whether the command the user picked was given --quiet (set by main() after parsing).
bool quiet_requested();
void set_quiet_requested(bool quiet);

// Prints "qkv: note: <text>" on stderr unless --quiet was given.
void print_note(const std::string& text);

}  // namespace qkv::cli
