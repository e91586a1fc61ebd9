#include "qkv/nn/attention.h"

#include <algorithm>

namespace qkv::nn {

namespace {
// The heads' total width: `width`, or d_model when it is 0.
int64_t heads_width(int64_t d_model, int64_t width) { return width > 0 ? width : d_model; }
}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t num_heads, Generator& gen, float attention_dropout,
                                       bool bias, int64_t width)
    : W_q(register_module("W_q", std::make_unique<Linear>(d_model, heads_width(d_model, width), gen, bias))),
      W_k(register_module("W_k", std::make_unique<Linear>(d_model, heads_width(d_model, width), gen, bias))),
      W_v(register_module("W_v", std::make_unique<Linear>(d_model, heads_width(d_model, width), gen, bias))),
      W_o(register_module("W_o", std::make_unique<Linear>(heads_width(d_model, width), d_model, gen, bias))),
      num_heads_(num_heads),
      attention_dropout_(attention_dropout),
      gen_(&gen) {
  QKV_CHECK(num_heads > 0 && heads_width(d_model, width) % num_heads == 0,
            "MultiHeadAttention: the attention width " << heads_width(d_model, width)
                                                       << " must be divisible by num_heads " << num_heads);
}

Var MultiHeadAttention::forward(const Var& Q, const Var& K, const Var& V, const ops::AttentionMasks& masks,
                                Tensor* weights, const Var& position_bias) const {
  // q (B, Tq, D), k v (B, Tk, D); the fused op reads them as heads and writes (B, Tq, D).
  // Self-attention (one input for all three) may take the three projections in one product.
  const auto [q, k, v] = &Q == &K && &K == &V ? self_projections(Q)
                                               : std::array<Var, 3>{W_q.forward(Q), W_k.forward(K), W_v.forward(V)};
  const ops::AttentionDropoutSpec drop = dropout_spec(q.size(0), q.size(1), k.size(1));
  // The fused op's output is kept by no node (its backward reads the softmax or the row statistics;
  // a GPU's flash backward keeps it, but the bf16 form is CPU-only): the projection may keep it in bf16.
  return W_o.forward(fn::multi_head_attention(q, k, v, num_heads_, masks, drop, weights, position_bias),
                     fn::InputUse::LastUse);
}

Var MultiHeadAttention::attend(const Var& q, const Var& k, const Var& v, const ops::AttentionMasks& masks,
                               Tensor* weights, const Var& position_bias) const {
  const ops::AttentionDropoutSpec drop = dropout_spec(q.size(0), q.size(2), k.size(2));
  const Var attn = fn::attention(q, k, v, masks, drop, weights, position_bias);  // (B, H, Tq, dk)
  return W_o.forward(fn::combine_heads(attn));  // (B, Tq, D)
}

std::array<Var, 3> MultiHeadAttention::self_projections(const Var& x) const {
  // Which forms share work is ops' choice (dispatch on dtype stays in ops/); this layer only says
  // that the three inference weights multiply one input.
  const Linear* layers[3] = {&W_q, &W_k, &W_v};
  const bool inference = std::all_of(std::begin(layers), std::end(layers),
                                     [&](const Linear* l) { return l->uses_inference_weight(x); });
  if (!inference) return {W_q.forward(x), W_k.forward(x), W_v.forward(x)};
  std::vector<const ops::LinearWeight*> weights;
  std::vector<Tensor> biases;
  for (const Linear* l : layers) {
    weights.push_back(&l->inference_weight());
    biases.push_back(l->bias.defined() ? l->bias.value() : Tensor());
  }
  std::vector<Tensor> ys = ops::linear_forward_many(x.value(), weights, biases);
  return {Var(std::move(ys[0])), Var(std::move(ys[1])), Var(std::move(ys[2]))};
}

ops::AttentionDropoutSpec MultiHeadAttention::dropout_spec(int64_t B, int64_t Tq, int64_t Tk) const {
  ops::AttentionDropoutSpec drop;
  if (training() && attention_dropout_ > 0.f) {
    drop.p = attention_dropout_;
    drop.seed = gen_->seed();
    drop.offset = gen_->reserve_rows(static_cast<uint64_t>(B * num_heads_ * Tq * Tk), B);
  }
  return drop;
}

}  // namespace qkv::nn

