#include "qkv/interop/hf_m2m100.h"

#include "qkv/core/error.h"
#include "qkv/interop/hf_seq2seq.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/models/checkpoint.h"
#include "qkv/nn/layers.h"
#include "qkv/text/multilingual_tokenizer.h"

namespace qkv::interop {

using nlohmann::json;
using models::TransformerConfig;

namespace {

// Fields of old (fairseq-converted) configs that transformers' M2M100 never reads: where they say
// the model was another than the one transformers builds, importing would compute another model.
void refuse_other_layouts(const HfConfigReader& r) {
  const std::string layout = "M2M100's blocks are pre-LN with a final layer_norm in each stack";
  r.require("normalize_before", true, true, layout);
  r.require("add_final_layer_norm", true, true, layout);
  r.require("layernorm_embedding", false, false, "M2M100 has no layernorm_embedding");
  r.require("normalize_embedding", false, false, "M2M100 has no layernorm_embedding");
  r.require("is_encoder_decoder", true, true, "M2M100 is an encoder-decoder");
  r.require("share_encoder_decoder_embeddings", true, true, "M2M100 has one table for both stacks");
  // NLLB-MoE's sparse layers (model_type "nllb-moe") have their own model type; a config that
  // names experts anyway is not M2M100's dense layout.
  for (const char* sparse : {"num_experts", "encoder_sparse_step", "decoder_sparse_step"})
    if (r.has(sparse))
      r.fail(sparse, "is set: not supported (qkv imports the dense M2M100 / NLLB-200 layout, not NLLB-MoE)");
}

}  // namespace

TransformerConfig hf_m2m100_config(const std::string& hf_dir, std::vector<std::string>* notes) {
  const std::string config_path = hf_dir + "/" + kHfConfigFile;
  const HfConfigReader r(config_path, parse_hf_config(config_path));
  QKV_CHECK(r.has("model_type"), config_path << ": field \"model_type\" is missing (expected \"m2m_100\")");
  const std::string model_type = r.string("model_type", "");
  if (model_type != "m2m_100") r.fail("model_type", "is \"" + model_type + "\", expected \"m2m_100\"");
  refuse_other_layouts(r);
  TransformerConfig c;  // the seed's defaults, then M2M100Config's
  read_seq2seq_fields(r, {128112, 1024, 12, 16, 4096, 1024}, c, notes);
  if (!r.has("activation_function")) c.activation = "relu";  // M2M100Config's default (BART's is gelu)
  c.scale_embeddings = r.boolean("scale_embedding", true);
  c.norm = models::NormPosition::Pre;
  c.positions = "sinusoidal_fairseq";
  read_special_ids(hf_dir, r, c, notes);
  check_bad_words(hf_dir, r, c, notes);
  validate_read_config(config_path, c);
  return c;
}

std::unique_ptr<models::Transformer> load_hf_m2m100(const std::string& hf_dir, HfConversion* info) {
  const std::string weights_path = hf_weights_path(hf_dir);
  std::vector<std::string> notes;
  const TransformerConfig c = hf_m2m100_config(hf_dir, &notes);
  std::unique_ptr<models::Transformer> model = transformer_to_read(c);
  HfWeights w(weights_path, {"model."}, nullptr, "M2M100's translation model (M2M100ForConditionalGeneration)");
  Seq2SeqWeightReader reader(w, c);
  reader.embeddings(*model);  // no final_logits_bias in M2M100: the output bias is zero
  reader.layers(*model);
  reader.norm("encoder.layer_norm", *model->encoder_norm);
  reader.norm("decoder.layer_norm", *model->decoder_norm);
  w.expect_all_taken();
  describe_import(info, c, w, *model, notes, "m2m_100");
  return model;
}

namespace {
// Whether DIR holds a tokenizer qkv reads (text/multilingual_tokenizer.h) that fits the model;
// without its files the checkpoint translates ids, with a note. A tokenizer that is there but
// does not load or fit is refused: the user meant it to be used.
bool usable_tokenizer(const std::string& hf_dir, const TransformerConfig& c, std::vector<std::string>& notes) {
  if (!text::MultilingualTokenizer::present(hf_dir)) {
    notes.push_back("no " + std::string(text::kFairseqSpm) + " in " + hf_dir +
                    ": the checkpoint translates token ids only (qkv translate --ids; a source line is what the Hugging "
                    "Face tokenizer gives: the language code, the ids and EOS " + std::to_string(c.eos_id) + ")");
    return false;
  }
  const auto t = text::MultilingualTokenizer::load(hf_dir);
  QKV_CHECK(t->vocab_size() <= c.tgt_vocab_size,
            hf_dir << "/" << text::kMultilingualTokenizerConfig << ": the tokenizer has " << t->vocab_size()
                   << " ids, more than the model's vocab_size " << c.tgt_vocab_size);
  QKV_CHECK(t->eos_id() == c.eos_id, hf_dir << ": the tokenizer's </s> is id " << t->eos_id() << " but config.json's "
                                            << "eos_token_id is " << c.eos_id);
  return true;
}
}  // namespace

HfConversion import_hf_m2m100(const std::string& hf_dir, const std::string& out_dir) {
  HfConversion info;
  auto model = load_hf_m2m100(hf_dir, &info);
  info.tokenizer = usable_tokenizer(hf_dir, info.config, info.notes);
  io::StagedDirectory staged(out_dir);
  models::write_model_files(staged, *model);
  if (info.tokenizer)
    for (const std::string& name : text::MultilingualTokenizer::files(hf_dir)) staged.copy_from(name, hf_dir + "/" + name);
  staged.commit();
  return info;
}

// ----------------------------------------------------------------------------- export (qkv -> HF) ---

bool is_m2m100_layout(const TransformerConfig& c) { return c.encoder_decoder() && c.positions == "sinusoidal_fairseq"; }

std::string hf_m2m100_config_json(const TransformerConfig& c) {
  QKV_CHECK(is_m2m100_layout(c), "export --to hf: only an encoder-decoder model with positions \"sinusoidal_fairseq\" "
                                 "exports as M2M100");
  const auto refuse = [](bool bad, const std::string& what) { refuse_for_export("M2M100", bad, what); };
  refuse(c.norm != models::NormPosition::Pre, "post-LN (M2M100 is pre-LN with a final layer_norm in each stack)");
  refuse(c.embedding_norm, "embedding_norm true (M2M100 has no layernorm_embedding)");
  refuse(!c.share_embeddings, "share_embeddings false (M2M100's stacks share one table)");
  refuse_outside_seq2seq_layouts(c, "M2M100");
  json j = seq2seq_config_fields(c);
  j["architectures"] = {"M2M100ForConditionalGeneration"};
  j["model_type"] = "m2m_100";
  if (c.forced_bos_id >= 0) j["forced_bos_token_id"] = c.forced_bos_id;
  return j.dump(2) + "\n";
}

namespace {
// M2M100 has no final_logits_bias: an output layer whose bias is not zero (a model qkv trained)
// would compute other scores there.
void require_zero_output_bias(const std::string& checkpoint_dir, const models::Transformer& m) {
  const std::vector<float> bias = values_of(m.fc.bias.value());
  for (size_t i = 0; i < bias.size(); ++i)
    QKV_CHECK(bias[i] == 0.f, "export --to hf: " << checkpoint_dir << ": fc.bias[" << i << "] is " << bias[i]
                                                 << ", not 0: transformers' M2M100 has no bias in its output layer");
}
}  // namespace

HfConversion export_hf_m2m100(const std::string& checkpoint_dir, const std::string& out_dir) {
  Seq2SeqExport e = start_seq2seq_export(checkpoint_dir, hf_m2m100_config_json);
  HfExportFiles& files = e.files;
  const std::unique_ptr<models::Transformer>& model = e.model;
  require_zero_output_bias(checkpoint_dir, *model);
  files.generation_config_json = seq2seq_generation_fields(model->config()).dump(2) + "\n";
  files.weights = hf_safetensors_file();
  Seq2SeqTensorWriter writer(files.weights);
  writer.embeddings(*model, false);
  writer.layers(*model);
  writer.norm("model.encoder.layer_norm", *model->encoder_norm);
  writer.norm("model.decoder.layer_norm", *model->decoder_norm);
  if (text::MultilingualTokenizer::present(checkpoint_dir))
    files.tokenizer_files = text::MultilingualTokenizer::files(checkpoint_dir);
  return write_hf_export(checkpoint_dir, out_dir, *model, "m2m_100", "M2M100ForConditionalGeneration", files);
}

}  // namespace qkv::interop
