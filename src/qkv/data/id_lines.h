// Token-id text files: one sentence a line, space-separated non-negative integer ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::data {

using IdLine = std::vector<int32_t>;

// Reads every line; a token that is not an id in [0, vocab_size) is an error naming file:line.
// A missing file or a directory is an error naming the path.
std::vector<IdLine> read_id_lines(const std::string& path, int64_t vocab_size);

// Rows padded with pad_id at the end to the longest row: i32 (rows, max_len).
Tensor pad_batch(const std::vector<IdLine>& rows, int32_t pad_id);

// Seed 000's teacher forcing: input = tgt[:, :-1] (B, T-1), labels = tgt[:, 1:] flattened (B*(T-1)).
struct TeacherForcing {
  Tensor input;
  Tensor labels;
};
TeacherForcing shift_target(const Tensor& tgt);

}  // namespace qkv::data
