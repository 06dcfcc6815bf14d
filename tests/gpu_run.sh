#!/usr/bin/env bash
# On a machine with an NVIDIA Hopper GPU and no project dependencies: unpacks
# .gpu/pkg.tar.xz (made by tests/gpu_pack.sh) and
#   tests [seconds per binary, default 240] [binaries ...]
#       runs the test binaries on the CUDA backend, each under the time limit,
#       TEST_JOBS of them at once (default 1), one log and one GoogleTest XML
#       report per binary in $OUT/results.tgz (or gpu-results/), ending with
#       `total: N passed, M failed`; exits 1 when any binary failed (a failed
#       case, a crash or a time-out), else 0;
#   bench
#       the GPU benchmarks, in one run: the device's float32 GEMM rate (PyTorch)
#       beside ours (cuBLAS loaded at run time, and Kokkos Kernels' own gemm
#       with REFORMER_DEVICE_BLAS=off), our attention layers against PyTorch's
#       fused SDPA layer and reformer-pytorch's LSHSelfAttention, the memory
#       instrument's sweep, the 6-layer Reformer step against lucidrains'
#       reformer-pytorch (wheels from .gpu/whl, if there), cached generation
#       against rerunning the model, the chunked kernels' two shapes
#       (REFORMER_CHUNKED_KERNEL=whole|streamed), the tiles' passes by rows
#       and by elements (REFORMER_TILE_LOOPS=rows|elements), exact attention's
#       two GPU tilings (REFORMER_EXACT_TILES=gpu|gpu-wide) and its batched
#       shape (REFORMER_EXACT_PRODUCTS=batched), and kernel profiles
#       (REFORMER_KERNEL_PROFILE, core/kernel_profile.hpp) of the 6-layer step
#       and of exact attention, kernel by kernel; BENCH_PARTS="gemm team ..."
#       runs only the parts named (see `parts=` below) for a short lease;
#   all [seconds per test binary, default 150]
#       the tests, every binary at once, then the benchmarks: the one command
#       for a lent GPU (about 8 minutes on an H200).
# The machine needs python3 with PyTorch for `bench`, nothing for `tests`.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Under the device tool ($OUT set) the results go to /tmp/gpu-results and, on
# any exit, into one $OUT/results.tgz: the tool returns at most 8 files, and a
# run writes dozens.
if [ -n "${OUT:-}" ]; then
  out=/tmp/gpu-results
  trap 'tar czf "$OUT/results.tgz" -C /tmp gpu-results' EXIT
else
  out=$root/gpu-results
fi
mode=${1:-tests}
shift || true
mkdir -p "$out" /tmp/reformer-gpu
if [ ! -d /tmp/reformer-gpu/pkg ]; then
  tar -C /tmp/reformer-gpu -xJf "$root/.gpu/pkg.tar.xz" ||
    python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
      "$root/.gpu/pkg.tar.xz" /tmp/reformer-gpu
fi
pkg=/tmp/reformer-gpu/pkg
# A pack built from other code than this tree's still runs (a lease is short),
# but every result says so.
packed=$(sed -n 's/^code //p' "$pkg/SOURCE" 2>/dev/null || true)
commit=$(sed -n 's/^commit //p' "$pkg/SOURCE" 2>/dev/null || echo 'no SOURCE file')
here=$("$root/tests/code_hash.sh" 2>/dev/null || echo unknown)
if [ -n "$packed" ] && [ "$packed" = "$here" ]; then
  echo "pack: built from this tree's code ($here; $commit)" | tee "$out/pack.txt"
else
  echo "pack: STALE: built from code ${packed:-unrecorded} ($commit), this tree's code is" \
    "$here; rebuild it with tests/gpu_pack.sh before the lease" | tee "$out/pack.txt"
fi
# The packed libraries (HDF5, MPI and what they pull in, from Debian) are for
# our binaries only: $pkg/run/<name> runs $pkg/bin/<name> with them on the
# library path, so that python3 and PyTorch keep the machine's own.
mkdir -p "$pkg/run"
for exe in "$pkg"/bin/*; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$pkg" "$exe" >"$pkg/run/${exe##*/}"
  chmod +x "$pkg/run/${exe##*/}"
