#include "qkv/models/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "qkv/models/blocks.h"

namespace qkv::models {

namespace {
const TransformerConfig& decoder_only(const TransformerConfig& c) {
  QKV_CHECK(c.decoder_only(), "CausalLM: the config is of an " << c.architecture
                                                                << " model, not a decoder-only one (use Transformer)");
  return c;
}

// Positions (B, T) i32: row b, column t holds t - padding[b], or 0 on the left padding.
Tensor positions_of(int64_t B, int64_t T, int64_t first, const std::vector<int64_t>& padding) {
  Tensor p = Tensor::empty(Dims{B, T}, DType::I32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      p.i32()[b * T + t] = static_cast<int32_t>(std::max<int64_t>(0, first + t - (padding.empty() ? 0 : padding[b])));
  return p;
}
}  // namespace

CausalBlock::CausalBlock(const TransformerConfig& c, Generator& gen)
    : norm1(register_module("norm1", make_norm(c))),
      self_attn(register_module("self_attn", std::make_unique<nn::MultiHeadAttention>(c.d_model, c.num_heads, gen,
                                                                                      c.attention_dropout))),
      norm2(register_module("norm2", make_norm(c))),
      feed_forward(register_module("feed_forward", make_feed_forward(c, gen))),
      dropout(register_module("dropout", std::make_unique<nn::Dropout>(c.dropout, gen))) {}

Var CausalBlock::forward(const Var& x, const ops::AttentionMasks& masks, Tensor* weights) const {
  Var h = residual(NormPosition::Pre, norm1, dropout, x,
                   [&](const Var& in) { return self_attn.forward(in, in, in, masks, weights); });
  return residual(NormPosition::Pre, norm2, dropout, h, [&](const Var& in) { return feed_forward.forward(in); });
}

Var CausalBlock::forward_cached(const Var& x, nn::KVCache& cache, const ops::AttentionMasks& masks,
                                Tensor* weights) const {
  Var h = residual(NormPosition::Pre, norm1, dropout, x,
                   [&](const Var& in) { return self_attn.forward_cached(in, cache, masks, weights); });
  return residual(NormPosition::Pre, norm2, dropout, h,
                  [&](const Var& in) { return feed_forward.forward(in); });
}

CausalLM::CausalLM(const TransformerConfig& config, uint64_t seed)
    : Model(decoder_only(config), seed),
      token_embedding(register_module("token_embedding",
                                      std::make_unique<nn::Embedding>(config.tgt_vocab_size, config.d_model, gen_))),
      final_norm(*[&] {
        // Registered in state_dict order: embeddings, positions, layers, final norm, head.
        if (config.positions == "learned")
          position_embedding = &register_module(
              "position_embedding", std::make_unique<nn::Embedding>(config.max_seq_length, config.d_model, gen_));
        else
          positional_encoding = &register_module(
              "positional_encoding", std::make_unique<nn::PositionalEncoding>(config.d_model, config.max_seq_length));
        for (int64_t i = 0; i < config.num_layers; ++i)
          layers.push_back(&register_module("layers." + std::to_string(i), std::make_unique<CausalBlock>(config, gen_)));
        return &register_module("final_norm", make_norm(config));
      }()),
      lm_head(register_module("lm_head", std::make_unique<nn::Linear>(config.d_model, config.tgt_vocab_size, gen_,
                                                                      /*bias=*/false))),
      dropout(register_module("dropout", std::make_unique<nn::Dropout>(config.dropout, gen_))) {
  if (config.tie_output_embedding) lm_head.tie_weight(token_embedding.weight);  // both (V, D)
  init_gpt2_weights();
}

void CausalLM::init_gpt2_weights() {
  std::mt19937_64 eng = gen_.engine();
  if (nn::random_init_skipped()) return;  // every value is loaded next
  const auto normal = [&](Var v, double std) {
    std::normal_distribution<float> dist(0.f, static_cast<float>(std));
    float* p = v.value().f32();
    for (int64_t i = 0; i < v.value().numel(); ++i) p[i] = dist(eng);
  };
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.num_layers));
  normal(token_embedding.weight, 0.02);
  if (position_embedding) normal(position_embedding->weight, 0.02);
  for (CausalBlock* l : layers) {
    for (nn::Linear* lin : {&l->self_attn.W_q, &l->self_attn.W_k, &l->self_attn.W_v, &l->feed_forward.fc1})
      normal(lin->weight, 0.02);
    normal(l->self_attn.W_o.weight, residual_std);
    normal(l->feed_forward.fc2.weight, residual_std);
    for (nn::Linear* lin : {&l->self_attn.W_q, &l->self_attn.W_k, &l->self_attn.W_v, &l->self_attn.W_o,
                            &l->feed_forward.fc1, &l->feed_forward.fc2})
      std::fill(lin->bias.value().f32(), lin->bias.value().f32() + lin->bias.value().numel(), 0.f);
  }
  if (!config_.tie_output_embedding) normal(lm_head.weight, 0.02);
}

