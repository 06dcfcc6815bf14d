#!/usr/bin/env bash
# A run never destroys what it saved, and bad input gets a clear message, through
# the `reformer` program: the divergence guard, non-finite and damaged
# checkpoints (edited with h5py, nothing on disk changed by the refusal), the
# run-folder lock, FIFOs, the memory check before work, the unclear inputs of
# the outside audits, and SIGKILLs during restarts (restart_kill.py).
#   test_run_safety.sh <reformer binary> <python with h5py>
set -u
bin=$1
python=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
source "$here/expect.sh"
export OMP_NUM_THREADS=1

# The config of test_train_cli.sh (12 steps, checkpoints every 3, 2 kept).
sed -n '/^cat >"$work\/tiny.toml" <<TOML$/,/^TOML$/p' "$here/test_train_cli.sh" | sed '1d;$d' |
  sed "s#\$work#$work#g" >"$work/tiny.toml"
grep -q '^steps = 12' "$work/tiny.toml" || { echo "FAIL cannot extract tiny.toml"; exit 1; }
dir() { echo "run.dir=\"$work/$1\""; }
# Every file of a run folder (but the lock) with its checksum.
snapshot() { (cd "$1" && find . -type f ! -name .lock -exec md5sum {} + | sort); }

# ---- divergence: stops naming the step, the newest checkpoint is finite and kept
expect diverges 1 "diverged" -- train "$work/tiny.toml" "$(dir diverge)" train.learning_rate=1e30 \
  train.steps=30 train.checkpoint_every=1 train.keep_checkpoints=1
n=$(ls "$work/diverge/checkpoints/"*.h5 2>/dev/null | wc -l)
[ "$n" -eq 1 ] && pass "finite_checkpoint_kept" || fail "finite_checkpoint_kept (found $n)"
expect eval_after_divergence 0 "accuracy" -- eval "$work/diverge" --batches 1
# Diverged before any checkpoint: nothing to resume, and the message says so.
expect diverges_first 1 "The run has no checkpoint yet" -- train "$work/tiny.toml" \
  "$(dir diverge_first)" train.learning_rate=1e30 train.steps=30 train.checkpoint_every=100

# ---- a good run, then copies of it damaged in one way each
"$bin" train "$work/tiny.toml" "$(dir good)" >/dev/null 2>&1 || fail "good_run"
newest=checkpoints/step_00000012.h5
damaged() {  # damaged <name> <python statement on f (h5py.File of the newest checkpoint)>
  rm -rf "$work/$1"
  cp -r "$work/good" "$work/$1"
  "$python" -c "import h5py, numpy as np
f = h5py.File('$work/$1/$newest', 'r+')
$2
f.close()" || fail "h5py edit for $1"
}
# refused <name> <text> <exit code>: eval and --resume refuse with the same
# code, nothing on disk changes. Both exit 2 when they find the damage while
# checking their input (the metadata) before any work, 1 when loading the
# values.
refused() {
  local before
  before=$(snapshot "$work/$1")
  expect "eval_$1" "$3" "$2" -- eval "$work/$1" --batches 1
  expect "resume_$1" "$3" "$2" -- train "$work/tiny.toml" "$(dir "$1")" train.steps=20 --resume
  [ "$(snapshot "$work/$1")" = "$before" ] && pass "unchanged_$1" || fail "unchanged_$1"
}
damaged nan "d = f['parameters/embed.table']; a = d[...]; a[1, 2] = np.nan; d[...] = a"
refused nan 'parameter "embed.table" holds 1 non-finite value' 1
damaged config_edit "c = f['config'][()]; c = c.decode() if isinstance(c, bytes) else c
del f['config']; f['config'] = c.replace('n_hashes = 2', 'n_hashes = 4')"
refused config_edit "is damaged" 2
damaged step_3 "f.attrs.modify('step', 3)"
refused step_3 "is damaged" 2
damaged step_huge "f.attrs.modify('step', 2**62)"
refused step_huge "is damaged" 2
rm -rf "$work/folder" && cp -r "$work/good" "$work/folder"
rm "$work/folder/$newest" && mkdir "$work/folder/$newest"
refused folder "step_00000012.h5\" is a directory" 2
rm -rf "$work/dangling" && cp -r "$work/good" "$work/dangling"
rm "$work/dangling/$newest" && ln -s "$work/nowhere.h5" "$work/dangling/$newest"
refused dangling "step_00000012.h5\": No such file" 2
# Renamed: the name says another step than the file holds (eval read it as it was).
rm -rf "$work/renamed" && cp -r "$work/good" "$work/renamed"
mv "$work/renamed/$newest" "$work/renamed/checkpoints/step_00000099.h5"
refused renamed "holds step 12 but its name says step 99" 2

