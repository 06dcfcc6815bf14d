#include "reformer/core/distributed.hpp"

#include "core/device.hpp"
#include "reformer/core/error.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <thread>

#if defined(REFORMER_HAVE_MPI)
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // MPIX_Query_cuda_support, MPIX_Query_rocm_support (Open MPI)
#endif
#endif

namespace reformer {

struct Communicator::Impl {
#if defined(REFORMER_HAVE_MPI)
  MPI_Comm comm = MPI_COMM_NULL;
#endif
};

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

#if defined(REFORMER_HAVE_MPI)
bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// Started by mpirun / mpiexec / srun (Open MPI, MPICH, PMIx, Slurm).
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name)) return true;
  return false;
}

template <class T>
MPI_Datatype mpi_type() {
  return sizeof(T) == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT;
}

// Tests `requests` until all are done, sleeping briefly between tests after
// the first millisecond; past `timeout_seconds` (> 0) the whole run stops
// with a message naming `what`.
void wait_all(std::vector<MPI_Request>& requests, const Communicator& comm, const char* what,
              double timeout_seconds) {
  const auto start = Clock::now();
  for (;;) {
    int done = 0;
    MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    const double waited = seconds_since(start);
    if (timeout_seconds > 0 && waited > timeout_seconds) {
      std::fprintf(stderr,
                   "reformer: error: rank %d of %d: %s waited %.0f s for the other processes "
                   "(train.allreduce_timeout = %.0f s); one of them has died or hung. "
                   "Stopping every process; the newest checkpoint is complete, resume from it.\n",
                   comm.rank(), comm.size(), what, waited, timeout_seconds);
      std::fflush(stderr);
      comm.abort(3);
    }
    if (waited > 1e-3) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Whether MPI reads and writes device memory itself (asked at run time).
bool gpu_aware_mpi() {
#if defined(KOKKOS_ENABLE_CUDA) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#elif defined(KOKKOS_ENABLE_HIP) && defined(MPIX_ROCM_AWARE_SUPPORT) && MPIX_ROCM_AWARE_SUPPORT
  return MPIX_Query_rocm_support() == 1;
#else
  return false;
#endif
}
#endif

}  // namespace

DistributedRuntime::DistributedRuntime(int& argc, char**& argv) {
#if defined(REFORMER_HAVE_MPI)
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized && launched_by_mpi()) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    owns_ = true;
  }
#else
  (void)argc;
  (void)argv;
#endif
}

DistributedRuntime::~DistributedRuntime() {
#if defined(REFORMER_HAVE_MPI)
  if (owns_ && mpi_running()) MPI_Finalize();
#endif
}

bool mpi_built() {
#if defined(REFORMER_HAVE_MPI)
  return true;
#else
  return false;
#endif
}

std::string mpi_description() {
#if defined(REFORMER_HAVE_MPI)
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string text(version, std::size_t(length));
  const auto end = text.find_first_of(",\n");
  if (end != std::string::npos) text = text.substr(0, end);
  const bool running = mpi_running();
  return text + " (GPU-aware: " + (running ? (gpu_aware_mpi() ? "yes" : "no") : "unknown") +
         (running ? ", " + std::to_string(Communicator::world().size()) + " processes)"
                  : ", not started by an MPI launcher)");
#else
  return "none (built without MPI)";
#endif
}

const Communicator& Communicator::self() {
  static const Communicator single = [] {
    Communicator c;
#if defined(REFORMER_HAVE_MPI)
    c.impl_ = std::make_shared<Impl>();
    c.impl_->comm = MPI_COMM_SELF;
#endif
    return c;
  }();
  return single;
}

const Communicator& Communicator::world() {
#if defined(REFORMER_HAVE_MPI)
  if (mpi_running()) {
    static const Communicator all = [] {
      Communicator c;
      c.impl_ = std::make_shared<Impl>();
      c.impl_->comm = MPI_COMM_WORLD;
      MPI_Comm_rank(MPI_COMM_WORLD, &c.rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &c.size_);
      MPI_Comm node = MPI_COMM_NULL;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank_, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &c.local_rank_);
      MPI_Comm_free(&node);
      return c;
    }();
    return all;
  }
#endif
  return self();
}

void Communicator::sum(std::vector<double>& values, const char* what,
                       double timeout_seconds) const {
  if (size_ == 1 || values.empty()) return;
#if defined(REFORMER_HAVE_MPI)
  std::vector<MPI_Request> request(1);
  MPI_Iallreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE, MPI_SUM, impl_->comm,
                 request.data());
  wait_all(request, *this, what, timeout_seconds);
#else
  (void)what;
  (void)timeout_seconds;
#endif
}

std::string Communicator::broadcast(const std::string& text, int root) const {
  if (size_ == 1) return text;
#if defined(REFORMER_HAVE_MPI)
  unsigned long long length = text.size();
  MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, impl_->comm);
  std::string out = rank_ == root ? text : std::string(std::size_t(length), '\0');
  MPI_Bcast(out.data(), int(length), MPI_CHAR, root, impl_->comm);
  return out;
#else
  return text;
#endif
}

