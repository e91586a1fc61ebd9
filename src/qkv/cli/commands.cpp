#include "qkv/cli/commands.h"

#include <functional>
#include <vector>

namespace qkv::cli {
namespace {
std::vector<std::pair<CLI::App*, std::function<int()>>>& registry() {
  static std::vector<std::pair<CLI::App*, std::function<int()>>> r;
  return r;
}
}  // namespace

void register_commands(CLI::App& app) { (void)app; }

int run_selected(CLI::App& app) {
  for (auto& [sub, run] : registry())
    if (app.got_subcommand(sub)) return run();
  return 0;
}

}  // namespace qkv::cli
