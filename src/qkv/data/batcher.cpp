#include "qkv/data/batcher.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <utility>

#include "qkv/core/error.h"
#include "qkv/core/hash.h"

namespace qkv::data {

namespace {

// Our own generator and Fisher-Yates shuffle rather than std::shuffle / std::uniform_int_distribution,
// whose output is implementation-defined: the batch order is then the same on every platform.
class Rng {
 public:
  Rng(uint64_t seed, int64_t epoch, uint64_t stream)
      : state_(mix64(mix64(seed) ^ (static_cast<uint64_t>(epoch) * 0x9e3779b97f4a7c15ULL + stream))) {}
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  // Uniform in [0, n), unbiased (rejection of the short last interval).
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  uint64_t state_;
};

constexpr uint64_t kPairStream = 1, kBatchStream = 2;

void check_options(const BatcherOptions& o) {
  QKV_CHECK(o.pad_id >= 0 && o.bos_id >= 0 && o.eos_id >= 0,
            "batcher: pad/bos/eos ids must be non-negative, got " << o.pad_id << "/" << o.bos_id << "/" << o.eos_id);
  QKV_CHECK(o.max_tokens >= 1, "batcher: max_tokens must be >= 1, got " << o.max_tokens);
  QKV_CHECK(o.max_rows >= 0, "batcher: max_rows must be >= 0 (0 = no limit), got " << o.max_rows);
  QKV_CHECK(o.max_src_len >= 1, "batcher: max_src_len must be >= 1, got " << o.max_src_len);
  QKV_CHECK(o.max_tgt_len >= 2, "batcher: max_tgt_len must be >= 2 (BOS or one target id, plus EOS), got "
                                    << o.max_tgt_len);
  QKV_CHECK(o.bucketing != Bucketing::Chunked || o.chunk_pairs >= 1,
            "batcher: chunk_pairs must be >= 1 with chunked bucketing, got " << o.chunk_pairs);
}

// Moves the pairs that pass the length filter (truncated if so configured) to the back of *kept.
FilterStats filter_pairs(std::vector<IdLine>& src, std::vector<IdLine>& tgt, const BatcherOptions& o,
                         std::vector<IdLine>* kept_src, std::vector<IdLine>* kept_tgt, std::vector<int64_t>* original) {
  QKV_CHECK(src.size() == tgt.size(),
            "batcher: " << src.size() << " source lines but " << tgt.size() << " target lines");
  check_options(o);
  FilterStats st;
  st.input = static_cast<int64_t>(src.size());
  st.max_src_len = o.max_src_len;
  st.max_tgt_len = o.max_tgt_len;
  const size_t max_src = static_cast<size_t>(o.max_src_len);
  const size_t max_tgt = static_cast<size_t>(o.max_tgt_len) - 1;  // target ids before EOS
  for (size_t i = 0; i < src.size(); ++i) {
    IdLine& s = src[i];
    IdLine& t = tgt[i];
    if (s.empty()) {
      ++st.empty_src;
      continue;
    }
    if (t.empty()) {
      ++st.empty_tgt;
      continue;
    }
    const bool src_long = s.size() > max_src, tgt_long = t.size() > max_tgt;
    if (o.too_long == LengthPolicy::Drop) {
      if (src_long) {
        ++st.src_too_long;
        continue;
      }
      if (tgt_long) {
        ++st.tgt_too_long;
        continue;
      }
    } else {
      if (src_long) {
        const bool ends_with_eos = s.back() == o.eos_id;
        s.resize(max_src);
        if (ends_with_eos) s.back() = o.eos_id;
        ++st.src_truncated;
      }
      if (tgt_long) {
        t.resize(max_tgt);  // EOS is appended when the batch is made
        ++st.tgt_truncated;
      }
    }
    kept_src->push_back(std::move(s));
    kept_tgt->push_back(std::move(t));
    original->push_back(static_cast<int64_t>(i));
  }
  st.kept = static_cast<int64_t>(kept_src->size());
  return st;
}

// Width a pair adds to a batch: max(S, T) with T = len(tgt) + BOS + EOS.
int64_t pair_width(const IdLine& s, const IdLine& t) {
  return std::max(static_cast<int64_t>(s.size()), static_cast<int64_t>(t.size()) + 2);
}

// Greedy cut of order[begin, end) into batches; appends each batch's end to *ends.
void cut_batches(const std::vector<int64_t>& order, size_t begin, size_t end, const std::vector<IdLine>& src,
                 const std::vector<IdLine>& tgt, const BatcherOptions& o, std::vector<int64_t>* ends) {
  int64_t rows = 0, width = 0;
  for (size_t k = begin; k < end; ++k) {
    const int64_t w = pair_width(src[order[k]], tgt[order[k]]);
    int64_t new_width = std::max(width, w);
    const bool too_many_tokens = (rows + 1) * new_width > o.max_tokens;
    const bool too_many_rows = o.max_rows > 0 && rows + 1 > o.max_rows;
    if (rows > 0 && (too_many_tokens || too_many_rows)) {
      ends->push_back(static_cast<int64_t>(k));
      rows = 0;
      new_width = w;
    }
    ++rows;
    width = new_width;
  }
  if (rows > 0) ends->push_back(static_cast<int64_t>(end));
}

// Strict weak order of pairs a and b by length, as `order` says.
bool shorter(const std::vector<IdLine>& src, const std::vector<IdLine>& tgt, LengthOrder order, int64_t a, int64_t b) {
  if (order == LengthOrder::LongerSide) {
    const int64_t wa = pair_width(src[a], tgt[a]), wb = pair_width(src[b], tgt[b]);
    if (wa != wb) return wa < wb;
  }
  if (src[a].size() != src[b].size()) return src[a].size() < src[b].size();
  return tgt[a].size() < tgt[b].size();
}

Batch make_batch(const std::vector<IdLine>& src, const std::vector<IdLine>& tgt, const std::vector<int64_t>& original,
                 const int64_t* rows_begin, const int64_t* rows_end, const BatcherOptions& o, int64_t epoch,
                 int64_t index) {
  Batch b;
  b.epoch = epoch;
  b.index = index;
  const int64_t B = rows_end - rows_begin;
  int64_t S = 0, T = 0;
  for (const int64_t* r = rows_begin; r != rows_end; ++r) {
    S = std::max(S, static_cast<int64_t>(src[*r].size()));
    T = std::max(T, static_cast<int64_t>(tgt[*r].size()) + 2);
  }
  b.src = Tensor::empty(Dims{B, S}, DType::I32);
  b.tgt = Tensor::empty(Dims{B, T}, DType::I32);
  int32_t* ps = b.src.i32();
  int32_t* pt = b.tgt.i32();
  b.indices.reserve(B);
  for (int64_t i = 0; i < B; ++i) {
    const int64_t r = rows_begin[i];
    const IdLine& s = src[r];
    const IdLine& t = tgt[r];
    int32_t* row_s = ps + i * S;
    std::copy(s.begin(), s.end(), row_s);
    std::fill(row_s + s.size(), row_s + S, o.pad_id);
    int32_t* row_t = pt + i * T;
    row_t[0] = o.bos_id;
    std::copy(t.begin(), t.end(), row_t + 1);
    row_t[t.size() + 1] = o.eos_id;
    std::fill(row_t + t.size() + 2, row_t + T, o.pad_id);
    b.indices.push_back(original[r]);
    b.src_tokens += static_cast<int64_t>(s.size());
    b.tgt_tokens += static_cast<int64_t>(t.size()) + 1;  // labels: tgt + EOS
  }
  return b;
}

void append_count(std::ostringstream& os, bool& first, int64_t n, const char* one, const char* many,
                  const std::string& tail = "") {
  if (n == 0) return;
  os << (first ? "" : ", ") << n << " " << (n == 1 ? one : many) << tail;
  first = false;
}

}  // namespace

std::string FilterStats::summary() const {
  std::ostringstream os;
  os << "kept " << kept << " of " << input << " pairs";
  if (dropped() > 0) {
    os << "; dropped " << dropped() << ": ";
    bool first = true;
    append_count(os, first, empty_src, "empty source", "empty sources");
    append_count(os, first, empty_tgt, "empty target", "empty targets");
    append_count(os, first, src_too_long, "source", "sources", " longer than " + std::to_string(max_src_len));
    append_count(os, first, tgt_too_long, "target", "targets", " longer than " + std::to_string(max_tgt_len));
  }
  if (src_truncated + tgt_truncated > 0) {
    os << "; truncated ";
    bool first = true;
    append_count(os, first, src_truncated, "source", "sources", " to " + std::to_string(max_src_len));
    append_count(os, first, tgt_truncated, "target", "targets", " to " + std::to_string(max_tgt_len));
  }
  return os.str();
}

Batcher::Batcher(std::vector<IdLine> src, std::vector<IdLine> tgt, BatcherOptions options)
    : options_(options), seed_(options.seed) {
  stats_ = filter_pairs(src, tgt, options_, &src_, &tgt_, &original_);
  QKV_CHECK(!src_.empty(), "batcher: no training pairs left after length filtering (" << stats_.summary() << ")");
  plan_epoch();
}

void Batcher::plan_epoch() {
  const size_t n = src_.size();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng(seed_, epoch_, kPairStream).shuffle(order);
  auto by_length = [this](int64_t a, int64_t b) { return shorter(src_, tgt_, options_.length_order, a, b); };
  std::vector<int64_t> ends;
  const size_t chunk = options_.bucketing == Bucketing::Chunked ? static_cast<size_t>(options_.chunk_pairs) : n;
  for (size_t begin = 0; begin < n; begin += chunk) {
    const size_t end = std::min(n, begin + chunk);
    if (options_.bucketing != Bucketing::None)
      std::stable_sort(order.begin() + begin, order.begin() + end, by_length);
    cut_batches(order, begin, end, src_, tgt_, options_, &ends);
  }
  // Shuffle the batches, keeping each batch's rows together (and in length order).
  std::vector<int64_t> batch_ids(ends.size());
  std::iota(batch_ids.begin(), batch_ids.end(), int64_t{0});
  Rng(seed_, epoch_, kBatchStream).shuffle(batch_ids);
  order_.clear();
  order_.reserve(n);
  batch_begin_.assign(1, 0);
  for (int64_t b : batch_ids) {
    const int64_t begin = b == 0 ? 0 : ends[b - 1];
    order_.insert(order_.end(), order.begin() + begin, order.begin() + ends[b]);
    batch_begin_.push_back(static_cast<int64_t>(order_.size()));
  }
}

Batch Batcher::next() {
  const int64_t* rows = order_.data();
  Batch b = make_batch(src_, tgt_, original_, rows + batch_begin_[index_], rows + batch_begin_[index_ + 1], options_,
                       epoch_, index_);
  if (++index_ == batches_per_epoch()) {
    ++epoch_;
    index_ = 0;
    plan_epoch();
  }
  return b;
}

EpochPadding Batcher::padding() const {
  EpochPadding p;
  for (int64_t b = 0; b < batches_per_epoch(); ++b) {
    int64_t S = 0, T = 0;
    for (int64_t k = batch_begin_[b]; k < batch_begin_[b + 1]; ++k) {
      const int64_t r = order_[k], ls = static_cast<int64_t>(src_[r].size()), lt = static_cast<int64_t>(tgt_[r].size()) + 2;
      p.src_tokens += ls;
      p.tgt_tokens += lt;
      S = std::max(S, ls);
      T = std::max(T, lt);
    }
    const int64_t rows = batch_begin_[b + 1] - batch_begin_[b];
    p.src_cells += rows * S;
    p.tgt_cells += rows * T;
  }
  return p;
}

const char* length_order_name(LengthOrder order) {
  return order == LengthOrder::LongerSide ? "longer_side" : "source_then_target";
}

LengthOrder parse_length_order(const std::string& name) {
  if (name == "longer_side") return LengthOrder::LongerSide;
  QKV_CHECK(name == "source_then_target",
            "unknown batch length order '" << name << "' (expected longer_side or source_then_target)");
  return LengthOrder::SourceThenTarget;
}

void Batcher::restore(const BatcherState& state) {
  QKV_CHECK(state.epoch >= 0 && state.index >= 0,
            "cannot restore batcher state: negative epoch " << state.epoch << " or index " << state.index);
  seed_ = state.seed;
  options_.length_order = state.length_order;
  epoch_ = state.epoch;
  index_ = 0;
  plan_epoch();
  QKV_CHECK(state.index <= batches_per_epoch(),
            "cannot restore batcher state: batch " << state.index << " of epoch " << state.epoch << " but that epoch has "
                                                   << batches_per_epoch()
                                                   << " batches (different data or batching options than the saved run?)");
  index_ = state.index;
  if (index_ == batches_per_epoch()) {  // saved exactly at an epoch's end
    ++epoch_;
    index_ = 0;
    plan_epoch();
  }
}

std::vector<Batch> fixed_batches(const std::vector<IdLine>& src_in, const std::vector<IdLine>& tgt_in,
                                 const BatcherOptions& options, FilterStats* stats) {
  std::vector<IdLine> src_copy = src_in, tgt_copy = tgt_in;
  std::vector<IdLine> src, tgt;
  std::vector<int64_t> original;
  const FilterStats st = filter_pairs(src_copy, tgt_copy, options, &src, &tgt, &original);
  if (stats) *stats = st;
  std::vector<int64_t> order(src.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return shorter(src, tgt, options.length_order, a, b); });  // ties: input order
  std::vector<int64_t> ends;
  cut_batches(order, 0, order.size(), src, tgt, options, &ends);
  std::vector<Batch> batches;
  batches.reserve(ends.size());
  int64_t begin = 0;
  for (size_t b = 0; b < ends.size(); ++b) {
    batches.push_back(make_batch(src, tgt, original, order.data() + begin, order.data() + ends[b], options, 0,
                                 static_cast<int64_t>(b)));
    begin = ends[b];
  }
  return batches;
}

}  // namespace qkv::data