namespace qkv::nn {

KVCache KVCache::with_capacity(int64_t N, int64_t num_heads, int64_t capacity, int64_t dk, Device device) {
  KVCache c;
  c.k = Tensor::empty_unpooled(Dims{N, num_heads, capacity, dk}, DType::F32, device);
  c.v = Tensor::empty_unpooled(Dims{N, num_heads, capacity, dk}, DType::F32, device);
  return c;
}

KVCache KVCacheStorage::take(size_t layer, int64_t N, int64_t num_heads, int64_t length_limit, int64_t capacity,
                             int64_t dk, Device device) {
  QKV_CHECK(length_limit >= 1 && length_limit <= capacity,
            "key/value storage: length " << length_limit << " must be in [1, capacity " << capacity << "]");
  if (kept_.size() <= layer) kept_.resize(layer + 1);
  KVCache& kept = kept_[layer];
  const bool fits = kept.k.defined() && kept.k.device() == device && kept.k.size(0) >= N &&
                    kept.k.size(1) == num_heads && kept.k.size(2) >= length_limit && kept.k.size(3) == dk;
  if (!fits) {
    // Dropped first, so the old and new storage never take memory together.
    const int64_t rows = kept.k.defined() ? std::max(N, kept.k.size(0)) : N;
    kept = KVCache();
    kept = KVCache::with_capacity(rows, num_heads, capacity, dk, device);
  }
  KVCache c;
  c.k = kept.k.slice0(0, N);
  c.v = kept.v.slice0(0, N);
  c.kept_storage = true;
  return c;
}

KVCache self_attention_cache(KVCacheStorage* storage, size_t layer, int64_t N, int64_t num_heads,
                             int64_t length_limit, int64_t storage_capacity, int64_t dk, Device device) {
  if (device.is_cuda()) storage_capacity = length_limit;
  return storage ? storage->take(layer, N, num_heads, length_limit, storage_capacity, dk, device)
                 : KVCache::with_capacity(N, num_heads, length_limit, dk, device);
}

namespace {
// The first `length` key columns of a mask that covers a cache's capacity.
ops::AttentionMasks first_keys(const ops::AttentionMasks& masks, int64_t length) {
  ops::AttentionMasks m = masks;
  if (m.key_keep.defined()) m.key_keep = m.key_keep.narrow(1, 0, length);
  return m;
}
}  // namespace

namespace {
// Copies rows [0, rows) of `from` into a fresh (rows_out, H, capacity, dk) cache tensor, over the
// first `length` positions.
Tensor grown_copy(const Tensor& from, int64_t rows_out, int64_t length) {
  Dims shape = from.shape();
  shape[0] = rows_out;
  Tensor grown = Tensor::empty_unpooled(shape, DType::F32, from.device());
  const int64_t rows = from.size(0);
  grown.slice0(0, rows).narrow(2, 0, length).copy_from(from.narrow(2, 0, length));
  return grown;
}

// Row i of `cache` (N, H, capacity, dk) becomes old row rows[i], over the first `length` positions
// only (the rest is unused). In place, copying each row that changes once: a row is overwritten
// only after the rows that read from it are done (the order of a parallel assignment), and a cycle
// of rows is broken through one row of scratch.
// Dropping rows (rows.size() < N) just narrows the view; only a batch that grows gets new storage.
void reorder_rows(Tensor& cache, const std::vector<int64_t>& rows, int64_t length) {
  const int64_t N = cache.size(0), n = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) QKV_CHECK(r >= 0 && r < N, "attention cache: row " << r << " outside [0, " << N << ")");
  const auto row = [&](int64_t i) { return cache.slice0(i, i + 1).narrow(2, 0, length); };
  if (n > N) {
    Dims shape = cache.shape();
    shape[0] = n;
    Tensor grown = Tensor::empty_unpooled(shape, DType::F32, cache.device());
    for (int64_t i = 0; i < n; ++i) grown.slice0(i, i + 1).narrow(2, 0, length).copy_from(row(rows[i]));
    cache = std::move(grown);
    return;
  }
  constexpr int64_t kFromScratch = -1;
  std::vector<int64_t> source(rows.begin(), rows.end()), readers(static_cast<size_t>(N), 0), ready;
  int64_t pending = 0;
  for (int64_t i = 0; i < n; ++i)
    if (source[i] != i) {
      ++readers[source[i]];
      ++pending;
    }
  for (int64_t i = 0; i < n; ++i)
    if (source[i] != i && readers[i] == 0) ready.push_back(i);
  Tensor scratch;
  int64_t next_unresolved = 0;
  while (pending > 0) {
    if (ready.empty()) {  // only cycles are left, each row read once: save one and start there
      while (source[next_unresolved] == next_unresolved) ++next_unresolved;
      const int64_t start = next_unresolved;
      if (!scratch.defined()) scratch = Tensor::empty(row(start).shape(), DType::F32, cache.device());
      scratch.copy_from(row(start));
      for (int64_t i = 0; i < n; ++i)
        if (source[i] == start && i != start) source[i] = kFromScratch;
      readers[start] = 0;
      ready.push_back(start);
    }
    const int64_t i = ready.back();
    ready.pop_back();
    const int64_t from = source[i];
    row(i).copy_from(from == kFromScratch ? scratch : row(from));
    source[i] = i;
    --pending;
    if (from != kFromScratch && --readers[from] == 0 && from < n && source[from] != from) ready.push_back(from);
  }
  if (n < N) cache = cache.slice0(0, n);
}
}  // namespace