# ---- run.dir naming a file is a config error (it read as a full disk)
expect run_dir_is_a_file 2 "which is a file, not a folder" -- train "$work/tiny.toml" \
  "run.dir=\"$work/tiny.toml\""
# ---- one train per run folder: the second exits at once naming the first's pid
"$bin" train "$work/tiny.toml" "$(dir locked)" train.steps=1000000 train.log_every=1 \
  >"$work/locked.log" 2>&1 &
first=$!
for _ in $(seq 1 200); do
  grep -q "^step " "$work/locked.log" 2>/dev/null && break
  sleep 0.05
done
start=$(date +%s%N)
expect locked_resume 1 "in use by process $first" -- train "$work/tiny.toml" "$(dir locked)" \
  train.steps=1000000 --resume
expect locked_fresh 1 "in use by process $first" -- train "$work/tiny.toml" "$(dir locked)" \
  train.seed=9
ms=$((($(date +%s%N) - start) / 1000000))
# Wall-clock bounds only where the binary runs at full speed (not under ASan).
if sanitized; then
  echo "skip locked_within_a_second_each ($ms ms for both; sanitizer build, no time bound)"
elif [ $ms -lt 2000 ]; then
  pass "locked_within_a_second_each ($ms ms for both)"
else
  fail "locked_within_a_second_each ($ms ms for both)"
fi
kill -0 $first 2>/dev/null && pass "first_run_goes_on" || fail "first_run_goes_on"
kill -INT $first
wait $first
rc=$?
[ $rc -eq 130 ] && pass "first_run_stops_cleanly" || fail "first_run_stops_cleanly (exit $rc)"
expect eval_while_unlocked 0 "accuracy" -- eval "$work/locked" --batches 1

# ---- special files: refused at once, never opened for reading
mkfifo "$work/fifo.toml" "$work/fifo.txt"
expect fifo_config 2 "is a FIFO (named pipe), not a regular file" -- train "$work/fifo.toml"
expect fifo_data 2 "is not a regular file" -- train "$work/tiny.toml" 'data.task="bytes"' \
  "data.path=\"$work/fifo.txt\"" data.vocab=256 model.vocab=256 "$(dir fifo)"
expect device_config 2 "is a character device" -- train /dev/zero
# Opening the FIFO would block for ever: the refusal must come without a writer
# (exit 2, not the time-out's 124), and within a second at full speed.
start=$(date +%s%N)
timeout 30 "$bin" train "$work/fifo.toml" >/dev/null 2>&1
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
[ $rc -eq 2 ] && pass "fifo_never_opened (exit $rc)" || fail "fifo_never_opened (exit $rc, want 2)"
if sanitized; then
  echo "skip fifo_within_a_second ($ms ms; sanitizer build, no time bound)"
elif [ $ms -lt 1000 ]; then
  pass "fifo_within_a_second ($ms ms)"
else
  fail "fifo_within_a_second ($ms ms)"
fi

# ---- memory: predicted and checked before any allocation, nothing created
expect memory_full_attention 1 "needs about" -- train "$work/tiny.toml" "$(dir huge)" \
  'model.attention=["full"]' 'model.positions="sinusoidal"' data.length=2097152 \
  model.max_length=2097152