done
# The products load the vendor BLAS at run time (src/ops/tpls/device_blas.cpp):
# unless REFORMER_CUBLAS names one, PyTorch's cuBLAS from its wheels
# (site-packages/nvidia/<cublas or cu13>/lib), with its cuBLASLt beside it.
if [ -z "${REFORMER_CUBLAS:-}" ]; then
  cublas=$(python3 -c 'import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
found = sorted(p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcublas.so.*")))
print(found[-1] if found else "")' 2>/dev/null || true)
  if [ -n "$cublas" ]; then
    export LD_LIBRARY_PATH=$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export REFORMER_CUBLAS=$cublas
  fi
fi
echo "device BLAS: ${REFORMER_CUBLAS:-none named, the dynamic loader searches}" | tee "$out/device_blas.txt"
"$pkg/run/reformer" info 2>&1 | grep -E "device" | tee -a "$out/device_blas.txt" || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

# run_test_binary <seconds> <name>: one binary, its log and report in $out and
# its exit status in $out/<name>.rc.
run_test_binary() {
  local limit=$1 name=$2 start
  start=$(date +%s)
  # The tests read files relative to the repository (fixtures, scripts).
  (cd "$root" && timeout "$limit" "$pkg/run/$name" --gtest_output="xml:$out/$name.xml") \
    >"$out/$name.log" 2>&1
  echo "$? $(($(date +%s) - start))" >"$out/$name.rc"
}

# run_tests <seconds per binary> <jobs> [binaries ...]: 0 when every binary passed.
run_tests() {
  local limit=$1 jobs=$2
  shift 2
  local binaries=("$@")
  if [ ${#binaries[@]} -eq 0 ]; then
    # Every test binary in the package (tests/gpu_pack.sh's PACK_BINARIES may leave some out).
    for name in test_core test_ops test_attention test_layers test_models test_train test_data \
      test_io test_config; do
      if [ -x "$pkg/bin/$name" ]; then binaries+=("$name"); else echo "not in the package: $name"; fi
    done
  fi
  local running=0 name
  for name in "${binaries[@]}"; do
    run_test_binary "$limit" "$name" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
      wait -n
      running=$((running - 1))
    fi
  done
  wait
  local passed=0 failed=0 p f rc seconds
  for name in "${binaries[@]}"; do
    read -r rc seconds <"$out/$name.rc"
    p=$(grep -c '^\[       OK \]' "$out/$name.log" || true)
    f=$(grep -c '^\[  FAILED  \] .*(' "$out/$name.log" || true)
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1  # a crash or a time-out counts as a failure
    passed=$((passed + p))
    failed=$((failed + f))
    echo "$name: $p passed, $f failed, exit $rc, $seconds s"
    [ "$rc" -eq 0 ] || grep -E '^\[  FAILED  \]|rror|abort|Assertion' "$out/$name.log" | head -n 20
  done
  echo "total: $passed passed, $failed failed" | tee "$out/tests_total.txt"
  [ "$failed" -eq 0 ]
}

# The tests' reference scripts need numpy, which the GPU machine's python3 has
# (its /usr/bin/python3, the build's default, does not).
if [ -z "${REFORMER_TEST_PYTHON:-}" ] && command -v python3 >/dev/null; then
  export REFORMER_TEST_PYTHON=$(command -v python3)
fi
if [ "$mode" = tests ]; then
  limit=${1:-240}
  shift || true
  run_tests "$limit" "${TEST_JOBS:-1}" "$@"
  exit
fi
# BENCH_PARTS picks the parts (default: all of them); every step has a time
# limit, so one that hangs or crashes costs only itself. The parts run in the
# order below, the issue's done-when figures first (the files written so far
# come back from a lease that runs out): the GEMM rate, the layers against SDPA
# and reformer-pytorch, the 6-layer step against reformer-pytorch, cached
# generation; then the choices to make (tilings, loops, shapes, team sizes),
# profiles, and the rest.
parts=" ${BENCH_PARTS:-sgemm sdpa lsh_peer step peer_step products bf16 generate tiles loops shape profile elementwise gemm team memory} "
known=" sgemm gemm elementwise sdpa team shape loops tiles lsh_peer memory step peer_step products bf16 profile generate "
for name in $parts; do
  if [[ "$known" != *" $name "* ]]; then
    echo "gpu_run.sh: BENCH_PARTS names '$name' but the parts are:$known" >&2
    exit 2
  fi
done
tests_status=0
if [ "$mode" = all ]; then
  echo "== tests (every binary at once)"
  run_tests "${1:-150}" 16 || tests_status=1
elif [ "$mode" != bench ]; then
  echo "gpu_run.sh: mode is '$mode' but must be tests, bench or all" >&2
  exit 2
fi
if ls "$root"/.gpu/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/reformer-gpu/site "$root"/.gpu/whl/*.whl
  export PYTHONPATH=/tmp/reformer-gpu/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
# time_layers <file> <seconds> <filter> [VAR=value ...]: our attention layers
# (BM_AttentionLayer matching the filter) with the given settings, one process,
# appended to $out/<file>.
time_layers() {
  local file=$1 seconds=$2 filter=$3
  shift 3
  env "$@" timeout "$seconds" "$pkg/run/bench_attention" --benchmark_filter="$filter" 2>&1 |
    grep -E "^BM_|rror|what" | tee -a "$out/$file"
}
# time_step <file> <length> <name> [VAR=value ...] [-- reformer memory arguments]:
# the 6-layer Reformer step at one length in its own process (so that its peak
# counts its own scratch pool or slice workspace), appended to $out/<file>.
time_step() {
  local file=$1 length=$2 name=$3 vars=()
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    vars+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  env "${vars[@]}" timeout 100 "$pkg/run/reformer" memory --variants reformer --layers 6 \
    --lengths "$length" --steps 2 --out "$out/$name" "$@" 2>&1 |
    grep -E "^(variant|reformer) | chunks: |rror" | tee -a "$out/$file"
}
part_sgemm() {
  python3 - <<'PY' | tee "$out/sgemm.txt"
import time, torch
torch.backends.cuda.matmul.allow_tf32 = False
def rate(m, k, n, reps):
    a = torch.randn(m, k, device="cuda"); b = torch.randn(k, n, device="cuda")
    for _ in range(3): a @ b
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(reps): a @ b
    torch.cuda.synchronize()
    return 2 * m * k * n * reps / (time.perf_counter() - t) / 1e12
print(f"{torch.cuda.get_device_name()}: float32 sgemm (no TF32), torch {torch.__version__}: "
      f"8192^3 {rate(8192, 8192, 8192, 10):.1f} TFLOP/s; "
      f"[65536, 1024] x [1024, 1024] {rate(65536, 1024, 1024, 20):.1f} TFLOP/s; "
      f"[16384, 256] x [256, 256] {rate(16384, 256, 256, 50):.1f} TFLOP/s")
PY
}
part_gemm() {
  echo "== our products: cuBLAS loaded at run time, then Kokkos Kernels' gemm (REFORMER_DEVICE_BLAS=off)"
  gemm_filter='^(BM_Matmul/(65536/1024|16384/256)/|BM_DenseProduct<float>)'
  timeout 60 "$pkg/run/bench_ops" --benchmark_filter="$gemm_filter" | tee "$out/gemm_ours.txt"
  REFORMER_DEVICE_BLAS=off timeout 60 "$pkg/run/bench_ops" --benchmark_filter="$gemm_filter" |
    tee "$out/gemm_portable.txt"
}
part_elementwise() {
  echo "== element-wise maps (core/element_map.hpp) and layer norm's backward: bytes/s"
  timeout 60 "$pkg/run/bench_ops" --benchmark_filter='^BM_ElementwiseStorage<(float|bf16)>/65536/|^BM_LayerNormBackward/(16384|65536)/256/|^BM_FeedForwardProducts/rows:16384/' |
    tee "$out/elementwise.txt"
}
part_sdpa() {
  echo "== attention layers against PyTorch's fused SDPA layer (forward + backward, L x 256, causal)"
  timeout 200 python3 "$root/bench/torch_attention.py" --impl sdpa --device cuda --ours-layer \
    --ours "$pkg/run/bench_attention" --ours-kinds full lsh local exact \
    --lengths 1024 4096 16384 | tee "$out/sdpa_layer.md"
}
part_team() {
  echo "== threads per team of the fused kernels at 16K (REFORMER_TEAM_SIZE; 0: the default, core/cpu_target.hpp)"
  for size in ${TEAM_SIZES:-0 64 256}; do
    echo "team size $size" | tee -a "$out/team_size.txt"
    time_layers team_size.txt 60 '^BM_AttentionLayer/[123]/16384/' REFORMER_TEAM_SIZE=$size
  done
}
part_shape() {
  # Each run is its own process, so that each peak counts its team scratch pool.
  echo "== the chunked kernels' two shapes (REFORMER_CHUNKED_KERNEL; streamed is the GPU default): LSH-2 and local layers at 4K and 16K, the 6-layer step at 16K"
  for shape in whole streamed; do
    echo "shape $shape" | tee -a "$out/chunked_shape.txt"
    time_layers chunked_shape.txt 60 '^BM_AttentionLayer/[12]/(4096|16384)/' \
      REFORMER_CHUNKED_KERNEL=$shape
    time_step chunked_shape.txt 16384 "memory_shape_$shape" REFORMER_CHUNKED_KERNEL=$shape
  done
}
part_products() {
  # Where the chunked kernels' products run (REFORMER_CHUNK_PRODUCTS, issue 46):
  # fused team kernels (streamed, the GPU default) or gathered chunks and the
  # vendor's strided-batched products. Each run is its own process, so that
  # each peak counts its own scratch pool or slice workspace.
  echo "== chunk products (REFORMER_CHUNK_PRODUCTS): LSH-2 and local layers at 4K and 16K, the 6-layer step at 16K and 64K"
  for products in fused batched; do
    echo "products $products" | tee -a "$out/chunk_products.txt"
    time_layers chunk_products.txt 60 '^BM_AttentionLayer/[12]/(4096|16384)/' \
      REFORMER_CHUNK_PRODUCTS=$products
    for length in 16384 65536; do
      time_step chunk_products.txt "$length" "memory_products_${products}_$length" \
        REFORMER_CHUNK_PRODUCTS=$products -- "model.ff_chunk=$((length / 8))"
    done
  done
  # Larger slices at 64K (fewer gathers, launches and gradient walks; 192 MiB
  # more than the default 64), with a run's GPU default chunks: against
  # memory_6_auto_65536 of part step.
  time_step chunk_products.txt 65536 memory_products_slices256_65536 REFORMER_CHUNK_SLICE_MIB=256 \
    -- model.ff_chunk=auto model.loss_chunk=auto
  REFORMER_CHUNK_PRODUCTS=batched REFORMER_KERNEL_PROFILE="$out/profile_step16k_batched.txt" \
    timeout 100 "$pkg/run/reformer" memory --variants reformer --layers 6 --lengths 16384 \
    --steps 0 --out "$out/profile_batched" "model.ff_chunk=2048" >/dev/null
  head -n 30 "$out/profile_step16k_batched.txt"
  tail -n 1 "$out/profile_step16k_batched.txt"
}
part_bf16() {
  # bf16 activations (train.precision = "bf16") against reformer-pytorch under
  # torch.autocast(bfloat16), the same GPU, the 6-layer step at 16K and 64K.
  echo "== bf16: the 6-layer step (ours --precision bf16; reformer-pytorch under autocast)"
  for length in 16384 65536; do
    time_step bf16_step.txt "$length" "memory_bf16_$length" -- --precision bf16 \
      "model.ff_chunk=$((length / 8))"
    # The weights kept in float32 (the products widen bf16 to float32 and run
    # in sgemm) instead of rounded to bf16 for the tensor cores.
    time_step bf16_step.txt "$length" "memory_bf16_keep_$length" REFORMER_BF16_WEIGHTS=keep \
      -- --precision bf16 "model.ff_chunk=$((length / 8))"
    timeout 120 python3 "$root/experiments/pytorch_step.py" --model reformer --length "$length" \
      --device cuda --steps 2 --autocast-bf16 | tee -a "$out/bf16_step.txt"
  done
}
part_loops() {
  # The passes inside tiles by rows (the host's loops, and the GPU code before
  # 2026-11-26) or a thread per element (the GPU default since), same bits.
  echo "== the tiles' elementwise passes (REFORMER_TILE_LOOPS; elements is the GPU default): LSH-2 (streamed) and exact layers at 4K and 16K"
  for loops in rows elements; do
    echo "loops $loops" | tee -a "$out/tile_loops.txt"
    time_layers tile_loops.txt 90 '^BM_AttentionLayer/[13]/(4096|16384)/' \
      REFORMER_TILE_LOOPS=$loops
  done
}
part_tiles() {
  # Exact attention's two GPU tilings (core/cpu_target.hpp's GpuTarget): 16 x 16
  # tiles with 1 x 4 blocks, or the wide one (a 32 x 32 forward with 4 x 4
  # blocks), the latter at three team sizes (0: its own, 128).
  echo "== exact attention's tilings (REFORMER_EXACT_TILES; gpu is the default): the exact layer at 4K and 16K"
  for setting in gpu:0 gpu-wide:0 gpu-wide:64; do
    echo "tiles ${setting%:*} team size ${setting#*:}" | tee -a "$out/exact_tiles.txt"
    time_layers exact_tiles.txt 90 '^BM_AttentionLayer/3/(4096|16384)/' \
      REFORMER_EXACT_TILES="${setting%:*}" REFORMER_TEAM_SIZE="${setting#*:}"
  done
  # The batched shape (REFORMER_EXACT_PRODUCTS=batched: slices of query rows on
  # the vendor's strided-batched products) with two slice budgets (MiB of
  # scores; the layer's peak counts them).
  for mib in 64 16; do
    echo "products batched, slices of $mib MiB" | tee -a "$out/exact_tiles.txt"
    time_layers exact_tiles.txt 90 '^BM_AttentionLayer/3/(4096|16384)/' \
      REFORMER_EXACT_PRODUCTS=batched REFORMER_CHUNK_SLICE_MIB=$mib
  done
  REFORMER_EXACT_TILES=gpu-wide REFORMER_KERNEL_PROFILE="$out/profile_exact16k_wide.txt" \
    timeout 100 "$pkg/run/reformer" memory --variants exact --lengths 16384 --steps 0 \
    --out "$out/profile_exact_wide" >/dev/null
  head -n 12 "$out/profile_exact16k_wide.txt"
  REFORMER_EXACT_PRODUCTS=batched REFORMER_KERNEL_PROFILE="$out/profile_exact16k_batched.txt" \
    timeout 100 "$pkg/run/reformer" memory --variants exact --lengths 16384 --steps 0 \
    --out "$out/profile_exact_batched" >/dev/null
  head -n 12 "$out/profile_exact16k_batched.txt"
  tail -n 1 "$out/profile_exact16k_batched.txt"
}
part_lsh_peer() {
  echo "== reformer-pytorch's LSHSelfAttention layer (2 rounds, bucket 64, causal)"
  for length in 4096 16384; do
    timeout 60 python3 "$root/bench/peer_layers.py" --layer lsh --length "$length" --device cuda |
      tee -a "$out/lsh_peer.jsonl"
  done
}
part_memory() {
  echo "== the memory instrument on the GPU (2 layers)"
  timeout 120 "$pkg/run/reformer" memory --variants full,lsh-2,local,exact,reformer \
    --lengths 16384 --steps 1 --out "$out/memory_lm" | tee "$out/memory_lm.txt"
}
part_step() {
  echo "== the 6-layer Reformer step: ours (cuBLAS; then the portable gemm at 16K)"
  # One process per length, so that each peak counts the team scratch pool.
  for length in ${STEP_LENGTHS:-16384 65536}; do
    timeout 100 "$pkg/run/reformer" memory --variants reformer --layers 6 --lengths "$length" \
      --steps 2 --out "$out/memory_6_$length" | tee -a "$out/memory_6.txt"
  done
  # The feed-forward chunked as reformer-pytorch's is below (ff_chunks 8: L / 8
  # rows a chunk, instead of our default 1024): fewer, larger products.
  for length in ${STEP_LENGTHS:-16384 65536}; do
    timeout 100 "$pkg/run/reformer" memory --variants reformer --layers 6 --lengths "$length" \
      --steps 2 --out "$out/memory_6_ff8_$length" "model.ff_chunk=$((length / 8))" |
      tee -a "$out/memory_6_ff8.txt"
  done
  # A run's GPU default (model.ff_chunk and model.loss_chunk "auto": the
  # largest chunks that do not raise the predicted peak, L / 4 for the
  # feed-forward here; docs/memory.md "Automatic chunks"), the chunks named.
  for length in ${STEP_LENGTHS:-16384 65536}; do
    time_step memory_6_auto.txt "$length" "memory_6_auto_$length" -- --explain \
      model.ff_chunk=auto model.loss_chunk=auto
  done
  REFORMER_DEVICE_BLAS=off timeout 60 "$pkg/run/reformer" memory --variants reformer --layers 6 \
    --lengths 16384 --steps 2 --out "$out/memory_6_portable" | tee "$out/memory_6_portable.txt"
}
part_peer_step() {
  echo "== the 6-layer step of lucidrains' reformer-pytorch"
  for length in ${PEER_LENGTHS:-16384 65536}; do
    timeout 120 python3 "$root/experiments/pytorch_step.py" --model reformer --length "$length" \
      --device cuda --steps 2 | tee -a "$out/reformer_pytorch.jsonl"
  done
}
part_profile() {
  echo "== kernel profiles (every kernel fenced: slower than the plain runs above)"
  REFORMER_KERNEL_PROFILE="$out/profile_step16k.txt" timeout 100 "$pkg/run/reformer" memory \
    --variants reformer --layers 6 --lengths 16384 --steps 0 --out "$out/profile_step" >/dev/null
  head -n 40 "$out/profile_step16k.txt"
  tail -n 1 "$out/profile_step16k.txt"
  # 64K, float32 and bf16, with a run's GPU default chunks (model.ff_chunk and
  # model.loss_chunk "auto").
  for precision in float32 bf16; do
    REFORMER_KERNEL_PROFILE="$out/profile_step64k_$precision.txt" timeout 100 \
      "$pkg/run/reformer" memory --variants reformer --layers 6 --lengths 65536 --steps 0 \
      --precision "$precision" --out "$out/profile_step64k_$precision" model.ff_chunk=auto \
      model.loss_chunk=auto >/dev/null
    head -n 25 "$out/profile_step64k_$precision.txt"
    tail -n 1 "$out/profile_step64k_$precision.txt"
  done
  REFORMER_KERNEL_PROFILE="$out/profile_exact16k.txt" timeout 100 "$pkg/run/reformer" memory \
    --variants exact --lengths 16384 --steps 0 --out "$out/profile_exact" >/dev/null
  head -n 12 "$out/profile_exact16k.txt"
  tail -n 1 "$out/profile_exact16k.txt"
}
part_generate() {
  echo "== cached generation against rerunning the model (4K)"
  timeout 90 "$pkg/run/bench_decode" --benchmark_filter='^BM_LmGenerate/cached:[01]/L:4096' |
    tee "$out/generate.txt"
  # The cached steps with each sublayer's products in one rows_linear launch
  # (REFORMER_STEP_PRODUCTS=fused) instead of the vendor's products with their
  # layer norms and epilogues apart (the default until this is timed).
  echo "-- REFORMER_STEP_PRODUCTS=fused" | tee -a "$out/generate.txt"
  REFORMER_STEP_PRODUCTS=fused timeout 60 "$pkg/run/bench_decode" \
    --benchmark_filter='^BM_LmGenerate(Launches)?/(cached:1/L:4096|rows:1/positions:0)' |
    sed 's/^BM_/fused BM_/' | tee -a "$out/generate.txt"
  # Launches and allocations per token on the GPU (the CPU counts: docs/benchmarks.md).
  timeout 60 "$pkg/run/bench_decode" --benchmark_filter='^BM_LmGenerateLaunches/rows:1/positions:0' |
    tee -a "$out/generate.txt"
  # Where a cached token's time goes, kernel by kernel (the prompt's forward
  # pass is in the table too: its kernels run once per benchmark iteration).
  REFORMER_KERNEL_PROFILE="$out/profile_generate4k.txt" timeout 90 "$pkg/run/bench_decode" \
    --benchmark_filter='^BM_LmGenerate/cached:1/L:4096' >/dev/null
  head -n 30 "$out/profile_generate4k.txt"
  tail -n 1 "$out/profile_generate4k.txt"
}
for name in $parts; do "part_$name"; done
echo
echo "==== summary ($(cat "$out/gpu.txt"))"
cat "$out/device_blas.txt" "$out/sgemm.txt" 2>/dev/null
grep -hE "^BM_(Matmul|DenseProduct)" "$out/gemm_ours.txt" 2>/dev/null | sed 's/^/cuBLAS   /'
grep -hE "^BM_(Matmul|DenseProduct)" "$out/gemm_portable.txt" 2>/dev/null | sed 's/^/portable /'
cat "$out/sdpa_layer.md" "$out/team_size.txt" "$out/chunked_shape.txt" "$out/chunk_products.txt" \
  "$out/bf16_step.txt" \
  "$out/tile_loops.txt" \
  "$out/exact_tiles.txt" "$out/lsh_peer.jsonl" 2>/dev/null
grep -hE "^(variant|full|lsh-[0-9]+|local|exact|reformer) " "$out/memory_lm.txt" "$out/memory_6.txt" \
  "$out/memory_6_ff8.txt" "$out/memory_6_portable.txt" 2>/dev/null
cat "$out/reformer_pytorch.jsonl" 2>/dev/null
grep -hE "^(fused )?BM_" "$out/generate.txt" 2>/dev/null
if [ "$mode" = all ]; then cat "$out/tests_total.txt"; fi
exit "$tests_status"
