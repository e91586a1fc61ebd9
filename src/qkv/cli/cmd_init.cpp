// qkv init --config FILE --output-dir DIR [--seed N]: a freshly initialised checkpoint of any family
#include <iostream>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/models/checkpoint.h"

namespace qkv::cli {

Runner add_init_command(CLI::App& app) {
  auto opts = std::make_shared<std::tuple<std::string, std::string, uint64_t>>("", "", 0);
  app.add_option("--config", std::get<0>(*opts), "Model config (JSON)")->required()->check(CLI::ExistingFile);
  app.add_option("--output-dir", std::get<1>(*opts), "Checkpoint directory to write")->required();
  app.add_option("--seed", std::get<2>(*opts), "Initialisation seed")->capture_default_str();
  return [opts]() {
    const auto& [config_path, out, seed] = *opts;
    // Any family: config.json's "architecture" picks it (encoder-decoder by default).
    const std::unique_ptr<models::Model> model = models::make_model(models::load_config(config_path), seed);
    models::save_model(out, *model);
    int64_t count = 0;
    for (const Var& p : model->parameters()) count += p.value().numel();
    std::cout << "wrote " << out << " (" << count << " parameters)\n";
    return 0;
  };
}

}  // namespace qkv::cli
