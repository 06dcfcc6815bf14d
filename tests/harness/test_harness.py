#!/usr/bin/env python3
"""The test command's own tests: seconds, no build.

Each test makes a fake build folder (a test manifest as tests/CMakeLists.txt
writes it, fake GoogleTest binaries that list and run cases as a spec says, and
a CTestTestfile.cmake registering them as tests/discover_gtest.cmake does), runs the
real ctest through tests/harness/ctest_step.py, and checks that the planted
fault fails the step with its own line; tests/harness/steps.sh (the step
bookkeeping of run_all.sh) is checked the same way with a fake step.

    test_harness.py [--result FILE] [unittest arguments]

--result FILE receives "P F S" for run_all.sh's total.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CTEST_STEP = os.path.join(HERE, "ctest_step.py")
DISCOVER = os.path.join(os.path.dirname(HERE), "discover_gtest.cmake")
STEPS_SH = os.path.join(HERE, "steps.sh")

# A fake GoogleTest binary: lists spec["list"] (honouring --gtest_filter), runs
# one case by its behaviour in spec["cases"] (pass by default), or, given
# --gtest_output=xml:PREFIX.xml, plays an MPI run and writes each rank's report.
FAKE_BINARY = textwrap.dedent("""\
    #!/usr/bin/env python3
    import fnmatch, json, os, signal, sys, time
    spec = json.load(open(sys.argv[0] + ".json"))
    args = sys.argv[1:]
    flt = next((a.split("=", 1)[1] for a in args if a.startswith("--gtest_filter=")), "*")
    out = next((a[len("--gtest_output=xml:"):] for a in args if a.startswith("--gtest_output=xml:")), None)
    cases = [c for c in spec["list"] if fnmatch.fnmatchcase(c.split("  #")[0], flt)]
    if "--gtest_list_tests" in args:
        if spec.get("list_fails"):
            print("cannot start"); sys.exit(1)
        suite = None
        for c in cases:
            s, name = c.split(".", 1)
            if s != suite:
                print(s + "."); suite = s
            print("  " + name)
        sys.exit(0)
    def play(case):
        how = spec.get("cases", {}).get(case, "pass")
        print("[ RUN      ] " + case)
        if how == "fail":
            print("test.cpp:12: Failure\\nExpected: 1 == 2"); sys.exit(1)
        if how == "crash":
            sys.stdout.flush(); os.kill(os.getpid(), signal.SIGSEGV)
        if how == "hang":
            time.sleep(60)
        if how == "skip":
            print("test.cpp:3: Skipped\\nno GPU here\\n[  SKIPPED ] " + case); sys.exit(77)
        if how == "skip_then_leak":
            print("test.cpp:3: Skipped\\nno GPU here\\n[  SKIPPED ] " + case)
            print("==1==ERROR: LeakSanitizer: detected memory leaks"); sys.exit(23)
        print("[       OK ] " + case)
        return how
    if out is None:
        play(cases[0] if cases else flt); sys.exit(0)
    mpi = spec.get("mpi", {})
    prefix = out[:-4]
    for rank in range(mpi.get("ranks", 2)):
        if rank in mpi.get("silent_ranks", []):
            continue
        rows = []
        for c in cases + mpi.get("extra", []):
            suite, name = c.split(".", 1)
            how = mpi.get("rank_cases", {}).get(str(rank), {}).get(c, "pass")
            body = '<failure message="boom"/>' if how == "fail" else ""
            result = "skipped" if how == "skip" else "completed"
            rows.append(f'<testcase name="{name}" classname="{suite}" status="run" '
                        f'result="{result}">{body}</testcase>')
        with open(f"{prefix}.rank{rank}.xml", "w") as f:
            f.write("<testsuites><testsuite>" + "".join(rows) + "</testsuite></testsuites>")
    sys.exit(mpi.get("exit", 0))
    """)


def cmake_quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class FakeBuild:
    """A build folder with a manifest, fake binaries and a ctest registration."""

    def __init__(self, root):
        self.root = root
        os.makedirs(os.path.join(root, "tests"))
        self.manifest, self.tests, self.includes = [], [], []

    def binary(self, name, spec, threads=("1", "2"), registered=None, skip_regex=None,
               build=True, manifest_threads=True):
        path = os.path.join(self.root, "tests", name)
        if build:
            with open(path, "w") as f:
                f.write(FAKE_BINARY)
            os.chmod(path, 0o755)
            with open(path + ".json", "w") as f:
                json.dump(spec, f)
        line = f"gtest\t{path}\t{len(threads)}"
        self.manifest.append(line + (f"\t{' '.join(threads)}" if manifest_threads else ""))
        for case in (spec["list"] if registered is None else registered):
            filt = case.split("  #")[0]
            for t in threads:
                name = case + (f".threads{t}" if len(threads) > 1 else "")
                props = [f'ENVIRONMENT "OMP_NUM_THREADS={t}"', "SKIP_RETURN_CODE 77", "TIMEOUT 3"]
                if skip_regex:
                    props.append(f"SKIP_REGULAR_EXPRESSION {cmake_quote(skip_regex)}")
                self.tests.append((name, [path, "--gtest_filter=" + filt,
                                          "--gtest_also_run_disabled_tests"], props))
        return path

    def discovered(self, name, spec, threads=("1", "2")):
        """A fake binary registered by the project's own tests/discover_gtest.cmake."""
        path = self.binary(name, spec, threads=threads, registered=[])
        self.includes.append("\n".join([
            f"set(REFORMER_GTEST_BINARY {cmake_quote(path)})", "set(REFORMER_GTEST_EMULATOR)",
            f"set(REFORMER_GTEST_THREADS {' '.join(threads)})",
            "set(REFORMER_GTEST_PROCESSORS_PER_THREAD 1)", "set(REFORMER_GTEST_TIMEOUT 3)",
            "set(REFORMER_GTEST_LIST_TIMEOUT 30)", "set(REFORMER_GTEST_PROPERTIES)",
            f"set(REFORMER_GTEST_WORKING_DIRECTORY {cmake_quote(self.root)})",
            f"include({cmake_quote(DISCOVER)})"]))
        return path

    def plain(self, name, command, in_manifest=True):
        if in_manifest:
            self.manifest.append(f"test\t{name}")
        self.tests.append((name, command, ["TIMEOUT 3"]))

    def mpi(self, name, binary_name, spec, gtest_filter):
        path = os.path.join(self.root, "tests", binary_name)
        with open(path, "w") as f:
            f.write(FAKE_BINARY)
        os.chmod(path, 0o755)
        with open(path + ".json", "w") as f:
            json.dump(spec, f)
        report = os.path.join(self.root, "tests", name)
        self.manifest.append(f"test\t{name}")
        self.manifest.append(f"mpi\t{name}\t{path}\t{gtest_filter}\t{report}\t2")
        self.tests.append((name, [path, "--gtest_filter=" + gtest_filter,
                                  f"--gtest_output=xml:{report}.xml"], ["TIMEOUT 10"]))
        return report

    def write(self, manifest=True):
        if manifest:
            with open(os.path.join(self.root, "tests", "test_manifest.txt"), "w") as f:
                f.write("\n".join(self.manifest + ["emulator\t"]) + "\n")
        with open(os.path.join(self.root, "CTestTestfile.cmake"), "w") as f:
            for name, command, props in self.tests:
                f.write(f"add_test({cmake_quote(name)} {' '.join(map(cmake_quote, command))})\n")
                f.write(f"set_tests_properties({cmake_quote(name)} PROPERTIES {' '.join(props)})\n")
            f.writelines(text + "\n" for text in self.includes)

    def step(self, *extra, env=None):
        """Runs ctest_step.py: (exit status, its output, the result file's counts)."""
        result = os.path.join(self.root, "result.txt")
        run = subprocess.run([sys.executable, CTEST_STEP, self.root, "--name", "fake", "--jobs", "2",
                              "--result", result] + list(extra), capture_output=True, text=True,
                             env=clean_env(env))
        counts = None
        if os.path.exists(result):
            with open(result) as f:
                counts = f.read().split()
        return run.returncode, run.stdout + run.stderr, counts


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GTEST_", "KOKKOS_", "REFORMER_")) and k != "LSAN_OPTIONS"}
    env.update(extra or {})
    return env


