// qkv export --to hf CKPT --out DIR
//
// Writes a decoder-only checkpoint as a Hugging Face GPT-2 directory that transformers loads with
// GPT2LMHeadModel.from_pretrained (interop/hf_gpt2.h says what is refused).
#include <iostream>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/interop/hf_gpt2.h"

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
  app.add_option("--to", o->to, "Format to write: hf (a Hugging Face GPT-2 directory)")
      ->required()
      ->check(CLI::IsMember({"hf"}));
  app.add_option("checkpoint", o->checkpoint, "qkv checkpoint directory (decoder-only)")->required();
  app.add_option("--out", o->out, "Directory to write (config.json, model.safetensors, tokenizer.json)")->required();
  return [o]() {
    check_checkpoint_argument(o->checkpoint);
    const interop::HfConversion info = interop::export_hf_gpt2(o->checkpoint, o->out);
    for (const std::string& note : info.notes) std::cerr << "qkv: note: " << note << "\n";
    std::cout << "wrote " << o->out << ": GPT2LMHeadModel (" << info.parameters << " parameters"
              << (info.tokenizer ? ", tokenizer.json" : "") << ")\n";
    return 0;
  };
}

}  // namespace qkv::cli
