// Sinusoidal positional encoding table, computed in float32 exactly as seed 000's PyTorch code:
//   div_term[i] = exp((2i) * -(ln(10000) / D))
//   pe[pos, 2i] = sin(pos * div_term[i]),  pe[pos, 2i+1] = cos(pos * div_term[i])
#pragma once
#include <cstdint>

namespace qkv::kernels {

void sinusoidal_table(float* pe, int64_t max_len, int64_t D);  // pe: (max_len, D)
// Hugging Face Marian's table (MarianSinusoidalPositionalEmbedding): angle(pos, c) = pos / 10000^(2c / D);
// columns [0, ceil(D/2)) hold sin(angle(pos, c)), the rest cos(angle(pos, c - ceil(D/2))). Computed in
// double and rounded once, as its numpy code does.
void sinusoidal_table_halves(float* pe, int64_t max_len, int64_t D);

}  // namespace qkv::kernels
