#!/usr/bin/env bash
# A full disk or a read-only run folder ends `reformer train` with one line on
# stderr (the path, the free space on its file system, the newest good
# checkpoint), exit code 1 and no crash, and loses nothing already saved. Each
# case runs on a small tmpfs sized from a reference run so that it fills up at
# the write under test: the config at the start, a metrics row, a checkpoint
# after good ones (fresh and --resume), and a read-only file system.
#   test_full_disk.sh <reformer binary>
# Needs root (mount); exits 77 (skipped) without it.
set -u
bin=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: mounting the small tmpfs file systems needs root (running as uid $(id -u))"
  exit 77
fi
work=$(mktemp -d)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m"; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/probe"
if ! mount -t tmpfs -o size=64k tmpfs "$work/probe" 2>"$work/probe.err"; then
  echo "SKIP: cannot mount a tmpfs here: $(cat "$work/probe.err")"
  exit 77
fi
umount "$work/probe"
source "$here/expect.sh"
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false
page=$(getconf PAGESIZE)

# The config of test_train_cli.sh (12 steps, checkpoints every 3); keep them all.
sed -n '/^cat >"$work\/tiny.toml" <<TOML$/,/^TOML$/p' "$here/test_train_cli.sh" | sed '1d;$d' |
  sed "s#\$work#$work#g" >"$work/tiny.toml"
grep -q '^steps = 12' "$work/tiny.toml" || { echo "FAIL cannot extract tiny.toml"; exit 1; }
keep=train.keep_checkpoints=100

# mount_fs <name> <pages>: a tmpfs of that many pages at $work/<name>.
mount_fs() {
  mkdir -p "$work/$1"
  mount -t tmpfs -o size=$(($2 * page)) tmpfs "$work/$1" || { echo "FAIL mount $1"; exit 1; }
  mounts+=("$work/$1")
}
pages() { echo $((($(stat -c %s "$1") + page - 1) / page)); }
# As the program writes a size (format_bytes): "0 B", "1023 B", "4.00 KiB", "1.50 MiB".
bytes_text() {
  awk -v b="$1" 'BEGIN {
    if (b < 1024) { printf "%d B", b; exit }
    split("KiB MiB GiB TiB", u, " "); v = b / 1024; i = 1
    while (v >= 1024 && i < 4) { v /= 1024; i++ }
    printf "%.2f %s", v, u[i] }'
}
# What the message must say of the file system of folder $1, as it is now.
free_text() {
  local free size
  read -r free size < <(stat -f -c '%f %S %b' "$1" | awk '{ print $1 * $2, $3 * $2 }')
  echo "$(bytes_text "$free") free of $(bytes_text "$size") on the file system of \"$1\""
}
checkpoints() { (cd "$1/checkpoints" && md5sum step_*.h5); }

# fails_cleanly <name> <reason> <folder> <texts...> -- <args...>: exit 1, one
# line on stderr naming the reason, the free space of <folder> (as it is after
# the run: the partial file is gone) and every text; no HDF5 dump, no signal,
# no temporary file left.
fails_cleanly() {
  local name=$1 reason=$2 folder=$3
  shift 3
  local texts=()
  while [ "$1" != "--" ]; do
    texts+=("$1")
    shift
  done
  shift
  "$bin" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$? err bad=""
  err=$(cat "$work/$name.err")
  [ "$rc" -eq 1 ] || bad+=" exit $rc (want 1)"
  [ "$(wc -l <"$work/$name.err")" -eq 1 ] || bad+=" stderr has $(wc -l <"$work/$name.err") lines"
  [[ $err == "reformer: error: "* ]] || bad+=" stderr does not start with 'reformer: error: '"
  grep -q "HDF5-DIAG\|#000:" <<<"$err" && bad+=" HDF5 printed its error stack"
  for text in "$reason" "$(free_text "$folder")" "${texts[@]}"; do
    grep -qF -- "$text" <<<"$err" || bad+=" no '$text'"
  done
  local left
  left=$(find "$work" -name '*.tmp.*' 2>/dev/null)
  [ -z "$left" ] || bad+=" left $left"
  if [ -n "$bad" ]; then
    echo "$err" | head -20
    fail "$name:$bad"
  else
    pass "$name"
  fi
}
full="No space left on device"
newest() { echo "the newest good checkpoint is \"$1/checkpoints/step_$(printf %08d "$2").h5\" (step $2)"; }

