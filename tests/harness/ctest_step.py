#!/usr/bin/env python3
"""One ctest step of tests/run_all.sh, counted honestly and by name.

    ctest_step.py BUILD_DIR --name NAME [--jobs N] [--exclude REGEX --exclude-why TEXT]
                  [--result FILE] [--failures FILE] [-- extra ctest arguments]
    ctest_step.py --narrowing      the environment's variables that would narrow a run

What the build expects comes from the build itself: CMake writes
BUILD_DIR/tests/test_manifest.txt (tests/CMakeLists.txt) with every GoogleTest
binary and the thread counts ctest registers its cases at, every test added by
name, every MPI test with the binary, --gtest_filter and report files of its
cases, and the emulator of a cross build. Each binary is listed here
(--gtest_list_tests, under the emulator if there is one) before ctest runs: a
binary that is missing, whose listing fails or lists nothing is a failure named
here. ctest's own registration (ctest --show-only=json-v1) maps each ctest name
to its binary, case and thread count. Then ctest runs with a JUnit report, and
the step fails when

  - a test failed or timed out (each named, with ctest's own output above),
  - a test did not run for a reason other than a skip (a missing executable, a
    failed fixture),
  - an expected test did not run or an unexpected one ran (each named: equal
    counts do not hide a missing test behind an extra one),
  - a test is registered so that a skip would hide its exit status (a
    SKIP_REGULAR_EXPRESSION: GoogleTest cases skip by exit code 77 alone, which
    a LeakSanitizer report after GTEST_SKIP replaces; tests/discover_gtest.cmake),
  - an MPI test's filter lists no case, a case has no result in every
    process's report, or the run exited non-zero although every case passed
    (each MPI case counts as one test),
  - the environment holds a variable that narrows what runs (GTEST_FILTER,
    GTEST_REPEAT, sharding, KOKKOS_* or REFORMER_* settings; run_all.sh clears
    them),
  - ctest exited non-zero, or wrote no report.

Skipped tests (GTEST_SKIP, a script's exit 77, a disabled test, or one left out
with --exclude) are listed by name with their reason and not counted as passed.
The step ends with one line `NAME: P passed, F failed, S skipped (expected E)`
and exits non-zero when F > 0; --result FILE receives "P F S" for the caller's
total, and --failures FILE gets each failure appended with the first lines of
the test's own failure message, for the caller to print again at the end.
tests/harness/test_harness.py plants each of these cases and checks its line.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

# Variables that change or narrow what the suite runs: GoogleTest's own
# (GTEST_FILTER, GTEST_REPEAT, GTEST_TOTAL_SHARDS, ...), Kokkos' (threads, tools
# libraries), the project's settings and test switches (REFORMER_TEST_SEED,
# REFORMER_TEST_SANITIZED, REFORMER_CHUNK_PRODUCTS, ...), and LeakSanitizer's
# options (suppressions). The harness's own options are not among them.
NARROWING_PREFIXES = ("GTEST_", "KOKKOS_", "REFORMER_")
NARROWING_NAMES = ("LSAN_OPTIONS",)
HARNESS_OPTIONS = ("REFORMER_BACKENDS", "REFORMER_BUILD", "REFORMER_DEPS")
SKIP_MESSAGES = ("SKIP_RETURN_CODE=", "SKIP_REGULAR_EXPRESSION_MATCHED")


def narrowing_variables(environ):
    return sorted(n for n in environ
                  if (n.startswith(NARROWING_PREFIXES) or n in NARROWING_NAMES)
                  and n not in HARNESS_OPTIONS)


class Manifest:
    def __init__(self):
        self.binaries = []  # (path, [thread counts as strings])
        self.plain = []  # ctest names of tests added by name
        self.mpi = []  # dicts: name, binary, filter, reports, ranks
        self.emulator = []
        self.errors = []


def read_manifest(path):
    m = Manifest()
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "gtest":
                if len(parts) < 4 or len(parts[3].split()) != int(parts[2]):
                    m.errors.append(f"{path}:{number}: a gtest line needs its thread counts "
                                    "(reconfigure the build with this tests/CMakeLists.txt)")
                    continue
                m.binaries.append((parts[1], parts[3].split()))
            elif parts[0] == "test":
                m.plain.append(parts[1])
            elif parts[0] == "mpi":
                if len(parts) != 6:
                    m.errors.append(f"{path}:{number}: an mpi line needs name, binary, filter, "
                                    "report prefix and ranks")
                    continue
                m.mpi.append({"name": parts[1], "binary": parts[2], "filter": parts[3],
                              "reports": parts[4], "ranks": int(parts[5])})
            elif parts[0] == "emulator" and len(parts) > 1 and parts[1]:
                m.emulator = parts[1].split()
    mpi_names = {e["name"] for e in m.mpi}
    m.plain = [name for name in m.plain if name not in mpi_names]
    return m


def list_cases(binary, emulator, gtest_filter=None):
    """The binary's GoogleTest cases as 'Suite.Case' names (or an error text)."""
    command = emulator + [binary, "--gtest_list_tests"]
    if gtest_filter:
        command.append("--gtest_filter=" + gtest_filter)
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
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
        return None, ("lists no test" +
                      (f" for --gtest_filter={gtest_filter} (a run of none)" if gtest_filter else ""))
    return cases, None


