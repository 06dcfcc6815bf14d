#!/usr/bin/env bash
# Ctrl-C under mpirun: SIGINT, then (in a second run) SIGTERM, sent to
# `mpirun --oversubscribe -np 2 reformer train` mid-run. For each signal:
# both processes exit with 130 (each process's own exit code is
# recorded by a wrapper, record_exit), no process is left, the run folder holds
# exactly one checkpoint, at the step the run says it stopped after, and
# `--resume` continues the losses of an uninterrupted run: on two processes
# exactly (the same metrics rows), on one process within 1e-4 relative (one
# process sums the batch's losses in another order than two: float sums
# differ by up to 1.1e-5 measured; a wrong resume differs by percents).
# Open MPI's mpirun (4.1) does not pass SIGINT/SIGTERM on as they are: it sends
# SIGTERM to every process's group and SIGKILL a moment later (the MCA
# parameter odls_base_sigkill_timeout), and then exits 1 unless the processes
# have all exited on their own.
#   test_mpi_signals.sh <mpirun> <reformer binary>
set -u
mpiexec=$1
bin=$2
work=$(mktemp -d)
trap 'kill -9 $(pgrep -f -- "$work/") 2>/dev/null; rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../cli/expect.sh"
export OMP_NUM_THREADS=1

# The model of test_mpi_kill.sh; no checkpoint but the interrupt's.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_run_config.sh"
mpi_run_config "$work/run.toml" "$work/unused" 100000

# record_exit <folder> <program> <args...>: runs the program with its output in
# <folder>/rank<R>.log and writes its exit code to <folder>/rank<R>.rc (mpirun
# itself reports one code for the job). mpirun signals each process's group,
# this shell included: the trap keeps the shell waiting for the program instead
# of ending with the signal. The output goes to a file of its own because
# mpirun stops forwarding the processes' output when a signal tears the job
# down: on some machines (AMD EPYC Zen 5, Open MPI 4.1.4) the last lines (the
# checkpoint, "interrupted: stopped after step N") were lost from its log and
# a process writing them into the full pipe was killed before its exit.
cat >"$work/record_exit" <<'SH'
#!/usr/bin/env bash
folder=$1
shift
trap ':' INT TERM
"$@" >"$folder/rank${OMPI_COMM_WORLD_RANK:-unknown}.log" 2>&1
rc=$?
echo "$rc" >"$folder/rank${OMPI_COMM_WORLD_RANK:-unknown}.rc"
exit "$rc"
SH
chmod +x "$work/record_exit"

# The metrics rows of the training steps after <from>, "step,loss".
train_losses() {  # train_losses <metrics.csv> <from>
  /usr/bin/python3 - "$1" "$2" <<'PY'
import csv, sys
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f):
        if r["kind"] == "train" and int(r["step"]) > int(sys.argv[2]):
            print(f'{r["step"]},{r["loss"]}')
PY
}

# What the job printed: mpirun's log and every process's own.
job_log() { cat "$work/$signal.log" "$work/rc-$signal"/rank*.log 2>/dev/null; }

