// Synthetic id data for training without a corpus.
//   random: seed 000's example — src, tgt = randint(1, V, (B, L)), one fixed batch trained on repeatedly.
//   copy:   a new batch each step; tgt = [BOS] src [EOS], sources of random length in [L/2, L]
//           padded with 0, ids in [4, V) (0-3 are pad, unk, BOS, EOS). A model that learns
//           attention copies it; its loss falls near 0 and greedy decoding reproduces the source.
#pragma once
#include <cstdint>
#include <string>

#include "qkv/core/tensor.h"

namespace qkv::data {

struct SyntheticBatch {
  Tensor src;  // (B, L) i32
  Tensor tgt;  // (B, L) or, for copy, (B, L + 2) i32
};

// Deterministic in (task, seed, step): a resumed run sees the same batches.
SyntheticBatch synthetic_batch(const std::string& task, int64_t batch, int64_t length, int64_t vocab, uint64_t seed,
                               int64_t step);

// Ids of the copy task: BOS and EOS as in TransformerConfig's defaults, content from kCopyFirstId.
constexpr int32_t kCopyBos = 2, kCopyEos = 3, kCopyFirstId = 4;

}  // namespace qkv::data
