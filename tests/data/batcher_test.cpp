// Token-count batching: length filter (drop counts, truncation keeping EOS), BOS/EOS/padding layout,
// max_tokens, every pair once per epoch, determinism in (seed, epoch), exact resume, bucketing's
// effect on padding, and the fixed evaluation batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/data/batcher.h"
#include "qkv/data/id_lines.h"
#include "error_message.h"

namespace {

using qkv::data::Batch;
using qkv::data::Batcher;
using qkv::data::BatcherOptions;
using qkv::data::BatcherState;
using qkv::data::Bucketing;
using qkv::data::FilterStats;
using qkv::data::IdLine;
using qkv::data::LengthPolicy;

constexpr int32_t kPad = 0, kBos = 2, kEos = 3;

using qkv::test_support::error_message_of;

// n pairs with source lengths in [1, max_len] and target lengths roughly proportional; the ids
// encode the pair index (first id = 100 + i) so rows can be traced back to their pair.
struct Corpus {
  std::vector<IdLine> src, tgt;
};
Corpus make_corpus(int n, int max_len, uint32_t seed = 1) {
  std::mt19937 eng(seed);
  std::uniform_int_distribution<int> len(1, max_len), jitter(-3, 3), id(4, 99);
  Corpus c;
  for (int i = 0; i < n; ++i) {
    const int ls = len(eng);
    const int lt = std::clamp(ls + jitter(eng), 1, max_len);
    IdLine s(ls), t(lt);
    for (auto& v : s) v = id(eng);
    for (auto& v : t) v = id(eng);
    s[0] = 100 + i;
    t[0] = 100 + i;
    c.src.push_back(s);
    c.tgt.push_back(t);
  }
  return c;
}

BatcherOptions options(int64_t max_tokens, Bucketing bucketing = Bucketing::Global, uint64_t seed = 7) {
  BatcherOptions o;
  o.pad_id = kPad;
  o.bos_id = kBos;
  o.eos_id = kEos;
  o.max_tokens = max_tokens;
  o.max_src_len = 64;
  o.max_tgt_len = 64;
  o.bucketing = bucketing;
  o.chunk_pairs = 200;
  o.seed = seed;
  return o;
}

// The rows of a batch as id lines without padding (src) and with BOS/EOS (tgt), checked for layout.
void expect_well_formed(const Batch& b, const std::vector<IdLine>& src, const std::vector<IdLine>& tgt) {
  const int64_t B = b.rows(), S = b.src.size(1), T = b.tgt.size(1);
  ASSERT_EQ(b.src.dim(), 2);
  ASSERT_EQ(b.tgt.dim(), 2);
  ASSERT_EQ(b.src.dtype(), qkv::DType::I32);
  ASSERT_EQ(b.tgt.dtype(), qkv::DType::I32);
  ASSERT_EQ(b.src.size(0), B);
  ASSERT_EQ(b.tgt.size(0), B);
  const std::vector<int32_t> s = b.src.to_ids(), t = b.tgt.to_ids();
  int64_t src_tokens = 0, labels = 0;
  for (int64_t r = 0; r < B; ++r) {
    const IdLine& want_s = src[b.indices[r]];
    const IdLine& want_t = tgt[b.indices[r]];
    for (int64_t j = 0; j < S; ++j)
      ASSERT_EQ(s[r * S + j], j < static_cast<int64_t>(want_s.size()) ? want_s[j] : kPad) << "row " << r << " col " << j;
    const int64_t lt = static_cast<int64_t>(want_t.size());
    ASSERT_EQ(t[r * T], kBos);
    for (int64_t j = 0; j < lt; ++j) ASSERT_EQ(t[r * T + 1 + j], want_t[j]);
    ASSERT_EQ(t[r * T + lt + 1], kEos);
    for (int64_t j = lt + 2; j < T; ++j) ASSERT_EQ(t[r * T + j], kPad);
    src_tokens += static_cast<int64_t>(want_s.size());
    labels += lt + 1;
  }
  EXPECT_EQ(b.src_tokens, src_tokens);
  EXPECT_EQ(b.tgt_tokens, labels);
}

std::vector<int64_t> epoch_indices(Batcher& batcher, std::vector<Batch>* batches = nullptr) {
  const int64_t e = batcher.epoch(), n = batcher.batches_per_epoch();
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    Batch b = batcher.next();
    EXPECT_EQ(b.epoch, e);
    EXPECT_EQ(b.index, i);
    out.insert(out.end(), b.indices.begin(), b.indices.end());
    if (batches) batches->push_back(std::move(b));
  }
  EXPECT_EQ(batcher.epoch(), e + 1);
  return out;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.src.shape(), b.src.shape());
  EXPECT_EQ(a.tgt.shape(), b.tgt.shape());
  EXPECT_EQ(a.src.to_ids(), b.src.to_ids());
  EXPECT_EQ(a.tgt.to_ids(), b.tgt.to_ids());
}

