// qkv — the command-line entry point. Subcommands live in their own files (cli/cmd_*.cpp).
//
// Every failure is one line on stderr starting with "qkv: error: ", and the exit status says what
// kind of failure it was:
//   0    success (also --help and --version)
//   1    bad input: a file, checkpoint or config that cannot be used (qkv::Error and the like)
//   2    usage: an unknown, missing, repeated or malformed flag, or a value out of its range;
//        followed by the line "Run 'qkv CMD --help' for usage." (a bare `qkv` prints its help on
//        stderr and exits 2 too)
//   130  interrupted (Ctrl-C; `qkv train` saves its last checkpoint first)
#include <CLI/CLI.hpp>

#include <iostream>
#include <new>
#include <optional>
#include <vector>
#include <string>

#include "qkv/cli/commands.h"
#include "qkv/cli/flag_aliases.h"
#include "qkv/cli/omp_wait.h"
#include "qkv/cli/quiet.h"
#include "qkv/cli/unknown_flags.h"
#include "qkv/core/cpu_features.h"
#include "qkv/core/invalid_arguments.h"
#include "qkv/core/error.h"
#include "qkv/ops/ops.h"

namespace {

constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;

// "qkv translate": the (sub)command the user was calling, for the help hint.
std::string command_path(const CLI::App& app) {
  std::string path = "qkv";
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  return path;
}

// Replaces `marker` in CLI11's `message` as `rewrite(before, after)` would, or keeps it as it is.
template <class Rewrite>
std::string reword(const std::string& message, const std::string& marker, Rewrite rewrite) {
  const size_t at = message.find(marker);
  if (at == std::string::npos) return message;
  return rewrite(message.substr(0, at), message.substr(at + marker.size()));
}

// CLI11's wording of two errors, said plainly; the others already name the flag.
std::string usage_message(const CLI::ParseError& e) {
  std::string m = reword(e.what(), ": At Most 1 required but received ", [](const std::string& flag, const std::string& n) {
    return flag + ": given " + n + " times; give it once";
  });
  return reword(m, "Could not convert: ", [](const std::string&, const std::string& rest) {
    const size_t eq = rest.find(" = ");  // "--beam = 99999999999"
    if (eq == std::string::npos) return "could not convert " + rest;
    return rest.substr(0, eq) + ": '" + rest.substr(eq + 3) + "' is not a valid value (wrong type or out of range)";
  });
}

// `qkv --version`: the version, the CPU and the kernels this run would use (kernels/isa.h).
std::string version_text() {
  using qkv::ops::linear_kernel_description;
  std::string isa;
  try {
    isa = qkv::ops::cpu_kernel_level();
  } catch (const std::exception& e) {
    isa = std::string("error: ") + e.what();
  }
  return std::string("qkv ") + QKV_VERSION + "\nCPU:      " + qkv::cpu_features().description() +
         "\nfeatures: " + qkv::cpu_features().summary() + "\nkernels:  " + isa + "\n  float32 linears: " +
         linear_kernel_description(qkv::DType::F32) + "\n  int8 linears:    " +
         linear_kernel_description(qkv::DType::I8) + "\n  bf16 linears:    " +
         linear_kernel_description(qkv::DType::BF16) + "\n  bf16 training products (--precision bf16): " +
         qkv::ops::bf16_product_kernel();
}

int usage_error(const std::string& message, const CLI::App& app) {
  std::cerr << "qkv: error: " << message << "\nRun '" << command_path(app) << " --help' for usage.\n";
  return kExitUsage;
}

int bad_input(const std::string& message) {
  std::cerr << "qkv: error: " << message << "\n";
  return kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  qkv::cli::relaunch_with_short_omp_spin(argv);
  CLI::App app{"qkv: train and run Transformer models (Attention Is All You Need) on the CPU"};
  app.set_version_flag("--version", version_text);
  app.require_subcommand(0, 1);
  qkv::cli::register_commands(app);
  // Renamed flags keep their old spelling for one release (cli/flag_aliases.h).
  std::vector<std::string> notes;
  const std::vector<std::string> args =
      qkv::cli::rename_deprecated_flags(std::vector<std::string>(argv + 1, argv + argc), notes);
  const auto print_notes = [&notes] {
    for (const std::string& note : notes) std::cerr << note << "\n";
  };
  app.name(argv[0]);  // as parse(argc, argv) would: the help's "Usage:" line
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::ParseError& e) {
    print_notes();  // a failed parse may be about the renamed flag: say it was renamed, --quiet or not
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    const std::optional<std::string> unknown = qkv::cli::unknown_flag_message(app, args);
    return usage_error(unknown ? *unknown : usage_message(e), app);
  }
  if (app.get_subcommands().empty()) {  // a bare `qkv`: what there is to run, as a usage error
    std::cerr << app.help();
    return kExitUsage;
  }
  qkv::cli::set_quiet_requested(app.get_subcommands().front()->get_option("--quiet")->count() > 0);
  if (!qkv::cli::quiet_requested()) print_notes();
  try {
    qkv::ops::check_cpu_kernel_level();  // a QKV_ISA this CPU cannot run is an error before any work
    return qkv::cli::run_selected(app);
  } catch (const qkv::cli::UsageError& e) {
    return usage_error(e.what(), app);
  } catch (const qkv::InvalidArgumentsError& e) {  // flags the library finds cannot go together
    return usage_error(e.what(), app);
  } catch (const std::bad_alloc&) {
    return bad_input("out of memory");
  } catch (const std::exception& e) {  // qkv::Error and anything else a library throws
    return bad_input(e.what());
  }
}
