// The `reformer` command-line program.
#include "cli/commands.hpp"

#include "reformer/core/distributed.hpp"
#include "reformer/core/error.hpp"
#include "reformer/ops/gemm.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

namespace {

// The program's work; under mpirun a process that fails ends every process
// (the others would wait for it in their next sum).
int run_program(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  // Whole lines as they are printed, also into a pipe or a file, so that an
  // error on stderr comes after the progress lines before it.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Debian's OpenBLAS falls back to its SSE3 kernels on a CPU it does not
  // know (ops/gemm.hpp: a sixth of the AVX-512 rate): run again, once, with
  // the core this CPU supports, before MPI and Kokkos start. OpenBLAS reads
  // OPENBLAS_CORETYPE only when it loads.
  reformer::ops::run_with_host_blas_core(argv);
  // MPI first (under mpirun), before Kokkos; finalised after everything else.
  reformer::DistributedRuntime mpi(argc, argv);
  const int code = run_program(argc, argv);
  const auto& world = reformer::Communicator::world();
  if (code != 0 && code != 130 && world.size() > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    world.abort(code);
  }
  // 130: every process stopped on a signal at the same step and process 0 wrote
  // its checkpoint. Under mpirun the signal went to mpirun, which is tearing the
  // job down: it no longer answers MPI_Finalize's handshake and kills every
  // process a moment later (Open MPI 4.1: about a second). So the processes
  // wait for each other once more (no process may end while process 0 still
  // writes: its end would make mpirun kill the writer) and then end at once
  // with 130, without MPI_Finalize.
  // Each process says so before the handshake: the first to end makes mpirun
  // kill the others, which may then be past the handshake but not yet at
  // their exit (tests/mpi/test_mpi_signals.sh accepts a process killed there
  // once it has said that it ends).
  if (code == 130 && world.size() > 1) {
    std::fprintf(stderr, "reformer: process %d of %d ends with exit code 130 (interrupted)\n",
                 world.rank(), world.size());
    std::fflush(stdout);
    std::fflush(stderr);
    std::vector<double> done = {1.0};
    world.sum(done, "the end of the interrupted run", 30);
    std::_Exit(130);
  }
  return code;
}

namespace {

int run_program(int argc, char** argv) {
  using namespace reformer::cli;
  CLI::App app{"Reformer: memory-efficient Transformers on Kokkos (Serial, OpenMP, CUDA, HIP)",
               "reformer"};
  app.set_version_flag("--version", REFORMER_VERSION);
  GlobalOptions global;
  app.add_option("--threads", global.threads, "Host threads for Kokkos (default: OMP_NUM_THREADS)")
      ->check(CLI::Range(1, 1 << 16));
  std::function<int()> run;
  add_info_command(app, global, run);
  add_run_commands(app, global, run);
  add_memory_command(app, global, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    // A leading word that is not a subcommand is most likely a typo of one; after
    // a known subcommand, the extra word is an argument it does not take.
    const std::string first = argc > 1 ? argv[1] : "";
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == first;
    }
    if (!first.empty() && first[0] != '-' && !known) {
      std::fprintf(stderr, "reformer: error: unknown subcommand '%s' (available: %s)\n",
                   first.c_str(), names.c_str());
    } else {
      std::fprintf(stderr, "reformer: error: %s\n", e.what());
    }
    std::fprintf(stderr, "Run 'reformer --help' for usage.\n");
    return 2;
  } catch (const CLI::ParseError& e) {
    // Usage errors (unknown subcommand or option, bad value) exit with 2.
    std::fprintf(stderr, "reformer: error: %s\nRun 'reformer --help' for usage.\n", e.what());
    return 2;
  }
  try {
    if (!run) {
      std::fprintf(stderr, "reformer: error: a subcommand is required\n%s", app.help().c_str());
      return 2;
    }
    return run();
  } catch (const reformer::ConfigError& e) {
    // A config error found once the work has started (a prompt's id against
    // the model's vocabulary, a checkpoint that does not fit the overrides)
    // exits with 2 like one found before.
    std::fprintf(stderr, "reformer: error: %s\n", e.what());
    return 2;
  } catch (const reformer::Error& e) {
    std::fprintf(stderr, "reformer: error: %s\n", e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A folder that cannot be made (memory --out under a file, a read-only place).
    std::fprintf(stderr, "reformer: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    // An allocation the prediction before the run did not foresee (another
    // process took the memory meanwhile, or a prediction is short).
    const std::string what = e.what();
    if (what.find("failed to allocate") != std::string::npos) {
      // Kokkos' first line names the allocation; the rest is its traceback.
      std::fprintf(stderr,
                   "reformer: error: out of memory: %s\nLower the batch or the length "
                   "(train.batch, data.length; `reformer memory`: --batch, --lengths), or use "
                   "LSH, local or exact attention (model.attention); `reformer memory` predicts "
                   "what a configuration needs.\n",
                   what.substr(0, what.find('\n')).c_str());
      return 1;
    }
    std::fprintf(stderr, "reformer: internal error: %s\n", e.what());
    return 1;
  }
}

}  // namespace
