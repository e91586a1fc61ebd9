// How long an idle OpenMP thread spins before it sleeps, chosen for shared machines.
#pragma once

namespace qkv::cli {

// libgomp's default has a thread that waits at a barrier spin 300000 times before it sleeps. When
// another process holds one of the cores, the partner thread is off the CPU for whole time slices
// and the spinning one burns its own: measured on the 2-core machine with two compilers running,
// `qkv translate --threads 2` of 8 sentences took 20.9 s against 0.77 s with one thread. A spin of
// 10000 costs nothing measurable on a quiet machine (training step, translation) and brings the
// loaded case to 2.4 s; OMP_WAIT_POLICY=passive to 0.94 s, but it is 10% slower when quiet.
// libgomp reads its environment before main, so the only way to change the spin is to run the
// program again with GOMP_SPINCOUNT set: this does that once, unless the user has set
// OMP_WAIT_POLICY or GOMP_SPINCOUNT. It returns only if the re-run could not start (the default
// spin then stays).
void relaunch_with_short_omp_spin(char** argv);

}  // namespace qkv::cli
