// qkv import --from hf DIR --output-dir CKPT
//
// Converts a Hugging Face directory (config.json + model.safetensors [+ tokenizer.json]) into a qkv
// checkpoint: GPT-2 into a decoder-only one (interop/hf_gpt2.h), BERT into an encoder-only one
// (interop/hf_bert.h), with sentence-transformers' pooling when the directory describes it, Marian
// (OPUS-MT) and T5 into encoder-decoder ones with their tokenizers (interop/hf_marian.h, hf_t5.h),
// BART (with its tokenizer.json) and mBART (with its SentencePiece tokenizer) into encoder-decoder
// ones (interop/hf_bart.h), M2M100 and NLLB-200 likewise (interop/hf_m2m100.h).
#include <iostream>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/cli/quiet.h"
#include "qkv/interop/hf_import.h"

namespace qkv::cli {

namespace {
struct ImportOptions {
  std::string from;
  std::string source;
  std::string out;
};
}  // namespace

Runner add_import_command(CLI::App& app) {
  auto o = std::make_shared<ImportOptions>();
  app.add_option("--from", o->from, "Format of the source: hf (a Hugging Face GPT-2, BERT, Marian, T5, BART, mBART, M2M100 or NLLB directory)")
      ->required()
      ->check(CLI::IsMember({"hf"}));
  app.add_option("source", o->source, "Hugging Face model directory (config.json, model.safetensors, and its tokenizer: tokenizer.json, "
                 "or Marian's source.spm, target.spm and vocab.json, or T5's spiece.model; BART's tokenizer.json; "
                 "mBART's, NLLB's or M2M100's sentencepiece.bpe.model with tokenizer_config.json [and vocab.json])")
      ->required();
  app.add_option("--output-dir", o->out, "Checkpoint directory to write")->required();
  return [o]() {
    const interop::HfConversion info = interop::import_hf(o->source, o->out);
    for (const std::string& note : info.notes) print_note(note);
    const models::TransformerConfig& c = info.config;
    const bool bert = info.model_type == "bert", t5 = info.model_type == "t5";
    const bool bart = info.model_type == "bart", mbart = info.model_type == "mbart";
    const bool m2m100 = info.model_type == "m2m_100";
    const bool seq2seq = info.model_type == "marian" || t5 || bart || mbart || m2m100;
    const std::string family = bert     ? "BERT"
                               : t5     ? "T5"
                               : bart   ? "BART"
                               : mbart  ? "mBART"
                               : m2m100 ? "M2M100"
                               : seq2seq ? "Marian"
                                         : "GPT-2";
    const std::string vocab = c.encoder_decoder() && c.src_vocab_size != c.tgt_vocab_size
                                  ? std::to_string(c.src_vocab_size) + " / " + std::to_string(c.tgt_vocab_size)
                                  : std::to_string(c.tgt_vocab_size);
    const std::string tokenizer = !info.tokenizer ? ""
                                  : t5        ? ", tokenizer spiece.model"
                                  : mbart || m2m100 ? ", tokenizer sentencepiece.bpe.model"
                                  : seq2seq && !bart ? ", tokenizer source.spm, target.spm, vocab.json"
                                              : ", tokenizer.json";
    std::cout << "wrote " << o->out << ": " << family << " from " << o->source << " (" << c.num_layers
              << (seq2seq ? " + " + std::to_string(c.num_layers) : "") << " layers, d_model " << c.d_model << ", "
              << c.num_heads << " heads, vocab " << vocab << ", "
              << (t5 ? "relative positions, max length " : bert || seq2seq ? "positions " : "context ")
              << c.max_seq_length << ", " << info.parameters << " parameters, weights "
              << (info.weights_dtype == "F32" ? "F32" : info.weights_dtype + " widened to F32")
              << (bert && c.pooler ? ", pooler" : "") << (bert && c.mlm_head ? ", masked-LM head" : "")
              << (bert && !c.labels.empty() ? ", classifier over " + std::to_string(c.labels.size()) + " labels" : "")
              << tokenizer << ")\n";
    return 0;
  };
}

}  // namespace qkv::cli
