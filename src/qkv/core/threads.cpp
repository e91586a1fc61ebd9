#include "qkv/core/threads.h"

#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <string>

#include "qkv/core/error.h"

namespace qkv {

void set_num_threads(int n) {
  if (n <= 0) {
    const char* env = std::getenv("QKV_THREADS");
    if (env && *env) {
      try {
        n = std::stoi(env);
      } catch (const std::exception&) {
        throw Error(std::string("QKV_THREADS='") + env + "' is not a number");
      }
      QKV_CHECK(n > 0, "QKV_THREADS must be positive, got " << env);
    } else {
      n = omp_get_num_procs();
    }
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace qkv
