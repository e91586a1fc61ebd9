// Embedding lookup and its scatter-add backward. Ids are checked by the op layer.
#pragma once
#include <cstdint>

#include "qkv/core/dtype.h"

namespace qkv::kernels {

// out[n, :] = table[ids[n], :]   out (N, D), table (V, D)
void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t N, int64_t D);
// The same from a bfloat16 table, each value widened exactly to float.
void embedding_forward_bf16(float* out, const bfloat16* table, const int32_t* ids, int64_t N, int64_t D);
// dtable[ids[n], :] += dout[n, :]; threads split the D columns so repeated ids never race.
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t D);

}  // namespace qkv::kernels
