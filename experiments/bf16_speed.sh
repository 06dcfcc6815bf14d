#!/usr/bin/env bash
# bf16 against float32 step time for the issue's 6-layer Reformer (the
# `reformer memory` base model: d_model 256, d_ff 1024, LSH-2 with chunks of
# 64, reversible, chunked feed-forward and loss), on three vector units, each
# pair of precisions in one invocation (`--precision float32,bf16`):
#   native   the native build (build/openmp): AVX-512 on an AVX-512 CPU;
#   v3       an -march=x86-64-v3 build (build/isa-v3), whose bf16 products take
#            its AVX-512 copy on an AVX-512 CPU;
#   avx2     the same x86-64-v3 build held to AVX2 throughout: its own 6 x 16
#            bf16 block (REFORMER_BF16_GEMM=narrow) and OpenBLAS's Haswell
#            kernel for float32 (OPENBLAS_CORETYPE=Haswell), and glibc's AVX2
#            memcpy and memset (GLIBC_TUNABLES hiding AVX-512). On an AVX-512 CPU
#            this stands in for an AVX2-only machine (Zen 3); on one it is one.
# Prints the CPU model and each build's sgemm rate first, then one table row
# per run (build, tokens, the precision run first, float32 s/step, bf16
# s/step, bf16 / float32) and a summary per build and length.
#   experiments/bf16_speed.sh [THREADS] [REPEATS] [LENGTHS]
# LENGTHS defaults to "16384 65536"; the median of --steps timed steps per
# invocation, REPEATS invocations per build and length (default 2), the
# precisions' order alternating between them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
threads=${1:-2}
repeats=${2:-2}
lengths=${3:-"16384 65536"}
native=${NATIVE_BIN:-$root/build/openmp/bin/reformer}
v3=${V3_BIN:-$root/build/isa-v3/bin/reformer}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
lscpu | grep -E "Model name" | head -1
held=(REFORMER_BF16_GEMM=narrow OPENBLAS_CORETYPE=Haswell
  GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ)
describe() {  # label, binary, then environment settings
  local label=$1 bin=$2
  shift 2
  echo "$label: $(env "$@" "$bin" info | grep -E "vector unit" | sed 's/^ *//');" \
    "$(env "$@" "$bin" info | grep -E "bf16 GEMM" | sed 's/^ *//')"
  env "$@" python3 "$root/experiments/sgemm_rate.py" --threads "$threads" \
    --bench-ops "$(dirname "$bin")/../bench/bench_ops" 2>/dev/null || true
}
describe native "$native"
describe "x86-64-v3" "$v3"
describe "x86-64-v3 held to AVX2" "$v3" "${held[@]}"
step() {  # build label, binary, tokens, order, then environment settings
  local label=$1 bin=$2 tokens=$3 order=$4
  shift 4
  local steps=3
  [ "$tokens" -gt 20000 ] && steps=1
  env "$@" "$bin" --threads "$threads" memory --variants reformer --lengths "$tokens" \
    --layers 6 --steps "$steps" --precision "$order" --out "$out/run" >/dev/null
  python3 - "$out/run/sweep.csv" "$label" "$tokens" "${order%%,*}" "$out/ratios" <<'EOF'
import csv, sys
rows = {r["precision"]: float(r["seconds_per_step"]) for r in csv.DictReader(open(sys.argv[1]))}
f, b = rows["float32"], rows["bf16"]
print(f"| {sys.argv[2]} | {int(sys.argv[3]):,} | {sys.argv[4]} | {f:.3f} | {b:.3f} | {b / f:.3f} |")
with open(sys.argv[5], "a") as ratios:
    ratios.write(f"{sys.argv[2]}\t{sys.argv[3]}\t{b / f}\n")
EOF
}
# The second precision of an invocation ran up to 2% faster than the first
# (2026-11-26), so the order alternates between repeats, float32 first on
# even ones; the summary gives each row's geometric mean over its repeats.
echo "| build | tokens | first | float32 s/step | bf16 s/step | bf16 / float32 |"
echo "|---|---|---|---|---|---|"
for tokens in $lengths; do
  for ((r = 0; r < repeats; ++r)); do
    order=float32,bf16
    [ $((r % 2)) -eq 1 ] && order=bf16,float32
    step native "$native" "$tokens" "$order"
    step "x86-64-v3" "$v3" "$tokens" "$order"
    step "x86-64-v3 held to AVX2" "$v3" "$tokens" "$order" "${held[@]}"
  done
done
echo
python3 - "$out/ratios" <<'EOF'
import math, sys
groups = {}
for line in open(sys.argv[1]):
    label, tokens, ratio = line.rstrip("\n").split("\t")
    groups.setdefault((label, int(tokens)), []).append(float(ratio))
print("| build | tokens | runs | bf16 / float32, geometric mean | range |")
print("|---|---|---|---|---|")
for (label, tokens), rs in groups.items():
    mean = math.exp(sum(map(math.log, rs)) / len(rs))
    print(f"| {label} | {tokens:,} | {len(rs)} | {mean:.3f} | {min(rs):.3f}-{max(rs):.3f} |")
EOF
