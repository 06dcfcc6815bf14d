#!/usr/bin/env python3
"""Removes each check of the test harness in turn and runs its own tests.

    tests/harness/mutation_check.py

Each mutation below takes one check out of ctest_step.py, steps.sh or
tests/discover_gtest.cmake (in a copy of them); tests/harness/test_harness.py
must then fail. A mutation that
survives is a check no planted case covers: the line names it. Takes a few
minutes (the self-tests run once per mutation, stopping at their first
failure); docs/testing.md records its output. Exit status 1 when one survives.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)

# (what the mutation removes, file, text, replacement)
MUTATIONS = [
    ("the step removes a stale result file", "harness/ctest_step.py",
     "os.remove(a.result)  # a stale", "pass  # a stale"),
    ("narrowing variables fail the step", "harness/ctest_step.py",
     "for variable in narrowing_variables(os.environ):", "for variable in []:"),
    ("the manifest must exist", "harness/ctest_step.py",
     'problems.append(f"{manifest_path} is missing', 'print(f"{manifest_path} is missing'),
    ("gtest lines carry their thread counts", "harness/ctest_step.py",
     "if len(parts) < 4 or len(parts[3].split()) != int(parts[2]):", "if False:"),
    ("gtest lines' thread counts agree with their number", "harness/ctest_step.py",
     "if len(parts) < 4 or len(parts[3].split()) != int(parts[2]):", "if len(parts) < 4:"),
    ("a missing binary is named", "harness/ctest_step.py",
     'problems.append(f"test binary {base} is missing ({binary})")', "pass"),
    ("a failed listing is named", "harness/ctest_step.py",
     'problems.append(f"test binary {base}: {error}")', "pass"),
    ("a listing of no case fails", "harness/ctest_step.py", "if not cases:", "if False:"),
    ("tests registered with a skip pattern fail", "harness/ctest_step.py",
     "if regex_skips:", "if False:"),
    ("a failed test counts as failed", "harness/ctest_step.py",
     'failed.append(name + (" (timed out)" if name in timeouts else ""))',
     "passed.append(name)"),
    ("a timed-out test is named so", "harness/ctest_step.py", "timeouts.add(m.group(1))", "pass"),
    ("a test that did not run is not a skip", "harness/ctest_step.py",
     'elif status == "disabled" or message.startswith(SKIP_MESSAGES):', "elif True:"),
    ("expected tests that did not run are named", "harness/ctest_step.py", "if missing:", "if False:"),
    ("unexpected tests are named", "harness/ctest_step.py", "if unexpected:", "if False:"),
    ("ctest's exit status is checked", "harness/ctest_step.py",
     "if rc != 0 and not failed and not problems:", "if False:"),
    ("ctest's report must exist", "harness/ctest_step.py",
     'problems.append(f"ctest wrote no report', 'print(f"ctest wrote no report'),
    ("every MPI rank must write a report", "harness/ctest_step.py",
     "unreported.append(rank)", "continue"),
    ("an MPI case failing on a rank fails", "harness/ctest_step.py",
     'if unreported or any(o[0] in ("fail", "missing") for o in outcome):', "if unreported:"),
    ("an MPI run's exit status is checked", "harness/ctest_step.py",
     'if status != "run" and all_passed:', "if False:"),
    ("MPI cases outside the filter are named", "harness/ctest_step.py", "if extra:", "if False:"),
    ("the step's exit status reports failures", "harness/ctest_step.py",
     "return 1 if n_failed else 0", "return 0"),
    ("steps.sh removes a stale result first", "harness/steps.sh",
     'step_start=$(date +%s)\n  rm -f "$result"', "step_start=$(date +%s)"),
    ("steps.sh checks the step's exit status", "harness/steps.sh",
     'elif [ "$status" -ne 0 ] && [ "${counts[1]}" -eq 0 ]; then', "elif false; then"),
    ("steps.sh requires a result", "harness/steps.sh",
     "if ! read_result \"$result\"; then", "if ! read_result \"$result\" && false; then"),
    ("steps.sh clears narrowing variables", "harness/steps.sh", 'unset "$v"', ":"),
    ("discovery skips by exit code alone", "discover_gtest.cmake",
     "SKIP_RETURN_CODE 77\n",
     'SKIP_RETURN_CODE 77\n        SKIP_REGULAR_EXPRESSION "\\\\[  SKIPPED \\\\]"\n'),
    ("discovery registers a failed listing as a failing test", "discover_gtest.cmake",
     'add_test("${reformer_gtest_name}.listing"', 'message("${reformer_gtest_name}.listing"'),
    ("discovery registers every thread count", "discover_gtest.cmake",
     "foreach(reformer_gtest_n IN LISTS REFORMER_GTEST_THREADS)",
     "foreach(reformer_gtest_n IN ITEMS 2)"),
]


def main():
    survived = 0
    for what, name, text, replacement in MUTATIONS:
        work = tempfile.mkdtemp(prefix="harness-mutant-")
        try:
            copy = os.path.join(work, "harness")
            shutil.copytree(HERE, copy, ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copy(os.path.join(TESTS, "discover_gtest.cmake"), work)
            path = os.path.join(work, name)
            source = open(path, encoding="utf-8").read()
            if source.count(text) != 1:
                print(f"ERROR {what}: the text to remove occurs {source.count(text)} times in {name}")
                survived += 1
                continue
            with open(path, "w", encoding="utf-8") as f:
                f.write(source.replace(text, replacement))
            run = subprocess.run([sys.executable, os.path.join(copy, "test_harness.py"), "-f"],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                caught = next((line.split("(")[0].strip() for line in run.stdout.splitlines() +
                               run.stderr.splitlines() if line.startswith(("FAIL:", "ERROR:"))), "")
                print(f"caught    {what} ({caught})")
            else:
                print(f"SURVIVED  {what}: no self-test fails without it")
                survived += 1
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"mutations: {len(MUTATIONS) - survived} caught, {survived} survived")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
