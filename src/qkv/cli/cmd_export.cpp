// qkv export --to hf --checkpoint CKPT --output-dir DIR (the checkpoint may be positional)
//
// Writes a decoder-only checkpoint as a Hugging Face GPT-2 directory that transformers loads with
// GPT2LMHeadModel.from_pretrained (interop/hf_gpt2.h says what is refused), and an encoder-decoder
// one as a T5, BART, mBART, M2M100 or Marian directory by its layout (interop/hf_import.h).
#include <iostream>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/cli/quiet.h"
#include "qkv/interop/hf_import.h"

namespace qkv::cli {

namespace {
struct ExportOptions {
  std::string to;
  std::string checkpoint;
  std::string out;
};
}  // namespace

Runner add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  app.add_option("--to", o->to, "Format to write: hf (a Hugging Face GPT-2, Marian, T5, BART, mBART or M2M100 directory)")
      ->required()
      ->check(CLI::IsMember({"hf"}));
  app.add_option("checkpoint,--checkpoint", o->checkpoint,
                 "qkv checkpoint directory (decoder-only or encoder-decoder; --checkpoint DIR or positional)")->required();
  app.add_option("--output-dir", o->out, "Directory to write (config.json, model.safetensors and the tokenizer)")->required();
  return [o]() {
    check_checkpoint_argument(o->checkpoint);
    const interop::HfConversion info = interop::export_hf(o->checkpoint, o->out);
    for (const std::string& note : info.notes) print_note(note);
    std::string tokenizer;
    for (const std::string& name : info.tokenizer_files) tokenizer += (tokenizer.empty() ? ", tokenizer " : ", ") + name;
    std::cout << "wrote " << o->out << ": " << info.hf_class << " (" << info.parameters << " parameters" << tokenizer
              << ")\n";
    return 0;
  };
}

}  // namespace qkv::cli