expect memory_names_keys 1 "lower train.batch or data.length" -- train "$work/tiny.toml" \
  "$(dir huge)" 'model.attention=["full"]' 'model.positions="sinusoidal"' data.length=2097152 \
  model.max_length=2097152
[ ! -e "$work/huge" ] && pass "memory_nothing_created" || fail "memory_nothing_created"
expect memory_wide_model 1 "parameters, gradients and Adam moments" -- train "$work/tiny.toml" \
  "$(dir wide)" model.d_model=1000000 model.d_ff=1000000

# ---- the unclear inputs of the audits, each with a message naming value and rule
expect resume_beyond_steps 2 "is at step 12 but train.steps is 6" -- train "$work/tiny.toml" \
  "$(dir good)" train.steps=6 --resume
expect seed_negative 2 "--seed: Value -1 not in range" -- generate "$work/good" --seed -1
expect keep_overflow 2 "train.keep_checkpoints is 2147483648 but must be in [1, 1000000]" -- \
  train "$work/tiny.toml" train.keep_checkpoints=2147483648
expect heads_overflow 2 "model.heads * model.d_head = 4294967296 * 4294967296 overflows" -- \
  train "$work/tiny.toml" model.heads=4294967296 model.d_head=4294967296
expect axial_overflow 2 "[5, 3689348814741910336] but its product overflows" -- \
  train "$work/tiny.toml" 'model.positions="axial"' 'model.axial_shape=[5,3689348814741910336]'
expect prompt_id_too_large 2 "token 99999999999 is too large to be a token id" -- \
  generate "$work/good" --prompt "1 99999999999"
# Ten digits that fit an int are an id, refused by the vocabulary, not by size.
expect prompt_id_ten_digits 2 "prompt token 1000000000 is outside the vocabulary" -- \
  generate "$work/good" --prompt "1 1000000000"
# An override after a multi-value option is an override (here a typo'd key, so
# the message proves where it went), not a variant name or a length.
expect memory_variants_then_override 2 "model.d_modle" -- memory --variants lsh-2 \
  model.d_modle=32 --lengths 64 --out "$work/mem"
expect memory_lengths_then_override 2 "model.d_modle" -- memory --variants lsh-2 --lengths 64 \
  model.d_modle=32 --out "$work/mem"
expect memory_lengths_not_integer 2 "--lengths has 'x64', which is not an integer" -- \
  memory --lengths x64 --out "$work/mem"
expect memory_override_applied 0 "wrote" -- memory --variants lsh-2 model.d_model=32 \
  --lengths 64 --steps 0 --out "$work/mem"
grep -q "^lsh-2,64," "$work/mem/sweep.csv" && pass "memory_override_point" ||
  fail "memory_override_point"
# An empty item is refused, not dropped; an override's own commas stay its own.
expect memory_lengths_empty_item 2 "--lengths has an empty item in '64,,128'" -- \
  memory --lengths 64,,128 --out "$work/mem"
expect memory_variants_trailing_comma 2 "--variants has an empty item in 'lsh-2,'" -- \
  memory --variants lsh-2, --lengths 64 --out "$work/mem"
expect memory_precision_then_override 2 "model.d_modle" -- memory --variants lsh-2 --lengths 64 \
  --precision float32 model.d_modle=32 --out "$work/mem"
expect memory_list_override_after_variants 0 "wrote" -- memory --variants full,lsh-2 \
  'model.lsh={n_hashes=1,chunk=32}' --lengths 64 --steps 0 --out "$work/mem_list"
expect memory_tokens_too_many 2 "--tokens: Value 99999999999999999999 not in range" -- memory --tokens 99999999999999999999 --lengths 64 \
  --out "$work/mem"
expect budget_inf 2 "'inf' is not a positive number of GiB (finite" -- memory --budget-gib inf

# ---- SIGKILLs during restarts and checkpoint writes
if "$python" "$here/restart_kill.py" "$bin" "$work/tiny.toml" "$work"; then
  pass "restart_kill"
else
  fail "restart_kill"
fi
[ "$failures" -eq 0 ]
