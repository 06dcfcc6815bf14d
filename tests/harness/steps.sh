# The bookkeeping of tests/run_all.sh's steps, sourced by it and by
# tests/harness/test_harness.py (which plants a crashed step, a stale result and
# a narrowing variable and checks each line). The caller sets `summary` and
# `failures` (files), `passed`, `failed`, `skipped` (counts) and `step_start`.
# shellcheck shell=bash disable=SC2154
harness_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ctest_step_py=${ctest_step_py:-$harness_dir/ctest_step.py}

say_fail() {  # say_fail <text>: print a failure now and keep it for the end
  echo "FAIL $*"
  echo "FAIL $*" >>"$failures"
}
# record <step> <passed> <failed> <skipped>: one row of the closing table.
record() {
  passed=$((passed + $2))
  failed=$((failed + $3))
  skipped=$((skipped + $4))
  printf '%-44s %6d %6d %7d %6ds\n' "$1" "$2" "$3" "$4" $(($(date +%s) - step_start)) >>"$summary"
}
fail_step() {  # fail_step <step> <message>: a step that could not run counts as one failure
  say_fail "$1: $2"
  record "$1" 0 1 0
}

# read_result <file>: sets `counts` to the "P F S" the file holds; 1 when it
# holds no such line.
read_result() {
  counts=()
  [ -s "$1" ] || return 1
  read -r -a counts <"$1" || true
  [ ${#counts[@]} -eq 3 ] && [[ "${counts[*]}" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]]
}

# run_counted <step name> <result file> <command...>: runs a step that writes
# "P F S" to the result file, and records it. The file is removed first (a
# result left by an earlier run must not stand for this one), and the step's
# exit status must agree with its counts: a crash after a result, or a failing
# exit with no failure counted, is a failure of its own.
run_counted() {
  local name=$1 result=$2 status what
  shift 2
  what=$(basename "$1")
  [[ $what == python* ]] && what=$(basename "$2")
  step_start=$(date +%s)
  rm -f "$result"
  "$@"
  status=$?
  if ! read_result "$result"; then
    fail_step "$name" "$what ended without a result (exit status $status)"
  elif [ "$status" -ne 0 ] && [ "${counts[1]}" -eq 0 ]; then
    say_fail "$name: $what exited with status $status but counted no failure"
    record "$name" "${counts[0]}" 1 "${counts[2]}"
  elif [ "$status" -eq 0 ] && [ "${counts[1]}" -ne 0 ]; then
    say_fail "$name: $what counted ${counts[1]} failures but exited with status 0"
    record "$name" "${counts[@]}"
  else
    record "$name" "${counts[@]}"
  fi
  rm -f "$result"
}

# run_ctest <step name> <build dir> [ctest_step.py arguments]
run_ctest() {
  local name=$1 dir=$2
  shift 2
  run_counted "$name" "$dir/result.txt" python3 "$ctest_step_py" "$dir" --name "$name" \
    --result "$dir/result.txt" --failures "$failures" "$@"
}

# clear_narrowing: unsets every variable that would change or narrow what the
# tests run (ctest_step.py --narrowing names them: GTEST_*, KOKKOS_*, the
# project's REFORMER_* settings and LSAN_OPTIONS) and the sanitizers' options
# (the Serial step sets its own), and keeps their names in `cleared`.
clear_narrowing() {
  local v names
  cleared=""
  names=$(python3 "$ctest_step_py" --narrowing) || names=""
  for v in $names ASAN_OPTIONS UBSAN_OPTIONS; do
    if [ -n "${!v+set}" ]; then
      unset "$v"
      cleared="$cleared $v"
    fi
  done
  cleared=${cleared# }
}
