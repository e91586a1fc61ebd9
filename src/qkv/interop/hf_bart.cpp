#include "qkv/interop/hf_bart.h"

#include <filesystem>

#include "qkv/core/error.h"
#include "qkv/interop/hf_seq2seq.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/models/checkpoint.h"
#include "qkv/nn/layers.h"
#include "qkv/text/legacy_bpe_files.h"
#include "qkv/text/multilingual_tokenizer.h"
#include "qkv/text/tokenizer.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using nlohmann::json;
using models::TransformerConfig;

namespace {

// BartLearnedPositionalEmbedding reads row p + 2 for position p (a fairseq convention).
constexpr int64_t kPositionOffset = 2;

// Old configs (converted from fairseq) carry fields that transformers no longer reads; where they
// say the model was something other than what transformers builds from model_type, the import
// would compute another model than its author's, so they are refused.
void refuse_other_layouts(const HfConfigReader& r, bool mbart) {
  const std::string layout = mbart ? "mBART's blocks are pre-LN with a final layer_norm in each stack"
                                   : "BART's blocks are post-LN without final norms";
  r.require("normalize_before", mbart, mbart, layout);
  r.require("add_final_layer_norm", mbart, mbart, layout);
  r.require("normalize_embedding", true, true, "both stacks have layernorm_embedding");
  r.require("static_position_embeddings", false, false, "BART's and mBART's positions are learned");
  r.require("add_bias_logits", false, false, "qkv's output layer adds final_logits_bias only");
  r.require("is_encoder_decoder", true, true, "BART is an encoder-decoder");
}

}  // namespace

TransformerConfig hf_bart_config(const std::string& hf_dir, std::vector<std::string>* notes) {
  const std::string config_path = hf_dir + "/" + kHfConfigFile;
  const HfConfigReader r(config_path, parse_hf_config(config_path));
  QKV_CHECK(r.has("model_type"), config_path << ": field \"model_type\" is missing (expected \"bart\" or \"mbart\")");
  const std::string model_type = r.string("model_type", "");
  if (model_type != "bart" && model_type != "mbart")
    r.fail("model_type", "is \"" + model_type + "\", expected \"bart\" or \"mbart\"");
  const bool mbart = model_type == "mbart";
  refuse_other_layouts(r, mbart);
  TransformerConfig c;  // the seed's defaults, then BART's choices
  read_seq2seq_fields(r, {50265, 1024, 12, 16, 4096, 1024}, c, notes);
  c.norm = mbart ? models::NormPosition::Pre : models::NormPosition::Post;
  c.positions = "learned";
  c.embedding_norm = true;
  read_special_ids(hf_dir, r, c, notes);
  check_bad_words(hf_dir, r, c, notes);
  validate_read_config(config_path, c);
  return c;
}

namespace {
// A position table of P + 2 rows without its first two (never read: positions start at row 2).
void read_positions(HfWeights& w, const std::string& name, const TransformerConfig& c, nn::Embedding& table) {
  const int64_t rows = c.max_seq_length + kPositionOffset;
  copy_into(w.take(name, {rows, c.d_model}, "(max_position_embeddings + 2) x d_model"), kPositionOffset * c.d_model,
            table.weight.value());
}
}  // namespace

std::unique_ptr<models::Transformer> load_hf_bart(const std::string& hf_dir, HfConversion* info) {
  const std::string weights_path = hf_weights_path(hf_dir);
  std::vector<std::string> notes;
  const TransformerConfig c = hf_bart_config(hf_dir, &notes);
  std::unique_ptr<models::Transformer> model = transformer_to_read(c);
  const bool mbart = c.norm == models::NormPosition::Pre;
  HfWeights w(weights_path, {"model."}, nullptr,
              mbart ? "mBART's translation model (MBartForConditionalGeneration)"
                    : "BART's model (BartForConditionalGeneration)");
  Seq2SeqWeightReader reader(w, c);
  reader.embeddings(*model);
  read_positions(w, "encoder.embed_positions.weight", c, *model->encoder_position_embedding);
  read_positions(w, "decoder.embed_positions.weight", c, *model->decoder_position_embedding);
  reader.norm("encoder.layernorm_embedding", *model->encoder_embedding_norm);
  reader.norm("decoder.layernorm_embedding", *model->decoder_embedding_norm);
  reader.layers(*model);
  if (mbart) {
    reader.norm("encoder.layer_norm", *model->encoder_norm);
    reader.norm("decoder.layer_norm", *model->decoder_norm);
  }
  w.expect_all_taken();
  describe_import(info, c, w, *model, notes, mbart ? "mbart" : "bart");
  return model;
}

