// blocking::walk_shared_b_blocks (gemm_blocking.h), the walk by which gemm_bf16's row split packs each
// B block once for all its threads: every K block of every panel block is packed exactly once, into a
// slot of the shared buffer (shared_b_panels) that no other block of its phase uses, before it is
// multiplied, and multiplied before its slot is packed anew. Checked on one thread (no region), from
// the calls the walk makes, for op(B) narrower than the buffer (K blocks sharing a phase), as wide as
// it, and wider (a narrow last panel block whose K blocks take several phases).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "qkv/kernels/gemm_blocking.h"

namespace qkv::kernels {
namespace {

struct Walked {
  int64_t barriers_between = 0;  // phases: a pack after a multiply
  std::vector<std::string> errors;
};

// Walks panels x K in K blocks of kc with room for panels_per_block panels of a K block a slot, and
// checks the calls as they come.
Walked walk(int64_t panels, int64_t panels_per_block, int64_t K, int64_t kc) {
  const int64_t buffer_panels = blocking::shared_b_panels(panels, panels_per_block, K, kc);
  // What each buffer panel (a kc-long panel of words) holds now: (panel, k0), or (-1, -1).
  std::vector<std::pair<int64_t, int64_t>> buffer(static_cast<size_t>(buffer_panels), {-1, -1});
  std::set<std::pair<int64_t, int64_t>> packed, multiplied;
  std::map<std::pair<int64_t, int64_t>, int64_t> block_slot;  // (pb, k0) -> slot
  Walked w;
  bool last_was_multiply = false;
  const auto where = [&](int64_t np, int64_t slot, int64_t q) { return slot * np + q; };
  const auto pack = [&](int64_t pb, int64_t q0, int64_t q1, int64_t k0, int64_t kcur, int64_t slot) {
    if (last_was_multiply) ++w.barriers_between;
    last_was_multiply = false;
    const int64_t np = std::min(panels_per_block, panels - pb);
    if (kcur != std::min(kc, K - k0)) w.errors.push_back("wrong K block length at k0 " + std::to_string(k0));
    block_slot[{pb, k0}] = slot;
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t at = where(np, slot, q);
      if (at < 0 || at >= buffer_panels) {
        w.errors.push_back("pack past the buffer: panel " + std::to_string(pb + q) + " k0 " + std::to_string(k0));
        continue;
      }
      const auto held = buffer[static_cast<size_t>(at)];
      if (held.first >= 0 && !multiplied.count(held))
        w.errors.push_back("overwrote panel " + std::to_string(held.first) + " k0 " + std::to_string(held.second) +
                           " before its product");
      buffer[static_cast<size_t>(at)] = {pb + q, k0};
      if (!packed.insert({pb + q, k0}).second) w.errors.push_back("packed twice: panel " + std::to_string(pb + q));
    }
  };
  const auto multiply = [&](int64_t pb, int64_t np, int64_t k0, int64_t, int64_t slot) {
    last_was_multiply = true;
    if (block_slot.count({pb, k0}) == 0 || block_slot[{pb, k0}] != slot)
      w.errors.push_back("multiplied from another slot at k0 " + std::to_string(k0));
    for (int64_t q = 0; q < np; ++q) {
      const int64_t at = where(np, slot, q);
      if (at >= buffer_panels || buffer[static_cast<size_t>(at)] != std::make_pair(pb + q, k0))
        w.errors.push_back("panel " + std::to_string(pb + q) + " k0 " + std::to_string(k0) + " not in its slot");
      multiplied.insert({pb + q, k0});
    }
  };
  blocking::walk_shared_b_blocks(panels, panels_per_block, K, kc, /*even_k=*/false, 0, 1, /*in_region=*/false, pack,
                                 multiply);
  for (int64_t q = 0; q < panels; ++q)
    for (int64_t k0 = 0; k0 < K; k0 += kc)
      if (!multiplied.count({q, k0}))
        w.errors.push_back("panel " + std::to_string(q) + " k0 " + std::to_string(k0) + " never multiplied");
  return w;
}

TEST(WalkSharedBBlocks, EveryBlockIsPackedOnceIntoItsOwnSlotAndMultipliedBeforeReuse) {
  for (const auto& [panels, per_block, K, kc] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {8, 136, 6000, 500},   // a 256-wide weight gradient: twelve K blocks, one phase
           {2, 100, 2600, 512},   // narrower than any K block's share
           {64, 64, 3200, 458},   // as wide as the buffer: a phase a K block
           {114, 84, 3100, 776},  // a full panel block, then 30 panels: two K blocks a phase
           {5, 2, 1000, 100},     // blocks of 2, 2, 1 panels: slots 1, 1, 2
           {3, 3, 7, 10}}) {      // one short K block
    const Walked w = walk(panels, per_block, K, kc);
    for (const std::string& e : w.errors)
      ADD_FAILURE() << e << " (panels " << panels << ", " << per_block << " a block, K " << K << ", kc " << kc << ")";
  }
}

TEST(WalkSharedBBlocks, BlocksThatFitTogetherShareOnePhase) {
  EXPECT_EQ(walk(8, 136, 6000, 500).barriers_between, 0);   // 12 K blocks, 8 panels: one phase
  EXPECT_EQ(walk(64, 64, 3200, 458).barriers_between, 6);   // 7 K blocks, a phase each
  EXPECT_EQ(walk(114, 84, 3100, 776).barriers_between, 5);  // 4 phases of 84, then 2 of 30 x 2 blocks
  EXPECT_EQ(blocking::shared_b_panels(8, 136, 6000, 500), 96);
  EXPECT_EQ(blocking::shared_b_panels(64, 64, 3200, 458), 64);
  EXPECT_EQ(blocking::shared_b_panels(2, 100, 600, 512), 4);
}

}  // namespace
}  // namespace qkv::kernels
