#!/usr/bin/env bash
# Before/after timing of the attention kernels in one run: builds bench_attention
# at another git revision of this repository in a temporary worktree
# ($TMPDIR/reformer-rev-REV) and runs the cases both builds share, alternating
# builds, at the given thread counts.
#   bench/compare_revisions.sh [REV] [THREADS...]     (default: 0e2cd42, 2 1)
# Needs the OpenMP build of this tree in build/openmp (tests/run_all.sh or the
# quickstart makes it). Prints Google Benchmark tables; bench/make_tables.py is
# not needed.
#   bench/compare_revisions.sh --isa [--filter REGEX] [--rounds N] REV [THREADS...]
# builds bench_attention of REV and of this tree for -march=x86-64-v3 and for
# native (build/isa/<target> in each tree, as bench/cross_isa.py; tests off) and
# tile_guard of this tree, prints lscpu's model and vector ISA and each target's
# sgemm rate (tile_guard), then runs the cases matching REGEX (default: exact
# and relative attention, forward + backward, at 2K and 4K) N rounds (default 3)
# per build, before and after alternating, and ends with a Markdown table of
# the best time of each side and after / before (default threads: 2).
#   --paired (with --isa) runs before and after at the same time, one thread
# each, pinned to cores 0 and 1 and swapped every round (taskset), so that
# both see the same moments of a noisy machine (a shared VM's times vary by 30%
# and more from one minute to the next); the table gives the median of the
# rounds' after / before ratios beside the best times.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
isa=0
filter='BM_(Exact|Relative)Attention/(2048|4096)/'
rounds=3
paired=0
while [ $# -gt 0 ]; do
  case $1 in
    --isa) isa=1; shift ;;
    --filter) filter=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --paired) paired=1; shift ;;
    *) break ;;
  esac
done
rev=${1:-0e2cd42}
shift || true
threads=("$@")
deps=${REFORMER_DEPS:-$HOME/.cache/reformer-deps}
old=${TMPDIR:-/tmp}/reformer-rev-$rev
[ -d "$old" ] || git -C "$root" worktree add --detach "$old" "$rev" >/dev/null 2>&1 || true

