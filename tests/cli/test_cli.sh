#!/usr/bin/env bash
# Checks the `reformer` program's user-facing behaviour: help, version, info,
# and exit code 2 with a clear message for unknown subcommands and options.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
expect help 0 "info" -- --help
expect version 0 "0." -- --version
expect info 0 "memory tracker" -- info
expect info_backend 0 "Kokkos" -- info
expect no_subcommand 2 "subcommand" --
expect unknown_subcommand 2 "bogus" -- bogus
expect unknown_option 2 "--frobnicate" -- --frobnicate info
expect bad_threads 2 "threads" -- --threads -3 info
[ "$failures" -eq 0 ]
