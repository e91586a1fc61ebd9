#include "qkv/interop/hf_marian.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "qkv/core/error.h"
#include "qkv/interop/hf_seq2seq.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/models/checkpoint.h"
#include "qkv/nn/layers.h"
#include "qkv/text/marian_tokenizer.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using nlohmann::json;
using models::TransformerConfig;

TransformerConfig hf_marian_config(const std::string& hf_dir, std::vector<std::string>* notes) {
  const std::string config_path = hf_dir + "/" + kHfConfigFile;
  const json j = parse_hf_config(config_path);
  const HfConfigReader r(config_path, j);
  QKV_CHECK(r.has("model_type"), config_path << ": field \"model_type\" is missing (expected \"marian\")");
  const std::string model_type = r.string("model_type", "");
  if (model_type != "marian") r.fail("model_type", "is \"" + model_type + "\", expected \"marian\"");
  for (const char* key : {"normalize_before", "add_final_layer_norm", "normalize_embedding", "layernorm_embedding"})
    r.require(key, false, false, "Marian's blocks are post-LN without an embedding norm; BART-style layouts are not "
                                 "imported as Marian");
  r.require("is_encoder_decoder", true, true, "a Marian model is an encoder-decoder");

  TransformerConfig c;  // the seed's defaults, then Marian's choices
  read_seq2seq_fields(r, {58101, 512, 6, 8, 2048, 512}, c, notes);
  c.norm = models::NormPosition::Post;
  c.positions = "sinusoidal_halves";
  const int64_t max_id = std::min(c.src_vocab_size, c.tgt_vocab_size) - 1;
  for (const char* key : {"pad_token_id", "eos_token_id", "decoder_start_token_id"})
    QKV_CHECK(r.has(key), config_path << ": field \"" << key << "\" is missing (qkv takes the special ids from the config)");
  c.pad_id = static_cast<int32_t>(r.integer("pad_token_id", 0, 0, max_id));
  c.eos_id = static_cast<int32_t>(r.integer("eos_token_id", 0, 0, c.tgt_vocab_size - 1));
  c.bos_id = static_cast<int32_t>(r.integer("decoder_start_token_id", 0, 0, c.tgt_vocab_size - 1));
  check_bad_words(hf_dir, r, c, notes);
  validate_read_config(config_path, c);
  return c;
}

namespace {
// A stored sinusoidal table must be the one qkv computes (a different one would be a layout qkv
// does not build).
void check_positions(HfWeights& w, const std::string& name, const Tensor& ours) {
  if (!w.has(name)) return;
  const std::vector<float> stored = w.take(name, {ours.size(0), ours.size(1)}, "max_position_embeddings x d_model");
  const std::vector<float> mine = ours.contiguous().to_vector();
  for (size_t i = 0; i < stored.size(); ++i)
    QKV_CHECK(std::fabs(stored[i] - mine[i]) <= 1e-5f,
              w.path() << ": tensor '" << name << "' is not Marian's sinusoidal table (element " << i << " is "
                       << stored[i] << ", expected " << mine[i] << ")");
}
}  // namespace

std::unique_ptr<models::Transformer> load_hf_marian(const std::string& hf_dir, HfConversion* info) {
  const std::string weights_path = hf_weights_path(hf_dir);
  std::vector<std::string> notes;
  const TransformerConfig c = hf_marian_config(hf_dir, &notes);
  std::unique_ptr<models::Transformer> model = transformer_to_read(c);
  HfWeights w(weights_path, {"model."}, nullptr, "Marian's translation model (MarianMTModel)");
  Seq2SeqWeightReader reader(w, c);
  reader.embeddings(*model);
  check_positions(w, "encoder.embed_positions.weight", model->positional_encoding.pe);
  check_positions(w, "decoder.embed_positions.weight", model->positional_encoding.pe);
  reader.layers(*model);
  w.expect_all_taken();
  describe_import(info, c, w, *model, notes, "marian");
  return model;
}