def property_value(test, name):
    for p in test.get("properties", []):
        if p.get("name") == name:
            return p.get("value")
    return None


def registered_tests(build, ctest_args, manifest):
    """ctest's registration: {ctest name: key}, and the registration problems.

    Keys: ("gtest", binary, case, threads) for a GoogleTest case, ("mpi", name)
    for an MPI test, ("test", name) for any other test."""
    binaries = {path for path, _ in manifest.binaries}
    mpi_names = {e["name"] for e in manifest.mpi}
    run = subprocess.run(["ctest", "--show-only=json-v1"] + ctest_args, cwd=build,
                         capture_output=True, text=True)
    if run.returncode != 0:
        return {}, [f"ctest --show-only=json-v1 exited with {run.returncode}: "
                    + " ".join(run.stderr.strip().splitlines()[-3:])]
    keys, problems, regex_skips = {}, [], []
    for test in json.loads(run.stdout).get("tests", []):
        name, command = test["name"], test.get("command") or []
        gtest_filter = next((a[len("--gtest_filter="):] for a in command
                             if a.startswith("--gtest_filter=")), None)
        binary = next((a for a in command if a in binaries), None)
        if name in mpi_names:
            keys[name] = ("mpi", name)
        elif binary and gtest_filter:
            env = property_value(test, "ENVIRONMENT") or []
            threads = next((e.split("=", 1)[1] for e in env if e.startswith("OMP_NUM_THREADS=")),
                           None)
            keys[name] = ("gtest", binary, gtest_filter, threads)
        else:
            keys[name] = ("test", name)
        regex = property_value(test, "SKIP_REGULAR_EXPRESSION")
        regex = regex if isinstance(regex, list) else [regex] if regex else []
        if regex:
            regex_skips.append((name, regex[0]))
    if regex_skips:
        names = ", ".join(n for n, _ in regex_skips[:3])
        more = f" and {len(regex_skips) - 3} more" if len(regex_skips) > 3 else ""
        problems.append(
            f"{len(regex_skips)} tests are registered with SKIP_REGULAR_EXPRESSION "
            f"'{regex_skips[0][1]}' ({names}{more}): a skip would hide a non-zero exit; "
            "skip by SKIP_RETURN_CODE 77 alone (tests/discover_gtest.cmake)")
    return keys, problems


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


