"""SIGKILL at random moments of a restart (`reformer train --resume`) with a large
metrics file, 20 times: no metrics row up to the checkpoint's step is ever lost,
and the next start removes every temporary file a killed process left. Then the
same for kills while the trainer writes a checkpoint at every step.

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
seed = random.randrange(1 << 30)
rng = random.Random(seed)
print(f"random seed {seed}")
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
            sys.exit(f"FAIL train {' '.join(extra)} exited {p.returncode}:\n{out}")
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
    time.sleep(rng.uniform(0.0, 0.12))
    p.send_signal(signal.SIGKILL)
    p.communicate()
    mid_rewrite += any(t.startswith(metrics) for t in temporaries())
    now = collections.Counter(rows())
    lost = kept - now
    if lost:
        failures.append(f"kill {kill}: {sum(lost.values())} rows up to step 12 lost, "
                        f"e.g. {next(iter(lost))!r}")
print(f"20 restarts killed, {mid_rewrite} of them while the metrics file was being rewritten")

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
    time.sleep(rng.uniform(0.3, 0.8))
    p.send_signal(signal.SIGKILL)
    p.communicate()
    stale = temporaries()
    left += bool(stale)
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
print(f"5 trainers killed while writing checkpoints, {left} left a temporary file")

for f in failures:
    print("FAIL", f)
if not failures:
    print("restart_kill.py: no row lost, no temporary file left")
sys.exit(1 if failures else 0)