if [ $isa = 1 ]; then
  [ ${#threads[@]} -eq 0 ] && threads=(2)
  targets=(x86-64-v3 native)
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  build() {  # tree target build-targets...
    local dir=$1/build/isa/$2
    cmake -S "$1" -B "$dir" -G Ninja "${launcher[@]}" -DKokkos_ROOT="$deps/openmp" \
      -DKokkosKernels_ROOT="$deps/openmp" -DREFORMER_ARCH="$2" -DREFORMER_ENABLE_TESTS=OFF \
      -DREFORMER_ENABLE_BENCH=ON >/dev/null
    cmake --build "$dir" --target "${@:3}" >/dev/null
  }
  for t in "${targets[@]}"; do
    build "$old" "$t" bench_attention
    build "$root" "$t" bench_attention tile_guard
  done
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(lscpu | grep -qw avx512f && echo AVX-512 ||
    (lscpu | grep -qw avx2 && echo AVX2 || echo 'no AVX2'))"
  echo "before: $rev; after: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD || echo ' + uncommitted changes')"
  raw=$(mktemp)
  for n in "${threads[@]}"; do
    export OMP_NUM_THREADS=$n OMP_PROC_BIND=false
    for t in "${targets[@]}"; do
      guard=$("$root/build/isa/$t/bench/tile_guard" 2>/dev/null || true)
      echo "$t, $n threads: $(echo "$guard" | sed -n 's/^tile_guard: [^;]*; \([^;]*\);.*/\1/p');" \
        "$(echo "$guard" | grep -o 'large sgemm.*')"
    done
    if [ $paired = 1 ]; then
      for r in $(seq "$rounds"); do
        for t in "${targets[@]}"; do
          cores=(0 1)
          [ $((r % 2)) = 0 ] && cores=(1 0)
          b_out=$(mktemp)
          a_out=$(mktemp)
          OMP_NUM_THREADS=1 taskset -c "${cores[0]}" "$old/build/isa/$t/bench/bench_attention" \
            --benchmark_filter="$filter" 2>/dev/null >"$b_out" &
          OMP_NUM_THREADS=1 taskset -c "${cores[1]}" "$root/build/isa/$t/bench/bench_attention" \
            --benchmark_filter="$filter" 2>/dev/null >"$a_out" &
          wait
          for side in before after; do
            out=$b_out
            [ $side = after ] && out=$a_out
            grep -E '^BM_' "$out" |
              awk -v t="$t" -v s="$side" -v r="$r" '{print t, "1p", s, r, $1, $2}' | tee -a "$raw"
          done
          rm -f "$b_out" "$a_out"
        done
      done
      break
    fi
    for r in $(seq "$rounds"); do
      for t in "${targets[@]}"; do
        for side in before after; do
          bin=$old/build/isa/$t/bench/bench_attention
          [ $side = after ] && bin=$root/build/isa/$t/bench/bench_attention
          "$bin" --benchmark_filter="$filter" 2>/dev/null | grep -E '^BM_' |
            awk -v t="$t" -v n="$n" -v s="$side" -v r="$r" '{print t, n, s, r, $1, $2}' | tee -a "$raw"
        done
      done
    done
  done
  echo
  if [ $paired = 1 ]; then
    echo "paired: before and after at once, 1 thread each, cores swapped every round ($rounds rounds)"
    echo
    echo "| target | case | best before ms | best after ms | median of after / before |"
    echo "|---|---|---|---|---|"
    python3 - "$raw" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(dict)
order = []
for line in open(sys.argv[1]):
    target, _, side, rnd, case, ms = line.split()
    key = (target, case.split("/iterations")[0])
    if key not in order:
        order.append(key)
    t[key].setdefault(side, {})[rnd] = float(ms)
for key in order:
    b, a = t[key].get("before", {}), t[key].get("after", {})
    ratios = [a[r] / b[r] for r in b if r in a]
    print(f"| {key[0]} | {key[1]} | {min(b.values()):.1f} | {min(a.values()):.1f} | "
          f"{statistics.median(ratios):.3f} |")
PY
    rm -f "$raw"
    exit 0
  fi
  echo "| target | threads | case | before ms | after ms | after / before |"
  echo "|---|---|---|---|---|---|"
  awk '{k = $1 " " $2 " " $5; if (!(k in seen)) { seen[k] = 1; order[++m] = k }
        if ($3 == "before") { if (!(k in b) || $6 < b[k]) b[k] = $6 }
        else { if (!(k in a) || $6 < a[k]) a[k] = $6 } }
       END { for (i = 1; i <= m; ++i) { k = order[i]; split(k, f, " ")
             sub(/\/iterations.*/, "", f[3])
             printf "| %s | %s | %s | %.1f | %.1f | %.3f |\n", f[1], f[2], f[3], b[k], a[k], a[k] / b[k] } }' "$raw"
  rm -f "$raw"
  exit 0
fi

[ ${#threads[@]} -eq 0 ] && threads=(2 1)
if [ ! -x "$old/build/bench/bench_attention" ]; then
  cmake -S "$old" -B "$old/build" -G Ninja -DKokkos_ROOT="$deps/openmp" \
    -DKokkosKernels_ROOT="$deps/openmp" -DREFORMER_ENABLE_TESTS=OFF >/dev/null
  cmake --build "$old/build" --target bench_attention >/dev/null
fi
new=$root/build/openmp/bench/bench_attention
shared='BM_(Lsh|Local)Attention/(4096|16384)(/2)?/it|BM_FullAttention/4096/it|BM_LshHashAndSort/(16384|65536)/2/it'
for t in "${threads[@]}"; do
  for side in before after; do
    bin=$old/build/bench/bench_attention
    [ $side = after ] && bin=$new
    echo "=== $side ($rev vs $(git -C "$root" rev-parse --short HEAD)), OMP_NUM_THREADS=$t"
    OMP_NUM_THREADS=$t OMP_PROC_BIND=false "$bin" --benchmark_filter="$shared" 2>/dev/null |
      grep -E '^BM_'
  done
  echo "=== after only, OMP_NUM_THREADS=$t"
  OMP_NUM_THREADS=$t OMP_PROC_BIND=false "$new" \
    --benchmark_filter='BM_AttentionLayer/./(4096|16384)/it|BM_LshSort/65536/it' 2>/dev/null | grep -E '^BM_'
done
