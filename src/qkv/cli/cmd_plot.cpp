// qkv plot RUN_DIR [--out curves.png] [--title TEXT]
//
// Draws a training run's curves (loss and dev score against step and training time) from its
// metrics.jsonl through python/qkv/plot.py (see python_plot.h for how python3 and the script are
// found). Needs python3 with matplotlib; without them the error says what to install (exit 1).
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/cli/python_plot.h"

namespace qkv::cli {

namespace {
struct PlotOptions {
  std::string run, out, title;
};
}  // namespace

Runner add_plot_command(CLI::App& app) {
  auto o = std::make_shared<PlotOptions>();
  app.add_option("run", o->run, "Training run directory (holding metrics.jsonl), or a metrics.jsonl file")->required();
  app.add_option("--out", o->out, "Picture to write (PNG; default: RUN_DIR/curves.png)");
  app.add_option("--title", o->title, "Title of the picture (default: the run's name and step count)");
  return [o]() {
    std::vector<std::string> args{"curves"};
    if (!o->out.empty()) args.insert(args.end(), {"--out", o->out});
    if (!o->title.empty()) args.insert(args.end(), {"--title", o->title});
    args.insert(args.end(), {"--", o->run});  // a run named "-x" is still a path
    run_plot_script(args);
    return 0;
  };
}

}  // namespace qkv::cli
