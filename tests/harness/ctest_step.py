#!/usr/bin/env python3
"""One ctest step of tests/run_all.sh, counted honestly.

    ctest_step.py BUILD_DIR --name NAME [--jobs N] [--exclude REGEX --exclude-why TEXT]
                  [--result FILE] [-- extra ctest arguments]

What the build expects comes from the build itself: CMake writes
BUILD_DIR/tests/test_manifest.txt (tests/CMakeLists.txt) with every GoogleTest
binary, how many thread configurations ctest registers it under, and every test
added by name. Each binary is listed here (--gtest_list_tests, under the
build's emulator if it has one) before ctest runs: a binary that is missing or
whose listing fails is a failure named here, not a smaller total. Then ctest runs
with a JUnit report, and the step fails when

  - a test failed or timed out (each named, with ctest's own output above),
  - ctest ran a different number of tests than the manifest and the listings
    say (both numbers printed),
  - ctest exited non-zero, or wrote no report.

Skipped tests (GTEST_SKIP, a script's exit 77, a disabled test, or one left out
with --exclude) are listed by name with their reason and not counted as passed.
The step ends with one line `NAME: P passed, F failed, S skipped (expected E)`;
--result FILE receives "P F S" for the caller's total, and --failures FILE gets
each failure appended with the first lines of the test's own failure message,
for the caller to print again at the end of its log.
"""
import argparse
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET


def read_manifest(path):
    binaries, plain, emulator = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "gtest":
                binaries.append((parts[1], int(parts[2])))
            elif parts[0] == "test":
                plain.append(parts[1])
            elif parts[0] == "emulator" and len(parts) > 1 and parts[1]:
                emulator = parts[1].split()
    return binaries, plain, emulator


def list_cases(binary, emulator):
    """The binary's GoogleTest cases as 'Suite.Case' names (or an error text)."""
    try:
        run = subprocess.run(emulator + [binary, "--gtest_list_tests"], capture_output=True,
                             text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, "listing did not finish within 300 s"
    except OSError as e:
        return None, f"could not be started ({e})"
    if run.returncode != 0:
        tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-5:])
        how = (f"was killed by signal {-run.returncode}" if run.returncode < 0 else
               f"exited with {run.returncode}")
        return None, f"--gtest_list_tests {how}" + (f":\n{tail}" if tail else "")
    cases, suite = [], None
    for line in run.stdout.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        elif suite is not None:
            cases.append(suite + line.split("#")[0].strip())
    if not cases:
        return None, "lists no test"
    return cases, None


def skip_reason(case):
    """The reason a skipped test gives: GoogleTest's skip message or the output's last line."""
    out = (case.findtext("system-out") or "").strip()
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith("Skipped") and i + 1 < len(lines) and lines[i + 1].strip():
            return lines[i + 1].strip()
    if case.get("status") == "disabled":
        return "disabled"
    return lines[-1].strip() if lines else "no reason printed"


def failure_excerpt(case, limit=16):
    """The first lines of a failed test's message (GoogleTest's 'Failure' onwards), or its last lines."""
    lines = [line.rstrip() for line in (case.findtext("system-out") or "").splitlines()]
    noise = ("[----------]", "[==========]", "[  PASSED  ]", "[ RUN      ]", "[       OK ]")
    lines = [line for line in lines if line.strip() and not line.startswith(noise)]
    start = next((i for i, line in enumerate(lines) if "Failure" in line or "error" in line.lower()),
                 max(0, len(lines) - limit))
    return lines[start:start + limit]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--name", required=True)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--exclude", default="")
    p.add_argument("--exclude-why", default="")
    p.add_argument("--timeout", type=int, default=600,
                   help="ctest's limit for a test that sets none of its own")
    p.add_argument("--result")
    p.add_argument("--failures", help="append each failure, with its message, to this file")
    p.add_argument("ctest_args", nargs="*")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)

    problems = []
    manifest = os.path.join(a.build, "tests", "test_manifest.txt")
    if not os.path.exists(manifest):
        problems.append(f"{manifest} is missing: the build did not configure its tests")
        binaries, plain, emulator = [], [], []
    else:
        binaries, plain, emulator = read_manifest(manifest)
    exclude = re.compile(a.exclude) if a.exclude else None
    expected, excluded = len(plain), []
    for binary, configurations in binaries:
        name = os.path.basename(binary)
        if not os.access(binary, os.X_OK):
            problems.append(f"test binary {name} is missing ({binary})")
            continue
        cases, error = list_cases(binary, emulator)
        if error:
            problems.append(f"test binary {name}: {error}")
            continue
        for case in cases:
            if exclude and exclude.search(case):
                excluded.append(case)
            else:
                expected += configurations

    junit = os.path.join(a.build, "ctest-junit.xml")
    log = os.path.join(a.build, "ctest.log")
    if os.path.exists(junit):
        os.remove(junit)
    cmd = ["ctest", "--output-on-failure", "-j", str(a.jobs), "--timeout", str(a.timeout),
           "--output-junit", junit] + (["-E", a.exclude] if a.exclude else []) + a.ctest_args
    print("+ " + " ".join(cmd), flush=True)
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=a.build, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        for line in proc.stdout:
            sys.stdout.write(line)
            out.write(line)
        rc = proc.wait()
    sys.stdout.flush()
    timeouts = set()
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.search(r"Test +#\d+: (\S+) .*\*\*\*Timeout", line)
            if m:
                timeouts.add(m.group(1))

    passed, failed, skipped = [], [], []
    excerpts = {}
    if not os.path.exists(junit):
        problems.append(f"ctest wrote no report ({junit}); exit status {rc}")
    else:
        for case in ET.parse(junit).getroot().iter("testcase"):
            status, name = case.get("status"), case.get("name")
            if status == "run":
                passed.append(name)
            elif status == "fail":
                failed.append(name + (" (timed out)" if name in timeouts else ""))
                excerpts[failed[-1]] = failure_excerpt(case)
            else:
                skipped.append((name, skip_reason(case)))
    ran = len(passed) + len(failed) + len(skipped)
    if not problems and ran != expected:
        problems.append(f"ctest ran {ran} tests, the build's manifest and listings expect {expected}")
    if rc != 0 and not failed and not problems:
        problems.append(f"ctest exited with {rc} although no test failed")

    print(f"\n--- {a.name}")
    for name in failed:
        print(f"FAIL {name}")
    for problem in problems:
        print(f"FAIL {problem}")
    for name, why in skipped:
        print(f"skip {name}: {why}")
    for case in excluded:
        print(f"skip {case}: left out here ({a.exclude_why or 'excluded by name'})")
    n_failed = len(failed) + len(problems)
    n_skipped = len(skipped) + len(excluded)
    print(f"{a.name}: {len(passed)} passed, {n_failed} failed, {n_skipped} skipped "
          f"(expected {expected + len(excluded)})")
    if a.failures and n_failed:
        with open(a.failures, "a", encoding="utf-8") as f:
            for name in failed:
                f.write(f"FAIL {a.name}: {name}\n")
                f.writelines(f"    {line}\n" for line in excerpts.get(name, []))
            for problem in problems:
                f.write(f"FAIL {a.name}: {problem}\n")
    if a.result:
        with open(a.result, "w", encoding="utf-8") as f:
            f.write(f"{len(passed)} {n_failed} {n_skipped}\n")
    return 1 if n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
