#include "reformer/core/huge_pages.hpp"

#include "reformer/core/kokkos_compat.hpp"

#include <cstdint>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

namespace reformer {
namespace {

constexpr std::uint64_t kHugePage = 2u << 20;
bool registered = false;

void advise(Kokkos::Profiling::SpaceHandle handle, const char*, const void* ptr,
            std::uint64_t bytes) {
  if (bytes < kHugePage || std::strcmp(handle.name, "Host") != 0) return;
#ifdef MADV_HUGEPAGE
  // The whole 2 MiB pages inside [ptr, ptr + bytes).
  const auto begin = (reinterpret_cast<std::uintptr_t>(ptr) + kHugePage - 1) & ~(kHugePage - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(ptr) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

}  // namespace

void advise_huge_pages_for_host_allocations() {
  if (registered) return;
  Kokkos::Tools::Experimental::set_allocate_data_callback(&advise);
  registered = true;
}

}  // namespace reformer
