// Sinusoidal positional encoding table, computed in float32 exactly as seed 000's PyTorch code:
//   div_term[i] = exp((2i) * -(ln(10000) / D))
//   pe[pos, 2i] = sin(pos * div_term[i]),  pe[pos, 2i+1] = cos(pos * div_term[i])
#pragma once
#include <cstdint>

namespace qkv::kernels {

void sinusoidal_table(float* pe, int64_t max_len, int64_t D);  // pe: (max_len, D)

}  // namespace qkv::kernels