std::vector<std::pair<std::string, Tensor>> CausalLM::named_buffers() const {
  if (!positional_encoding) return {};
  const Tensor& pe = positional_encoding->pe;
  return {{"positional_encoding.pe", pe.reshape(Dims{1, pe.size(0), pe.size(1)})}};
}

void CausalLM::set_recompute_ffn(bool on) {
  for (CausalBlock* l : layers) l->feed_forward.set_recompute(on);
}

Var CausalLM::embed(const Tensor& ids, const Tensor& positions) const {
  Var e = token_embedding.forward(ids);  // (B, T, D)
  if (config_.scale_embeddings) e = fn::scale(e, std::sqrt(static_cast<float>(config_.d_model)));
  const Var pos = position_embedding ? position_embedding->forward(positions)
                                     : fn::embedding(Var(positional_encoding->pe), positions);
  return dropout.forward(fn::add(e, pos));
}

Var CausalLM::run_blocks(Var x, std::vector<nn::KVCache>* caches, const ops::AttentionMasks& masks,
                         std::vector<Tensor>* weights) const {
  if (weights) weights->assign(layers.size(), Tensor());
  for (size_t i = 0; i < layers.size(); ++i) {
    Tensor* w = weights ? &(*weights)[i] : nullptr;
    x = caches ? layers[i]->forward_cached(x, (*caches)[i], masks, w) : layers[i]->forward(x, masks, w);
  }
  return final_norm.forward(x);
}

std::vector<nn::Linear*> CausalLM::inference_linears() {
  std::vector<nn::Linear*> out;
  for (CausalBlock* block : layers) add_block_linears(block->self_attn, block->feed_forward, out);
  out.push_back(&lm_head);
  return out;
}

std::vector<nn::Embedding*> CausalLM::inference_embeddings() {
  std::vector<nn::Embedding*> out{&token_embedding};
  if (position_embedding) out.push_back(position_embedding);
  return out;
}

Var CausalLM::forward(const Tensor& ids, std::vector<Tensor>* weights) const {
  QKV_CHECK(ids.dim() == 2, "CausalLM: ids " << ids.shape() << " must be (B, T)");
  QKV_CHECK(ids.size(1) >= 1 && ids.size(1) <= config_.max_seq_length,
            "CausalLM: " << ids.size(1) << " positions, the model's context (max_seq_length) is "
                         << config_.max_seq_length);
  ops::AttentionMasks masks;
  masks.causal = true;
  masks.fill = config_.mask_fill_value();
  const Tensor positions = positions_of(ids.size(0), ids.size(1), 0, {}).to(ids.device());
  const Var hidden = run_blocks(embed(ids, positions), nullptr, masks, weights);
  return lm_head.forward(hidden);
}

Var CausalLM::teacher_forced_logits(const Tensor&, const Tensor& input) const {
  return forward(input, nullptr);
}

