#include "qkv/kernels/weight_alloc.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>

namespace qkv::kernels {

void* allocate_weights(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  bytes = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;  // aligned_alloc's rule
  void* p = std::aligned_alloc(alignment, bytes);
  if (!p) throw std::bad_alloc();
  if (alignment == kHugePage) ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure changes nothing
  return p;
}

}  // namespace qkv::kernels
