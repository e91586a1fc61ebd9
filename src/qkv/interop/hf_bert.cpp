#include "qkv/interop/hf_bert.h"

#include <cstring>
#include <filesystem>

#include "qkv/interop/sentence_embedding.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/tokenizer_json.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using nlohmann::json;
using models::TransformerConfig;

namespace {

std::string activation_of(const HfConfigReader& r) {
  const std::string act = r.string("hidden_act", "gelu");
  if (act == "gelu") return "gelu";
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return "gelu_tanh";
  if (act == "relu") return "relu";
  r.fail("hidden_act", "is \"" + act + "\": not supported (qkv computes gelu, gelu_new / gelu_pytorch_tanh and relu)");
}

// id2label as a list ordered by id: {"0": "neg", "1": "pos"} -> [neg, pos]. Empty when absent.
std::vector<std::string> labels_of(const HfConfigReader& r) {
  if (!r.has("id2label")) return {};
  const json& m = r.raw().at("id2label");
  if (!m.is_object()) r.fail("id2label", "is " + m.dump() + ", expected an object of id: label");
  std::vector<std::string> labels(m.size());
  for (auto it = m.begin(); it != m.end(); ++it) {
    size_t id = 0;
    try {
      id = std::stoul(it.key());
    } catch (const std::exception&) {
      r.fail("id2label", "has the key \"" + it.key() + "\", expected ids 0 .. " + std::to_string(m.size() - 1));
    }
    if (id >= labels.size() || !labels[id].empty() || !it.value().is_string())
      r.fail("id2label", "must map each id 0 .. " + std::to_string(m.size() - 1) + " to a label once");
    labels[id] = it.value().get<std::string>();
  }
  return labels;
}

// Ids of the special tokens in a tokenizer.json's vocabulary (model.vocab or added_tokens); -1 when absent.
int32_t token_id(const json& tok, const std::string& token) {
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const json& t : tok["added_tokens"])
      if (t.is_object() && t.value("content", "") == token && t.contains("id") && t["id"].is_number_integer())
        return t["id"].get<int32_t>();
  if (tok.contains("model") && tok["model"].is_object() && tok["model"].contains("vocab")) {
    const json& vocab = tok["model"]["vocab"];
    if (vocab.is_object() && vocab.contains(token) && vocab[token].is_number_integer()) return vocab[token].get<int32_t>();
  }
  return -1;
}

// The number of ids a tokenizer.json can produce (largest id + 1).
int64_t tokenizer_vocab_size(const std::string& path, const json& tok) {
  int64_t size = 0;
  const auto grow = [&](const json& id) {
    if (id.is_number_integer()) size = std::max<int64_t>(size, id.get<int64_t>() + 1);
  };
  QKV_CHECK(tok.contains("model") && tok["model"].is_object() && tok["model"].contains("vocab") &&
                tok["model"]["vocab"].is_object(),
            path << ": model.vocab is missing or not a JSON object of token: id");
  for (const json& id : tok["model"]["vocab"]) grow(id);
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const json& t : tok["added_tokens"])
      if (t.is_object() && t.contains("id")) grow(t["id"]);
  return size;
}

void set_special_ids(TransformerConfig& c, const std::string& tokenizer_json, std::vector<std::string>& notes) {
  if (tokenizer_json.empty()) {
    // BERT's uncased vocabulary: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
    const bool fits = c.tgt_vocab_size > 103;
    c.cls_id = fits ? 101 : 0;
    c.sep_id = fits ? 102 : 0;
    c.mask_id = fits ? 103 : -1;
    notes.push_back("no tokenizer.json: [CLS] [SEP] [MASK] take the ids of BERT's vocabulary (101 102 103)");
    return;
  }
  const json tok = text::read_tokenizer_json(tokenizer_json);
  const auto id_of = [&](const char* token, bool required) {
    const int32_t id = token_id(tok, token);
    QKV_CHECK(!required || id >= 0, tokenizer_json << ": the vocabulary has no " << token << " token");
    QKV_CHECK(id < c.tgt_vocab_size, tokenizer_json << ": " << token << " has id " << id
                                                    << ", outside the model's vocab_size " << c.tgt_vocab_size);
    return id;
  };
  c.cls_id = id_of("[CLS]", true);
  c.sep_id = id_of("[SEP]", true);
  c.mask_id = id_of("[MASK]", false);
}

}  // namespace

