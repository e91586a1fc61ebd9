#include "qkv/train/vocabulary.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "qkv/core/error.h"
#include "qkv/core/threads.h"

namespace qkv::train {
namespace fs = std::filesystem;

namespace {
// Deletes a file when it goes out of scope, also when an exception passes through.
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};
}  // namespace

void train_vocabulary(const std::vector<const std::vector<std::string>*>& texts, const std::string& work_dir,
                      const VocabularyOptions& o, const std::string& spm_path) {
  const std::string tmp_prefix = work_dir + "/spm.training-" + std::to_string(::getpid());
  const RemoveOnExit input{tmp_prefix + ".input.txt"}, model{tmp_prefix + ".model"}, vocab{tmp_prefix + ".vocab"};
  {
    std::ofstream f(input.path);
    for (const auto* lines : texts)
      for (const auto& line : *lines) f << line << '\n';
    f.flush();
    QKV_CHECK(f, input.path << ": write failed (disk full?)");
  }
  text::SpmTrainOptions so;
  so.vocab_size = o.vocab_size;
  so.model_type = o.model_type;
  so.input_sentence_size = o.sample_lines;
  so.seed = o.seed;
  so.user_defined_symbols = o.user_defined_symbols;
  so.num_threads = num_threads();
  text::train_sentencepiece({input.path}, tmp_prefix, so);
  fs::rename(model.path, spm_path);
  fs::rename(vocab.path, fs::path(spm_path).replace_extension(".vocab"));
}

void remove_stale_vocabulary_files(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("spm.training-", 0) == 0 || n.rfind("spm_input.txt", 0) == 0) fs::remove(e.path(), ec);
  }
}

std::vector<data::IdLine> encode_all(const text::SentencePiece& spm, const std::vector<std::string>& lines) {
  std::vector<data::IdLine> out(lines.size());
#pragma omp parallel for schedule(dynamic, 256)
  for (size_t i = 0; i < lines.size(); ++i) out[i] = spm.encode(lines[i]);
  return out;
}

}  // namespace qkv::train