namespace {
std::string ids_only(const TransformerConfig& c) {
  return ": the checkpoint translates token ids only (qkv translate --ids; a source line is what the Hugging Face "
         "tokenizer gives, ending with EOS " + std::to_string(c.eos_id) + ")";
}

// Whether the tokenizer.json at `path` (DIR's own, or the one made of its slow tokenizer's files)
// is one qkv's Translator reads (BART's byte-level BPE with RobertaProcessing) and fits the model;
// otherwise a note says why the checkpoint takes ids only.
bool usable_tokenizer_json(const std::string& path, const TransformerConfig& c, std::vector<std::string>& notes) {
  try {
    const auto t = text::load_tokenizer(path);
    QKV_CHECK(t->vocab_size() <= c.tgt_vocab_size,
              path << ": the tokenizer has " << t->vocab_size() << " ids, more than the model's " << c.tgt_vocab_size);
    QKV_CHECK(t->with_special_tokens({}).size() == 2, path << ": post_processor adds no <s> ... </s> (BART's "
                                                              "RobertaProcessing)");
  } catch (const Error& e) {
    notes.push_back(std::string("tokenizer not imported (") + e.what() + ")" + ids_only(c));
    return false;
  }
  return true;
}

// mBART's SentencePiece tokenizer (MBartTokenizer or MBart50Tokenizer: sentencepiece.bpe.model with
// tokenizer_config.json), which must load and fit the model once its model file is there.
void check_mbart_tokenizer(const std::string& hf_dir, const TransformerConfig& c) {
  const auto t = text::MultilingualTokenizer::load(hf_dir);
  const std::string config_path = hf_dir + "/" + text::kMultilingualTokenizerConfig;
  using Kind = text::MultilingualTokenizer::Kind;
  QKV_CHECK(t->kind() == Kind::MBart || t->kind() == Kind::MBart50,
            config_path << ": field \"tokenizer_class\" is not mBART's (MBartTokenizer or MBart50Tokenizer)");
  QKV_CHECK(t->vocab_size() <= c.tgt_vocab_size, config_path << ": the tokenizer has " << t->vocab_size()
                                                             << " ids, more than the model's vocab_size "
                                                             << c.tgt_vocab_size);
}

// The tokenizer a BART checkpoint gets: files copied from the directory, and for a directory with
// the slow tokenizer's files but no tokenizer.json (transformers before 4.34, or
// save_pretrained(legacy_format=True)) the tokenizer.json transformers would make of them.
struct BartTokenizerFiles {
  std::vector<std::string> copied;
  std::string made_tokenizer_json;  // empty: none made
};

// mBART's SentencePiece files when there, else BART's tokenizer.json (its own or made of vocab.json
// and merges.txt) with its tokenizer_config.json, whose clean_up_tokenization_spaces decides how
// the Translator decodes; none, with a note, otherwise.
BartTokenizerFiles tokenizer_files(const std::string& hf_dir, const TransformerConfig& c, bool mbart,
                                   std::vector<std::string>& notes) {
  if (mbart && text::MultilingualTokenizer::present(hf_dir)) {
    check_mbart_tokenizer(hf_dir, c);
    return {text::MultilingualTokenizer::files(hf_dir), ""};
  }
  if (mbart) {
    notes.push_back("no " + std::string(text::kFairseqSpm) + " in " + hf_dir + ids_only(c));
    return {};
  }
  BartTokenizerFiles files;
  const std::string path = hf_dir + "/" + kTokenizerJsonFile;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (!usable_tokenizer_json(path, c, notes)) return {};
    files.copied.emplace_back(kTokenizerJsonFile);
  } else if (text::legacy_bpe_files_present(hf_dir)) {
    files.made_tokenizer_json = text::roberta_tokenizer_json(hf_dir);
    notes.push_back(std::string(kTokenizerJsonFile) + " made of " + hf_dir + "'s " + text::kBpeVocabFile + " and " +
                    text::kBpeMergesFile + " (a slow tokenizer's files), as transformers' BartTokenizerFast makes it");
  } else {
    notes.push_back("no " + std::string(kTokenizerJsonFile) + " (nor " + text::kBpeVocabFile + " and " +
                    text::kBpeMergesFile + ") in " + hf_dir + ids_only(c));
    return {};
  }
  if (fs::exists(hf_dir + "/tokenizer_config.json", ec)) files.copied.emplace_back("tokenizer_config.json");
  return files;
}
}  // namespace

