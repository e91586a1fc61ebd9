#include "qkv/interop/hf_gpt2.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "qkv/core/error.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/byte_level_bpe.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using nlohmann::json;
using models::TransformerConfig;

namespace {

constexpr const char* kPrefix = "transformer.";


float to_float(double d) { return static_cast<float>(d); }

}  // namespace

TransformerConfig hf_gpt2_config(const std::string& config_path, std::vector<std::string>* notes) {
  const json j = parse_hf_config(config_path);
  const HfConfigReader r(config_path, j);
  QKV_CHECK(j.contains("model_type"), config_path << ": field \"model_type\" is missing (qkv imports model_type \"gpt2\")");
  const std::string model_type = r.string("model_type", "");
  QKV_CHECK(model_type == "gpt2", config_path << ": field \"model_type\" is \"" << model_type
                                              << "\": not supported (qkv imports model_type \"gpt2\" only)");

  // Options of GPT2Config that change the computation in ways qkv's blocks do not.
  r.require("scale_attn_weights", true, true, "qkv always divides attention scores by sqrt(head size)");
  r.require("scale_attn_by_inverse_layer_idx", false, false, "qkv does not scale scores by 1 / layer index");
  r.require("reorder_and_upcast_attn", false, false, "qkv has no reordered, upcast attention");
  r.require("add_cross_attention", false, false, "qkv's decoder-only blocks have no cross-attention");
  r.require("is_encoder_decoder", false, false, "qkv imports GPT-2 language models only");

  TransformerConfig c = models::decoder_only_defaults();
  c.d_model = r.integer("n_embd", 768, 1, models::kMaxWidth);
  c.num_heads = r.integer("n_head", 12, 1, models::kMaxWidth);
  QKV_CHECK(c.d_model % c.num_heads == 0, config_path << ": field \"n_head\" is " << c.num_heads
                                                      << ", which does not divide n_embd " << c.d_model);
  c.num_layers = r.integer("n_layer", 12, 1, models::kMaxLayers);
  c.d_ff = r.has("n_inner") ? r.integer("n_inner", 0, 1, models::kMaxWidth) : 4 * c.d_model;
  QKV_CHECK(c.d_ff <= models::kMaxWidth, config_path << ": 4 * n_embd (n_inner is null) is " << c.d_ff
                                                     << ", more than qkv's d_ff limit " << models::kMaxWidth);
  c.max_seq_length = r.integer("n_positions", 1024, 1, models::kMaxSeqLength);
  c.tgt_vocab_size = c.src_vocab_size = r.integer("vocab_size", 50257, 1, models::kMaxVocabSize);
  c.layer_norm_eps = to_float(r.number("layer_norm_epsilon", 1e-5, 0, 1));
  QKV_CHECK(c.layer_norm_eps > 0, config_path << ": field \"layer_norm_epsilon\" must be positive");

  const std::string act = r.string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    c.activation = "gelu_tanh";
  else if (act == "gelu")
    c.activation = "gelu";
  else
    r.fail("activation_function", "is \"" + act + "\": not supported (qkv has \"gelu_new\" and \"gelu_pytorch_tanh\" "
                                  "= tanh GELU, \"gelu\" = erf GELU)");

  // qkv has one dropout for the residual branches and the embeddings (GPT-2: resid_pdrop and
  // embd_pdrop); when they differ the residual one is kept, as it acts in every block.
  const double resid = r.number("resid_pdrop", 0.1, 0, 1), embd = r.number("embd_pdrop", 0.1, 0, 1);
  QKV_CHECK(resid < 1 && embd < 1 && r.number("attn_pdrop", 0.1, 0, 1) < 1,
            config_path << ": dropout probabilities must be below 1");
  c.dropout = to_float(resid);
  if (resid != embd && notes)
    notes->push_back("embd_pdrop " + j.at("embd_pdrop").dump() + " differs from resid_pdrop " + std::to_string(resid) +
                     "; qkv has one dropout for both and uses resid_pdrop (dropout only matters for training)");
  c.attention_dropout = to_float(r.number("attn_pdrop", 0.1, 0, 1));

  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    QKV_CHECK(!j.contains(key) || !j.at(key).is_null(),
              config_path << ": field \"" << key << "\" is null: qkv needs a begin and an end id for generation");
  }
  c.bos_id = static_cast<int32_t>(r.integer("bos_token_id", 50256, 0, c.tgt_vocab_size - 1));
  c.eos_id = static_cast<int32_t>(r.integer("eos_token_id", 50256, 0, c.tgt_vocab_size - 1));
  c.pad_id = -1;  // GPT-2 has no padding id; a pad_token_id (generation only) does not change the model
  c.tie_output_embedding = r.boolean("tie_word_embeddings", true);
  c.positions = "learned";
  c.layer_norm = "standard";
  c.ffn_dropout = 0;
  c.scale_embeddings = false;
  c.mask_fill = "-1e9";  // see hf_gpt2.h: GPT-2's finite fill (the dtype's minimum) behaves the same
  validate_read_config(config_path, c);
  return c;
}

