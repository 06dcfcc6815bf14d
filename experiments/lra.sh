#!/usr/bin/env bash
# Long Range Arena on our classifier (issue 48): the two tables, printed and
# written to docs-ready Markdown, with LRA's published figures beside ours.
#
#   experiments/lra.sh efficiency [THREADS] [BATCH] [LENGTHS]
#     Table 2 of LRA (Tay et al., ICLR 2021): one training step (forward,
#     loss, backward, Adam) of the classifier at LRA's byte-level text sizes
#     (`reformer memory --model classifier`: 4 layers of width 256, 4 heads,
#     feed-forward 1024, sinusoidal positions, 257 byte ids, 2 classes) with
#     full, exact, LSH-2, LSH-4, local and reversible LSH-2 ("reformer")
#     attention at 1K, 2K, 3K and 4K tokens: steps per second and peak memory
#     (the step's peak plus parameters, gradients and Adam moments), each
#     relative to our full attention as LRA gives them; and in the same run
#     PyTorch 2's nn.TransformerEncoder at the same sizes
#     (experiments/lra_pytorch.py --fast-path: no mask, SDPA's fused kernel),
#     with our LSH-2 step against it. Each build in BUILDS (default: the
#     native build/openmp and, if present, the -march=x86-64-v3 build/isa-v3)
#     runs the whole table; the CPU model, its ISA and each build's sgemm rate
#     head the output. Defaults: 2 threads, batch 4, "1024 2048 3072 4096".
#
#   experiments/lra.sh retrieval [THREADS] [BATCH] [LENGTH]
#     LRA's Retrieval model at its size: the two-tower classifier
#     (model.classifier.documents = 2; lra_benchmarks/matching/configs/
#     base_match_config.py: 4 layers of width 128, 4 heads of 32, feed-forward
#     512, two documents of 4,000 bytes an example) for one training step with
#     full, exact, LSH-2, local and reversible LSH-2 ("reformer") attention
#     (LSH chunks of 80 and local chunks of 100, which divide 4,000), beside
#     PyTorch 2's nn.TransformerEncoder as the same two towers in the same run
#     (experiments/lra_pytorch.py --pairs --fast-path). Defaults: 2 threads,
#     batch 1 (two sequences), length 4000.
#
#   experiments/lra.sh listops [THREADS] [CONFIGS...]
#     Table 1's ListOps column at a CPU size (experiments/lra_listops_cpu.toml:
#     trees of 64..512 tokens, the LRA recipe otherwise): trains each attention
#     kind (full attention by the exact kernel, lsh, local), then evaluates
#     the whole test split; prints accuracy, loss and minutes (the majority
#     class holds 16.45% of that split: tests/data/test_listops.cpp).
#
# Environment: PYTHON (default /work/venv/bin/python, PyTorch 2), OUT (a
# folder for the runs; default a temporary one), BUILDS (build folders).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-efficiency}
python=${PYTHON:-/work/venv/bin/python}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

header() {
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1);" \
    "ISA: $(grep -o -w -E 'avx512f|avx512_bf16|avx2|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "date: $(date -u +%Y-%m-%d), threads: $threads"
}

