// Training memory under a budget (`qkv train --max-memory`): a deterministic estimate of a training
// step's peak memory, and the micro-batch (rows per chunk, train/step.h) that keeps a batch under it.
//
// The estimate counts what a step holds at its peak, from the model's config and the batch's shape
// alone (never from the memory free at the moment, so that the same flags and data always chunk the
// same way and a resumed run repeats an uninterrupted one bit for bit):
//   state        4 bytes per parameter for each of: the weights, their gradients, Adam's two
//                moments, and (when the batch runs in chunks) the earlier chunks' summed gradients
//                (train/grad_sync.h); so 16 or 20 bytes per parameter.
//   activations  the tensors the forward pass saves for backward, per layer and row (floats):
//                attention: q, k, v and the heads' combined output (4 x len x d_model; cross-
//                attention's k and v are source-long), the probabilities (heads x len x keys);
//                each sub-layer's LayerNorm output (len x d_model); the feed-forward hidden layer
//                (len x d_ff; twice with GELU or FFN dropout, none with --recompute-ffn); the
//                embeddings' output; the logits (outputs x vocabulary; their gradient reuses their
//                buffer); plus one layer's gradients alive at once during backward.
//   overhead     what the process holds besides tensors (code, BLAS buffers, allocator slack): a
//                constant, kProcessOverheadBytes.
// It is meant to be within ~15% of the measured peak RSS (docs/performance.md, "Memory budget", compares it for a few
// shapes); the counts follow the autograd functions of autograd/functions.cpp, which save outputs
// rather than inputs wherever they can (ReLU, LayerNorm), so the estimate must follow them if they change.
//
// Micro-batching sums a batch's gradient in chunks of rows, so the floats are added in another
// order than in one pass: the update differs from the unchunked one in the last bits (the same
// update otherwise). The choice depends only on flags and shapes, so a resumed run chunks every batch
// as the uninterrupted run did.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/models/config.h"

namespace qkv::train {

// --max-memory: 0 is no limit; kAutoMemory (the default) is the model's training state plus
// kAutoActivationBytes of activations, which keeps the seed configuration (64 x 100 tokens) under
// half of PyTorch's peak while leaving chunks large enough for full-speed matrix products.
inline constexpr int64_t kAutoMemory = -1;
inline constexpr int64_t kAutoActivationBytes = int64_t{1536} << 20;  // 1.5 GiB
inline constexpr int64_t kProcessOverheadBytes = int64_t{160} << 20;

// What one training step runs, per batch (Objective::step_shape).
struct StepShape {
  int64_t rows = 0;          // batch rows
  int64_t src_len = 0;       // encoder positions per row of an encoder-decoder model (0: none)
  int64_t len = 0;           // positions per row through the decoder (decoder-only) or the encoder (encoder-only)
  int64_t outputs = 0;       // rows of the output projection in the whole batch (tokens, chosen positions, rows)
  int64_t output_width = 0;  // its width: the vocabulary, or the labels of a classifier
};

struct MemoryEstimate {
  int64_t state_bytes = 0;       // weights, gradients, Adam's moments (+ the accumulated chunks)
  int64_t activation_bytes = 0;  // one chunk's saved activations and its backward's transient gradients
  int64_t total() const { return state_bytes + activation_bytes + kProcessOverheadBytes; }
};

// The estimated peak of a step that runs `rows` rows of `shape` at a time (rows >= shape.rows: the
// whole batch in one pass). Grows with rows below shape.rows; the whole batch needs no accumulation
// buffer, so it may estimate below shape.rows - 1 rows. `parameters`: the model's parameter count.
MemoryEstimate estimate_step_memory(const models::TransformerConfig& config, int64_t parameters, bool recompute_ffn,
                                    const StepShape& shape, int64_t rows);

// The budget --max-memory means in bytes: kAutoMemory resolved for this model, 0 for no limit.
int64_t memory_budget_bytes(int64_t max_memory, int64_t parameters);

// --max-memory auto when training on a GPU: this fraction of the device's memory for the whole step.
// The CPU's auto keeps a host's peak near half of PyTorch's; a GPU's memory is there for the step,
// and a batch that fits unsplit runs its products at full size (the seed's 64 x 100 batch is split
// in two by the CPU's budget). Of the device's total, not of what is free, so that one GPU model
// chunks alike on every run and every resume.
inline constexpr double kGpuAutoFraction = 0.8;
// max_memory unchanged unless it is kAutoMemory on a GPU of `device_total_bytes`, which
// `ranks_on_device` ranks of a data-parallel run share (each gets its part of the fraction).
int64_t max_memory_on_gpu(int64_t max_memory, int64_t device_total_bytes, int ranks_on_device = 1);

// Where a rank trains: its host (any number naming it) and device (-1: the CPU, else a GPU index).
struct RankPlacement {
  double host = 0, device = -1;
};
// The ranks, `rank` included, that train on the GPU `rank` trains on (same host and device); 1 for
// a rank on the CPU.
int ranks_on_same_gpu(const std::vector<RankPlacement>& placements, int rank);
// Before NCCL (--allreduce nccl), which needs a GPU per rank: throws a qkv::Error naming two ranks
// that share a GPU, or a rank on the CPU, and what to use instead.
void check_gpu_per_rank(const std::vector<RankPlacement>& placements);

struct MicroBatchPlan {
  int64_t rows = 0;        // rows per chunk; 0: the whole batch in one pass
  int64_t chunks = 1;
  int64_t largest_fitting = 0;  // the most rows a chunk may have under the budget (0: none fits)
  int64_t budget_bytes = 0;     // 0: no limit
  MemoryEstimate estimate;      // of the plan chosen
  bool fits = true;             // false: even one row exceeds the budget (it runs one row at a time)
};

// The chunking of a batch of `shape` under `max_memory` (--max-memory's value: bytes, 0 or
// kAutoMemory). The whole batch when it fits; else the fewest chunks of at most the largest fitting
// number of rows, made as even as possible (64 rows that fit 31 at a time: 3 chunks of 22, not
// 31 + 31 + 2), which keeps the chunk count and each chunk under the budget.
MicroBatchPlan plan_micro_batches(const models::TransformerConfig& config, int64_t parameters, bool recompute_ffn,
                                  const StepShape& shape, int64_t max_memory);

// "2G", "1500M", "512MiB", "3.5GB", "1073741824" (bytes), "0" (no limit) or "auto": K, M, G and T
// are powers of 1024. Throws qkv::Error naming --max-memory otherwise.
int64_t parse_memory_size(const std::string& text);
// 0 -> "no limit", kAutoMemory -> "auto", else "2.0G" style (powers of 1024).
std::string format_memory_size(int64_t max_memory);
// Bytes as "1.93 GiB".
std::string format_bytes(int64_t bytes);

}  // namespace qkv::train
