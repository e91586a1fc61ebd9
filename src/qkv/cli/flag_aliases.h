// Renamed flags (docs/cli.md, "Renamed flags"): the old spelling keeps working for one release. It
// is rewritten to the new one before CLI11 parses the command line, with a one-line note on
// stderr, so every check, message and help text of a command knows only the new names.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace qkv::cli {

struct FlagAlias {
  std::string_view command;   // "translate"
  std::string_view old_name;  // "--beam"
  std::string_view new_name;  // "--beam-size"
};

// Every renamed flag of every command (serve has none).
const std::vector<FlagAlias>& flag_aliases();

// The command line (argv without the program name) with each old flag of the command it selects
// renamed ("--beam 4" and "--beam=4" alike; nothing after "--"). Each renamed flag adds a note,
// "qkv: note: --beam is deprecated; use --beam-size", to `notes`.
std::vector<std::string> rename_deprecated_flags(const std::vector<std::string>& args,
                                                 std::vector<std::string>& notes);

}  // namespace qkv::cli
