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
// fairseq's table as Hugging Face's M2M100 (and NLLB) computes it (M2M100SinusoidalPositionalEmbedding,
// tensor2tensor's frequencies): with H = D / 2, freq[i] = exp(i * -(ln(10000) / (H - 1))), columns
// [0, H) hold sin(p * freq[i]), [H, 2H) cos(p * freq[i]), an odd D's last column 0. Row `pos` of pe
// is fairseq's position p = pos + first_position (fairseq counts from padding_idx + 1). Computed in
// float32 as torch does. D >= 4 (H - 1 divides).
void sinusoidal_table_fairseq(float* pe, int64_t max_len, int64_t D, int64_t first_position);

}  // namespace qkv::kernels