TEST(BatcherTest, BatchLayoutBosEosPaddingAndTokenCounts) {
  const Corpus c = make_corpus(300, 40);
  Batcher batcher(c.src, c.tgt, options(600));
  for (int i = 0; i < batcher.batches_per_epoch(); ++i) expect_well_formed(batcher.next(), c.src, c.tgt);
  // tgt_tokens is what shift_target's labels hold besides padding.
  Batcher again(c.src, c.tgt, options(600));
  const Batch b = again.next();
  const auto labels = qkv::data::shift_target(b.tgt).labels.to_ids();
  EXPECT_EQ(std::count_if(labels.begin(), labels.end(), [](int32_t v) { return v != kPad; }), b.tgt_tokens);
}

TEST(BatcherTest, LengthFilterDropCounts) {
  std::vector<IdLine> src = {{5, 6},       {},        {5},       IdLine(9, 7), {5, 6, 7}, IdLine(9, 7), {8}};
  std::vector<IdLine> tgt = {{5},          {5},       {},        {5},          IdLine(8, 9), IdLine(8, 9), {8, 8, 8, 8, 8, 8, 8}};
  BatcherOptions o = options(1000);
  o.max_src_len = 8;
  o.max_tgt_len = 8;  // tgt ids + EOS <= 8, i.e. at most 7 target ids
  Batcher batcher(src, tgt, o);
  const FilterStats& st = batcher.stats();
  EXPECT_EQ(st.input, 7);
  EXPECT_EQ(st.kept, 2);  // pairs 0 and 6 (7 target ids fit exactly)
  EXPECT_EQ(st.empty_src, 1);
  EXPECT_EQ(st.empty_tgt, 1);
  EXPECT_EQ(st.src_too_long, 2);  // pair 5 is too long on both sides: counted once, as source
  EXPECT_EQ(st.tgt_too_long, 1);
  EXPECT_EQ(st.dropped(), 5);
  EXPECT_EQ(st.src_truncated + st.tgt_truncated, 0);
  EXPECT_EQ(st.summary(), "kept 2 of 7 pairs; dropped 5: 1 empty source, 1 empty target, 2 sources longer than 8, "
                          "1 target longer than 8");
  EXPECT_EQ(batcher.pairs(), 2);
  std::vector<int64_t> seen;
  for (int i = 0; i < batcher.batches_per_epoch(); ++i) {
    const Batch b = batcher.next();
    seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    EXPECT_LE(b.tgt.size(1) - 1, 8);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 6}));
  FilterStats none;
  none.input = none.kept = 3;
  EXPECT_EQ(none.summary(), "kept 3 of 3 pairs");
}

