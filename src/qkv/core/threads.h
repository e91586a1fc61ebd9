// One threading runtime for everything: OpenMP drives our kernels and the OpenMP build of OpenBLAS,
// so GEMM and our loops share one pool of threads and never oversubscribe the cores.
#pragma once

namespace qkv {

// Sets the thread count of our kernels and of BLAS. n <= 0 means: $QKV_THREADS if set, else all cores.
void set_num_threads(int n);
int num_threads();

}  // namespace qkv