TransformerConfig hf_bert_config(const std::string& config_path, const std::string& tokenizer_json,
                                 std::vector<std::string>* notes_out) {
  const json j = parse_hf_config(config_path);
  const HfConfigReader r(config_path, j);
  QKV_CHECK(j.contains("model_type"), config_path << ": field \"model_type\" is missing");
  const std::string model_type = r.string("model_type", "");
  QKV_CHECK(model_type == "bert", config_path << ": field \"model_type\" is \"" << model_type
                                              << "\": not a BERT model");
  const std::string position_type = r.string("position_embedding_type", "absolute");
  if (position_type != "absolute")
    r.fail("position_embedding_type", "is \"" + position_type + "\": not supported (qkv reads absolute positions)");
  r.require("is_decoder", false, false, "qkv imports BERT encoders; causal BERT is not supported");
  r.require("add_cross_attention", false, false, "qkv's encoder blocks have no cross-attention");

  std::vector<std::string> notes;
  TransformerConfig c = models::encoder_only_defaults();
  c.tgt_vocab_size = c.src_vocab_size = r.integer("vocab_size", 30522, 1, models::kMaxVocabSize);
  c.d_model = r.integer("hidden_size", 768, 1, models::kMaxWidth);
  c.num_layers = r.integer("num_hidden_layers", 12, 1, models::kMaxLayers);
  c.num_heads = r.integer("num_attention_heads", 12, 1, models::kMaxWidth);
  c.d_ff = r.integer("intermediate_size", 3072, 1, models::kMaxWidth);
  c.max_seq_length = r.integer("max_position_embeddings", 512, 1, models::kMaxSeqLength);
  c.type_vocab_size = r.integer("type_vocab_size", 2, 0, models::kMaxTypeVocabSize);
  c.activation = activation_of(r);
  c.dropout = static_cast<float>(r.number("hidden_dropout_prob", 0.1, 0.0, 0.999));
  c.attention_dropout = static_cast<float>(r.number("attention_probs_dropout_prob", 0.1, 0.0, 0.999));
  c.layer_norm_eps = static_cast<float>(r.number("layer_norm_eps", 1e-12, 1e-30, 1.0));
  c.pad_id = static_cast<int32_t>(r.integer("pad_token_id", 0, 0, c.tgt_vocab_size - 1));
  c.mask_fill = "-1e9";  // BERT adds the dtype's minimum to masked scores: probabilities 0 either way
  if (r.has("classifier_dropout") && r.number("classifier_dropout", 0, 0, 0.999) != c.dropout)
    notes.push_back("classifier_dropout " + r.raw().at("classifier_dropout").dump() +
                    " is not kept: qkv's classifier uses dropout " + std::to_string(c.dropout));
  c.tie_output_embedding = r.boolean("tie_word_embeddings", true);
  c.labels = labels_of(r);
  set_special_ids(c, tokenizer_json, notes);
  if (notes_out) *notes_out = notes;
  return c;
}