TEST(BatcherTest, LengthFilterTruncateKeepsEos) {
  IdLine long_src(20), long_tgt(30), src_with_eos(20, 9);
  for (int i = 0; i < 20; ++i) long_src[i] = 10 + i;
  for (int i = 0; i < 30; ++i) long_tgt[i] = 50 + i;
  src_with_eos.back() = kEos;
  std::vector<IdLine> src = {long_src, {4, 5}, src_with_eos, {}};
  std::vector<IdLine> tgt = {long_tgt, long_tgt, {6}, {6}};
  BatcherOptions o = options(1000);
  o.max_src_len = 8;
  o.max_tgt_len = 10;
  o.too_long = LengthPolicy::Truncate;
  Batcher batcher(src, tgt, o);
  const FilterStats& st = batcher.stats();
  EXPECT_EQ(st.kept, 3);
  EXPECT_EQ(st.empty_src, 1);  // empty pairs are dropped even when truncating
  EXPECT_EQ(st.src_truncated, 2);
  EXPECT_EQ(st.tgt_truncated, 2);
  EXPECT_EQ(st.summary(), "kept 3 of 4 pairs; dropped 1: 1 empty source; truncated 2 sources to 8, 2 targets to 10");
  std::map<int64_t, std::pair<IdLine, IdLine>> rows;  // pair index -> (src row, tgt row) without padding
  for (int i = 0; i < batcher.batches_per_epoch(); ++i) {
    const Batch b = batcher.next();
    const auto s = b.src.to_ids(), t = b.tgt.to_ids();
    const int64_t S = b.src.size(1), T = b.tgt.size(1);
    EXPECT_LE(S, 8);
    EXPECT_LE(T - 1, 10);
    for (int64_t r = 0; r < b.rows(); ++r) {
      IdLine sr(s.begin() + r * S, s.begin() + (r + 1) * S), tr(t.begin() + r * T, t.begin() + (r + 1) * T);
      while (!sr.empty() && sr.back() == kPad) sr.pop_back();
      while (!tr.empty() && tr.back() == kPad) tr.pop_back();
      rows[b.indices[r]] = {sr, tr};
    }
  }
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].first, IdLine(long_src.begin(), long_src.begin() + 8));
  IdLine want_t = {kBos};
  want_t.insert(want_t.end(), long_tgt.begin(), long_tgt.begin() + 9);
  want_t.push_back(kEos);
  EXPECT_EQ(rows[0].second, want_t);  // len(tgt_full) - 1 == max_tgt_len, EOS last
  EXPECT_EQ(rows[1].second, want_t);
  EXPECT_EQ(rows[2].first, (IdLine{9, 9, 9, 9, 9, 9, 9, kEos}));  // a source's final EOS survives
  EXPECT_EQ(rows[2].second, (IdLine{kBos, 6, kEos}));
}

TEST(BatcherTest, MaxTokensRespectedByEveryBatch) {
  const Corpus c = make_corpus(500, 60);
  for (Bucketing bk : {Bucketing::Global, Bucketing::Chunked, Bucketing::None})
    for (int64_t max_tokens : {1, 40, 64, 100, 333, 1000, 4096}) {
      Batcher batcher(c.src, c.tgt, options(max_tokens, bk));
      for (int epoch = 0; epoch < 2; ++epoch) {
        const int64_t n = batcher.batches_per_epoch();
        for (int64_t i = 0; i < n; ++i) {
          const Batch b = batcher.next();
          const int64_t padded = b.rows() * std::max(b.src.size(1), b.tgt.size(1));
          if (b.rows() > 1) {
            EXPECT_LE(padded, max_tokens) << "bucketing " << static_cast<int>(bk) << " batch " << i;
          } else {
            EXPECT_EQ(b.rows(), 1);
          }
        }
      }
    }
}

TEST(BatcherTest, OversizedPairGetsABatchAlone) {
  std::vector<IdLine> src = {IdLine(50, 5), {5}, {6}, {7}};
  std::vector<IdLine> tgt = {{5}, {5}, {6}, IdLine(60, 7)};
  Batcher batcher(src, tgt, options(40));  // pair 0: width 50, pair 3: width 62; 1 and 2: width 3
  std::map<int64_t, int64_t> rows_of;
  for (int i = 0; i < batcher.batches_per_epoch(); ++i) {
    const Batch b = batcher.next();
    for (int64_t idx : b.indices) rows_of[idx] = b.rows();
  }
  EXPECT_EQ(rows_of[0], 1);
  EXPECT_EQ(rows_of[3], 1);
  EXPECT_EQ(rows_of[1], 2);
  EXPECT_EQ(rows_of[2], 2);
}

