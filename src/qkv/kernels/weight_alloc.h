// Memory for packed weights, which decoding streams through once per step: 64-byte aligned, and
// from 2 MiB up aligned to 2 MiB and advised as transparent huge pages (Linux's default THP
// mode, "madvise", gives huge pages only where asked), so the stream costs one TLB entry per
// 2 MiB instead of one per 4 KiB. Free with std::free.
#pragma once
#include <cstddef>

namespace qkv::kernels {

void* allocate_weights(size_t bytes);  // throws std::bad_alloc; `bytes` 0 gives a valid block

}  // namespace qkv::kernels
