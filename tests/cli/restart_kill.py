"""SIGKILL at random moments of a restart (`reformer train --resume`) with a large
metrics file, 20 times: no metrics row up to the checkpoint's step is ever lost,
and the next start removes every temporary file a killed process left. Then the
same for kills while the trainer writes a checkpoint at every step.

Every other kill is timed by what the script sees instead of a random delay: it
waits until the writer's temporary file (metrics.csv.tmp.<pid> or a checkpoint's
.tmp.<pid>) exists and kills then. Each part fails unless at least one of its
kills landed mid-write (the temporary file is still there after the kill): kills
that all fell between writes would prove nothing.

The random delays come from a fixed seed; REFORMER_TEST_SEED=<n> replays or
changes it (the seed is printed first and with every failure).

usage: restart_kill.py <reformer binary> <tiny run config (TOML)> <work folder>
"""
import collections
import glob
import os
import random
import signal
import subprocess
import sys
import time

binary, toml, work = sys.argv[1:4]
seed = int(os.environ.get("REFORMER_TEST_SEED") or 20240611)
rng = random.Random(seed)
replay = f"seed {seed}, replay: REFORMER_TEST_SEED={seed}"
print(f"random {replay}")
env = dict(os.environ, OMP_NUM_THREADS="1", OMP_PROC_BIND="false")
run = os.path.join(work, "restart")
metrics = os.path.join(run, "metrics.csv")
failures = []


def train(*extra, resume=False, wait=True):
    args = [binary, "train", toml, f'run.dir="{run}"', "train.log_every=1", *extra]
    if resume:
        args.append("--resume")
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if wait:
        out = p.communicate()[0]
        if p.returncode != 0:
            sys.exit(f"FAIL train {' '.join(extra)} exited {p.returncode} ({replay}):\n{out}")
        return out
    return p


def rows():
    with open(metrics) as f:
        return f.read().splitlines()


def step_of(row):
    head = row.split(",", 1)[0]
    return int(head) if head.isdigit() else -1


def temporaries():
    return glob.glob(os.path.join(run, "*.tmp.*")) + glob.glob(
        os.path.join(run, "checkpoints", "*.tmp.*"))


def kill_when(p, wanted, random_delay):
    """SIGKILLs `p`: after `random_delay` seconds when that is not None, else as
    soon as a temporary file that `wanted` accepts exists (at most 5 s)."""
    if random_delay is not None:
        time.sleep(random_delay)
    else:
        deadline = time.monotonic() + 5
        while (p.poll() is None and time.monotonic() < deadline
               and not any(wanted(t) for t in temporaries())):
            time.sleep(0.0005)
    p.send_signal(signal.SIGKILL)
    p.communicate()


# A run at step 12 with a checkpoint there, and a metrics file of about 10 MB:
# 250,000 rows up to step 12 and rows of steps 13-20 that a restart must drop
# (so every restart rewrites the file).
train("train.steps=12", "train.checkpoint_every=12", "train.eval_every=0")
header, *logged = rows()
filler = [f"{1 + i % 12},train,{i},0,0,0,0,0,0,0,0,0,0,0" for i in range(250000)]
later = [f"{s},train,9,0,0,0,0,0,0,0,0,0,0,0" for s in range(13, 21)]
with open(metrics, "a") as f:
    f.write("\n".join(filler + later) + "\n")
kept = collections.Counter(r for r in [header] + logged + filler)
print(f"metrics.csv: {os.path.getsize(metrics)} bytes, {len(kept)} distinct rows to keep")

mid_rewrite = 0
for kill in range(20):
    p = train("train.steps=100000", "train.checkpoint_every=100000", "train.eval_every=0",
              resume=True, wait=False)
    delay = rng.uniform(0.0, 0.12)
    kill_when(p, lambda t: t.startswith(metrics), delay if kill % 2 == 0 else None)
    mid_rewrite += any(t.startswith(metrics) for t in temporaries())
    now = collections.Counter(rows())
    lost = kept - now
    if lost:
        failures.append(f"kill {kill}: {sum(lost.values())} rows up to step 12 lost, "
                        f"e.g. {next(iter(lost))!r}")
print(f"20 restarts killed, {mid_rewrite} of them while the metrics file was being rewritten")
if mid_rewrite == 0:
    failures.append("no kill landed while the metrics file was being rewritten "
                    "(no metrics.csv.tmp.* left): the restart kills proved nothing")

# The next start removes what the kills left, keeps every row up to step 12 and
# replaces the dropped rows of steps 13-20 with the new run's own.
out = train("train.steps=14", "train.checkpoint_every=14", "train.eval_every=0", resume=True)
if temporaries():
    failures.append(f"temporary files survived the next start: {temporaries()}")
final = rows()
if kept - collections.Counter(final):
    failures.append("rows up to step 12 were lost by the completed restart")
tail = [r for r in final if step_of(r) > 12]
if sorted({step_of(r) for r in tail}) != [13, 14] or any(r in later for r in tail):
    failures.append(f"rows after the checkpoint: {tail}")

# Kills while a checkpoint is written at every step: the next start removes the
# killed writer's temporary file and says so.
left = 0
for kill in range(5):
    p = train("train.steps=100000", "train.checkpoint_every=1", "train.keep_checkpoints=2",
              "train.eval_every=0", resume=True, wait=False)
    delay = rng.uniform(0.3, 0.8)
    checkpoints = os.path.join(run, "checkpoints")
    kill_when(p, lambda t: t.startswith(checkpoints), delay if kill % 2 == 0 else None)
    stale = temporaries()
    left += any(t.startswith(checkpoints) for t in stale)
    p = train("train.steps=100000", "train.checkpoint_every=1", "train.keep_checkpoints=2",
              "train.eval_every=0", resume=True, wait=False)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out = p.communicate()[0]
    survivors = [t for t in stale if os.path.exists(t)]
    if survivors:
        failures.append(f"kill {kill}: {survivors} survived the next start")
    for t in stale:
        if f"removed {t}" not in out:
            failures.append(f"kill {kill}: the next start did not say it removed {t}:\n{out}")
print(f"5 trainers killed while writing checkpoints, {left} left a checkpoint's temporary file")
if left == 0:
    failures.append("no kill landed while a checkpoint was being written (no temporary "
                    "file left): the checkpoint kills proved nothing")

for f in failures:
    print("FAIL", f, f"({replay})")
if not failures:
    print("restart_kill.py: no row lost, no temporary file left")
sys.exit(1 if failures else 0)