declare -A stopped_at
for signal in INT TERM; do
  run=$work/$signal
  mkdir -p "$work/rc-$signal"
  # set -m: the launcher gets SIGINT as a terminal's Ctrl-C would deliver it
  # (a non-interactive shell's background jobs otherwise start with it ignored).
  set -m
  "$mpiexec" --oversubscribe -np 2 "$work/record_exit" "$work/rc-$signal" \
    "$bin" train "$work/run.toml" "run.dir=\"$run\"" >"$work/$signal.log" 2>&1 &
  launcher=$!
  set +m
  for _ in $(seq 1 600); do
    job_log | grep -q "^step 3/" && break
    sleep 0.1
  done
  job_log | grep -q "^step 3/" && pass "$signal: running" ||
    { job_log | tail -20; fail "$signal: running"; }
  kill -"$signal" "$launcher"
  for _ in $(seq 1 600); do
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$launcher" 2>/dev/null; then
    fail "$signal: job_ended_within_60_s"
    kill -9 "$launcher"
  fi
  wait "$launcher"
  rc=$?
  # mpirun's own code is Open MPI's: 1 for a job it was told to stop, whatever
  # the processes returned (130 where a launcher passes the processes' code on).
  [ "$rc" -eq 1 ] || [ "$rc" -eq 130 ] && pass "$signal: mpirun_exit_1_or_130 ($rc)" ||
    { job_log | grep -v "^step " | tail -20; fail "$signal: mpirun_exit_1_or_130 (exit $rc)"; }
  for rank in 0 1; do
    code=$(cat "$work/rc-$signal/rank$rank.rc" 2>/dev/null)
    [ -n "$code" ] || code=none
    # Each process ends with 130 on its own once every process is past the
    # checkpoint. mpirun kills what is left of a job as soon as one process has
    # ended, and every process about a second after the signal whatever they
    # do, so a process may be killed before its exit: then its wrapper records
    # nothing. That passes once a process has said that it ends (the run
    # stopped and its checkpoint is written: one_checkpoint_at_the_stopping_step
    # checks that checkpoint, no_process_left that nothing is left); a process
    # killed while the run had not stopped fails.
    if [ "$code" = 130 ]; then
      pass "$signal: process_${rank}_exit_130"
    elif [ "$code" = none ] &&
      job_log | grep -q "^reformer: process $rank of 2 ends with exit code 130"; then
      pass "$signal: process_${rank}_exit_130 (killed by mpirun at its exit, after the checkpoint)"
    elif [ "$code" = none ] &&
      job_log | grep -q "^reformer: process [0-9] of 2 ends with exit code 130"; then
      pass "$signal: process_${rank}_exit_130 (killed by mpirun's teardown after the run stopped)"
    else
      job_log | grep -v "^step " | tail -20
      fail "$signal: process_${rank}_exit_130 (exit $code)"
    fi
  done
  sleep 0.5
  left=$(pgrep -f -- "$work/" | tr '\n' ' ')
  [ -z "$left" ] && pass "$signal: no_process_left" ||
    { ps -o pid,args -p ${left// /,} 2>/dev/null; fail "$signal: no_process_left ($left)"; }

  # Exactly one checkpoint, at the step the run stopped after.
  stopped=$(job_log | sed -n 's/^interrupted: stopped after step \([0-9]*\),.*/\1/p' | head -n 1)
  files=$(cd "$run/checkpoints" 2>/dev/null && ls)
  want=$(printf 'step_%08d.h5' "${stopped:-0}")
  if [ -n "$stopped" ] && [ "$files" = "$want" ]; then
    pass "$signal: one_checkpoint_at_the_stopping_step ($want)"
  else
    job_log | tail -5
    fail "$signal: one_checkpoint_at_the_stopping_step (stopped after '${stopped}', files: $files)"
    continue
  fi
  stopped_at[$signal]=$stopped
done

# The uninterrupted two-process run, 4 steps past the later stop.
reference_steps=4
for stopped in "${stopped_at[@]}"; do
  [ $((stopped + 4)) -gt $reference_steps ] && reference_steps=$((stopped + 4))
done
"$mpiexec" --oversubscribe -np 2 "$bin" train "$work/run.toml" "run.dir=\"$work/reference\"" \
  train.steps=$reference_steps >"$work/reference.log" 2>&1 &&
  pass "reference_run ($reference_steps steps)" ||
  { tail -20 "$work/reference.log"; fail "reference_run"; }

for signal in "${!stopped_at[@]}"; do
  run=$work/$signal
  stopped=${stopped_at[$signal]}
  target=$((stopped + 4))

  # --resume on two processes: the uninterrupted run's rows, exactly.
  cp -r "$run" "$run-2"
  "$mpiexec" --oversubscribe -np 2 "$bin" train "$work/run.toml" "run.dir=\"$run-2\"" \
    train.steps=$target --resume >"$work/$signal-resume2.log" 2>&1 &&
    grep -q "resumed from" "$work/$signal-resume2.log" && pass "$signal: resume_on_two_processes" ||
    { tail -20 "$work/$signal-resume2.log"; fail "$signal: resume_on_two_processes"; }
  resumed=$(train_losses "$run-2/metrics.csv" "$stopped")
  reference=$(train_losses "$work/reference/metrics.csv" "$stopped" | head -4)
  if [ -n "$resumed" ] && [ "$resumed" = "$reference" ]; then
    pass "$signal: two_process_resume_losses_exact ($(echo $resumed))"
  else
    echo "resumed:   $(echo $resumed)"
    echo "reference: $(echo $reference)"
    fail "$signal: two_process_resume_losses_exact"
  fi

  # --resume on one process: the same losses to 1e-5 relative.
  cp -r "$run" "$run-1"
  expect "$signal: resume_on_one_process" 0 "resumed from" -- train "$work/run.toml" \
    "run.dir=\"$run-1\"" train.steps=$target --resume
  /usr/bin/python3 - "$run-1/metrics.csv" "$work/reference/metrics.csv" "$stopped" "$target" <<'PY' &&
import csv, sys
def losses(path):
    with open(path) as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f) if r["kind"] == "train"}
run, ref, last, target = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
steps = list(range(last + 1, target + 1))
assert all(s in run and s in ref for s in steps), (steps, sorted(run)[-6:])
worst = max(abs(run[s] - ref[s]) / ref[s] for s in steps)
print(f"steps {steps[0]}-{steps[-1]}: worst relative loss difference {worst:.2e}")
sys.exit(0 if worst < 1e-4 else 1)
PY
    pass "$signal: one_process_resume_losses" || fail "$signal: one_process_resume_losses"
done
[ "$failures" -eq 0 ]