TEST(BatcherTest, MaxRowsRespected) {
  const Corpus c = make_corpus(200, 10);
  BatcherOptions o = options(100000);
  o.max_rows = 16;
  Batcher batcher(c.src, c.tgt, o);
  EXPECT_EQ(batcher.batches_per_epoch(), (200 + 15) / 16);
  for (int i = 0; i < batcher.batches_per_epoch(); ++i) EXPECT_LE(batcher.next().rows(), 16);
}

TEST(BatcherTest, EveryPairExactlyOncePerEpoch) {
  const Corpus c = make_corpus(400, 50);
  for (Bucketing bk : {Bucketing::Global, Bucketing::Chunked, Bucketing::None}) {
    Batcher batcher(c.src, c.tgt, options(500, bk));
    std::vector<int64_t> all(400);
    for (int i = 0; i < 400; ++i) all[i] = i;
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::vector<int64_t> seen = epoch_indices(batcher);
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, all) << "bucketing " << static_cast<int>(bk) << " epoch " << epoch;
    }
  }
}

TEST(BatcherTest, EpochsDifferAndSeedsAreDeterministic) {
  const Corpus c = make_corpus(400, 50);
  for (Bucketing bk : {Bucketing::Global, Bucketing::Chunked, Bucketing::None}) {
    Batcher a(c.src, c.tgt, options(500, bk, 11)), b(c.src, c.tgt, options(500, bk, 11));
    Batcher other(c.src, c.tgt, options(500, bk, 12));
    const auto a0 = epoch_indices(a), a1 = epoch_indices(a), a2 = epoch_indices(a);
    EXPECT_NE(a0, a1);
    EXPECT_NE(a1, a2);
    EXPECT_EQ(epoch_indices(b), a0);  // same seed, same order
    EXPECT_EQ(epoch_indices(b), a1);
    EXPECT_NE(epoch_indices(other), a0);
  }
}

TEST(BatcherTest, RestoreContinuesIdentically) {
  const Corpus c = make_corpus(300, 40);
  for (Bucketing bk : {Bucketing::Global, Bucketing::Chunked}) {
    BatcherOptions o = options(400, bk, 5);
    Batcher run(c.src, c.tgt, o);
    const int64_t n0 = run.batches_per_epoch();
    ASSERT_GT(n0, 4);
    // Stop at several points: mid first epoch, mid second epoch, exactly at an epoch boundary.
    for (int64_t stop : {n0 / 2, n0 + 3, 2 * n0}) {
      Batcher uninterrupted(c.src, c.tgt, o);
      Batcher first(c.src, c.tgt, o);
      for (int64_t i = 0; i < stop; ++i) {
        uninterrupted.next();
        first.next();
      }
      const BatcherState saved = first.state();
      BatcherOptions other_seed = o;
      other_seed.seed = 999;  // the state's seed wins
      Batcher resumed(c.src, c.tgt, other_seed);
      resumed.next();  // some unrelated progress, overwritten by restore
      resumed.restore(saved);
      EXPECT_EQ(resumed.epoch(), saved.epoch);
      EXPECT_EQ(resumed.state().index, saved.index);
      EXPECT_EQ(resumed.state().seed, 5u);
      EXPECT_EQ(resumed.batches_per_epoch(), uninterrupted.batches_per_epoch());
      for (int64_t i = 0; i < 2 * n0 + 5; ++i) expect_same_batch(resumed.next(), uninterrupted.next());
    }
  }
}

TEST(BatcherTest, RestoreAtEndOfEpochStartsTheNext) {
  const Corpus c = make_corpus(100, 20);
  Batcher a(c.src, c.tgt, options(200));
  const BatcherState end{0, a.batches_per_epoch(), 7};
  Batcher b(c.src, c.tgt, options(200));
  b.restore(end);
  EXPECT_EQ(b.epoch(), 1);
  EXPECT_EQ(b.state().index, 0);
  epoch_indices(a);
  expect_same_batch(b.next(), a.next());
}

