#include "qkv/kernels/isa.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "qkv/core/cpu_baseline.h"
#include "qkv/core/cpu_features.h"
#include "qkv/core/error.h"

namespace qkv::kernels {

namespace {

constexpr Isa kLevels[] = {Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Avx512Bf16, Isa::Amx};

// Linux gives a process the AMX tile data state only when asked (arch_prctl ARCH_REQ_XCOMP_PERM,
// kernel 5.16 and later); without it the first tile instruction kills the process.
bool amx_permitted() {
#if defined(__linux__)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

Isa detect_best() {
  const CpuFeatures& f = cpu_features();
  // XCR0: which register states the OS saves on a context switch. AVX-512 needs the opmask and both
  // halves of the zmm registers (bits 5-7), AMX the tile configuration and data (bits 17, 18).
  const uint64_t os = read_cpuid_words().xcr0;
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && (os & 0xe0) == 0xe0;
  if (!avx512) return Isa::Avx2;
  if (!f.avx512_vnni) return Isa::Avx512;
  if (!f.avx512_bf16) return Isa::Avx512Vnni;
  const bool amx = f.amx_tile && f.amx_bf16 && f.amx_int8 && (os & 0x60000) == 0x60000 && amx_permitted();
  return amx ? Isa::Amx : Isa::Avx512Bf16;
}

struct Choice {
  Isa isa;
  std::string description;
};

// "avx2, avx512": the levels this CPU can run, lowest first.
std::string names_up_to(Isa best) {
  std::string names;
  for (const Isa level : kLevels)
    if (level <= best) names += (names.empty() ? "" : ", ") + std::string(isa_name(level));
  return names;
}

Choice choose() {
  const Isa best = best_isa();
  const char* env = std::getenv("QKV_ISA");
  if (!env || !*env)
    return {best, std::string(isa_name(best)) + " (the best this CPU allows)"};
  const std::string_view wanted(env);
  for (const Isa level : kLevels) {
    if (wanted != isa_name(level)) continue;
    QKV_CHECK(level <= best, "QKV_ISA=" << wanted << ": this CPU (" << cpu_features().description() << ") allows at most "
                                        << isa_name(best) << "; unset QKV_ISA or name one of "
                                        << names_up_to(best));
    return {level, std::string(isa_name(level)) + " (QKV_ISA=" + env + "; this CPU allows " + isa_name(best) + ")"};
  }
  QKV_CHECK(false, "QKV_ISA=" << wanted << ": no such instruction set; expected one of " << isa_names());
  return {};
}

const Choice& chosen() {
  static const Choice choice = choose();  // a throw leaves it unset: the next call throws again
  return choice;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512_vnni";
    case Isa::Avx512Bf16: return "avx512_bf16";
    case Isa::Amx: return "amx";
  }
  return "?";
}

const char* isa_names() { return "avx2, avx512, avx512_vnni, avx512_bf16, amx"; }

Isa best_isa() {
  static const Isa best = detect_best();
  return best;
}

Isa active_isa() { return chosen().isa; }

bool isa_enabled(Isa isa) noexcept {
  static const Isa usable = [] {
    try {
      return active_isa();
    } catch (...) {
      return Isa::Avx2;
    }
  }();
  return usable >= isa;
}

std::string isa_description() { return chosen().description; }

}  // namespace qkv::kernels