# ---- a reference run on the ordinary disk: the sizes of its files
"$bin" train "$work/tiny.toml" "run.dir=\"$work/ref\"" $keep train.log_every=1 >/dev/null 2>&1 ||
  fail "reference_run"
ck=$(pages "$work/ref/checkpoints/step_00000003.h5")
for f in config.toml metrics.csv .lock; do
  [ "$(pages "$work/ref/$f")" -le 1 ] || fail "assumption: $f of the reference fits a page"
done
[ $((ck * page)) -ge 16384 ] || fail "assumption: a checkpoint is several pages ($ck)"

# ---- (c) the config at the start: the lock takes the only page
mount_fs config 1
run=$work/config/run
fails_cleanly config_write "$full" "$run" "\"$run/config.toml.tmp." \
  "no checkpoint was saved yet" -- train "$work/tiny.toml" "run.dir=\"$run\"" $keep
[ ! -e "$run/config.toml" ] && pass "config_not_left_half_written" ||
  fail "config_not_left_half_written"

# ---- (a) a checkpoint after good ones: lock, config and metrics take a page
# each, checkpoints 3, 6 and 9 fit, step 12 does not (half of it does).
mount_fs ckpt $((3 + 3 * ck + ck / 2))
run=$work/ckpt/run
fails_cleanly checkpoint_write "$full" "$run/checkpoints" \
  "\"$run/checkpoints/step_00000012.h5.tmp." "$(newest "$run" 9)" "--resume" -- \
  train "$work/tiny.toml" "run.dir=\"$run\"" $keep
[ "$(ls "$run/checkpoints")" = "$(printf 'step_%08d.h5\n' 3 6 9)" ] &&
  pass "checkpoints_3_6_9_kept" || fail "checkpoints_3_6_9_kept: $(ls "$run/checkpoints")"
expect eval_after_full_disk 0 "step_00000009.h5 on valid" -- eval "$run" --batches 1
expect eval_step_3_after_full_disk 0 "accuracy" -- eval "$run/checkpoints/step_00000003.h5" \
  --batches 1
grep -q "^12,train," "$run/metrics.csv" && [ -z "$(tail -c 1 "$run/metrics.csv")" ] &&
  pass "metrics_whole_up_to_step_12" || fail "metrics_whole_up_to_step_12"

# ---- --resume on the same full disk: fails the same way, changes nothing
before=$(checkpoints "$run")
kept=$(grep -E '^(step|[1-9],)' "$run/metrics.csv")
fails_cleanly resume_checkpoint_write "$full" "$run/checkpoints" \
  "\"$run/checkpoints/step_00000012.h5.tmp." "$(newest "$run" 9)" -- \
  train "$work/tiny.toml" "run.dir=\"$run\"" $keep --resume
[ "$(checkpoints "$run")" = "$before" ] && pass "resume_checkpoints_byte_identical" ||
  fail "resume_checkpoints_byte_identical"
[ "$(grep -E '^(step|[1-9],)' "$run/metrics.csv")" = "$kept" ] &&
  pass "resume_metrics_rows_kept" || fail "resume_metrics_rows_kept"
# Not a byte left: --resume stops at the config, the first file it writes.
dd if=/dev/zero of="$work/ckpt/filler" bs=$page 2>/dev/null
[ "$(stat -f -c %f "$work/ckpt")" -eq 0 ] || fail "filler did not fill the disk"
fails_cleanly resume_disk_full "$full" "$run" "\"$run/config.toml.tmp." "$(newest "$run" 9)" \
  -- train "$work/tiny.toml" "run.dir=\"$run\"" $keep --resume
