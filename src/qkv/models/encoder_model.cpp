#include "qkv/models/encoder_model.h"

#include <algorithm>
#include <random>
#include <string>

namespace qkv::models {

namespace {
const TransformerConfig& encoder_only(const TransformerConfig& c) {
  QKV_CHECK(c.encoder_only(), "EncoderModel: the config is of a" << (c.decoder_only() ? " " : "n ") << c.architecture
                                                                 << " model, not an encoder-only one");
  return c;
}

// Positions (B, T) i32: column t of every row is t (rows are right-padded).
Tensor positions_of(int64_t B, int64_t T) {
  Tensor p = Tensor::empty(Dims{B, T}, DType::I32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) p.i32()[b * T + t] = static_cast<int32_t>(t);
  return p;
}

void check_same_shape(const Tensor& t, const Tensor& ids, const char* name) {
  QKV_CHECK(!t.defined() || (t.dtype() == DType::I32 && t.shape() == ids.shape()),
            "EncoderModel: " << name << " " << t.describe() << " must be i32 of the ids' shape " << ids.shape());
}
}  // namespace

MaskedLMHead::MaskedLMHead(const TransformerConfig& c, Generator& gen)
    : transform(register_module("transform", std::make_unique<nn::Linear>(c.d_model, c.d_model, gen))),
      norm(register_module("norm", make_norm(c))),
      decoder(register_module("decoder", std::make_unique<nn::Linear>(c.d_model, c.tgt_vocab_size, gen))) {}

Var MaskedLMHead::forward(const Var& hidden) const {
  return decoder.forward(norm.forward(fn::gelu(transform.forward(hidden))));
}

EncoderModel::EncoderModel(const TransformerConfig& config, uint64_t seed)
    : Model(encoder_only(config), seed),
      token_embedding(register_module("token_embedding",
                                      std::make_unique<nn::Embedding>(config.tgt_vocab_size, config.d_model, gen_))) {
  // Registered in state_dict order: embeddings, blocks, pooler, heads.
  if (config.positions == "learned")
    position_embedding = &register_module("position_embedding",
                                          std::make_unique<nn::Embedding>(config.max_seq_length, config.d_model, gen_));
  else
    positional_encoding = &register_module(
        "positional_encoding", std::make_unique<nn::PositionalEncoding>(config.d_model, config.max_seq_length));
  if (config.type_vocab_size > 0)
    token_type_embedding = &register_module(
        "token_type_embedding", std::make_unique<nn::Embedding>(config.type_vocab_size, config.d_model, gen_));
  embedding_norm = &register_module("embedding_norm", make_norm(config));
  for (int64_t i = 0; i < config.num_layers; ++i)
    layers.push_back(&register_module("layers." + std::to_string(i), std::make_unique<EncoderLayer>(config, gen_)));
  if (config.pooler)
    pooler = &register_module("pooler", std::make_unique<nn::Linear>(config.d_model, config.d_model, gen_));
  if (config.mlm_head) {
    mlm_head = &register_module("mlm_head", std::make_unique<MaskedLMHead>(config, gen_));
    if (config.tie_output_embedding) mlm_head->decoder.tie_weight(token_embedding.weight);  // both (V, D)
  }
  if (!config.labels.empty())
    classifier = &register_module("classifier", std::make_unique<nn::Linear>(
                                                    config.d_model, static_cast<int64_t>(config.labels.size()), gen_));
  dropout = &register_module("dropout", std::make_unique<nn::Dropout>(config.dropout, gen_));
  if (config.pad_id >= 0) token_embedding.padding_idx = config.pad_id;
  init_bert_weights();
}

void EncoderModel::init_bert_weights() {
  std::mt19937_64 eng = gen_.engine();
  if (nn::random_init_skipped()) return;  // every value is loaded next
  const auto normal = [&](Var v) {
    std::normal_distribution<float> dist(0.f, 0.02f);
    float* p = v.value().f32();
    for (int64_t i = 0; i < v.value().numel(); ++i) p[i] = dist(eng);
  };
  const auto zero = [](Var v) { std::fill(v.value().f32(), v.value().f32() + v.value().numel(), 0.f); };
  // Every matrix and embedding table N(0, 0.02), every vector (bias) 0; norms keep 1 / 0. A tied
  // decoder weight is the token embedding, drawn once.
  for (Var p : parameters()) {
    if (p.value().dim() == 2) normal(p);
    else zero(p);
  }
  for (nn::LayerNorm* n : {embedding_norm, mlm_head ? &mlm_head->norm : nullptr}) {
    if (n) std::fill(n->weight.value().f32(), n->weight.value().f32() + n->weight.value().numel(), 1.f);
  }
  for (EncoderLayer* l : layers)
    for (nn::LayerNorm* n : {&l->norm1, &l->norm2})
      std::fill(n->weight.value().f32(), n->weight.value().f32() + n->weight.value().numel(), 1.f);
  if (config_.pad_id >= 0) {
    float* row = token_embedding.weight.value().f32() + config_.pad_id * config_.d_model;
    std::fill(row, row + config_.d_model, 0.f);
  }
}

std::vector<std::pair<std::string, Tensor>> EncoderModel::named_buffers() const {
  if (!positional_encoding) return {};
  const Tensor& pe = positional_encoding->pe;
  return {{"positional_encoding.pe", pe.reshape(Dims{1, pe.size(0), pe.size(1)})}};
}

void EncoderModel::set_recompute_ffn(bool on) {
  for (EncoderLayer* l : layers) l->feed_forward.set_recompute(on);
}

Var EncoderModel::embed(const EncoderInput& in) const {
  const int64_t B = in.ids.size(0), T = in.ids.size(1);
  // BERT's order of the sums: (words + types) + positions.
  Var e = token_embedding.forward(in.ids);
  if (config_.scale_embeddings) e = fn::scale(e, std::sqrt(static_cast<float>(config_.d_model)));
  if (token_type_embedding)
    e = fn::add(e, token_type_embedding->forward(in.type_ids.defined()
                                                     ? in.type_ids
                                                     : Tensor::zeros(Dims{B, T}, DType::I32, in.ids.device())));
  const Tensor positions = positions_of(B, T).to(in.ids.device());
  e = fn::add(e, position_embedding ? position_embedding->forward(positions)
                                    : fn::embedding(Var(positional_encoding->pe), positions));
  return dropout->forward(embedding_norm->forward(e));
}

Var EncoderModel::encode(const EncoderInput& in) const {
  QKV_CHECK(in.ids.defined() && in.ids.dim() == 2 && in.ids.dtype() == DType::I32,
            "EncoderModel: ids " << in.ids.describe() << " must be i32 (B, T)");
  QKV_CHECK(in.ids.size(1) >= 1 && in.ids.size(1) <= config_.max_seq_length,
            "EncoderModel: " << in.ids.size(1) << " positions, the model's position table (max_seq_length) has "
                             << config_.max_seq_length);
  check_same_shape(in.key_keep, in.ids, "key_keep");
  check_same_shape(in.type_ids, in.ids, "type_ids");
  if (in.type_ids.defined())
    for (const int32_t type : in.type_ids.to_ids())  // read on the host (a copy from a GPU)
      QKV_CHECK(type >= 0 && type < std::max<int64_t>(config_.type_vocab_size, 1),
                "EncoderModel: token type " << type << " out of range (type_vocab_size " << config_.type_vocab_size
                                            << ")");
  ops::AttentionMasks masks;
  masks.key_keep = in.key_keep;
  masks.fill = config_.mask_fill_value();
  Var x = embed(in);
  for (const EncoderLayer* layer : layers) x = layer->forward(x, masks, nullptr);
  return x;
}

std::vector<nn::Linear*> EncoderModel::inference_linears() {
  std::vector<nn::Linear*> out;
  for (EncoderLayer* layer : layers) add_block_linears(layer->self_attn, layer->feed_forward, out);
  return out;
}

std::vector<nn::Embedding*> EncoderModel::inference_embeddings() {
  std::vector<nn::Embedding*> out{&token_embedding};
  for (nn::Embedding* e : {position_embedding, token_type_embedding})
    if (e) out.push_back(e);
  return out;
}

Var EncoderModel::pool(const Var& hidden) const {
  QKV_CHECK(pooler, "EncoderModel: this model has no pooler (config.json: pooler false)");
  QKV_CHECK(hidden.value().dim() == 3, "EncoderModel::pool: hidden " << hidden.shape() << " must be (B, T, D)");
  const int64_t B = hidden.value().size(0), T = hidden.value().size(1), D = hidden.value().size(2);
  // hidden[:, 0] as a lookup of rows 0, T, 2T, ... of the (B*T, D) matrix: an embedding lookup is a
  // differentiable row gather.
  std::vector<int32_t> first(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) first[static_cast<size_t>(b)] = static_cast<int32_t>(b * T);
  const Var cls = fn::embedding(fn::reshape(hidden, Dims{B * T, D}),
                                Tensor::from_ids(Dims{B}, first).to(hidden.value().device()));
  return fn::tanh(pooler->forward(cls));
}

Var EncoderModel::mlm_logits(const Var& hidden) const {
  QKV_CHECK(mlm_head, "EncoderModel: this model has no masked-LM head (config.json: mlm_head false)");
  return mlm_head->forward(hidden);
}

Var EncoderModel::classify(const Var& hidden) const {
  QKV_CHECK(classifier, "EncoderModel: this model has no classification head (config.json: labels is empty)");
  return classifier->forward(dropout->forward(pool(hidden)));
}

Var EncoderModel::teacher_forced_logits(const Tensor&, const Tensor& input) const {
  EncoderInput in{input, config_.pad_id >= 0 ? ops::keep_mask(input, config_.pad_id) : Tensor(), Tensor()};
  return mlm_logits(encode(in));
}

}  // namespace qkv::models