namespace {

// ------------------------------------------------------------------------ weights (HF -> qkv) ---

}  // namespace

std::unique_ptr<models::CausalLM> load_hf_gpt2(const std::string& hf_dir, HfConversion* info) {
  const std::string weights_path = hf_weights_path(hf_dir);
  std::vector<std::string> notes;
  const TransformerConfig c = hf_gpt2_config(hf_dir + "/" + kHfConfigFile, &notes);

  auto model = std::make_unique<models::CausalLM>(c, 0);
  model->eval();
  // The causal mask buffers (attn.bias, attn.masked_bias) that older GPT-2 checkpoints store.
  const auto mask_buffer = [](const std::string& name) {
    return name.rfind("h.", 0) == 0 && name.size() > 10 &&
           (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
  };
  HfWeights w(weights_path, {kPrefix}, mask_buffer, "GPT-2's language model (GPT2LMHeadModel)");
  const int64_t D = c.d_model, F = c.d_ff, V = c.tgt_vocab_size, P = c.max_seq_length;
  const std::string d = std::to_string(D), f = std::to_string(F);

  const auto wte = w.take("wte.weight", {V, D}, "vocab_size x n_embd");
  copy_into(wte, 0, model->token_embedding.weight.value());
  copy_into(w.take("wpe.weight", {P, D}, "n_positions x n_embd"), 0, model->position_embedding->weight.value());
  const auto norm = [&](const std::string& hf, nn::LayerNorm& ln) {
    copy_into(w.take(hf + ".weight", {D}, "n_embd"), 0, ln.weight.value());
    copy_into(w.take(hf + ".bias", {D}, "n_embd"), 0, ln.bias.value());
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    models::CausalBlock& block = *model->layers[static_cast<size_t>(l)];
    const std::string h = "h." + std::to_string(l) + ".";
    norm(h + "ln_1", block.norm1);
    norm(h + "ln_2", block.norm2);
    nn::MultiHeadAttention& attn = block.self_attn;
    const auto qkv_w = w.take(h + "attn.c_attn.weight", {D, 3 * D}, "Conv1D (in, out): n_embd x 3 * n_embd");
    const auto qkv_b = w.take(h + "attn.c_attn.bias", {3 * D}, "3 * n_embd");
    nn::Linear* parts[] = {&attn.W_q, &attn.W_k, &attn.W_v};
    for (int64_t p = 0; p < 3; ++p) {
      transpose_block(qkv_w, D, 3 * D, p * D, D, parts[p]->weight.value());
      copy_into(qkv_b, p * D, parts[p]->bias.value());
    }
    transpose_block(w.take(h + "attn.c_proj.weight", {D, D}, "Conv1D (in, out): n_embd x n_embd"), D, D, 0, D,
                    attn.W_o.weight.value());
    copy_into(w.take(h + "attn.c_proj.bias", {D}, "n_embd"), 0, attn.W_o.bias.value());
    nn::PositionWiseFeedForward& ffn = block.feed_forward;
    transpose_block(w.take(h + "mlp.c_fc.weight", {D, F}, "Conv1D (in, out): n_embd x n_inner"), D, F, 0, F,
                    ffn.fc1.weight.value());
    copy_into(w.take(h + "mlp.c_fc.bias", {F}, "n_inner"), 0, ffn.fc1.bias.value());
    transpose_block(w.take(h + "mlp.c_proj.weight", {F, D}, "Conv1D (in, out): n_inner x n_embd"), F, D, 0, D,
                    ffn.fc2.weight.value());
    copy_into(w.take(h + "mlp.c_proj.bias", {D}, "n_embd"), 0, ffn.fc2.bias.value());
  }
  norm("ln_f", model->final_norm);
  if (c.tie_output_embedding) {
    // GPT2LMHeadModel's lm_head shares wte; a file may still store it (then it must be the same).
    if (w.has("lm_head.weight")) {
      const auto head = w.take("lm_head.weight", {V, D}, "vocab_size x n_embd");
      QKV_CHECK(std::memcmp(head.data(), wte.data(), sizeof(float) * wte.size()) == 0,
                weights_path << ": tensor 'lm_head.weight' differs from 'wte.weight', but config.json says "
                                "tie_word_embeddings: true");
    }
  } else {
    copy_into(w.take("lm_head.weight", {V, D}, "vocab_size x n_embd; tie_word_embeddings is false"), 0,
              model->lm_head.weight.value());
  }
  w.expect_all_taken();
  describe_import(info, c, w, *model, notes, "gpt2");
  return model;
}

HfConversion import_hf_gpt2(const std::string& hf_dir, const std::string& out_dir) {
  HfConversion info;
  auto model = load_hf_gpt2(hf_dir, &info);
  std::error_code ec;
  const std::string tokenizer = hf_dir + "/" + kTokenizerJsonFile;
  if (fs::exists(tokenizer, ec)) {
    // Checked before anything is written: a tokenizer qkv cannot read would make a checkpoint that
    // generates ids only.
    const text::ByteLevelBpe bpe = text::ByteLevelBpe::load(tokenizer);
    QKV_CHECK(bpe.vocab_size() <= info.config.tgt_vocab_size,
              tokenizer << ": " << bpe.vocab_size() << " tokens, more than the model's vocab_size "
                        << info.config.tgt_vocab_size);
    info.tokenizer = true;
  }
  io::StagedDirectory staged(out_dir);
  models::write_model_files(staged, *model);
  if (info.tokenizer) staged.copy_from(kTokenizerJsonFile, tokenizer);
  staged.commit();
  return info;
}

// ----------------------------------------------------------------------------- export (qkv -> HF) ---

namespace {
// (rows, in) weights of nn.Linear -> the Conv1D (in, out) columns [col0, col0 + rows) of `dst`.
void put_transposed(const Tensor& w, int64_t out, int64_t col0, std::vector<float>& dst) {
  const std::vector<float> v = values_of(w);
  const int64_t rows = w.shape()[0], in = w.shape()[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < in; ++i) dst[static_cast<size_t>(i * out + col0 + r)] = v[static_cast<size_t>(r * in + i)];
}
}  // namespace

std::string hf_gpt2_config_json(const TransformerConfig& c) {
  QKV_CHECK(c.decoder_only(), "export --to hf: this is an " << c.architecture << " model; only decoder-only models "
                                                               "export to Hugging Face GPT-2 (encoder-decoder models export "
                                                               "as Marian: interop/hf_marian.h)");
  const auto refuse = [](bool bad, const std::string& what) {
    QKV_CHECK(!bad, "export --to hf: " << what << ": transformers' GPT-2 cannot express it");
  };
  refuse(c.positions != "learned", "positions \"" + c.positions + "\" (GPT-2 has learned positions only)");
  refuse(c.layer_norm != "standard", "layer_norm \"" + c.layer_norm + "\" (GPT-2 uses nn.LayerNorm)");
  refuse(c.ffn_dropout > 0, "ffn_dropout " + std::to_string(c.ffn_dropout) + " (GPT-2 has no dropout inside the MLP)");
  refuse(c.activation != "gelu" && c.activation != "gelu_tanh",
         "activation \"" + c.activation + "\" (GPT-2 exports gelu and gelu_tanh)");
  refuse(c.scale_embeddings, "scale_embeddings true (GPT-2 does not scale its embeddings)");
  refuse(c.norm != models::NormPosition::Pre, "post-LN (GPT-2 is pre-LN)");
  json j = json::object();
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["activation_function"] = c.activation == "gelu_tanh" ? "gelu_new" : "gelu";
  j["attn_pdrop"] = shortest(c.attention_dropout);
  j["bos_token_id"] = c.bos_id;
  j["embd_pdrop"] = shortest(c.dropout);
  j["eos_token_id"] = c.eos_id;
  j["initializer_range"] = 0.02;
  j["layer_norm_epsilon"] = shortest(c.layer_norm_eps);
  j["n_embd"] = c.d_model;
  j["n_head"] = c.num_heads;
  j["n_inner"] = c.d_ff;
  j["n_layer"] = c.num_layers;
  j["n_positions"] = c.max_seq_length;
  if (c.pad_id >= 0) j["pad_token_id"] = c.pad_id;
  j["reorder_and_upcast_attn"] = false;
  j["resid_pdrop"] = shortest(c.dropout);
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["summary_activation"] = nullptr;  // GPT2Config's defaults for the (unused) sequence-summary head
  j["summary_first_dropout"] = 0.1;
  j["summary_proj_to_labels"] = true;
  j["summary_type"] = "cls_index";
  j["summary_use_proj"] = true;
  j["tie_word_embeddings"] = c.tie_output_embedding;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  j["vocab_size"] = c.tgt_vocab_size;
  return j.dump(2) + "\n";
}

HfConversion export_hf_gpt2(const std::string& checkpoint_dir, const std::string& out_dir) {
  models::check_checkpoint_dir(checkpoint_dir);
  // The config first: an unexportable model is refused before its weights are read.
  const TransformerConfig config = models::load_config(checkpoint_dir + "/config.json");
  const std::string config_json = hf_gpt2_config_json(config);
  const std::unique_ptr<models::CausalLM> model = models::load_causal_lm(checkpoint_dir);
  const TransformerConfig& c = model->config();
  const int64_t D = c.d_model, F = c.d_ff;
  io::StFile file = hf_safetensors_file();
  const auto add = [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float> values) {
    file.tensors.push_back(f32_tensor(kPrefix + name, shape, values));
  };
  const auto add_param = [&](const std::string& name, const Tensor& t) {
    file.tensors.push_back(f32_tensor_of(kPrefix + name, t));
  };
  add_param("wte.weight", model->token_embedding.weight.value());
  add_param("wpe.weight", model->position_embedding->weight.value());
  const auto norm = [&](const std::string& hf, const nn::LayerNorm& ln) {
    add_param(hf + ".weight", ln.weight.value());
    add_param(hf + ".bias", ln.bias.value());
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const models::CausalBlock& block = *model->layers[static_cast<size_t>(l)];
    const std::string h = "h." + std::to_string(l) + ".";
    norm(h + "ln_1", block.norm1);
    norm(h + "ln_2", block.norm2);
    const nn::MultiHeadAttention& attn = block.self_attn;
    std::vector<float> qkv_w(static_cast<size_t>(D * 3 * D)), qkv_b;
    const nn::Linear* parts[] = {&attn.W_q, &attn.W_k, &attn.W_v};
    for (int64_t p = 0; p < 3; ++p) {
      put_transposed(parts[p]->weight.value(), 3 * D, p * D, qkv_w);
      const std::vector<float> b = values_of(parts[p]->bias.value());
      qkv_b.insert(qkv_b.end(), b.begin(), b.end());
    }
    add(h + "attn.c_attn.weight", {D, 3 * D}, std::move(qkv_w));
    add(h + "attn.c_attn.bias", {3 * D}, std::move(qkv_b));
    std::vector<float> proj(static_cast<size_t>(D * D)), fc(static_cast<size_t>(D * F)), fc_proj(static_cast<size_t>(F * D));
    put_transposed(attn.W_o.weight.value(), D, 0, proj);
    add(h + "attn.c_proj.weight", {D, D}, std::move(proj));
    add_param(h + "attn.c_proj.bias", attn.W_o.bias.value());
    put_transposed(block.feed_forward.fc1.weight.value(), F, 0, fc);
    add(h + "mlp.c_fc.weight", {D, F}, std::move(fc));
    add_param(h + "mlp.c_fc.bias", block.feed_forward.fc1.bias.value());
    put_transposed(block.feed_forward.fc2.weight.value(), D, 0, fc_proj);
    add(h + "mlp.c_proj.weight", {F, D}, std::move(fc_proj));
    add_param(h + "mlp.c_proj.bias", block.feed_forward.fc2.bias.value());
  }
  norm("ln_f", model->final_norm);
  if (!c.tie_output_embedding) {
    const Tensor& head = model->lm_head.weight.value();
    file.tensors.push_back(f32_tensor("lm_head.weight", {head.shape()[0], head.shape()[1]}, values_of(head)));
  }

  HfExportFiles files;
  files.weights = std::move(file);
  files.config_json = config_json;
  files.tokenizer_files = existing_files(checkpoint_dir, {kTokenizerJsonFile});
  std::vector<std::string> notes;
  std::error_code ec;
  if (fs::exists(checkpoint_dir + "/" + models::kLmSpmFile, ec))
    notes.push_back(std::string(models::kLmSpmFile) +
                    " not exported: transformers' GPT-2 tokenizer is a byte-level BPE (tokenizer.json)");
  return write_hf_export(checkpoint_dir, out_dir, *model, "gpt2", "GPT2LMHeadModel", files, std::move(notes));
}

}  // namespace qkv::interop
