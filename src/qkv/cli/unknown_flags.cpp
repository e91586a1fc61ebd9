#include "qkv/cli/unknown_flags.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace qkv::cli {

size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: Levenshtein plus the swap of two neighbours ("chekc").
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

namespace {

// A value such as -3 or -1.5e2 that follows a flag, not a flag.
bool is_number(const std::string& token) {
  char* end = nullptr;
  std::strtod(token.c_str(), &end);
  return end != token.c_str() && *end == '\0';
}

struct KnownFlags {
  std::vector<std::string> long_names, short_names;  // without dashes
};

KnownFlags flags_of(const CLI::App& command) {
  KnownFlags k;
  for (const CLI::Option* opt : command.get_options()) {
    k.long_names.insert(k.long_names.end(), opt->get_lnames().begin(), opt->get_lnames().end());
    k.short_names.insert(k.short_names.end(), opt->get_snames().begin(), opt->get_snames().end());
  }
  return k;
}

// The known long flag nearest to `name`: within a third of its length in edits (at least 2), or
// one whose words start it ("beam-size" -> "beam").
std::optional<std::string> nearest(const std::string& name, const std::vector<std::string>& known) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& k : known) {
    const size_t d = edit_distance(name, k);
    if (d < best_distance) best_distance = d, best = k;
  }
  if (best) return best;
  for (const std::string& k : known)
    if (name.rfind(k + "-", 0) == 0 || k.rfind(name + "-", 0) == 0) return k;
  return std::nullopt;
}

// The subcommand `args` selects (the first argument naming one), or null.
CLI::App* selected_command(CLI::App& app, const std::vector<std::string>& args, size_t& first_flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].empty() || args[i][0] == '-') continue;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      if (sub->get_name() == args[i]) {
        first_flag = i + 1;
        return sub;
      }
    return nullptr;  // an unknown command: CLI11's message names it
  }
  return nullptr;
}

}  // namespace

std::optional<std::string> unknown_flag_message(CLI::App& app, const std::vector<std::string>& args) {
  size_t first = 0;
  CLI::App* sub = selected_command(app, args, first);
  const CLI::App& command = sub ? *sub : app;
  const KnownFlags known = flags_of(command);
  const std::string where = sub ? " for qkv " + sub->get_name() : "";
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (t == "--") break;
    if (t.size() < 2 || t[0] != '-' || is_number(t)) continue;
    if (t[1] == '-') {
      const std::string name = t.substr(2, t.find('=') == std::string::npos ? std::string::npos : t.find('=') - 2);
      if (std::find(known.long_names.begin(), known.long_names.end(), name) != known.long_names.end()) continue;
      const std::optional<std::string> near = nearest(name, known.long_names);
      return "unknown flag --" + name + where + (near ? " (did you mean --" + *near + "?)" : "");
    }
    if (!std::isalpha(static_cast<unsigned char>(t[1]))) continue;
    const std::string name = t.substr(1, 1);
    if (std::find(known.short_names.begin(), known.short_names.end(), name) == known.short_names.end())
      return "unknown flag -" + name + where;
  }
  return std::nullopt;
}

}  // namespace qkv::cli
