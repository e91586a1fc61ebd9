// qkv plot RUN_DIR [RUN_DIR ...] [-o curves.png] [--title TEXT]
//
// Draws training runs' curves (loss and dev score against step and training time, learning rate,
// gradient norm and throughput by step; several runs over each other; for one classifier run, the
// dev confusion matrix of its best validation and each label's F1) from their metrics.jsonl
// through python/qkv/plot.py (see python_plot.h for how python3 and the script are
// found). Needs python3 with matplotlib; without them the error says what to install (exit 1).
#include <memory>
#include <string>
#include <vector>

#include "qkv/cli/commands.h"
#include "qkv/cli/python_plot.h"
#include "qkv/cli/quiet.h"

namespace qkv::cli {

namespace {
struct PlotOptions {
  std::vector<std::string> runs;
  std::string out, title;
  bool quiet = false;  // read through quiet_requested() where the script's stderr is passed on
};
}  // namespace

Runner add_plot_command(CLI::App& app) {
  auto o = std::make_shared<PlotOptions>();
  app.add_option("run", o->runs,
                 "Training run directories (holding metrics.jsonl), or metrics.jsonl files; several are drawn over "
                 "each other, one colour each")
      ->required();
  app.add_option("-o,--output", o->out, "Picture to write (PNG; default: RUN_DIR/curves.png; required for several runs)");
  app.add_option("--title", o->title, "Title of the picture (default: the run's name and step count, or the runs' names)");
  add_quiet_flag(app, o->quiet, "No notes or matplotlib warnings on stderr (errors still)");
  return [o]() {
    if (o->runs.size() > 1 && o->out.empty())
      throw UsageError("several runs: say where the picture goes with -o FILE.png");
    std::vector<std::string> args{"curves"};
    if (!o->out.empty()) args.insert(args.end(), {"--out", o->out});
    if (!o->title.empty()) args.insert(args.end(), {"--title", o->title});
    args.push_back("--");  // a run named "-x" is still a path
    args.insert(args.end(), o->runs.begin(), o->runs.end());
    run_plot_script(args);
    return 0;
  };
}

}  // namespace qkv::cli