Var CausalLM::prefill(const std::vector<std::vector<int32_t>>& prompts, int64_t max_new_tokens,
                      GenerationState& st, std::vector<Tensor>* weights, nn::KVCacheStorage* kv_storage) const {
  QKV_CHECK(!grad_enabled(), "incremental decoding is for inference: use it under NoGradGuard");
  QKV_CHECK(!prompts.empty(), "prefill: no prompts");
  int64_t longest = 0;
  for (const auto& p : prompts) {
    QKV_CHECK(!p.empty(), "prefill: an empty prompt (start it with the BOS id)");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  QKV_CHECK(max_new_tokens >= 0 && longest + max_new_tokens <= config_.max_seq_length,
            "prefill: a prompt of " << longest << " tokens plus " << max_new_tokens
                                    << " new ones exceeds the model's context (max_seq_length " << config_.max_seq_length
                                    << ")");
  const int64_t N = static_cast<int64_t>(prompts.size()), V = config_.tgt_vocab_size;
  st = GenerationState{};
  st.capacity = std::max<int64_t>(longest + max_new_tokens, 1);
  st.key_keep = Tensor::zeros(Dims{N, st.capacity}, DType::I32);
  std::fill(st.key_keep.i32(), st.key_keep.i32() + N * st.capacity, 1);
  Tensor ids = Tensor::zeros(Dims{N, longest}, DType::I32);
  for (int64_t r = 0; r < N; ++r) {
    const auto& p = prompts[static_cast<size_t>(r)];
    const int64_t pad = longest - static_cast<int64_t>(p.size());
    st.padding.push_back(pad);
    for (int64_t t = 0; t < longest; ++t) {
      ids.i32()[r * longest + t] = t < pad ? p[0] : p[static_cast<size_t>(t - pad)];  // padding: any valid id
      if (t < pad) st.key_keep.i32()[r * st.capacity + t] = 0;
    }
  }
  const Device on = device();  // built on the host, used where the weights are
  st.key_keep = st.key_keep.to(on);
  const int64_t H = config_.num_heads, dk = config_.d_model / H;
  for (size_t i = 0; i < layers.size(); ++i)
    st.layers.push_back(nn::self_attention_cache(kv_storage, i, N, H, st.capacity, config_.max_seq_length, dk, on));
  ops::AttentionMasks masks;
  masks.key_keep = st.key_keep;
  masks.causal = true;
  masks.fill = config_.mask_fill_value();
  const Var hidden =
      run_blocks(embed(ids.to(on), positions_of(N, longest, 0, st.padding).to(on)), &st.layers, masks, weights);
  st.length = longest;
  // Only the last position of every row (all rows end at the same column) needs logits: the output
  // projection is the largest matmul, and the prompt's other positions would be thrown away.
  const Var last(hidden.value().narrow(1, longest - 1, 1).contiguous().reshape(Dims{N, config_.d_model}));
  return fn::reshape(lm_head.forward(last), Dims{N, V});
}

Var CausalLM::step(const Tensor& tokens, GenerationState& st, std::vector<Tensor>* weights) const {
  QKV_CHECK(st.length < st.capacity, "step: all " << st.capacity << " cache positions are used");
  const int64_t N = tokens.numel();
  QKV_CHECK(N == st.rows(), "step: " << N << " tokens for " << st.rows() << " sequences");
  ops::AttentionMasks masks;
  masks.key_keep = st.key_keep;
  masks.fill = config_.mask_fill_value();
  const Device on = device();
  const Var x = embed(tokens.reshape(Dims{N, 1}).to(on), positions_of(N, 1, st.length, st.padding).to(on));
  const Var logits = lm_head.forward(run_blocks(x, &st.layers, masks, weights));
  st.length += 1;
  return fn::reshape(logits, Dims{N, config_.tgt_vocab_size});
}

namespace {
// Row i of the state's mask and padding become row rows[i]'s (the caches move on their own).
void reorder_mask_and_padding(GenerationState& st, const std::vector<int64_t>& rows) {
  st.key_keep = ops::gather_rows(st.key_keep, rows);
  std::vector<int64_t> padding;
  for (int64_t r : rows) padding.push_back(st.padding[static_cast<size_t>(r)]);
  st.padding = std::move(padding);
}
}  // namespace

void CausalLM::reorder(GenerationState& st, const std::vector<int64_t>& rows) const {
  for (nn::KVCache& c : st.layers) c.reorder(rows);
  reorder_mask_and_padding(st, rows);
}

namespace {
// Copies the cached positions of `from`'s rows into rows [row, row + rows) of `into`, moved right by
// `shift` columns (left, when negative: columns that only padding used are dropped); the columns
// left of the copied ones are zeroed, so that no stale value (NaN bits) sits under a padding mask
// that multiplies it by 0.
void place_rows(Tensor& into, const Tensor& from, int64_t row, int64_t rows, int64_t from_length, int64_t shift) {
  const int64_t first = std::max<int64_t>(0, -shift), count = from_length - first, at = first + shift;
  Tensor dst = into.narrow(0, row, rows);
  if (at > 0) {
    Tensor left = dst.narrow(2, 0, at);
    left.copy_from(Tensor::zeros(left.shape(), DType::F32, into.device()));
  }
  if (count > 0) dst.narrow(2, at, count).copy_from(from.narrow(0, 0, rows).narrow(2, first, count));
}
}  // namespace

namespace {
// 0 on each row's left padding, 1 after: (N, capacity), built on the host.
Tensor key_keep_of(const std::vector<int64_t>& padding, int64_t capacity, Device on) {
  const int64_t N = static_cast<int64_t>(padding.size());
  Tensor keep = Tensor::zeros(Dims{N, capacity}, DType::I32);
  for (int64_t i = 0; i < N; ++i)
    std::fill(keep.i32() + i * capacity + padding[static_cast<size_t>(i)], keep.i32() + (i + 1) * capacity, 1);
  return keep.to(on);
}
}  // namespace

GenerationState CausalLM::join(GenerationState first, GenerationState second, int64_t new_positions,
                               int64_t reserve_rows, int64_t reserve_positions) const {
  QKV_CHECK(new_positions >= 0 && reserve_positions >= 0, "join: " << new_positions << " new positions, "
                                                                   << reserve_positions << " reserved");
  std::vector<GenerationState*> parts;
  for (GenerationState* s : {&first, &second})
    if (s->rows() > 0) parts.push_back(s);
  GenerationState out;
  for (const GenerationState* s : parts)
    for (int64_t pad : s->padding) out.length = std::max(out.length, s->length - pad);
  out.capacity = std::max<int64_t>(out.length + new_positions + reserve_positions, 1);
  int64_t N = 0;
  for (const GenerationState* s : parts) N += s->rows();
  if (N == 0) return out;
  const int64_t H = config_.num_heads, dk = config_.d_model / H;
  const Device on = device();
  for (size_t l = 0; l < layers.size(); ++l) {
    out.reserved.push_back(nn::KVCache::with_capacity(std::max(N, reserve_rows), H, out.capacity, dk, on));
    nn::KVCache c;
    c.k = out.reserved.back().k.slice0(0, N);
    c.v = out.reserved.back().v.slice0(0, N);
    c.length = out.length;
    out.layers.push_back(std::move(c));
  }
  int64_t row = 0;
  for (GenerationState* s : parts) {
    // Every row of a state ends at its column `length`, so one shift moves all of them.
    const int64_t shift = out.length - s->length, n = s->rows();
    for (size_t l = 0; l < layers.size(); ++l) {
      nn::KVCache& from = s->layers[l];
      from.gather_in_place();  // a map moved its rows: put them in sequence order
      place_rows(out.layers[l].k, from.k, row, n, s->length, shift);
      place_rows(out.layers[l].v, from.v, row, n, s->length, shift);
    }
    for (int64_t pad : s->padding) out.padding.push_back(pad + shift);
    row += n;
  }
  out.key_keep = key_keep_of(out.padding, out.capacity, on);
  return out;
}

bool CausalLM::append(GenerationState& into, const GenerationState& more, int64_t new_positions) const {
  const int64_t n = into.rows(), m = more.rows();
  if (m == 0) return true;
  if (into.reserved.empty() || n + m > into.reserved[0].k.size(0) || into.length + new_positions > into.capacity)
    return false;
  for (int64_t pad : more.padding)
    if (more.length - pad > into.length) return false;
  // Rows must still lie in the reserved storage: keep_rows copies in place, but a reorder that
  // gathers into new storage would leave `reserved` stale.
  for (size_t l = 0; l < layers.size(); ++l)
    if (into.layers[l].k.raw_data() != into.reserved[l].k.raw_data() ||
        into.layers[l].v.raw_data() != into.reserved[l].v.raw_data())
      return false;
  const int64_t shift = into.length - more.length;
  for (size_t l = 0; l < layers.size(); ++l) {
    nn::KVCache& c = into.layers[l];
    QKV_CHECK(!c.key_rows.defined() && !more.layers[l].key_rows.defined(), "append: a cache whose rows move by a map");
    c.k = into.reserved[l].k.slice0(0, n + m);
    c.v = into.reserved[l].v.slice0(0, n + m);
    // Rows past n held sequences that left: their columns from `length` on were never written, and
    // place_rows writes (or zeroes) every column before.
    place_rows(c.k, more.layers[l].k, n, m, more.length, shift);
    place_rows(c.v, more.layers[l].v, n, m, more.length, shift);
  }
  for (int64_t pad : more.padding) into.padding.push_back(pad + shift);
  into.key_keep = key_keep_of(into.padding, into.capacity, device());
  return true;
}

void CausalLM::keep_rows(GenerationState& st, const std::vector<int64_t>& rows) const {
  for (nn::KVCache& c : st.layers) c.reorder_copying(rows);
  reorder_mask_and_padding(st, rows);
}

}  // namespace qkv::models
