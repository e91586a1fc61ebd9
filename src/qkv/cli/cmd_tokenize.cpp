// qkv tokenize (--checkpoint DIR | --tokenizer FILE) [--input FILE] [--no-special-tokens] [--pieces]
//
// One line of space-separated token ids per input line (stdin by default), with the special tokens
// the tokenizer's post-processor adds ([CLS] ... [SEP] for WordPiece; SentencePiece and byte-level
// BPE add none); no truncation or padding. --pieces prints the tokens themselves instead of ids.
// A checkpoint's tokenizer is DIR/tokenizer.json, else DIR/spm.model, else (translation)
// DIR/source.spm.model, or an imported Marian model's source side (source.spm and vocab.json, EOS
// appended); the model's weights are not loaded.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/core/error.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/marian_tokenizer.h"
#include "qkv/text/tokenizer.h"
#include "qkv/text/utf8.h"

namespace qkv::cli {

namespace {
struct TokenizeOptions {
  std::string checkpoint, tokenizer, input = "-";
  bool no_special_tokens = false, pieces = false;
  const CLI::Option *checkpoint_opt = nullptr, *tokenizer_opt = nullptr;
};

std::string checkpoint_tokenizer(const std::string& dir) {
  models::check_checkpoint_dir(dir);
  for (const char* name : {models::kLmBpeFile, models::kLmSpmFile, models::kSourceSpmFile})
    if (std::filesystem::exists(dir + "/" + name)) return dir + "/" + name;
  throw Error(dir + ": no tokenizer (" + models::kLmBpeFile + ", " + models::kLmSpmFile + " or " +
              models::kSourceSpmFile + ")");
}

int run_tokenize(const TokenizeOptions& o) {
  const bool by_checkpoint = o.checkpoint_opt->count() > 0, by_file = o.tokenizer_opt->count() > 0;
  if (by_checkpoint && by_file) throw UsageError("--checkpoint and --tokenizer: give one of them, not both");
  if (!by_checkpoint && !by_file) throw UsageError("give --checkpoint DIR or --tokenizer FILE");
  // An imported Marian model's source side: its pieces looked up in vocab.json, EOS appended.
  const bool marian = by_checkpoint && text::MarianTokenizer::present(o.checkpoint);
  const std::unique_ptr<text::Tokenizer> tokenizer =
      marian ? text::MarianTokenizer::load(o.checkpoint, false)
             : text::load_tokenizer(by_file ? o.tokenizer : checkpoint_tokenizer(o.checkpoint));
  std::string line_out;
  for (const std::string& line : text::read_text_lines_or_stdin(o.input)) {
    std::vector<int32_t> ids = tokenizer->encode(line);
    if (!o.no_special_tokens) ids = tokenizer->with_special_tokens(std::move(ids));
    line_out.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line_out += ' ';
      line_out += o.pieces ? tokenizer->id_to_token(ids[i]) : std::to_string(ids[i]);
    }
    line_out += '\n';
    std::fwrite(line_out.data(), 1, line_out.size(), stdout);
  }
  return 0;
}
}  // namespace

Runner add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  o->checkpoint_opt = app.add_option("--checkpoint", o->checkpoint,
                                     "Checkpoint directory: its tokenizer.json, spm.model or source.spm.model");
  o->tokenizer_opt = app.add_option("--tokenizer", o->tokenizer, "A tokenizer.json (BPE or WordPiece) or SentencePiece model");
  app.add_option("--input", o->input, "Text, one sentence a line ('-' = stdin, the default)");
  app.add_flag("--no-special-tokens", o->no_special_tokens, "Do not add the post-processor's tokens ([CLS] ... [SEP])");
  app.add_flag("--pieces", o->pieces, "Print the tokens instead of their ids");
  return [o]() { return run_tokenize(*o); };
}

}  // namespace qkv::cli