def named(names, limit=10):
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def gtest_report(path):
    """{case: (result, message)} of a GoogleTest XML report, result pass/fail/skip."""
    results = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("classname", "") + "." + case.get("name", "")
        failure = case.find("failure")
        if failure is not None:
            results[name] = ("fail", (failure.get("message") or "").splitlines()[:4])
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            results[name] = ("skip", [])
        elif case.get("status", "run") == "run":
            results[name] = ("pass", [])
        else:
            results[name] = ("skip", [])
    return results


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build", nargs="?")
    p.add_argument("--name")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--exclude", default="")
    p.add_argument("--exclude-why", default="")
    p.add_argument("--timeout", type=int, default=600,
                   help="ctest's limit for a test that sets none of its own")
    p.add_argument("--result")
    p.add_argument("--failures", help="append each failure, with its message, to this file")
    p.add_argument("--narrowing", action="store_true",
                   help="print the environment's variables that narrow a run, one a line, and exit")
    p.add_argument("ctest_args", nargs="*")
    a = p.parse_args()
    if a.narrowing:
        print("\n".join(narrowing_variables(os.environ)))
        return 0
    if not a.build or not a.name:
        p.error("BUILD_DIR and --name are required")
    a.build = os.path.abspath(a.build)
    if a.result and os.path.exists(a.result):
        os.remove(a.result)  # a stale result must not stand for this run's

    problems = []
    for variable in narrowing_variables(os.environ):
        problems.append(f"{variable}={os.environ[variable]} is set: it changes or narrows what "
                        "the tests run (tests/run_all.sh clears it; unset it to run the suite)")
    manifest_path = os.path.join(a.build, "tests", "test_manifest.txt")
    if not os.path.exists(manifest_path):
        problems.append(f"{manifest_path} is missing: the build did not configure its tests")
        manifest = Manifest()
    else:
        manifest = read_manifest(manifest_path)
        problems += manifest.errors
    exclude = re.compile(a.exclude) if a.exclude else None
    ctest_filter = ["-E", a.exclude] if a.exclude else []

    # What the build expects: {key: ctest-style display name}.
    expected, excluded = {}, []
    for name in manifest.plain:
        if exclude and exclude.search(name):
            excluded.append(name)
        else:
            expected[("test", name)] = name
    for binary, threads in manifest.binaries:
        base = os.path.basename(binary)
        if not os.access(binary, os.X_OK):
            problems.append(f"test binary {base} is missing ({binary})")
            continue
        cases, error = list_cases(binary, manifest.emulator)
        if error:
            problems.append(f"test binary {base}: {error}")
            continue
        for case in cases:
            for t in threads:
                display = case + (f".threads{t}" if len(threads) > 1 else "")
                if exclude and exclude.search(display):
                    excluded.append(display)
                else:
                    expected[("gtest", binary, case, t)] = display
    mpi_cases = {}
    for entry in manifest.mpi:
        expected[("mpi", entry["name"])] = entry["name"]
        base = os.path.basename(entry["binary"])
        if not os.access(entry["binary"], os.X_OK):
            problems.append(f"{entry['name']}: test binary {base} is missing ({entry['binary']})")
            continue
        cases, error = list_cases(entry["binary"], manifest.emulator, entry["filter"])
        if error:
            problems.append(f"{entry['name']}: test binary {base} {error}")
            continue
        mpi_cases[entry["name"]] = cases
        for old in glob.glob(glob.escape(entry["reports"]) + ".rank*.xml"):
            os.remove(old)

    keys = {}
    if os.path.exists(manifest_path):
        keys, registration = registered_tests(a.build, ctest_filter + a.ctest_args, manifest)
        problems += registration

    junit = os.path.join(a.build, "ctest-junit.xml")
    log = os.path.join(a.build, "ctest.log")
    if os.path.exists(junit):
        os.remove(junit)
    cmd = ["ctest", "--output-on-failure", "-j", str(a.jobs), "--timeout", str(a.timeout),
           "--output-junit", junit] + ctest_filter + a.ctest_args
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
    excerpts, ran, mpi_status = {}, {}, {}
    if not os.path.exists(junit):
        problems.append(f"ctest wrote no report ({junit}); exit status {rc}")
    else:
        for case in ET.parse(junit).getroot().iter("testcase"):
            status, name = case.get("status"), case.get("name")
            key = keys.get(name, ("unregistered", name))
            ran[key] = name
            skip = case.find("skipped")
            message = skip.get("message", "") if skip is not None else ""
            if key[0] == "mpi":  # counted by its cases below
                mpi_status[name] = (status, failure_excerpt(case))
            elif status == "run":
                passed.append(name)
            elif status == "fail":
                failed.append(name + (" (timed out)" if name in timeouts else ""))
                excerpts[failed[-1]] = failure_excerpt(case)
            elif status == "disabled" or message.startswith(SKIP_MESSAGES):
                skipped.append((name, skip_reason(case)))
            else:
                failed.append(f"{name} did not run ({message or status})")

    # The MPI tests: each case of the filter, with a result in every process's report.
    for entry in manifest.mpi:
        name, cases = entry["name"], mpi_cases.get(entry["name"])
        if cases is None or name not in mpi_status:
            continue
        results, unreported = {}, []
        for rank in range(entry["ranks"]):
            report = f"{entry['reports']}.rank{rank}.xml"
            try:
                results[rank] = gtest_report(report)
            except (OSError, ET.ParseError) as e:
                unreported.append(rank)
                problems.append(f"{name}: rank {rank} wrote no readable report ({report}: "
                                f"{e.__class__.__name__}); the job ended before its cases did")
        all_passed = not unreported
        for case in cases:
            outcome = [results[r].get(case, ("missing", [])) for r in results]
            if unreported or any(o[0] in ("fail", "missing") for o in outcome):
                all_passed = False
                why = next((f"rank {r}: {o[0]}" for r, o in zip(results, outcome)
                            if o[0] in ("fail", "missing")), "no report from every rank")
                failed.append(f"{name}: {case} ({why})")
                excerpts[failed[-1]] = next((o[1] for o in outcome if o[0] == "fail"), [])
            elif all(o[0] == "skip" for o in outcome):
                skipped.append((f"{name}: {case}", "GTEST_SKIP"))
            else:
                passed.append(f"{name}: {case}")
        extra = sorted({c for r in results for c in results[r]} - set(cases))
        if extra:
            problems.append(f"{name}: cases ran that its filter does not list: {named(extra)}")
        status, excerpt = mpi_status[name]
        if status != "run" and all_passed:
            problems.append(f"{name}: the run ended with status '{status}' although every case "
                            "passed on every rank")
            excerpts[problems[-1]] = excerpt

    # Expected and run tests, by name: a missing test and an extra one do not cancel out.
    missing = [expected[k] for k in expected if k not in ran]
    unexpected = [ran[k] for k in ran if k not in expected]
    if os.path.exists(junit) and os.path.exists(manifest_path):
        if missing:
            problems.append(f"{len(missing)} expected tests did not run: {named(missing)}")
        if unexpected:
            problems.append(f"{len(unexpected)} tests ran that the build's manifest and listings "
                            f"do not expect: {named(unexpected)}")
    if rc != 0 and not failed and not problems:
        problems.append(f"ctest exited with {rc} although no test failed")

    n_expected = sum(len(mpi_cases.get(k[1], [1])) if k[0] == "mpi" else 1 for k in expected)
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
          f"(expected {n_expected + len(excluded)})")
    if a.failures and n_failed:
        with open(a.failures, "a", encoding="utf-8") as f:
            for name in failed + problems:
                f.write(f"FAIL {a.name}: {name}\n")
                f.writelines(f"    {line}\n" for line in excerpts.get(name, []))
    if a.result:
        with open(a.result, "w", encoding="utf-8") as f:
            f.write(f"{len(passed)} {n_failed} {n_skipped}\n")
    return 1 if n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
