#include "qkv/interop/hf_bart.h"

#include <filesystem>
#include <optional>

#include "qkv/core/error.h"
#include "qkv/interop/hf_seq2seq.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/models/checkpoint.h"
#include "qkv/nn/layers.h"
#include "qkv/text/tokenizer.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using json = nlohmann::json;
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

// The generation settings that decide which ids come out: generation_config.json's when it has
// them (generate reads that file), else config.json's.
class GenerationFields {
 public:
  GenerationFields(const std::string& hf_dir, const HfConfigReader& config) : config_(config) {
    const std::string path = hf_dir + "/generation_config.json";
    std::error_code ec;
    if (fs::exists(path, ec)) generation_.emplace(path, parse_json_object(path, "a generation config"));
  }
  const HfConfigReader& source(const char* key) const {
    return generation_ && generation_->has(key) ? *generation_ : config_;
  }
  bool has(const char* key) const { return source(key).has(key); }
  int64_t id(const char* key, int64_t fallback, int64_t vocab) const { return source(key).integer(key, fallback, 0, vocab - 1); }

 private:
  const HfConfigReader& config_;
  std::optional<HfConfigReader> generation_;
};

void read_special_ids(const std::string& hf_dir, const HfConfigReader& r, TransformerConfig& c,
                      std::vector<std::string>* notes) {
  const GenerationFields g(hf_dir, r);
  const int64_t V = c.tgt_vocab_size;
  c.pad_id = static_cast<int32_t>(r.integer("pad_token_id", 1, 0, V - 1));
  c.eos_id = static_cast<int32_t>(g.id("eos_token_id", 2, V));
  // generate starts from decoder_start_token_id, or from bos_token_id when there is none (mBART).
  c.bos_id = static_cast<int32_t>(g.has("decoder_start_token_id") ? g.id("decoder_start_token_id", 2, V)
                                                                   : g.id("bos_token_id", 0, V));
  if (g.has("forced_bos_token_id")) c.forced_bos_id = static_cast<int32_t>(g.id("forced_bos_token_id", 0, V));
  if (g.has("forced_eos_token_id")) {
    const int64_t forced_eos = g.id("forced_eos_token_id", c.eos_id, V);
    if (forced_eos != c.eos_id)
      g.source("forced_eos_token_id")
          .fail("forced_eos_token_id", "is " + std::to_string(forced_eos) + " but the EOS is " + std::to_string(c.eos_id) +
                                           ": not supported (qkv's search ends a hypothesis at its length limit with EOS)");
    if (notes) notes->push_back("forced_eos_token_id " + std::to_string(forced_eos) +
                                ": qkv's search ends every hypothesis at its length limit with EOS");
  }
  for (const char* key : {"no_repeat_ngram_size", "min_length", "repetition_penalty", "num_beams", "length_penalty"})
    if (g.has(key) && notes)
      notes->push_back(std::string(key) + " " + g.source(key).raw().at(key).dump() +
                       " is a generation default of the model, not applied (give qkv translate's options instead)");
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
  std::unique_ptr<models::Transformer> model;
  {
    const nn::SkipRandomInitGuard no_init;  // every parameter is read below
    model = std::make_unique<models::Transformer>(c, 0);
  }
  model->eval();
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
// Whether DIR/tokenizer.json is one qkv's Translator reads (BART's byte-level BPE with
// RobertaProcessing) and fits the model; otherwise a note says why the checkpoint takes ids only.
bool usable_tokenizer(const std::string& hf_dir, const TransformerConfig& c, std::vector<std::string>& notes) {
  const std::string path = hf_dir + "/" + kTokenizerJsonFile;
  const std::string ids_only = ": the checkpoint translates token ids only (qkv translate --ids; a source line is what "
                               "the Hugging Face tokenizer gives, ending with EOS " + std::to_string(c.eos_id) + ")";
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    notes.push_back("no " + std::string(kTokenizerJsonFile) + " in " + hf_dir + ids_only);
    return false;
  }
  try {
    const auto t = text::load_tokenizer(path);
    QKV_CHECK(t->vocab_size() <= c.tgt_vocab_size,
              path << ": the tokenizer has " << t->vocab_size() << " ids, more than the model's " << c.tgt_vocab_size);
    QKV_CHECK(t->with_special_tokens({}).size() == 2, path << ": post_processor adds no <s> ... </s> (BART's "
                                                              "RobertaProcessing)");
  } catch (const Error& e) {  // mBART's SentencePiece tokenizer, for one
    notes.push_back(std::string("tokenizer not imported (") + e.what() + ")" + ids_only);
    return false;
  }
  return true;
}
}  // namespace

HfConversion import_hf_bart(const std::string& hf_dir, const std::string& out_dir) {
  HfConversion info;
  auto model = load_hf_bart(hf_dir, &info);
  info.tokenizer = usable_tokenizer(hf_dir, info.config, info.notes);
  io::StagedDirectory staged(out_dir);
  models::write_model_files(staged, *model);
  if (info.tokenizer) {
    staged.copy_from(kTokenizerJsonFile, hf_dir + "/" + kTokenizerJsonFile);
    // Its clean_up_tokenization_spaces decides how the Translator decodes.
    std::error_code ec;
    if (fs::exists(hf_dir + "/tokenizer_config.json", ec))
      staged.copy_from("tokenizer_config.json", hf_dir + "/tokenizer_config.json");
  }
  staged.commit();
  return info;
}

}  // namespace qkv::interop
