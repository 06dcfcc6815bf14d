#!/usr/bin/env bash
# The layout of the Reformer paper's Table 2 (section 5, shared QK on the
# duplication task) at a length this CPU allows: the duplication task of
# duplication_lsh.toml (0 w 0 w, length 256, 1 layer, d_model = d_ff = 256,
# 4 heads, LSH chunk 64) trained with full attention (shared q/k), LSH-1, LSH-2
# and LSH-4, each until the held-out accuracy on the second copy reaches
# TARGET or STEPS steps; then every trained model is evaluated with full
# attention and with LSH-8, -4, -2 and -1 on the same held-out batches.
#   experiments/table2.sh [OUT_DIR] [STEPS] [TARGET] [THREADS]
# Writes OUT_DIR/table2.csv (train, eval, accuracy, loss), OUT_DIR/table2.md
# (the table and each run's steps and time) and OUT_DIR/table2_curves.png
# (experiments/plot_curves.py; needs matplotlib).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/runs/table2-$(date +%Y%m%d-%H%M%S)}
steps=${2:-600}
target=${3:-0.99}
threads=${4:-2}
bin=${REFORMER_BIN:-$root/build/openmp/bin/reformer}
# A Python with matplotlib for the curves (PLOT_PYTHON, else the first of
# python3 and Debian's /usr/bin/python3 that has it).
python=${PLOT_PYTHON:-}
for candidate in python3 /usr/bin/python3; do
  [ -z "$python" ] && "$candidate" -c "import matplotlib" 2>/dev/null && python=$candidate
done
python=${python:-python3}
batches=16
mkdir -p "$out"
export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
# The attention a model is trained or evaluated with, as config overrides.
overrides() {
  case $1 in
    full) echo 'model.attention=["full"] model.qk=shared' ;;
    lsh*) echo "model.attention=[\"lsh\"] model.lsh.n_hashes=${1#lsh}" ;;
  esac
}
trained=(full lsh1 lsh2 lsh4)
evaluated=(full lsh8 lsh4 lsh2 lsh1)
echo "train,eval,accuracy,loss" >"$out/table2.csv"
{
  echo "| train \\ eval | Full | LSH-8 | LSH-4 | LSH-2 | LSH-1 | steps | train time |"
  echo "|---|---|---|---|---|---|---|---|"
} >"$out/table2.md"
for t in "${trained[@]}"; do
  # shellcheck disable=SC2046
  "$bin" train "$root/experiments/duplication_lsh.toml" run.dir="\"$out/$t\"" $(overrides "$t") \
    train.steps="$steps" train.target_accuracy="$target" train.eval_every=25 \
    train.log_every=25 >"$out/$t.log" 2>&1
  done_steps=$(sed -n 's/^trained \([0-9]*\) steps in .*/\1/p' "$out/$t.log")
  seconds=$(sed -n 's/^trained [0-9]* steps in \([0-9.]*\) s.*/\1/p' "$out/$t.log")
  row="| ${t/lsh/LSH-} |"
  [ "$t" = full ] && row="| Full |"
  for e in "${evaluated[@]}"; do
    # shellcheck disable=SC2046
    line=$("$bin" eval "$out/$t" $(overrides "$e") --batches "$batches")
    accuracy=$(sed -n 's/.*accuracy \([0-9.]*\)$/\1/p' <<<"$line")
    loss=$(sed -n 's/.*: loss \([0-9.]*\),.*/\1/p' <<<"$line")
    echo "$t,$e,$accuracy,$loss" >>"$out/table2.csv"
    row+=" $(awk -v a="$accuracy" 'BEGIN { printf "%.1f%%", 100 * a }') |"
  done
  echo "$row $done_steps | $seconds s |" >>"$out/table2.md"
  echo "trained $t: $done_steps steps, $seconds s"
done
cat "$out/table2.md"
"$python" "$root/experiments/plot_curves.py" --out "$out/table2_curves.png" \
  --title "Duplication task, length 256: held-out accuracy on the second copy" \
  "Full (shared QK)=$out/full" "LSH-1=$out/lsh1" "LSH-2=$out/lsh2" "LSH-4=$out/lsh4"
