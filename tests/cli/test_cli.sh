#!/usr/bin/env bash
# Checks the `reformer` program's user-facing behaviour: help, version, info,
# and exit code 2 with a clear message for unknown subcommands and options.
set -u
bin=$1
failures=0
check() {  # check <name> <expected exit code> <text the output must contain> -- <args...>
  local name=$1 code=$2 text=$3
  shift 4
  local out rc
  out=$("$bin" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL $name: exit $rc (want $code), output:"
    echo "$out" | head -20
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}
check help 0 "info" -- --help
check version 0 "0." -- --version
check info 0 "memory tracker" -- info
check info_backend 0 "Kokkos" -- info
check no_subcommand 2 "subcommand" --
check unknown_subcommand 2 "bogus" -- bogus
check unknown_option 2 "--frobnicate" -- --frobnicate info
check bad_threads 2 "threads" -- --threads -3 info
[ "$failures" -eq 0 ]
