// qkv average --output-dir DIR --checkpoint CKPT [--checkpoint CKPT ...] (or the checkpoints positional)
//
// Writes the checkpoint whose weights are the mean of the given checkpoints' weights (the last few
// checkpoints of one run, kept with `qkv train --keep-checkpoints N`). The SentencePiece models of
// the first checkpoint are copied along, and must be the same in all of them.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/core/error.h"
#include "qkv/models/average.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/marian_tokenizer.h"

namespace qkv::cli {

namespace {
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct AverageOptions {
  std::vector<std::string> checkpoints;
  std::string out;
};

int run_average(const AverageOptions& o) {
  namespace fs = std::filesystem;
  for (const std::string& dir : o.checkpoints) check_checkpoint_argument(dir);
  for (const std::string& dir : o.checkpoints)
    QKV_CHECK(fs::weakly_canonical(dir) != fs::weakly_canonical(o.out),
              "average: --output-dir " << o.out << " is one of the inputs; write the average elsewhere");
  const auto model = models::average_checkpoints(o.checkpoints);
  // The tokenizer files travel with the weights: qkv's SentencePiece models, or an imported Marian
  // model's.
  const char* spm_files[] = {models::kSourceSpmFile,  models::kTargetSpmFile,     text::kMarianSourceSpm,
                             text::kMarianTargetSpm, text::kMarianVocab,         text::kMarianTargetVocab,
                             text::kTokenizerConfig};
  for (const char* name : spm_files) {
    const std::string first = o.checkpoints[0] + "/" + name;
    for (const std::string& dir : o.checkpoints) {
      const std::string other = dir + "/" + name;  // both missing, or the same bytes
      QKV_CHECK(fs::exists(first) == fs::exists(other) && file_bytes(first) == file_bytes(other),
                "average: " << other << " differs from " << first << "; the checkpoints come from different runs");
    }
  }
  models::save_model(o.out, *model);
  for (const char* name : spm_files)
    if (fs::exists(o.checkpoints[0] + "/" + name))
      fs::copy_file(o.checkpoints[0] + "/" + name, o.out + "/" + name, fs::copy_options::overwrite_existing);
  std::cout << "wrote " << o.out << ": the mean of " << o.checkpoints.size() << (o.checkpoints.size() == 1 ? " checkpoint\n" : " checkpoints\n");
  return 0;
}
}  // namespace

Runner add_average_command(CLI::App& app) {
  auto o = std::make_shared<AverageOptions>();
  app.add_option("checkpoints,--checkpoint", o->checkpoints,
                 "Checkpoint directories of one model (--checkpoint DIR, repeated, or positional)")
      ->required();
  app.add_option("--output-dir", o->out, "Checkpoint directory to write")->required();
  return [o]() { return run_average(*o); };
}

}  // namespace qkv::cli