namespace {

// Reads the tensors of a BERT file into the model, by hf_bert_named_parameters.
void read_bert_weights(HfWeights& w, models::EncoderModel& m) {
  for (auto& [hf, var] : hf_bert_named_parameters(m)) {
    const Dims& dims = var.value().shape();
    const std::vector<int64_t> shape(dims.begin(), dims.end());
    std::string name = hf;
    // LayerNorm weight / bias are gamma / beta in files written by old versions.
    if (name.ends_with("LayerNorm.weight") && !w.has(name) && w.has(name.substr(0, name.size() - 6) + "gamma"))
      name = name.substr(0, name.size() - 6) + "gamma";
    if (name.ends_with("LayerNorm.bias") && !w.has(name) && w.has(name.substr(0, name.size() - 4) + "beta"))
      name = name.substr(0, name.size() - 4) + "beta";
    copy_into(w.take(name, shape, "the shape of qkv's " + shape_text(shape) + " parameter"), 0, var.value());
  }
  if (!m.mlm_head) return;
  // The decoder's weight is the word embedding matrix and its bias cls.predictions.bias (tied);
  // files may store either copy, which must then be the same.
  const int64_t V = m.config().tgt_vocab_size, D = m.config().d_model;
  const auto same = [&](const std::string& name, const std::vector<int64_t>& shape, const Tensor& ours) {
    if (!w.has(name)) return;
    const auto stored = w.take(name, shape, "tied");
    QKV_CHECK(std::memcmp(stored.data(), ours.f32(), sizeof(float) * stored.size()) == 0,
              w.path() << ": tensor '" << name << "' differs from the tensor it is tied to; qkv's masked-LM head "
                       << "shares them");
  };
  if (m.config().tie_output_embedding) same("cls.predictions.decoder.weight", {V, D}, m.token_embedding.weight.value());
  same("cls.predictions.decoder.bias", {V}, m.mlm_head->decoder.bias.value());
}

// The int64 position_ids buffer must be arange(max_position_embeddings): anything else would
// change which position rows are read.
void check_position_ids(const std::string& weights_path, const TransformerConfig& c) {
  const io::StFile f = io::read_safetensors(weights_path, io::StReadOptions{.allow_half = true});
  for (const io::StTensor& t : f.tensors) {
    if (!t.name.ends_with("embeddings.position_ids")) continue;
    QKV_CHECK(t.dtype == io::StDtype::I64 && t.bytes.size() % sizeof(int64_t) == 0,
              weights_path << ": tensor '" << t.name << "' must be int64");
    const size_t n = t.bytes.size() / sizeof(int64_t);
    for (size_t i = 0; i < n; ++i) {
      int64_t v = 0;
      std::memcpy(&v, t.bytes.data() + i * sizeof(int64_t), sizeof v);
      QKV_CHECK(v == static_cast<int64_t>(i) && static_cast<int64_t>(n) <= c.max_seq_length,
                weights_path << ": tensor '" << t.name << "' is not 0, 1, 2, ... (element " << i << " is " << v
                             << "); qkv numbers positions from 0");
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, Var>> hf_bert_named_parameters(const models::EncoderModel& m) {
  std::vector<std::pair<std::string, Var>> out;
  const auto linear = [&](const std::string& hf, const nn::Linear& lin) {
    out.emplace_back(hf + ".weight", lin.weight);
    out.emplace_back(hf + ".bias", lin.bias);
  };
  const auto norm = [&](const std::string& hf, const nn::LayerNorm& ln) {
    out.emplace_back(hf + ".weight", ln.weight);
    out.emplace_back(hf + ".bias", ln.bias);
  };
  out.emplace_back("embeddings.word_embeddings.weight", m.token_embedding.weight);
  QKV_CHECK(m.position_embedding, "Hugging Face BERT has learned positions; this model's are sinusoidal");
  out.emplace_back("embeddings.position_embeddings.weight", m.position_embedding->weight);
  if (m.token_type_embedding) out.emplace_back("embeddings.token_type_embeddings.weight", m.token_type_embedding->weight);
  norm("embeddings.LayerNorm", *m.embedding_norm);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const std::string h = "encoder.layer." + std::to_string(l) + ".";
    const models::EncoderLayer& layer = *m.layers[l];
    linear(h + "attention.self.query", layer.self_attn.W_q);
    linear(h + "attention.self.key", layer.self_attn.W_k);
    linear(h + "attention.self.value", layer.self_attn.W_v);
    linear(h + "attention.output.dense", layer.self_attn.W_o);
    norm(h + "attention.output.LayerNorm", layer.norm1);
    linear(h + "intermediate.dense", layer.feed_forward.fc1);
    linear(h + "output.dense", layer.feed_forward.fc2);
    norm(h + "output.LayerNorm", layer.norm2);
  }
  if (m.pooler) linear("pooler.dense", *m.pooler);
  if (m.mlm_head) {
    linear("cls.predictions.transform.dense", m.mlm_head->transform);
    norm("cls.predictions.transform.LayerNorm", m.mlm_head->norm);
    out.emplace_back("cls.predictions.bias", m.mlm_head->decoder.bias);
    if (!m.config().tie_output_embedding) out.emplace_back("cls.predictions.decoder.weight", m.mlm_head->decoder.weight);
  }
  if (m.classifier) linear("classifier", *m.classifier);
  return out;
}

std::unique_ptr<models::EncoderModel> load_hf_bert(const std::string& hf_dir, HfConversion* info) {
  const std::string weights_path = hf_weights_path(hf_dir);
  std::error_code ec;
  const std::string tokenizer = hf_dir + "/" + kTokenizerJsonFile;
  std::vector<std::string> notes;
  TransformerConfig c = hf_bert_config(hf_dir + "/" + kHfConfigFile, fs::exists(tokenizer, ec) ? tokenizer : "", &notes);
  const auto ignorable = [](const std::string& name) {
    return name == "embeddings.position_ids" || name.rfind("cls.seq_relationship.", 0) == 0;
  };
  HfWeights w(weights_path, {"bert."}, ignorable, "a BERT model (BertModel, BertForMaskedLM, BertForSequenceClassification)");
  // The heads and the pooler are built when their tensors are there.
  c.pooler = w.has("pooler.dense.weight");
  c.mlm_head = w.has("cls.predictions.transform.dense.weight");
  if (!w.has("classifier.weight")) {
    c.labels.clear();
  } else if (c.labels.empty()) {
    notes.push_back("config.json has no id2label: the classifier's labels are named LABEL_0, LABEL_1, ...");
  }
  if (w.has("cls.seq_relationship.weight")) notes.push_back("the next-sentence-prediction head is not imported");
  if (w.has("classifier.weight") && c.labels.empty()) {
    // The number of labels is the classifier's rows; the tensor is read (and checked) below.
    const io::StFile f = io::read_safetensors(weights_path, io::StReadOptions{.allow_half = true});
    for (const io::StTensor& t : f.tensors)
      if ((t.name == "classifier.weight" || t.name == "bert.classifier.weight") && t.shape.size() == 2)
        for (int64_t i = 0; i < t.shape[0]; ++i) c.labels.push_back("LABEL_" + std::to_string(i));
  }
  check_position_ids(weights_path, c);
  validate_read_config(hf_dir + "/" + kHfConfigFile, c);
  auto model = std::make_unique<models::EncoderModel>(c, 0);
  model->eval();
  read_bert_weights(w, *model);
  w.expect_all_taken();
  describe_import(info, c, w, *model, notes, "bert");
  return model;
}

HfConversion import_hf_bert(const std::string& hf_dir, const std::string& out_dir) {
  HfConversion info;
  auto model = load_hf_bert(hf_dir, &info);
  std::error_code ec;
  const std::string tokenizer = hf_dir + "/" + kTokenizerJsonFile;
  if (fs::exists(tokenizer, ec)) {
    const int64_t size = tokenizer_vocab_size(tokenizer, text::read_tokenizer_json(tokenizer));
    QKV_CHECK(size == info.config.tgt_vocab_size,
              tokenizer << ": the vocabulary has " << size << " tokens but the model's embedding has "
                        << info.config.tgt_vocab_size << " rows (config.json vocab_size)");
    info.tokenizer = true;
  }
  const std::optional<SentenceEmbeddingConfig> pooling = read_sentence_transformers_config(hf_dir);
  io::StagedDirectory staged(out_dir);
  models::write_model_files(staged, *model);
  if (info.tokenizer) staged.copy_from(kTokenizerJsonFile, tokenizer);
  if (pooling) {
    staged.write(kSentenceEmbeddingFile, sentence_embedding_to_json(*pooling));
    info.notes.push_back("sentence-transformers pooling: " + describe(*pooling));
  }
  staged.commit();
  return info;
}

}  // namespace qkv::interop
