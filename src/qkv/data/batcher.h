// Token-count batching of tokenized parallel text for training (Batcher) and evaluation
// (fixed_batches).
//
// Input pairs are id lines; the target is given WITHOUT BOS/EOS and the batcher makes
// tgt_full = [bos] + tgt + [eos], so teacher forcing (shift_target) sees input [bos] + tgt and
// labels tgt + [eos].
//
// Length filter, per pair (each dropped pair is counted under exactly one reason, in this order):
//   empty source, empty target                       -> always dropped
//   len(src) > max_src_len                           -> dropped, or truncated to max_src_len
//   len(tgt_full) - 1 > max_tgt_len                  -> dropped, or tgt cut so that
//     (max_tgt_len = the model's max_seq_length)        len(tgt_full) - 1 == max_tgt_len, EOS kept last
//   A truncated source that ended with eos_id still ends with it.
//
// Batches: the padded size rows * max(S, T) of a batch (S, T = widths of the src and tgt tensors,
// T including BOS and EOS) is at most max_tokens, as fairseq's --max-tokens; a pair that alone
// exceeds it gets a batch of its own. Pairs of similar length are batched together (bucketing,
// in the LengthOrder of the options), then the order of batches is shuffled. Every epoch's plan is
// a pure function of (data, options, seed, epoch), so a run resumed from state() sees exactly the
// same batches.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/data/id_lines.h"

namespace qkv::data {

enum class LengthPolicy { Drop, Truncate };

enum class Bucketing {
  Global,   // shuffle, then stable-sort all pairs by length (LengthOrder): least padding; with
            // Global the batch contents only vary between epochs among pairs of equal lengths
  Chunked,  // shuffle, cut into chunks of chunk_pairs, sort within each chunk: more variety
  None,     // shuffle only (random batching); for comparison and debugging
};

// The length the bucketing sorts pairs by. max_tokens bounds rows * max(S, T), so pairs sorted by
// their longer side fill it with the fewest padding cells: on the Bible corpus (translate_bible.sh,
// 6000 tokens) source-first sorting left 15% of the target cells padding in 198 batches an epoch,
// longer-side sorting 3% of the target and 6.5% of the source cells in 174.
enum class LengthOrder {
  LongerSide,        // by max(len(src), len(tgt) + 2), then len(src), then len(tgt)
  SourceThenTarget,  // by len(src), then len(tgt), as fairseq; runs saved before 2026-11-25 resume with it
};

struct BatcherOptions {
  int32_t pad_id = 0, bos_id = 2, eos_id = 3;
  int64_t max_tokens = 4096;   // rows * max(S, T) per batch
  int64_t max_rows = 0;        // also at most this many pairs per batch; 0 = no limit
  int64_t max_src_len = 100;   // source ids
  int64_t max_tgt_len = 100;   // len(tgt_full) - 1, i.e. the decoder input length
  LengthPolicy too_long = LengthPolicy::Drop;
  Bucketing bucketing = Bucketing::Global;
  LengthOrder length_order = LengthOrder::LongerSide;
  int64_t chunk_pairs = 100000;  // Bucketing::Chunked only
  uint64_t seed = 0;
};

struct FilterStats {
  int64_t input = 0;         // pairs given
  int64_t kept = 0;          // pairs that reach batches
  int64_t empty_src = 0;     // dropped: empty source
  int64_t empty_tgt = 0;     // dropped: empty target (source non-empty)
  int64_t src_too_long = 0;  // dropped (LengthPolicy::Drop): source longer than max_src_len
  int64_t tgt_too_long = 0;  // dropped: target too long (source fits)
  int64_t src_truncated = 0;  // kept after truncation (LengthPolicy::Truncate); a pair may count in both
  int64_t tgt_truncated = 0;
  int64_t max_src_len = 0, max_tgt_len = 0;  // the limits applied, for summary()

