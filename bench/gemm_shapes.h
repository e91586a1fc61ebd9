// The GEMM shapes of qkv's training steps and MiniLM embedding batches, shared by blas_shapes.cpp
// (one BLAS per build, compare_blas.py) and bench_gemm.cpp (qkv's gemm_blocked against OpenBLAS).
// Row-major C = op(A) op(B), the three products of a linear layer: forward X W^T, the input's
// gradient dY W, the weight's gradient dY^T X.
#pragma once

struct Shape {
  const char* name;
  int M, N, K;
  bool ta, tb;
};

// Seed 000's model trained in micro-batches of 32 x 100 rows (d_model 512, d_ff 2048, vocabulary
// 5000), and the Bible model's batches of ~6000 target tokens (d_model 256, d_ff 1024, vocabulary 8000).
const Shape kShapes[] = {
    {"seed fwd  X W^T   3200 x 2048 x 512 ", 3200, 2048, 512, false, true},
    {"seed fwd  X W^T   3200 x 512 x 2048 ", 3200, 512, 2048, false, true},
    {"seed fwd  X W^T   3200 x 512 x 512  ", 3200, 512, 512, false, true},
    {"seed out  X E^T   3200 x 5000 x 512 ", 3200, 5000, 512, false, true},
    {"seed bwd  dY W    3200 x 512 x 2048 ", 3200, 512, 2048, false, false},
    {"seed bwd  dY^T X  2048 x 512 x 3200 ", 2048, 512, 3200, true, false},
    {"seed bwd  dY^T X  512 x 512 x 3200  ", 512, 512, 3200, true, false},
    {"bible fwd X W^T   6000 x 1024 x 256 ", 6000, 1024, 256, false, true},
    {"bible out X E^T   6000 x 8000 x 256 ", 6000, 8000, 256, false, true},
    {"bible bwd dY W    6000 x 256 x 1024 ", 6000, 256, 1024, false, false},
    {"bible bwd dY E    6000 x 256 x 8000 ", 6000, 256, 8000, false, false},
    {"bible bwd dY^T X  1024 x 256 x 6000 ", 1024, 256, 6000, true, false},
    {"bible bwd dY^T X  256 x 256 x 6000  ", 256, 256, 6000, true, false},
    {"bible out dY^T X  8000 x 256 x 6000 ", 8000, 256, 6000, true, false},
    // bench_lm_train's GPT (23M parameters): batches of 8 x 256 tokens, d_model 512, d_ff 2048,
    // vocabulary 8000 (tied output)
    {"gpt fwd   X W^T   2048 x 512 x 512  ", 2048, 512, 512, false, true},
    {"gpt fwd   X W^T   2048 x 2048 x 512 ", 2048, 2048, 512, false, true},
    {"gpt fwd   X W^T   2048 x 512 x 2048 ", 2048, 512, 2048, false, true},
    {"gpt out   X E^T   2048 x 8000 x 512 ", 2048, 8000, 512, false, true},
    {"gpt bwd   dY W    2048 x 512 x 512  ", 2048, 512, 512, false, false},
    {"gpt bwd   dY W    2048 x 512 x 2048 ", 2048, 512, 2048, false, false},
    {"gpt bwd   dY E    2048 x 512 x 8000 ", 2048, 512, 8000, false, false},
    {"gpt bwd   dY^T X  512 x 512 x 2048  ", 512, 512, 2048, true, false},
    {"gpt bwd   dY^T X  2048 x 512 x 2048 ", 2048, 512, 2048, true, false},
    {"gpt bwd   dY^T X  512 x 2048 x 2048 ", 512, 2048, 2048, true, false},
    {"gpt out   dY^T X  8000 x 512 x 2048 ", 8000, 512, 2048, true, false},
    // all-MiniLM-L6-v2 embedding batches of 32 sentences of ~30 pieces (d_model 384, d_ff 1536)
    {"minilm    X W^T   960 x 384 x 384   ", 960, 384, 384, false, true},
    {"minilm    X W^T   960 x 1536 x 384  ", 960, 1536, 384, false, true},
    {"minilm    X W^T   960 x 384 x 1536  ", 960, 384, 1536, false, true},
};

// The per-head products of attention in training (kernels/attention.cpp's head_gemm), for heads
// shorter than the causal blocks' minimum (96 positions), which kernels::sgemm sends to OpenBLAS's
// small-matrix kernels: T positions, dk dimensions a head, rows `stride` floats apart (the heads of
// a batch row interleaved, as the projections leave them). Timed as they run: a parallel loop over
// many heads, one product a head per thread.
struct HeadShape {
  const char* name;
  int T, dk, stride;
};
const HeadShape kHeadShapes[] = {
    {"bible heads T 24, dk 64", 24, 64, 256},
    {"bible heads T 36, dk 64", 36, 64, 256},
    {"bible heads T 64, dk 64", 64, 64, 256},
    {"seed heads  T 80, dk 64", 80, 64, 512},
    {"minilm heads T 30, dk 32", 30, 32, 384},
    {"t5-small heads T 48, dk 64", 48, 64, 512},
};

// The six products of a head (forward S = Q K^T and O = P V; backward dV = P^T dO, dP = dO V^T,
// dQ = dS K, dK = dS^T Q); three distinct forms, each timed.
struct HeadForm {
  const char* name;
  bool ta, tb;
  bool strided_b;  // B is a head's rows (K, V, dO or Q): ld `stride`; else (and always A for P) T-wide
};
const HeadForm kHeadForms[] = {
    {"Q K^T  (T x T x dk)", false, true, true},
    {"P V    (T x dk x T)", false, false, true},
    {"P^T dO (T x dk x T)", true, false, true},
};