HfConversion import_hf_marian(const std::string& hf_dir, const std::string& out_dir) {
  HfConversion info;
  auto model = load_hf_marian(hf_dir, &info);
  std::vector<std::string> tokenizer_files;
  if (text::MarianTokenizer::present(hf_dir)) {
    // Checked before anything is written: a tokenizer qkv cannot read, or one larger than the
    // model, would make a checkpoint that cannot translate text.
    for (const bool target : {false, true}) {
      const auto t = text::MarianTokenizer::load(hf_dir, target);
      const int64_t rows = target ? info.config.tgt_vocab_size : info.config.src_vocab_size;
      QKV_CHECK(t->vocab_size() <= rows, hf_dir << ": the " << (target ? "target" : "source") << " vocabulary has "
                                                << t->vocab_size() << " ids, more than the model's " << rows);
    }
    tokenizer_files = existing_files(hf_dir, {text::kMarianSourceSpm, text::kMarianTargetSpm, text::kMarianVocab,
                                              text::kMarianTargetVocab, text::kTokenizerConfig});
    info.tokenizer = true;
  } else {
    info.notes.push_back("no Marian tokenizer (source.spm, target.spm, vocab.json) in " + hf_dir +
                         ": the checkpoint translates token ids only (qkv translate --ids)");
  }
  io::StagedDirectory staged(out_dir);
  models::write_model_files(staged, *model);
  for (const std::string& name : tokenizer_files) staged.copy_from(name, hf_dir + "/" + name);
  staged.commit();
  return info;
}

// ----------------------------------------------------------------------------- export (qkv -> HF) ---

std::string hf_marian_config_json(const TransformerConfig& c) {
  QKV_CHECK(c.encoder_decoder(), "export --to hf: this is an " << c.architecture
                                                                 << " model; encoder-decoder models export as Marian");
  const auto refuse = [](bool bad, const std::string& what) { refuse_for_export("Marian", bad, what); };
  refuse(c.norm != models::NormPosition::Post, "pre-LN (Marian is post-LN)");
  refuse(c.positions != "sinusoidal_halves", "positions \"" + c.positions +
                                                 "\" (Marian's table is \"sinusoidal_halves\": sines, then cosines)");
  refuse(c.embedding_norm, "embedding_norm true (BART's layernorm_embedding; Marian has none)");
  refuse(c.forced_bos_id >= 0, "forced_bos_id " + std::to_string(c.forced_bos_id) + " (Marian forces no first token)");
  refuse_outside_seq2seq_layouts(c, "Marian");
  json j = seq2seq_config_fields(c);
  j["architectures"] = {"MarianMTModel"};
  j["model_type"] = "marian";
  j["decoder_vocab_size"] = c.tgt_vocab_size;
  j["share_encoder_decoder_embeddings"] = c.share_embeddings;
  return j.dump(2) + "\n";
}

std::string hf_marian_generation_config_json(const TransformerConfig& c) {
  json j = seq2seq_generation_fields(c);
  j["bad_words_ids"] = json::array({json::array({c.pad_id})});
  return j.dump(2) + "\n";
}

HfConversion export_hf_marian(const std::string& checkpoint_dir, const std::string& out_dir) {
  Seq2SeqExport e = start_seq2seq_export(checkpoint_dir, hf_marian_config_json);
  HfExportFiles& files = e.files;
  const std::unique_ptr<models::Transformer>& model = e.model;
  files.generation_config_json = hf_marian_generation_config_json(model->config());
  files.weights = hf_safetensors_file();
  Seq2SeqTensorWriter writer(files.weights);
  writer.embeddings(*model, true);
  writer.layers(*model);
  std::vector<std::string> notes;
  std::error_code ec;
  if (text::MarianTokenizer::present(checkpoint_dir)) {
    files.tokenizer_files = existing_files(checkpoint_dir, {text::kMarianSourceSpm, text::kMarianTargetSpm, text::kMarianVocab,
                                                            text::kMarianTargetVocab, text::kTokenizerConfig});
  } else if (fs::exists(checkpoint_dir + "/" + models::kSourceSpmFile, ec)) {
    notes.push_back(std::string(models::kSourceSpmFile) + " and " + models::kTargetSpmFile +
                    " not exported: MarianTokenizer needs a vocab.json beside its SentencePiece models");
  }
  return write_hf_export(checkpoint_dir, out_dir, *model, "marian", "MarianMTModel", files, std::move(notes));
}

}  // namespace qkv::interop
