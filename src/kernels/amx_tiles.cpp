#include "kernels/amx_tiles.h"

#if defined(__AVX512F__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mt::amx {

bool available() {
#if defined(__AVX512F__)
  static const bool granted = [] {
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
    // Linux hands out the 8 KB tile state only to a process that asks (ARCH_REQ_XCOMP_PERM
    // for XFEATURE_XTILEDATA); without it the first tile instruction faults.
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtileData) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

}  // namespace mt::amx
