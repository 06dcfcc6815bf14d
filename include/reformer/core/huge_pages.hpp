// Transparent huge pages for large host allocations.
//
// LSH attention gathers rows from random positions of L x d tensors; with 4 KiB
// pages every gather at 64K positions misses the TLB. Where the kernel leaves
// huge pages to the program (/sys/kernel/mm/transparent_hugepage/enabled is
// "madvise"), this asks for them on every host allocation of 2 MiB or more,
// through the same Kokkos Tools allocation hook as the memory tracker (which
// chains to it). No effect on GPU memory or on systems without THP.
#pragma once

namespace reformer {

// Registers the hook (idempotent); call after Kokkos is initialised and before
// MemoryTracker::install().
void advise_huge_pages_for_host_allocations();

}  // namespace reformer