TEST(BatcherTest, StateIsTheNextBatchsPosition) {
  const Corpus c = make_corpus(100, 20);
  Batcher batcher(c.src, c.tgt, options(200));
  const int64_t n = batcher.batches_per_epoch();
  for (int64_t i = 0; i < n + 2; ++i) {
    const BatcherState s = batcher.state();
    const Batch b = batcher.next();
    EXPECT_EQ(s.epoch, b.epoch);
    EXPECT_EQ(s.index, b.index);
  }
  EXPECT_EQ(batcher.epoch(), 1);
}

TEST(BatcherTest, BucketingReducesPadding) {
  const Corpus c = make_corpus(2000, 80);
  // Fraction of the src and tgt tensor cells that are padding over one epoch.
  auto padding_ratio = [&](Bucketing bk) {
    Batcher batcher(c.src, c.tgt, options(2000, bk));
    int64_t cells = 0, tokens = 0;
    for (int64_t i = 0; i < batcher.batches_per_epoch(); ++i) {
      const Batch b = batcher.next();
      cells += b.src.numel() + b.tgt.numel();
      tokens += b.src_tokens + b.tgt_tokens + b.rows();  // tgt ids = labels + BOS
    }
    return 1.0 - static_cast<double>(tokens) / static_cast<double>(cells);
  };
  const double random = padding_ratio(Bucketing::None);
  const double chunked = padding_ratio(Bucketing::Chunked);
  const double global = padding_ratio(Bucketing::Global);
  EXPECT_GT(random, 0.3);          // uniform lengths in [1, 80]: about half the cells are padding
  EXPECT_LT(global, 0.1);          // only the src/tgt length jitter remains
  EXPECT_LT(chunked, random / 2);  // chunks of 200 pairs already help a lot
  EXPECT_LE(global, chunked);
  RecordProperty("padding_random", std::to_string(random));
  RecordProperty("padding_chunked", std::to_string(chunked));
  RecordProperty("padding_global", std::to_string(global));
}

// Targets about 10% longer than their sources, give or take 8 tokens, as translations are: sorted
// by source length, a batch's targets still vary by the jitter; sorted by the longer side (what
// max_tokens counts), both sides share the batch's width, so the same pairs need fewer batches and
// fewer padding cells (the Bible corpus: 174 batches instead of 198, 2.01M cells instead of 2.09M).
TEST(BatcherTest, SortingByTheLongerSideLeavesLessPadding) {
  std::mt19937 eng(3);
  std::uniform_int_distribution<int> len(1, 60), jitter(-8, 8), id(4, 99);
  std::vector<IdLine> src, tgt;
  for (int i = 0; i < 1500; ++i) {
    const int ls = len(eng), lt = std::clamp(static_cast<int>(std::lround(1.1 * ls)) + jitter(eng), 1, 62);
    src.emplace_back(ls, id(eng));
    tgt.emplace_back(lt, id(eng));
  }
  auto measure = [&](qkv::data::LengthOrder order) {
    BatcherOptions o = options(2000);
    o.length_order = order;
    Batcher batcher(src, tgt, o);
    const qkv::data::EpochPadding p = batcher.padding();  // the plan's count, before the batches are built
    int64_t cells = 0, tokens = 0;
    const int64_t n = batcher.batches_per_epoch();
    for (int64_t i = 0; i < n; ++i) {
      const Batch b = batcher.next();
      cells += b.src.numel() + b.tgt.numel();
      tokens += b.src_tokens + b.tgt_tokens + b.rows();
    }
    EXPECT_EQ(p.src_cells + p.tgt_cells, cells);
    EXPECT_EQ(p.src_tokens + p.tgt_tokens, tokens);
    return std::make_pair(n, 1.0 - static_cast<double>(tokens) / static_cast<double>(cells));
  };
  const auto [source_batches, source_padding] = measure(qkv::data::LengthOrder::SourceThenTarget);
  const auto [longer_batches, longer_padding] = measure(qkv::data::LengthOrder::LongerSide);
  EXPECT_LT(longer_padding, 0.97 * source_padding);
  EXPECT_LT(longer_batches, source_batches);
  RecordProperty("padding_source_then_target", std::to_string(source_padding));
  RecordProperty("padding_longer_side", std::to_string(longer_padding));
}