void KVCache::reorder(const std::vector<int64_t>& rows) {
  const int64_t n_old = sequences(), n = static_cast<int64_t>(rows.size()), capacity = k.size(2);
  for (int64_t r : rows)
    QKV_CHECK(r >= 0 && r < n_old, "attention cache: sequence " << r << " outside [0, " << n_old << ")");
  if (k.device().is_cuda()) {  // copies on the device are cheap next to a map the host must build
    reorder_gathering(rows);
    return;
  }
  if (n > k.size(0)) {  // more sequences than rows: new storage (the map's rows stay valid)
    k = grown_copy(k, n, length);
    v = grown_copy(v, n, length);
    kept_storage = false;
  }
  Tensor map = Tensor::empty(Dims{n, capacity}, DType::I32);
  int32_t* out = map.i32();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t from = rows[static_cast<size_t>(i)];
    if (key_rows.defined()) {
      const int32_t* in = key_rows.i32() + from * capacity;
      std::copy(in, in + length, out + i * capacity);
    } else {
      std::fill(out + i * capacity, out + i * capacity + length, static_cast<int32_t>(from));
    }
  }
  key_rows = std::move(map);
  // Rows of sequences that ended stay allocated while the map may point into them; once the
  // sequences fit in half the rows, a gather gives their memory back (CTranslate2's cache shrinks
  // with its batch the same way). Halving bounds the copies to about twice the final cache.
  if (2 * n <= k.size(0) && !kept_storage) gather_in_place();
}

namespace {
bool gathers_on_gpu(const KVCache& c) { return c.k.device().is_cuda() && c.k.is_contiguous() && c.v.is_contiguous(); }

// Rows [0, rows.size()) of `cache` become its old rows `rows` over the first `length` positions, in
// its own storage: a gather into scratch (rows may read rows that are overwritten), then one copy.
void gather_back_in_place(Tensor& cache, const std::vector<int64_t>& rows, int64_t length) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const Tensor gathered = ops::gather_cache_rows(cache, rows, length);
  cache = cache.slice0(0, n);
  cache.narrow(2, 0, length).copy_from(gathered.narrow(2, 0, length));
}
}  // namespace

void KVCache::reorder_copying(const std::vector<int64_t>& rows) {
  QKV_CHECK(!key_rows.defined(), "attention cache: reorder_copying on a cache whose rows move by a map");
  const int64_t n = static_cast<int64_t>(rows.size());
  if (gathers_on_gpu(*this) && n <= k.size(0)) {  // two launches a tensor, not a copy a row
    gather_back_in_place(k, rows, length);
    gather_back_in_place(v, rows, length);
    return;
  }
  reorder_rows(k, rows, length);
  reorder_rows(v, rows, length);
}

void KVCache::reorder_gathering(const std::vector<int64_t>& rows) {
  QKV_CHECK(!key_rows.defined(), "attention cache: reorder_gathering on a cache whose rows move by a map");
  if (!k.device().is_cuda()) return reorder_copying(rows);
  // A launch a tensor, into new storage. A cross-attention cache is a view of its heads
  // (split_heads): made whole first, one more launch, where row by row took two a row.
  k = ops::gather_cache_rows(k.contiguous(), rows, length);
  v = ops::gather_cache_rows(v.contiguous(), rows, length);
}

void KVCache::gather_in_place() {
  if (!key_rows.defined()) return;
  QKV_CHECK(k.is_contiguous() && v.is_contiguous(), "attention cache: a mapped cache's storage must be whole");
  const int64_t n = key_rows.size(0), capacity = k.size(2), H = k.size(1), dk = k.size(3);
  Tensor gk = Tensor::empty_unpooled(Dims{n, H, capacity, dk}), gv = Tensor::empty_unpooled(Dims{n, H, capacity, dk});
  const float *k_in = k.f32(), *v_in = v.f32();
  float *k_out = gk.f32(), *v_out = gv.f32();
  const int32_t* map = key_rows.i32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < length; ++p) {
        const int64_t to = ((i * H + h) * capacity + p) * dk;
        const int64_t from = ((map[i * capacity + p] * H + h) * capacity + p) * dk;
        std::copy(k_in + from, k_in + from + dk, k_out + to);
        std::copy(v_in + from, v_in + from + dk, v_out + to);
      }
  k = std::move(gk);
  v = std::move(gv);
  key_rows = Tensor();
  kept_storage = false;
}