CASES = ["Math.Adds", "Math.Subtracts", "P/Param.Works/0  # GetParam() = 1"]


class CtestStep(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="harness-")
        self.build = FakeBuild(self.dir)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def failing(self, *lines, **kw):
        """Runs the step; it must fail, and print each of `lines` on a FAIL line."""
        rc, out, counts = self.build.step(**kw)
        self.assertNotEqual(rc, 0, out)
        self.assertIsNotNone(counts, out)
        self.assertGreater(int(counts[1]), 0, out)
        fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
        for text in lines:
            self.assertTrue(any(text in line for line in fails), f"no FAIL line with {text!r}:\n{out}")
        return out

    def test_a_clean_build_passes_with_its_skips_named(self):
        self.build.binary("test_a", {"list": CASES + ["Gpu.Runs"], "cases": {"Gpu.Runs": "skip"}})
        self.build.plain("script", ["/bin/sh", "-c", "exit 0"])
        self.build.mpi("mpi_x", "test_mpi", {"list": ["Dp.One", "Dp.Two", "Other.Three"]}, "Dp.*")
        self.build.write()
        rc, out, counts = self.build.step()
        self.assertEqual(rc, 0, out)
        self.assertEqual(counts, ["9", "0", "2"], out)  # 3 cases x 2 threads, a script, 2 MPI cases
        self.assertIn("fake: 9 passed, 0 failed, 2 skipped (expected 11)", out)
        self.assertIn("skip Gpu.Runs.threads1: no GPU here", out)

    def test_the_projects_discovery_registers_every_case_and_skips_by_exit_code(self):
        self.build.discovered("test_a", {"list": CASES + ["Gpu.Runs"], "cases": {"Gpu.Runs": "skip"}})
        self.build.write()
        rc, out, counts = self.build.step()
        self.assertEqual(rc, 0, out)
        self.assertEqual(counts, ["6", "0", "2"], out)
        self.assertIn("skip Gpu.Runs.threads2: no GPU here", out)
        self.assertRegex(out, r"Test +#\d+: P/Param.Works/0.threads2 [.]+ +Passed")

    def test_the_projects_discovery_fails_a_skip_with_a_non_zero_exit(self):
        self.build.discovered("test_a", {"list": CASES, "cases": {"Math.Adds": "skip_then_leak"}})
        self.build.write()
        self.failing("FAIL Math.Adds.threads1", "FAIL Math.Adds.threads2")

    def test_the_projects_discovery_fails_a_binary_whose_listing_fails(self):
        self.build.discovered("test_a", {"list": CASES, "list_fails": True})
        self.build.write()
        self.failing("FAIL test_a.listing", "test binary test_a: --gtest_list_tests exited with 1")

    def test_a_failed_test_is_named(self):
        self.build.binary("test_a", {"list": CASES, "cases": {"Math.Adds": "fail"}})
        self.build.write()
        self.failing("FAIL Math.Adds.threads1", "FAIL Math.Adds.threads2")

    def test_a_crashed_test_is_named(self):
        self.build.binary("test_a", {"list": CASES, "cases": {"Math.Subtracts": "crash"}})
        self.build.write()
        self.failing("FAIL Math.Subtracts.threads2")

    def test_a_timed_out_test_is_named(self):
        self.build.binary("test_a", {"list": ["Slow.Hangs"], "cases": {"Slow.Hangs": "hang"}},
                          threads=("2",))
        self.build.write()
        self.failing("FAIL Slow.Hangs (timed out)")

    def test_a_missing_binary_fails(self):
        self.build.binary("test_a", {"list": CASES})
        self.build.binary("test_b", {"list": ["B.Runs"]}, build=False, registered=[])
        self.build.write()
        self.failing("test binary test_b is missing")

    def test_a_listing_that_fails_fails(self):
        self.build.binary("test_a", {"list": CASES, "list_fails": True}, registered=[])
        self.build.write()
        self.failing("test binary test_a: --gtest_list_tests exited with 1")

    def test_an_extra_test_is_named(self):
        self.build.binary("test_a", {"list": CASES}, registered=CASES + ["Math.Extra"])
        self.build.write()
        self.failing("do not expect: Math.Extra.threads1, Math.Extra.threads2")

    def test_a_missing_test_is_named(self):
        self.build.binary("test_a", {"list": CASES}, registered=CASES[1:])
        self.build.write()
        self.failing("2 expected tests did not run: Math.Adds.threads1, Math.Adds.threads2")

    def test_a_missing_test_and_an_extra_one_do_not_cancel_out(self):
        self.build.binary("test_a", {"list": CASES}, registered=CASES[1:] + ["Math.Extra"])
        self.build.write()
        out = self.failing("expected tests did not run: Math.Adds.threads1",
                           "do not expect: Math.Extra.threads1")
        self.assertIn("(expected 6)", out)

    def test_a_test_registered_at_other_thread_counts_is_caught(self):
        # The manifest says 1 and 2 threads; the registration runs 2 and 4.
        path = self.build.binary("test_a", {"list": ["Math.Adds"]}, threads=("2", "4"))
        self.build.manifest[-1] = f"gtest\t{path}\t2\t1 2"
        self.build.write()
        self.failing("expected tests did not run: Math.Adds.threads1",
                     "do not expect: Math.Adds.threads4")

    def test_a_skip_with_a_non_zero_exit_fails(self):
        self.build.binary("test_a", {"list": CASES, "cases": {"Math.Adds": "skip_then_leak"}})
        self.build.write()
        self.failing("FAIL Math.Adds.threads1")

    def test_a_skip_pattern_in_the_registration_fails(self):
        self.build.binary("test_a", {"list": CASES}, skip_regex="\\[  SKIPPED \\]")
        self.build.write()
        self.failing("registered with SKIP_REGULAR_EXPRESSION")

    def test_a_test_that_did_not_start_is_not_a_skip(self):
        self.build.binary("test_a", {"list": CASES})
        self.build.plain("script", [os.path.join(self.dir, "no-such-script.sh")])
        self.build.write()
        self.failing("script did not run (Unable to find executable")

    def test_an_mpi_filter_that_lists_no_case_fails(self):
        self.build.mpi("mpi_x", "test_mpi", {"list": ["Dp.One"]}, "Renamed.*")
        self.build.write()
        self.failing("mpi_x: test binary test_mpi lists no test for --gtest_filter=Renamed.* "
                     "(a run of none)")

    def test_an_mpi_case_that_fails_on_one_rank_is_named(self):
        self.build.mpi("mpi_x", "test_mpi", {"list": ["Dp.One", "Dp.Two"], "mpi": {
            "rank_cases": {"1": {"Dp.Two": "fail"}}, "exit": 1}}, "Dp.*")
        self.build.write()
        out = self.failing("FAIL mpi_x: Dp.Two (rank 1: fail)")
        self.assertIn("fake: 1 passed, 1 failed", out)

    def test_an_mpi_rank_without_a_report_fails(self):
        self.build.mpi("mpi_x", "test_mpi", {"list": ["Dp.One"], "mpi": {"silent_ranks": [1]}},
                       "Dp.*")
        self.build.write()
        self.failing("mpi_x: rank 1 wrote no readable report", "FAIL mpi_x: Dp.One")

    def test_an_mpi_run_that_exits_non_zero_after_passing_cases_fails(self):
        self.build.mpi("mpi_x", "test_mpi", {"list": ["Dp.One"], "mpi": {"exit": 3}}, "Dp.*")
        self.build.write()
        self.failing("mpi_x: the run ended with status 'fail' although every case passed")

    def test_an_mpi_case_outside_the_filter_fails(self):
        self.build.mpi("mpi_x", "test_mpi", {"list": ["Dp.One"], "mpi": {"extra": ["Dp.Ghost"]}},
                       "Dp.*")
        self.build.write()
        self.failing("mpi_x: cases ran that its filter does not list: Dp.Ghost")

    def test_a_narrowing_variable_fails(self):
        self.build.binary("test_a", {"list": CASES})
        self.build.write()
        for variable in ("GTEST_FILTER", "GTEST_REPEAT", "GTEST_TOTAL_SHARDS", "GTEST_SHARD_INDEX",
                         "REFORMER_TEST_SANITIZED", "KOKKOS_NUM_THREADS"):
            with self.subTest(variable=variable):
                self.failing(f"{variable}=1 is set", env={variable: "1"})

    def test_a_missing_manifest_fails(self):
        self.build.binary("test_a", {"list": CASES})
        self.build.write(manifest=False)
        self.failing("test_manifest.txt is missing")

    def test_a_manifest_without_thread_counts_fails(self):
        self.build.binary("test_a", {"list": CASES}, manifest_threads=False)
        self.build.write()
        self.failing("a gtest line needs its thread counts")

    def test_a_manifest_whose_thread_counts_disagree_fails(self):
        path = self.build.binary("test_a", {"list": CASES})
        self.build.manifest[-1] = f"gtest\t{path}\t2\t1"
        self.build.write()
        self.failing("a gtest line needs its thread counts")

    def test_a_stale_result_is_removed_before_the_step(self):
        self.build.binary("test_a", {"list": CASES, "list_fails": True}, registered=[])
        self.build.write()
        with open(os.path.join(self.dir, "result.txt"), "w") as f:
            f.write("900 0 0\n")
        rc, out, counts = self.build.step()
        self.assertNotEqual(rc, 0)
        self.assertNotEqual(counts, ["900", "0", "0"], out)

    def test_a_step_that_crashes_leaves_no_result(self):
        # ctest missing from PATH: the step ends in a traceback before it counts.
        self.build.binary("test_a", {"list": CASES})
        self.build.write()
        with open(os.path.join(self.dir, "result.txt"), "w") as f:
            f.write("900 0 0\n")
        rc, out, counts = self.build.step(env={"PATH": os.path.join(self.dir, "no-bin")})
        self.assertNotEqual(rc, 0, out)
        self.assertIsNone(counts, out)

    def wrapped_ctest(self, body):
        """A PATH whose ctest runs the real one for --show-only and `body` otherwise."""
        real = shutil.which("ctest")
        bin_dir = os.path.join(self.dir, "bin")
        os.makedirs(bin_dir)
        with open(os.path.join(bin_dir, "ctest"), "w") as f:
            f.write(f'#!/bin/sh\ncase "$*" in *--show-only*) exec {real} "$@";; esac\n{body}\n')
        os.chmod(os.path.join(bin_dir, "ctest"), 0o755)
        return {"PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}

    def test_ctest_failing_with_every_test_passed_fails(self):
        self.build.binary("test_a", {"list": CASES})
        self.build.write()
        env = self.wrapped_ctest(f'{shutil.which("ctest")} "$@"; exit 8')
        self.failing("ctest exited with 8 although no test failed", env=env)

    def test_ctest_without_a_report_fails(self):
        self.build.binary("test_a", {"list": CASES})
        self.build.write()
        env = self.wrapped_ctest("echo 100% tests passed; exit 0")
        self.failing("ctest wrote no report", env=env)


def run_steps(script, env=None):
    """Runs bash `script` after sourcing steps.sh; returns (status, output, summary, failures)."""
    d = tempfile.mkdtemp(prefix="harness-steps-")
    try:
        prelude = textwrap.dedent(f"""\
            set -uo pipefail
            summary={d}/summary.txt failures={d}/failures.txt
            : >"$summary"; : >"$failures"
            passed=0 failed=0 skipped=0 step_start=$(date +%s)
            source {STEPS_SH}
            """)
        run = subprocess.run(["bash", "-c", prelude + script.replace("@D", d)], capture_output=True,
                             text=True, env=clean_env(env))
        texts = []
        for name in ("summary.txt", "failures.txt"):
            with open(os.path.join(d, name)) as f:
                texts.append(f.read())
        return (run.returncode, run.stdout + run.stderr, *texts)
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Steps(unittest.TestCase):
    def test_a_crash_after_a_stale_result_fails(self):
        # A result left by an earlier run ("900 0 0") and a step that crashes.
        status, out, summary, failures = run_steps(
            'echo "900 0 0" >@D/result.txt\n'
            'run_counted "OpenMP ctest" @D/result.txt /bin/sh -c "kill -SEGV \\$\\$"\n'
            'echo "totals $passed $failed"')
        self.assertIn("totals 0 1", out)
        self.assertIn("FAIL OpenMP ctest: sh ended without a result (exit status 139)", failures)

    def test_a_failing_exit_with_no_failure_counted_fails(self):
        status, out, summary, failures = run_steps(
            'run_counted "OpenMP ctest" @D/result.txt /bin/sh -c "echo 5 0 0 >@D/result.txt; exit 2"\n'
            'echo "totals $passed $failed"')
        self.assertIn("totals 5 1", out)
        self.assertIn("exited with status 2 but counted no failure", failures)

    def test_counted_failures_with_a_zero_exit_still_fail(self):
        status, out, summary, failures = run_steps(
            'run_counted "OpenMP ctest" @D/result.txt /bin/sh -c "echo 5 2 0 >@D/result.txt"\n'
            'echo "totals $passed $failed"')
        self.assertIn("totals 5 2", out)
        self.assertIn("counted 2 failures but exited with status 0", failures)

    def test_a_good_step_is_recorded(self):
        status, out, summary, failures = run_steps(
            'run_counted "OpenMP ctest" @D/result.txt /bin/sh -c "echo 7 0 1 >@D/result.txt"\n'
            'echo "totals $passed $failed $skipped"\n'
            '[ ! -e @D/result.txt ] && echo "result removed"')
        self.assertIn("totals 7 0 1", out)
        self.assertIn("result removed", out)
        self.assertEqual(failures, "")
        self.assertRegex(summary, r"OpenMP ctest +7 +0 +1")

    def test_run_ctest_goes_through_ctest_step_and_its_result(self):
        d = tempfile.mkdtemp(prefix="harness-build-")
        try:
            build = FakeBuild(d)
            build.binary("test_a", {"list": CASES, "cases": {"Math.Adds": "fail"}})
            build.write()
            status, out, summary, failures = run_steps(
                f'echo "900 0 0" >{d}/result.txt\n'
                f'run_ctest "OpenMP ctest" {d} --jobs 2\n'
                'echo "totals $passed $failed"')
            self.assertIn("totals 4 2", out)
            self.assertIn("FAIL OpenMP ctest: Math.Adds.threads1", failures)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_narrowing_variables_are_cleared_and_named(self):
        status, out, summary, failures = run_steps(
            'clear_narrowing\n'
            'echo "cleared: $cleared"\n'
            'echo "left: ${GTEST_FILTER-unset} ${REFORMER_CHUNK_PRODUCTS-unset} '
            '${KOKKOS_NUM_THREADS-unset} ${REFORMER_BACKENDS-unset}"',
            env={"GTEST_FILTER": "Math.*", "GTEST_REPEAT": "0", "REFORMER_CHUNK_PRODUCTS": "batched",
                 "KOKKOS_NUM_THREADS": "1", "REFORMER_BACKENDS": "openmp",
                 "REFORMER_TEST_SANITIZED": "1"})
        self.assertIn("cleared: GTEST_FILTER GTEST_REPEAT KOKKOS_NUM_THREADS "
                      "REFORMER_CHUNK_PRODUCTS REFORMER_TEST_SANITIZED", out)
        self.assertIn("left: unset unset unset openmp", out)


def main():
    args = sys.argv[1:]
    result = None
    if "--result" in args:
        i = args.index("--result")
        result = args[i + 1]
        del args[i:i + 2]
    if shutil.which("ctest") is None:
        print("harness self-tests: ctest is not on PATH")
        if result:
            with open(result, "w") as f:
                f.write("0 1 0\n")
        return 1
    program = unittest.main(argv=[sys.argv[0]] + args, exit=False, verbosity=2)
    r = program.result
    bad = len(r.failures) + len(r.errors) + len(r.unexpectedSuccesses)
    good = r.testsRun - bad - len(r.skipped)
    print(f"harness self-tests: {good} passed, {bad} failed, {len(r.skipped)} skipped "
          f"(expected {r.testsRun})")
    if result:
        with open(result, "w") as f:
            f.write(f"{good} {bad} {len(r.skipped)}\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