// A state restores the length order it was saved in, whatever the options say.
TEST(BatcherTest, RestoreUsesTheSavedLengthOrder) {
  const Corpus c = make_corpus(400, 40);
  BatcherOptions source_first = options(500);
  source_first.length_order = qkv::data::LengthOrder::SourceThenTarget;
  Batcher uninterrupted(c.src, c.tgt, source_first), first(c.src, c.tgt, source_first);
  for (int i = 0; i < 5; ++i) {
    uninterrupted.next();
    first.next();
  }
  const BatcherState saved = first.state();
  EXPECT_EQ(saved.length_order, qkv::data::LengthOrder::SourceThenTarget);
  Batcher resumed(c.src, c.tgt, options(500));  // the default, LongerSide
  resumed.restore(saved);
  EXPECT_EQ(resumed.options().length_order, qkv::data::LengthOrder::SourceThenTarget);
  for (int i = 0; i < 3 * uninterrupted.batches_per_epoch(); ++i) expect_same_batch(resumed.next(), uninterrupted.next());
}

TEST(BatcherTest, LengthOrderNames) {
  using qkv::data::LengthOrder;
  for (LengthOrder order : {LengthOrder::LongerSide, LengthOrder::SourceThenTarget})
    EXPECT_EQ(qkv::data::parse_length_order(qkv::data::length_order_name(order)), order);
  EXPECT_EQ(error_message_of([] { qkv::data::parse_length_order("target"); }),
            "unknown batch length order 'target' (expected longer_side or source_then_target)");
}

TEST(BatcherTest, BatchesPerEpochMatchesWhatNextReturns) {
  const Corpus c = make_corpus(700, 60);
  for (Bucketing bk : {Bucketing::Global, Bucketing::Chunked, Bucketing::None}) {
    Batcher batcher(c.src, c.tgt, options(900, bk));
    const int64_t first = batcher.batches_per_epoch();
    for (int epoch = 0; epoch < 4; ++epoch) {
      const int64_t announced = batcher.batches_per_epoch();
      if (bk == Bucketing::Global) {
        EXPECT_EQ(announced, first);  // same every epoch
      }
      int64_t count = 0;
      while (batcher.epoch() == epoch) {
        batcher.next();
        ++count;
      }
      EXPECT_EQ(count, announced) << "bucketing " << static_cast<int>(bk) << " epoch " << epoch;
    }
  }
}