efficiency() {
  threads=${1:-2}
  batch=${2:-4}
  lengths=${3:-"1024 2048 3072 4096"}
  export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
  local builds=${BUILDS:-"$root/build/openmp $root/build/isa-v3"}
  header
  local csv_list=()
  for build in $builds; do
    [ -x "$build/bin/reformer" ] || { echo "skip $build: no bin/reformer"; continue; }
    local label
    label=$(basename "$build")
    echo "$label: $("$build/bin/reformer" info | grep -E 'vector unit' | sed 's/^ *//')"
    python3 "$root/experiments/sgemm_rate.py" --threads "$threads" \
      --bench-ops "$build/bench/bench_ops" 2>/dev/null || true
    local commas=${lengths// /,}
    "$build/bin/reformer" --threads "$threads" memory --model classifier \
      --variants full,exact,lsh-2,lsh-4,local,reformer --lengths "$commas" --layers 4 \
      --batch "$batch" --steps 2 --out "$out/$label" >/dev/null
    csv_list+=("$label=$out/$label/sweep.csv")
    # The process's peak resident set too, measured as PyTorch's is (growth
    # over a tiny run that loads the same libraries): LSH-2, stored and
    # reversible, one point a process.
    local base
    base=$(/usr/bin/time -f "%M" "$build/bin/reformer" --threads "$threads" memory \
      --model classifier --variants lsh-2 --lengths 128 --layers 1 --batch 1 --steps 0 \
      --out "$out/$label-rss-base" 2>&1 >/dev/null | tail -1)
    for variant in lsh-2 reformer; do
      for length in $lengths; do
        local kib
        kib=$(/usr/bin/time -f "%M" "$build/bin/reformer" --threads "$threads" memory \
          --model classifier --variants "$variant" --lengths "$length" --layers 4 \
          --batch "$batch" --steps 0 --out "$out/$label-rss" 2>&1 >/dev/null | tail -1)
        echo "$variant $length $(((kib - base) * 1024))" >>"$out/$label.rss"
      done
    done
    csv_list[-1]+="=$out/$label.rss"
  done
  "$python" "$root/experiments/sgemm_rate.py" --threads "$threads" 2>/dev/null || true
  : >"$out/torch.jsonl"
  for length in $lengths; do
    "$python" "$root/experiments/lra_pytorch.py" --length "$length" --batch "$batch" \
      --layers 4 --steps 2 --threads "$threads" --fast-path >>"$out/torch.jsonl"
  done
  python3 - "$out/torch.jsonl" "${csv_list[@]}" <<'PY' | tee "$out/efficiency.md"
import csv, json, sys
# LRA Table 2 (byte-level text, batch 32 on 4x4 TPU v3, per-device memory):
# the Transformer's steps/s and GB, and the others relative to it.
lra_steps = {1024: 8.1, 2048: 4.9, 3072: 2.3, 4096: 1.4}
lra_gb = {1024: 0.85, 2048: 2.65, 3072: 5.51, 4096: 9.48}
lra_rel = {  # model: (speed x per length, GB per length)
    "reformer": ((0.5, 0.4, 0.7, 0.8), (0.48, 0.99, 1.53, 2.28)),
    "local": ((1.1, 1.7, 3.2, 5.3), (0.42, 0.76, 1.06, 1.37)),
}
torch = {json.loads(l)["length"]: json.loads(l) for l in open(sys.argv[1]) if l.strip()}
for arg in sys.argv[2:]:
    label, path, rss_path = arg.split("=", 2)
    rss = {}
    for line in open(rss_path):
        v, l, b = line.split()
        rss[(v, int(l))] = int(b) / 2**30
    rows = [r for r in csv.DictReader(open(path)) if r["status"] == "ran"]
    by = {(r["variant"], int(r["length"])): r for r in rows}
    lengths = sorted({int(r["length"]) for r in rows})
    def mem(r):  # the step's peak plus the state, GiB
        return (float(r["peak_MiB"]) + float(r["state_MiB"])) / 1024
    print(f"\n### {label}: steps per second and peak memory (GiB), relative to our full attention\n")
    print("| model | " + " | ".join(f"{l} steps/s" for l in lengths) + " | " +
          " | ".join(f"{l} GiB" for l in lengths) + " |")
    print("|---" * (1 + 2 * len(lengths)) + "|")
    for v in ["full", "exact", "lsh-2", "lsh-4", "local", "reformer"]:
        cells, mems = [], []
        for l in lengths:
            r, f = by.get((v, l)), by.get(("full", l))
            if not r:
                cells.append("-"); mems.append("-"); continue
            s = 1 / float(r["seconds_per_step"])
            if v == "full" or not f:
                cells.append(f"{s:.3g}"); mems.append(f"{mem(r):.3g}")
            else:
                cells.append(f"{s:.3g} ({s * float(f['seconds_per_step']):.2f}x)")
                mems.append(f"{mem(r):.3g} ({mem(r) / mem(f):.2f}x)")
        print(f"| ours, {v} | " + " | ".join(cells) + " | " + " | ".join(mems) + " |")
    cells, mems = [], []
    for l in lengths:
        t = torch.get(l)
        cells.append(f"{1 / t['seconds_per_step']:.3g}" if t else "-")
        mems.append(f"{t['peak_bytes'] / 2**30:.3g}" if t else "-")
    print("| PyTorch nn.TransformerEncoder (SDPA) | " + " | ".join(cells) + " | " +
          " | ".join(mems) + " |")
    print("| LRA Transformer (TPU) | " + " | ".join(str(lra_steps.get(l, "-")) for l in lengths) +
          " | " + " | ".join(str(lra_gb.get(l, "-")) for l in lengths) + " |")
    for name, (speed, gb) in lra_rel.items():
        idx = [([1024, 2048, 3072, 4096].index(l) if l in lra_steps else None) for l in lengths]
        print(f"| LRA {name} (TPU) | " +
              " | ".join(f"({speed[i]}x)" if i is not None else "-" for i in idx) + " | " +
              " | ".join(f"{gb[i]} ({gb[i] / lra_gb[l]:.2f}x)" if i is not None else "-"
                         for i, l in zip(idx, lengths)) + " |")
    print(f"\n{label}: our LSH-2 step (stored, and reversible: \"reformer\") against PyTorch's "
          "nn.TransformerEncoder (same batch, threads); memory as tracked (the step's peak plus "
          "parameters, gradients, Adam) and as PyTorch's is measured (growth of the peak resident "
          "set over a tiny run)\n")
    print("| variant | length | ours s/step | PyTorch s/step | speed-up | ours GiB (tracked) | "
          "ours GiB (RSS) | PyTorch GiB (RSS) | memory fraction (RSS) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for v in ["lsh-2", "reformer"]:
        for l in lengths:
            r, t = by.get((v, l)), torch.get(l)
            if not r or not t:
                continue
            ours, theirs = float(r["seconds_per_step"]), t["seconds_per_step"]
            tg = t["peak_bytes"] / 2**30
            o = rss.get((v, l), float("nan"))
            print(f"| {v} | {l} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x | {mem(r):.3f} | "
                  f"{o:.3f} | {tg:.3f} | {o / tg:.3f} |")
PY
  echo "runs in $out"
}

retrieval() {
  threads=${1:-2}
  batch=${2:-1}
  length=${3:-4000}
  export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
  local build=${BUILD:-$root/build/openmp}
  header
  echo "$(basename "$build"): $("$build/bin/reformer" info | grep -E 'vector unit' | sed 's/^ *//')"
  python3 "$root/experiments/sgemm_rate.py" --threads "$threads" \
    --bench-ops "$build/bench/bench_ops" 2>/dev/null || true
  local model=(model.classifier.documents=2 model.d_model=128 model.d_ff=512 model.heads=4
    model.d_head=32 model.lsh.chunk=80 model.local.chunk=100)
  "$build/bin/reformer" --threads "$threads" memory --model classifier \
    --variants full,exact,lsh-2,local,reformer --lengths "$length" --layers 4 --batch "$batch" \
    --steps 2 --out "$out/retrieval" "${model[@]}" >/dev/null
  # The peak resident set as PyTorch's is measured: growth over a tiny run.
  local base
  base=$(/usr/bin/time -f "%M" "$build/bin/reformer" --threads "$threads" memory \
    --model classifier --variants lsh-2 --lengths 160 --layers 1 --batch 1 --steps 0 \
    --out "$out/rss-base" "${model[@]}" 2>&1 >/dev/null | tail -1)
  : >"$out/retrieval.rss"
  for variant in full exact lsh-2 local reformer; do
    local kib
    kib=$(/usr/bin/time -f "%M" "$build/bin/reformer" --threads "$threads" memory \
      --model classifier --variants "$variant" --lengths "$length" --layers 4 --batch "$batch" \
      --steps 0 --out "$out/rss" "${model[@]}" 2>&1 >/dev/null | tail -1)
    echo "$variant $(((kib - base) * 1024))" >>"$out/retrieval.rss"
  done
  "$python" "$root/experiments/sgemm_rate.py" --threads "$threads" 2>/dev/null || true
  "$python" "$root/experiments/lra_pytorch.py" --pairs --length "$length" --batch "$batch" \
    --layers 4 --d-model 128 --heads 4 --d-ff 512 --steps 2 --threads "$threads" \
    --fast-path >"$out/torch.jsonl"
  python3 - "$out/torch.jsonl" "$out/retrieval/sweep.csv" "$out/retrieval.rss" <<'PY' |
import csv, json, sys
t = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
rss = {l.split()[0]: int(l.split()[1]) / 2**30 for l in open(sys.argv[3]) if l.strip()}
rows = [r for r in csv.DictReader(open(sys.argv[2])) if r["status"] == "ran"]
tg = t["peak_bytes"] / 2**30
print(f"\nTwo documents of {t['length']} bytes an example, batch {t['batch']}, 4 layers of width "
      "128: one training step (forward, loss, backward, Adam)\n")
print("| model | s/step | speed vs PyTorch | GiB (tracked: step peak + state) | GiB (RSS growth) "
      "| memory vs PyTorch (RSS) |")
print("|---|---|---|---|---|---|")
for r in rows:
    s = float(r["seconds_per_step"])
    tracked = (float(r["peak_MiB"]) + float(r["state_MiB"])) / 1024
    o = rss.get(r["variant"], float("nan"))
    print(f"| ours, {r['variant']} | {s:.3f} | {t['seconds_per_step'] / s:.2f}x | {tracked:.3f} | "
          f"{o:.3f} | {o / tg:.3f} |")
print(f"| PyTorch nn.TransformerEncoder (SDPA), two towers | {t['seconds_per_step']:.3f} | 1 | - | "
      f"{tg:.3f} | 1 |")
PY
    tee "$out/retrieval.md"
  echo "runs in $out"
}

listops() {
  threads=${1:-2}
  shift || true
  export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
  local bin=${REFORMER_BIN:-$root/build/openmp/bin/reformer}
  local config=${CONFIG:-$root/experiments/lra_listops_cpu.toml}
  header
  local kinds=("exact" "lsh" "local")  # exact: full attention in O(L) memory
  echo "| attention | test accuracy | test loss | minutes |" | tee "$out/listops.md"
  echo "|---|---|---|---|" | tee -a "$out/listops.md"
  for kind in "${kinds[@]}"; do
    local run="$out/listops_$kind" start end
    start=$(date +%s)
    "$bin" --threads "$threads" train "$config" "run.dir=\"$run\"" \
      "model.attention=[\"$kind\"]" "$@" >"$out/listops_$kind.log" 2>&1
    end=$(date +%s)
    "$bin" --threads "$threads" eval "$run" --split test --batches 0 >"$out/listops_$kind.eval" 2>&1
    python3 - "$out/listops_$kind.eval" "$kind" "$start" "$end" <<'PY' | tee -a "$out/listops.md"
import re, sys
text = open(sys.argv[1]).read()
acc = re.search(r"accuracy ([0-9.]+)", text)
loss = re.search(r"loss ([0-9.]+)", text)
print(f"| {sys.argv[2]} | {acc.group(1) if acc else '?'} | {loss.group(1) if loss else '?'} | "
      f"{(int(sys.argv[4]) - int(sys.argv[3])) / 60:.1f} |")
PY
  done
  echo "runs in $out"
}

case $mode in
  efficiency) shift || true; efficiency "$@" ;;
  listops) shift || true; listops "$@" ;;
  retrieval) shift || true; retrieval "$@" ;;
  *) echo "usage: $0 efficiency|listops|retrieval [...]" >&2; exit 2 ;;
esac