Var MultiHeadAttention::forward_cached(const Var& x, KVCache& cache, const ops::AttentionMasks& masks,
                                       Tensor* weights, const Var& position_bias) const {
  const int64_t N = x.size(0), T = x.size(1), end = cache.length + T;
  QKV_CHECK(end <= cache.k.size(2), "attention cache: " << end << " positions exceed its capacity " << cache.k.size(2));
  QKV_CHECK(N == cache.sequences(), "attention cache: " << N << " sequences for a cache of " << cache.sequences());
  constexpr int64_t kMaxMappedQueries = 8;  // what ops::attention_forward_mapped takes
  if (T > kMaxMappedQueries) cache.gather_in_place();
  const auto [x_q, x_k, x_v] = self_projections(x);
  const Var q = fn::split_heads(x_q, num_heads_);  // (N, H, T, dk)
  // Sequence i's new positions go to row i: no row's positions [length, end) were written before.
  cache.k.slice0(0, N).narrow(2, cache.length, T).copy_from(fn::split_heads(x_k, num_heads_).value());
  cache.v.slice0(0, N).narrow(2, cache.length, T).copy_from(fn::split_heads(x_v, num_heads_).value());
  if (cache.key_rows.defined()) {
    const int64_t capacity = cache.k.size(2);
    int32_t* map = cache.key_rows.i32();
    for (int64_t i = 0; i < N; ++i)
      std::fill(map + i * capacity + cache.length, map + i * capacity + end, static_cast<int32_t>(i));
  }
  cache.length = end;
  if (!cache.key_rows.defined())
    return attend(q, Var(cache.k.narrow(2, 0, end)), Var(cache.v.narrow(2, 0, end)), first_keys(masks, end), weights,
                  position_bias);
  QKV_CHECK((!grad_enabled() || !q.requires_grad()) && !(training() && attention_dropout_ > 0.f),
            "attention cache: a reordered cache is for inference only (no gradient, no attention dropout)");
  Tensor probs;
  ops::AttentionMasks mapped_masks = first_keys(masks, end);
  if (position_bias.defined()) mapped_masks.bias = position_bias.value();
  const Tensor out = ops::attention_forward_mapped(q.value(), cache.k.narrow(2, 0, end), cache.v.narrow(2, 0, end),
                                                   cache.key_rows.narrow(1, 0, end), mapped_masks,
                                                   weights ? &probs : nullptr);
  if (weights) *weights = probs;
  return W_o.forward(fn::combine_heads(Var(out)));
}

Var MultiHeadAttention::forward_static(const Var& x, const KVCache& cache, const ops::AttentionMasks& masks,
                                       Tensor* weights, int64_t rows_per_source) const {
  QKV_CHECK(!cache.key_rows.defined(), "cross-attention: a static cache is reordered by copying (reorder_copying)");
  if (rows_per_source == 1)
    return attend(project(W_q, x), Var(cache.k), Var(cache.v), masks, weights);
  const int64_t N = x.size(0), T = x.size(1), D = x.size(2), groups = N / rows_per_source;
  QKV_CHECK(N % rows_per_source == 0 && groups == cache.k.size(0),
            "cross-attention: " << N << " rows in groups of " << rows_per_source << " for a cache of "
                                << cache.k.size(0) << " sources");
  // The R rows of a group, T queries each, become one sequence of R x T queries.
  const Var grouped = fn::reshape(x, Dims{groups, rows_per_source * T, D});
  const Var out = attend(project(W_q, grouped), Var(cache.k), Var(cache.v), masks, weights);
  if (weights) {  // (groups, H, R T, S) -> (N, H, T, S)
    const int64_t H = num_heads_, S = weights->size(3);
    *weights = weights->reshape(Dims{groups, H, rows_per_source, T * S}).transpose(1, 2).contiguous().reshape(Dims{N, H, T, S});
  }
  return fn::reshape(out, Dims{N, T, D});
}

KVCache MultiHeadAttention::project_memory(const Var& memory) const {
  KVCache c;
  c.k = project(W_k, memory).value();
  c.v = project(W_v, memory).value();
  c.length = c.k.size(2);
  return c;
}

Tensor MultiHeadAttention::attention_weights(const Var& Q, const Var& K, const ops::AttentionMasks& masks) const {
  NoGradGuard no_grad;
  const Var q = project(W_q, Q), k = project(W_k, K);
  Tensor probs;
  ops::attention_forward(q.value(), k.value(), k.value(), masks, {}, &probs);
  return probs;
}

}  // namespace qkv::nn
