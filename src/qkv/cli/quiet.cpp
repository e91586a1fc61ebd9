#include "qkv/cli/quiet.h"

#include <atomic>
#include <cstdio>
#include <functional>

namespace qkv::cli {
namespace {
// One process runs one command, so one flag serves all: main() sets it before the command runs.
std::atomic<bool> g_quiet{false};
}  // namespace

CLI::Option* add_quiet_flag(CLI::App& app, bool& quiet, const std::string& silenced) {
  return app.add_flag("--quiet", quiet, silenced);
}

void add_missing_quiet_flags(CLI::App& app) {
  static bool unused = false;  // such a command has nothing but notes: quiet_requested() is its flag
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{}))
    if (!sub->get_option_no_throw("--quiet")) add_quiet_flag(*sub, unused, "No notes on stderr (errors still)");
}

bool quiet_requested() { return g_quiet.load(std::memory_order_relaxed); }

void set_quiet_requested(bool quiet) { g_quiet.store(quiet, std::memory_order_relaxed); }

void print_note(const std::string& text) {
  if (!quiet_requested()) std::fprintf(stderr, "qkv: note: %s\n", text.c_str());
}

}  // namespace qkv::cli