template <class T>
std::vector<T> Communicator::gather(const std::vector<T>& mine, const char* what,
                                    double timeout_seconds, int root) const {
  if (size_ == 1) return mine;
  // The counts first: every process learns whether they agree.
  std::vector<double> counts(std::size_t(size_), 0.0);
  counts[std::size_t(rank_)] = double(mine.size());
  sum(counts, what, timeout_seconds);
  for (int r = 1; r < size_; ++r)
    require<ShapeError>(counts[std::size_t(r)] == counts[0], what, ": process ", r, " holds ",
                        counts[std::size_t(r)], " values but process 0 holds ", counts[0],
                        "; every process must give as many");
  require<ShapeError>(mine.size() <= std::size_t(std::numeric_limits<int>::max()), what, ": ",
                      mine.size(), " values per process, more than one MPI call passes (",
                      std::numeric_limits<int>::max(), ")");
  std::vector<T> all(rank_ == root ? mine.size() * std::size_t(size_) : 0);
#if defined(REFORMER_HAVE_MPI)
  std::vector<MPI_Request> request(1);
  MPI_Igather(mine.data(), int(mine.size()), mpi_type<T>(), all.data(), int(mine.size()),
              mpi_type<T>(), root, impl_->comm, request.data());
  wait_all(request, *this, what, timeout_seconds);
#endif
  return all;
}

template std::vector<float> Communicator::gather(const std::vector<float>&, const char*, double,
                                                 int) const;
template std::vector<double> Communicator::gather(const std::vector<double>&, const char*, double,
                                                  int) const;

void Communicator::abort(int code) const {
#if defined(REFORMER_HAVE_MPI)
  if (mpi_running()) MPI_Abort(impl_ ? impl_->comm : MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

template <class T>
struct GradientAllreduce<T>::Requests {
#if defined(REFORMER_HAVE_MPI)
  std::vector<MPI_Request> requests;
#endif
  Kokkos::View<T*, device::PinnedHostSpace> staging;
};

template <class T>
GradientAllreduce<T>::GradientAllreduce(const Communicator& comm, View1<T> buffer,
                                        std::vector<std::pair<Index, Index>> buckets, bool stage)
    : comm_(comm), buffer_(buffer), requests_(std::make_unique<Requests>()) {
  // MPI counts are ints: long buckets go in pieces.
  constexpr Index kPiece = Index(1) << 28;
  for (const auto& [begin, end] : buckets) {
    require<ShapeError>(begin >= 0 && begin <= end && end <= Index(buffer.extent(0)),
                        "GradientAllreduce: bucket [", begin, ", ", end,
                        ") does not lie in the buffer of ", buffer.extent(0), " values");
    for (Index b = begin; b < end; b += kPiece) buckets_.push_back({b, std::min(end, b + kPiece)});
  }
  started_.assign(buckets_.size(), 0);
#if defined(REFORMER_HAVE_MPI)
  requests_->requests.assign(buckets_.size(), MPI_REQUEST_NULL);
  direct_ = !stage && (kHostMemory || (comm.size() > 1 && gpu_aware_mpi()));
#else
  direct_ = !stage && kHostMemory;
#endif
  if (!direct_ && comm.size() > 1)
    requests_->staging =
        Kokkos::View<T*, device::PinnedHostSpace>("allreduce_staging", buffer.extent(0));
}

template <class T>
GradientAllreduce<T>::~GradientAllreduce() = default;

template <class T>
void GradientAllreduce<T>::start(std::size_t bucket) {
  if (comm_.size() == 1 || started_.at(bucket)) return;
  started_[bucket] = 1;
#if defined(REFORMER_HAVE_MPI)
  const auto [begin, end] = buckets_[bucket];
  const auto range = std::make_pair(begin, end);
  T* data = nullptr;
  if (direct_) {
    Kokkos::fence();  // the backward's kernels have written the bucket
    data = buffer_.data() + begin;
  } else {
    Kokkos::deep_copy(Kokkos::subview(requests_->staging, range), Kokkos::subview(buffer_, range));
    data = requests_->staging.data() + begin;
  }
  MPI_Iallreduce(MPI_IN_PLACE, data, int(end - begin), mpi_type<T>(), MPI_SUM, comm_.impl_->comm,
                 &requests_->requests[bucket]);
#endif
}

template <class T>
void GradientAllreduce<T>::progress() {
#if defined(REFORMER_HAVE_MPI)
  if (comm_.size() == 1) return;
  int done = 0;
  MPI_Testall(int(requests_->requests.size()), requests_->requests.data(), &done,
              MPI_STATUSES_IGNORE);
#endif
}

template <class T>
double GradientAllreduce<T>::finish(double timeout_seconds) {
  if (comm_.size() == 1) return 0.0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) start(b);
  const auto start_wait = Clock::now();
#if defined(REFORMER_HAVE_MPI)
  wait_all(requests_->requests, comm_, "the gradient allreduce", timeout_seconds);
#else
  (void)timeout_seconds;
#endif
  const double waited = seconds_since(start_wait);
  if (!direct_)
    for (const auto& [begin, end] : buckets_) {
      const auto range = std::make_pair(begin, end);
      Kokkos::deep_copy(Kokkos::subview(buffer_, range),
                        Kokkos::subview(requests_->staging, range));
    }
  started_.assign(buckets_.size(), 0);
  return waited;
}

template class GradientAllreduce<float>;
template class GradientAllreduce<double>;

}  // namespace reformer