HfConversion import_hf_bart(const std::string& hf_dir, const std::string& out_dir) {
  HfConversion info;
  auto model = load_hf_bart(hf_dir, &info);
  const BartTokenizerFiles files =
      tokenizer_files(hf_dir, info.config, info.config.norm == models::NormPosition::Pre, info.notes);
  io::StagedDirectory staged(out_dir);
  models::write_model_files(staged, *model);
  info.tokenizer = !files.copied.empty() || !files.made_tokenizer_json.empty();
  if (!files.made_tokenizer_json.empty()) {
    // Checked where it is written: a made tokenizer qkv cannot use leaves the checkpoint ids only.
    staged.write(kTokenizerJsonFile, files.made_tokenizer_json);
    info.tokenizer = usable_tokenizer_json(staged.path(kTokenizerJsonFile), info.config, info.notes);
    if (!info.tokenizer) fs::remove(staged.path(kTokenizerJsonFile));
  }
  if (info.tokenizer)
    for (const std::string& name : files.copied) staged.copy_from(name, hf_dir + "/" + name);
  staged.commit();
  return info;
}

// ----------------------------------------------------------------------------- export (qkv -> HF) ---

bool is_bart_layout(const TransformerConfig& c) { return c.encoder_decoder() && c.positions == "learned"; }

std::string hf_bart_config_json(const TransformerConfig& c) {
  QKV_CHECK(is_bart_layout(c), "export --to hf: only an encoder-decoder model with positions \"learned\" exports as "
                               "BART or mBART");
  const bool mbart = c.norm == models::NormPosition::Pre;
  const std::string family = mbart ? "mBART" : "BART";
  const auto refuse = [&](bool bad, const std::string& what) { refuse_for_export(family, bad, what); };
  refuse(!c.embedding_norm, "embedding_norm false (both stacks of " + family + " have layernorm_embedding)");
  refuse(!c.share_embeddings, "share_embeddings false (" + family + "'s stacks share one table)");
  refuse_outside_seq2seq_layouts(c, family);
  json j = seq2seq_config_fields(c);
  j["architectures"] = {mbart ? "MBartForConditionalGeneration" : "BartForConditionalGeneration"};
  j["model_type"] = mbart ? "mbart" : "bart";
  if (c.forced_bos_id >= 0) j["forced_bos_token_id"] = c.forced_bos_id;
  return j.dump(2) + "\n";
}

namespace {
// A position table with the offset's two rows in front (zeros: BartLearnedPositionalEmbedding
// never reads them).
io::StTensor positions_with_offset(const std::string& name, const nn::Embedding& table) {
  const Tensor& t = table.weight.value();
  std::vector<float> values(static_cast<size_t>(kPositionOffset * t.size(1)), 0.f);
  const std::vector<float> rows = values_of(t);
  values.insert(values.end(), rows.begin(), rows.end());
  return f32_tensor(name, {t.size(0) + kPositionOffset, t.size(1)}, values);
}

// The tokenizer the import kept: mBART's SentencePiece files, or BART's tokenizer.json with its
// tokenizer_config.json.
std::vector<std::string> bart_tokenizer_files(const std::string& checkpoint_dir) {
  if (text::MultilingualTokenizer::present(checkpoint_dir)) return text::MultilingualTokenizer::files(checkpoint_dir);
  std::error_code ec;
  if (!fs::exists(checkpoint_dir + "/" + kTokenizerJsonFile, ec)) return {};
  return existing_files(checkpoint_dir, {kTokenizerJsonFile, "tokenizer_config.json"});
}
}  // namespace

HfConversion export_hf_bart(const std::string& checkpoint_dir, const std::string& out_dir) {
  Seq2SeqExport e = start_seq2seq_export(checkpoint_dir, hf_bart_config_json);
  HfExportFiles& files = e.files;
  const std::unique_ptr<models::Transformer>& model = e.model;
  const bool mbart = model->config().norm == models::NormPosition::Pre;
  files.generation_config_json = seq2seq_generation_fields(model->config()).dump(2) + "\n";
  files.weights = hf_safetensors_file();
  Seq2SeqTensorWriter writer(files.weights);
  writer.embeddings(*model, true);
  files.weights.tensors.push_back(
      positions_with_offset("model.encoder.embed_positions.weight", *model->encoder_position_embedding));
  files.weights.tensors.push_back(
      positions_with_offset("model.decoder.embed_positions.weight", *model->decoder_position_embedding));
  writer.norm("model.encoder.layernorm_embedding", *model->encoder_embedding_norm);
  writer.norm("model.decoder.layernorm_embedding", *model->decoder_embedding_norm);
  writer.layers(*model);
  if (mbart) {
    writer.norm("model.encoder.layer_norm", *model->encoder_norm);
    writer.norm("model.decoder.layer_norm", *model->decoder_norm);
  }
  files.tokenizer_files = bart_tokenizer_files(checkpoint_dir);
  return write_hf_export(checkpoint_dir, out_dir, *model, mbart ? "mbart" : "bart",
                         mbart ? "MBartForConditionalGeneration" : "BartForConditionalGeneration", files);
}

}  // namespace qkv::interop
