// qkv — the command-line entry point. Subcommands live in their own files (cli/cmd_*.cpp).
#include <CLI/CLI.hpp>

#include <iostream>

#include "qkv/cli/commands.h"
#include "qkv/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"qkv: train and run Transformer models (Attention Is All You Need) on the CPU"};
  app.set_version_flag("--version", std::string("qkv ") + QKV_VERSION);
  app.require_subcommand(0, 1);
  qkv::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (app.get_subcommands().empty()) {
    std::cout << app.help();
    return 0;
  }
  try {
    return qkv::cli::run_selected(app);
  } catch (const qkv::Error& e) {
    std::cerr << "qkv: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "qkv: error: " << e.what() << "\n";
    return 1;
  }
}