[ "$(checkpoints "$run")" = "$before" ] && pass "resume_full_checkpoints_byte_identical" ||
  fail "resume_full_checkpoints_byte_identical"
rm "$work/ckpt/filler"

# ---- (b) a metrics row: a run to step 3 (one checkpoint) leaves one spare page;
# resumed with a row at every step, its rows fill that page and the next row
# does not fit.
mount_fs metrics $((4 + ck))
run=$work/metrics/run
"$bin" train "$work/tiny.toml" "run.dir=\"$run\"" $keep train.steps=3 >/dev/null 2>&1 ||
  fail "metrics_first_run"
cp "$run/metrics.csv" "$work/metrics_before.csv"
fails_cleanly metrics_row "$full" "$run" "metrics: cannot append to \"$run/metrics.csv\"" \
  "the lines before are intact" "$(newest "$run" 3)" -- train "$work/tiny.toml" \
  "run.dir=\"$run\"" $keep train.steps=1000 train.log_every=1 train.eval_every=0 \
  train.checkpoint_every=0 --resume
size=$(stat -c %s "$run/metrics.csv")
[ "$(head -c "$(stat -c %s "$work/metrics_before.csv")" "$run/metrics.csv")" = \
  "$(cat "$work/metrics_before.csv")" ] && pass "metrics_rows_before_unchanged" ||
  fail "metrics_rows_before_unchanged"
# Whole rows up to the full page: the file ends with a newline, every row has
# the 14 columns, the steps count on without a gap, and the next row would
# not have fit.
steps=$(awk -F, 'NR > 1 && $2 == "train" { print $1 }' "$run/metrics.csv" | tr '\n' ' ')
want=$(seq 1 "$(awk -F, 'NR > 1 && $2 == "train" { n = $1 } END { print n }' \
  "$run/metrics.csv")" | awk '$1 % 3 == 0 || $1 > 3' | tr '\n' ' ')
if [ -z "$(tail -c 1 "$run/metrics.csv")" ] &&
  [ "$(awk -F, 'NF != 14' "$run/metrics.csv" | wc -l)" -eq 0 ] && [ "$steps" = "$want" ] &&
  [ "$size" -le $((2 * page)) ] && [ "$size" -gt $((2 * page - 200)) ]; then
  pass "metrics_whole_rows_to_the_page ($size bytes, steps $(echo $steps | tr ' ' ,))"
else
  tail -3 "$run/metrics.csv"
  fail "metrics_whole_rows_to_the_page ($size bytes, steps $steps, want $want)"
fi
expect eval_after_metrics 0 "step_00000003.h5 on valid" -- eval "$run" --batches 1

# ---- (d) a read-only file system: nothing can be written, everything read
run=$work/ckpt/run
before=$(checkpoints "$run")
mount -o remount,ro "$work/ckpt" || fail "remount read-only"
ro="Read-only file system"
fails_cleanly read_only_resume "$ro" "$run" "\"$run/.lock\"" "mounted read-only" \
  "$(newest "$run" 9)" -- train "$work/tiny.toml" "run.dir=\"$run\"" $keep --resume
fails_cleanly read_only_new_run "$ro" "$work/ckpt" "\"$work/ckpt/new\"" \
  "no checkpoint was saved yet" -- train "$work/tiny.toml" "run.dir=\"$work/ckpt/new\"" $keep
expect read_only_eval 0 "step_00000009.h5 on valid" -- eval "$run" --batches 1
[ "$(checkpoints "$run")" = "$before" ] && pass "read_only_checkpoints_byte_identical" ||
  fail "read_only_checkpoints_byte_identical"

[ "$failures" -eq 0 ]
