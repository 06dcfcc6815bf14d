#include "ops/tpls/host_blas.hpp"

#include "reformer/core/team_scratch.hpp"

#include <KokkosKernels_config.h>

#include <algorithm>
#include <mutex>

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
#include <KokkosBlas_Host_tpl.hpp>

#include <dlfcn.h>
#endif

namespace reformer::ops::tpls {

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
namespace {

// Products with fewer multiply-adds stay in one BLAS call.
constexpr double kMinSplitWork = 1 << 20;
// Blocks of C are at least this many rows (or columns) wide.
constexpr Index kMinBlock = 32;

}  // namespace

template <class T>
bool host_blas_matmul(In2<T> a, Trans trans_a, In2<T> b, Trans trans_b, View2<T> c, T alpha,
                      T beta) {
  if constexpr (!kHostMemory) {
    return false;
  } else {
    using Host = Kokkos::DefaultHostExecutionSpace;
    const Index threads = Host().concurrency();
    const Index m = c.extent(0), n = c.extent(1);
    const Index k = trans_a == Trans::No ? a.extent(1) : a.extent(0);
    if (threads < 2 || double(m) * n * k < kMinSplitWork) return false;
    // Split the longer side of C if it gives every thread a block.
    const bool by_rows = m >= n ? m >= threads * kMinBlock : n < threads * kMinBlock;
    const Index side = by_rows ? m : n;
    if (side < threads * kMinBlock) return false;
    prepare_host_blas();
    const Index block = (side + threads - 1) / threads;
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: BLAS gets
    // B first, and the leading dimensions are the row strides.
    const char tb = trans_b == Trans::No ? 'N' : 'T', ta = trans_a == Trans::No ? 'N' : 'T';
    const int lda = a.stride(0), ldb = b.stride(0), ldc = c.stride(0);
    const T* pa = a.data();
    const T* pb = b.data();
    T* pc = c.data();
    Kokkos::parallel_for("host_blas_matmul", Kokkos::RangePolicy<Host>(0, threads), [=](Index t) {
      const Index begin = std::min(side, t * block), end = std::min(side, begin + block);
      if (begin == end) return;
      if (by_rows) {  // rows [begin, end) of C and of op(A)
        const T* a_rows = trans_a == Trans::No ? pa + begin * lda : pa + begin;
        KokkosBlas::Impl::HostBlas<T>::gemm(tb, ta, int(n), int(end - begin), int(k), alpha, pb,
                                            ldb, a_rows, lda, beta, pc + begin * ldc, ldc);
      } else {  // columns [begin, end) of C and of op(B)
        const T* b_cols = trans_b == Trans::No ? pb + begin : pb + begin * ldb;
        KokkosBlas::Impl::HostBlas<T>::gemm(tb, ta, int(end - begin), int(m), int(k), alpha, b_cols,
                                            ldb, pa, lda, beta, pc + begin, ldc);
      }
    });
    Host().fence();
    return true;
  }
}
#else
template <class T>
bool host_blas_matmul(In2<T>, Trans, In2<T>, Trans, View2<T>, T, T) {
  return false;
}
#endif

template bool host_blas_matmul<float>(In2<float>, Trans, In2<float>, Trans, View2<float>, float,
                                      float);
template bool host_blas_matmul<double>(In2<double>, Trans, In2<double>, Trans, View2<double>,
                                       double, double);

}  // namespace reformer::ops::tpls

namespace reformer::ops {

// A pthreads OpenBLAS would start its own threads inside each of ours: make it
// sequential once (an OpenMP OpenBLAS, MKL or a reference BLAS runs one thread
// inside a parallel region already).
void prepare_host_blas() {
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  static std::once_flag once;
  std::call_once(once, [] {
    using GetParallel = int (*)();
    using SetThreads = void (*)(int);
    auto get_parallel = reinterpret_cast<GetParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    auto set_threads =
        reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    // openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP.
    if (get_parallel && set_threads && get_parallel() == 1) set_threads(1);
  });
#endif
}

}  // namespace reformer::ops