TEST(BatcherTest, Errors) {
  const Corpus c = make_corpus(10, 5);
  std::vector<IdLine> fewer(c.tgt.begin(), c.tgt.begin() + 9);
  EXPECT_EQ(error_message_of([&] { Batcher(c.src, fewer, options(100)); }), "batcher: 10 source lines but 9 target lines");
  BatcherOptions tiny = options(100);
  tiny.max_src_len = 1;
  tiny.max_tgt_len = 2;
  std::vector<IdLine> src = {{4, 5}, {}}, tgt = {{6}, {6}};
  EXPECT_EQ(error_message_of([&] { Batcher(src, tgt, tiny); }),
            "batcher: no training pairs left after length filtering (kept 0 of 2 pairs; dropped 2: 1 empty source, "
            "1 source longer than 1)");
  EXPECT_EQ(error_message_of([&] { Batcher({}, {}, options(100)); }),
            "batcher: no training pairs left after length filtering (kept 0 of 0 pairs)");
  EXPECT_EQ(error_message_of([&] { Batcher(c.src, c.tgt, options(0)); }), "batcher: max_tokens must be >= 1, got 0");
  BatcherOptions bad = options(100);
  bad.max_tgt_len = 1;
  EXPECT_EQ(error_message_of([&] { Batcher(c.src, c.tgt, bad); }),
            "batcher: max_tgt_len must be >= 2 (BOS or one target id, plus EOS), got 1");
  bad = options(100);
  bad.max_src_len = 0;
  EXPECT_EQ(error_message_of([&] { Batcher(c.src, c.tgt, bad); }), "batcher: max_src_len must be >= 1, got 0");
  bad = options(100);
  bad.max_rows = -1;
  EXPECT_EQ(error_message_of([&] { Batcher(c.src, c.tgt, bad); }), "batcher: max_rows must be >= 0 (0 = no limit), got -1");
  bad = options(100, Bucketing::Chunked);
  bad.chunk_pairs = 0;
  EXPECT_EQ(error_message_of([&] { Batcher(c.src, c.tgt, bad); }),
            "batcher: chunk_pairs must be >= 1 with chunked bucketing, got 0");
  bad = options(100);
  bad.eos_id = -1;
  EXPECT_EQ(error_message_of([&] { Batcher(c.src, c.tgt, bad); }), "batcher: pad/bos/eos ids must be non-negative, got 0/2/-1");

  Batcher batcher(c.src, c.tgt, options(100));
  const int64_t n = batcher.batches_per_epoch();
  EXPECT_EQ(error_message_of([&] { batcher.restore({2, n + 1, 7}); }),
            "cannot restore batcher state: batch " + std::to_string(n + 1) + " of epoch 2 but that epoch has " +
                std::to_string(n) + " batches (different data or batching options than the saved run?)");
  EXPECT_EQ(error_message_of([&] { batcher.restore({-1, 0, 7}); }),
            "cannot restore batcher state: negative epoch -1 or index 0");
}

TEST(BatcherFixedTest, DeterministicSortedAndComplete) {
  const Corpus c = make_corpus(500, 60);
  BatcherOptions o = options(800);
  o.too_long = LengthPolicy::Truncate;
  o.length_order = qkv::data::LengthOrder::SourceThenTarget;
  FilterStats st;
  const std::vector<Batch> a = qkv::data::fixed_batches(c.src, c.tgt, o, &st);
  const std::vector<Batch> b = qkv::data::fixed_batches(c.src, c.tgt, o);
  EXPECT_EQ(st.kept, 500);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) expect_same_batch(a[i], b[i]);
  // Rows map back to the input, every pair once; the order is by (src_len, tgt_len, index).
  std::vector<int64_t> seen;
  size_t prev_src = 0, prev_tgt = 0;
  int64_t prev_index = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const Batch& batch = a[i];
    EXPECT_EQ(batch.epoch, 0);
    EXPECT_EQ(batch.index, static_cast<int64_t>(i));
    expect_well_formed(batch, c.src, c.tgt);
    if (batch.rows() > 1) {
      EXPECT_LE(batch.rows() * std::max(batch.src.size(1), batch.tgt.size(1)), 800);
    }
    for (int64_t idx : batch.indices) {
      const size_t ls = c.src[idx].size(), lt = c.tgt[idx].size();
      const bool ordered = ls > prev_src || (ls == prev_src && (lt > prev_tgt || (lt == prev_tgt && idx > prev_index)));
      EXPECT_TRUE(ordered) << "pair " << idx;
      prev_src = ls;
      prev_tgt = lt;
      prev_index = idx;
      seen.push_back(idx);
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(500);
  for (int i = 0; i < 500; ++i) all[i] = i;
  EXPECT_EQ(seen, all);
}

TEST(BatcherFixedTest, DroppedPairsAreReportedAndAbsent) {
  std::vector<IdLine> src = {{4}, {}, IdLine(10, 5), {6, 7}}, tgt = {{4}, {4}, {4}, {8}};
  BatcherOptions o = options(100);
  o.max_src_len = 5;
  FilterStats st;
  const auto batches = qkv::data::fixed_batches(src, tgt, o, &st);
  EXPECT_EQ(st.summary(), "kept 2 of 4 pairs; dropped 2: 1 empty source, 1 source longer than 5");
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].indices, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(qkv::data::fixed_batches({}, {}, o).empty());
}

}  // namespace