  int64_t dropped() const { return empty_src + empty_tgt + src_too_long + tgt_too_long; }
  // "kept 97 of 100 pairs; dropped 3: 1 empty source, 2 targets longer than 100"
  // (+ "; truncated 4 sources to 100, 1 target to 100" under LengthPolicy::Truncate)
  std::string summary() const;
};

struct Batch {
  Tensor src;  // (B, S) i32, padded with pad_id at the end
  Tensor tgt;  // (B, T) i32, [bos] tgt [eos] padded with pad_id; encoder-only objectives: the input ids
  // What an encoder-only objective predicts (train/objective.h); undefined for teacher forcing, whose
  // labels are tgt shifted. Masked LM: (B, T) i32, the original id at chosen positions and -1
  // elsewhere; classification: (B) i32 label indices.
  Tensor labels;
  std::vector<int64_t> indices;  // row r is pair indices[r] of the input vectors
  int64_t epoch = 0;
  int64_t index = 0;       // position of the batch within its epoch
  int64_t src_tokens = 0;  // non-pad source ids
  int64_t tgt_tokens = 0;  // non-pad labels: sum(len(tgt_full) - 1) = non-pad tgt ids - B

  int64_t rows() const { return static_cast<int64_t>(indices.size()); }
};

// Enough to continue exactly where a run stopped: the next batch is batch `index` of `epoch`, in
// plans sorted by `length_order`.
struct BatcherState {
  int64_t epoch = 0;
  int64_t index = 0;
  uint64_t seed = 0;
  LengthOrder length_order = LengthOrder::LongerSide;
};

// Non-pad ids and tensor cells of an epoch's batches, per side (tgt counts BOS and EOS as tokens).
struct EpochPadding {
  int64_t src_tokens = 0, src_cells = 0, tgt_tokens = 0, tgt_cells = 0;
  double src_fraction() const { return src_cells ? 1.0 - static_cast<double>(src_tokens) / src_cells : 0.0; }
  double tgt_fraction() const { return tgt_cells ? 1.0 - static_cast<double>(tgt_tokens) / tgt_cells : 0.0; }
};

const char* length_order_name(LengthOrder order);            // "longer_side", "source_then_target"
LengthOrder parse_length_order(const std::string& name);     // throws Error naming the value

class Batcher {
 public:
  // Throws if the vectors differ in size, an option is out of range, or no pair survives the filter.
  Batcher(std::vector<IdLine> src, std::vector<IdLine> tgt, BatcherOptions options);

  // The next batch; after the last batch of an epoch the next epoch's plan is made at once,
  // so epoch() and state() always describe the batch that next() returns.
  Batch next();

  int64_t epoch() const { return epoch_; }
  BatcherState state() const { return {epoch_, index_, seed_, options_.length_order}; }
  // Continue from a saved state (its seed and length order replace the options'). Throws if index
  // is out of range for that epoch's plan, which means the data or options differ from the saved run.
  void restore(const BatcherState& state);

  const FilterStats& stats() const { return stats_; }
  const BatcherOptions& options() const { return options_; }
  // Batches in the current epoch. Constant across epochs with Bucketing::Global (the sorted length
  // sequence is the same every epoch); with Chunked or None the grouping changes, so the count can
  // differ slightly from epoch to epoch.
  int64_t batches_per_epoch() const { return static_cast<int64_t>(batch_begin_.size()) - 1; }
  int64_t pairs() const { return static_cast<int64_t>(src_.size()); }  // kept pairs
  EpochPadding padding() const;  // of the current epoch's plan

 private:
  BatcherOptions options_;
  FilterStats stats_;
  std::vector<IdLine> src_, tgt_;  // kept pairs after truncation (tgt without BOS/EOS)
  std::vector<int64_t> original_;  // input index of each kept pair
  uint64_t seed_ = 0;
  int64_t epoch_ = 0, index_ = 0;
  // The current epoch's plan: batch b holds kept pairs order_[batch_begin_[b] .. batch_begin_[b+1]).
  std::vector<int64_t> order_, batch_begin_;

  void plan_epoch();
};

// Every pair once, in a fixed order for evaluation: sorted by options.length_order, then index, so
// rows of similar length share a batch; Batch::indices maps rows back to the input order. The same filter
// and max_tokens / max_rows limits as Batcher apply (use LengthPolicy::Truncate to keep every
// non-empty pair); dropped pairs appear in no batch. `stats`, if given, receives the filter counts.
std::vector<Batch> fixed_batches(const std::vector<IdLine>& src, const std::vector<IdLine>& tgt,
                                 const BatcherOptions& options, FilterStats* stats = nullptr);

}  // namespace qkv::data
