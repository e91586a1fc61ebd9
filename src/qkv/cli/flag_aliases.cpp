#include "qkv/cli/flag_aliases.h"

#include <algorithm>

namespace qkv::cli {

const std::vector<FlagAlias>& flag_aliases() {
  static const std::vector<FlagAlias> table = {
      {"translate", "--beam", "--beam-size"},
      {"translate", "--n-best", "--num-hypotheses"},
      {"generate", "--sample", "--do-sample"},
      {"classify", "--top", "--top-k"},
      {"similar", "--top", "--top-k"},
      {"embed", "--max-tokens", "--max-input-length"},
      {"classify", "--max-tokens", "--max-input-length"},
      {"similar", "--max-tokens", "--max-input-length"},
      {"embed", "--out", "--output"},
      {"plot", "--out", "--output"},
      {"train", "--batch", "--batch-size"},
      {"train", "--max-tokens", "--max-batch-tokens"},
      {"train", "--max-len", "--max-seq-length"},
      {"train", "--out", "--output-dir"},
      {"train", "--valid-beam", "--valid-beam-size"},
      {"init", "--out", "--output-dir"},
      {"import", "--out", "--output-dir"},
      {"export", "--out", "--output-dir"},
      {"average", "--out", "--output-dir"},
  };
  return table;
}

namespace {

// The subcommand a command line selects: its first argument that is not a flag.
size_t command_position(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i)
    if (!args[i].empty() && args[i][0] != '-') return i;
  return args.size();
}

const FlagAlias* alias_of(std::string_view command, std::string_view flag) {
  const auto& table = flag_aliases();
  const auto it = std::find_if(table.begin(), table.end(), [&](const FlagAlias& a) {
    return a.command == command && a.old_name == flag;
  });
  return it == table.end() ? nullptr : &*it;
}

}  // namespace

std::vector<std::string> rename_deprecated_flags(const std::vector<std::string>& args,
                                                 std::vector<std::string>& notes) {
  std::vector<std::string> renamed = args;
  const size_t at = command_position(args);
  if (at == args.size()) return renamed;
  const std::string& command = args[at];
  for (size_t i = at + 1; i < renamed.size(); ++i) {
    std::string& token = renamed[i];
    if (token == "--") break;
    if (token.rfind("--", 0) != 0) continue;
    const size_t eq = token.find('=');
    const std::string flag = token.substr(0, eq);
    const FlagAlias* alias = alias_of(command, flag);
    if (!alias) continue;
    notes.push_back("qkv: note: " + flag + " is deprecated; use " + std::string(alias->new_name));
    token = std::string(alias->new_name) + (eq == std::string::npos ? "" : token.substr(eq));
  }
  return renamed;
}

}  // namespace qkv::cli
