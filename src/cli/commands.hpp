// Subcommands of the `reformer` program. Each registers its options on the
// CLI11 app and returns the process exit code when run.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace reformer::cli {

struct GlobalOptions {
  int threads = -1;
};

// Adds the `info` subcommand; `run` is set to its action.
void add_info_command(CLI::App& app, const GlobalOptions& global, std::function<int()>& run);

// Adds `train`, `eval` and `generate`.
void add_run_commands(CLI::App& app, const GlobalOptions& global, std::function<int()>& run);

// Adds `memory` (the memory and speed instrument).
void add_memory_command(CLI::App& app, const GlobalOptions& global, std::function<int()>& run);

}  // namespace reformer::cli
