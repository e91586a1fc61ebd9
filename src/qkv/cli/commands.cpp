#include "qkv/cli/commands.h"

#include <vector>

namespace qkv::cli {
namespace {
std::vector<std::pair<CLI::App*, Runner>>& registry() {
  static std::vector<std::pair<CLI::App*, Runner>> r;
  return r;
}
}  // namespace

void register_commands(CLI::App& app) {
  auto add = [&](const char* name, const char* help, Runner (*make)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    registry().emplace_back(sub, make(*sub));
  };
  add("init", "Write a freshly initialised checkpoint from a config", add_init_command);
  add("train", "Train a model (--synthetic: seed 000's example or a copy task)", add_train_command);
  add("translate", "Translate text (or ids) with greedy or beam search", add_translate_command);
  add("score", "Teacher-forced cross-entropy of id pairs under a checkpoint", add_score_command);
  add("bleu", "Corpus BLEU of stdin against reference files (sacreBLEU 2.x defaults)", add_bleu_command);
  add("average", "Average the weights of several checkpoints of one run", add_average_command);
  add("chrf", "Corpus chrF of stdin against reference files (sacreBLEU 2.x defaults)", add_chrf_command);
}

int run_selected(CLI::App& app) {
  for (auto& [sub, run] : registry())
    if (app.got_subcommand(sub)) return run();
  return 0;
}

}  // namespace qkv::cli
