// Dropout's keep draws eight at a time (AVX2, or AVX-512DQ where the CPU has it: dropout_isa.h), the
// same draws as kernels::dropout_keep.
//
// dropout_keep hashes (seed, counter) with SplitMix64's finaliser: five 64-bit products per element,
// scalar. Dropout was 5.8% of a Bible training step (`perf`: forward 2.8%, backward, which draws the
// mask again, 3.0%). AVX2 has no 64-bit product, so each is built from three 32 x 32 -> 64 bit ones;
// the results are the same bits, and so are the masks and every value that depends on them.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// out[j] = keep(seed, counter + j) ? in[j] / (1 - p) : 0 for j < n; out may be in. One thread: for
// callers inside a parallel loop (attention's heads) and for dropout_forward's blocks.
void dropout_row(float* out, const float* in, int64_t n, float p, uint64_t seed, uint64_t counter);

}  // namespace qkv::kernels
