#!/usr/bin/env bash
# On a machine with an NVIDIA Hopper GPU and no project dependencies: unpacks
# .gpu/pkg.tar.xz (made by tests/gpu_pack.sh) and
#   tests [seconds per binary, default 240] [binaries ...]
#       runs the test binaries on the CUDA backend, each under the time limit,
#       one log and one GoogleTest XML report per binary in $OUT (or
#       gpu-results/), ending with `total: N passed, M failed`; exits 1 when
#       any binary failed (a failed case, a crash or a time-out), else 0;
#   bench
#       the GPU benchmarks, in one run: the device's float32 GEMM rate (PyTorch),
#       our attention layers against PyTorch's fused SDPA layer, the memory
#       instrument's sweep, and the 6-layer Reformer step against lucidrains'
#       reformer-pytorch (wheels from .gpu/whl, if there).
# The machine needs python3 with PyTorch for `bench`, nothing for `tests`.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/gpu-results}
mode=${1:-tests}
shift || true
mkdir -p "$out" /tmp/reformer-gpu
if [ ! -d /tmp/reformer-gpu/pkg ]; then
  tar -C /tmp/reformer-gpu -xJf "$root/.gpu/pkg.tar.xz" ||
    python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
      "$root/.gpu/pkg.tar.xz" /tmp/reformer-gpu
fi
pkg=/tmp/reformer-gpu/pkg
export LD_LIBRARY_PATH=$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The products load the vendor BLAS at run time (src/ops/tpls/device_blas.cpp):
# unless REFORMER_CUBLAS names one, PyTorch's cuBLAS from its wheels
# (site-packages/nvidia/<cublas or cu13>/lib), with its cuBLASLt beside it.
if [ -z "${REFORMER_CUBLAS:-}" ]; then
  cublas=$(python3 -c 'import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
found = sorted(p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcublas.so.*")))
print(found[-1] if found else "")' 2>/dev/null || true)
  if [ -n "$cublas" ]; then
    LD_LIBRARY_PATH=$(dirname "$cublas"):$LD_LIBRARY_PATH
    export REFORMER_CUBLAS=$cublas
  fi
fi
echo "device BLAS: ${REFORMER_CUBLAS:-none named, the dynamic loader searches}" | tee "$out/device_blas.txt"
"$pkg/bin/reformer" info 2>&1 | grep -E "device" | tee -a "$out/device_blas.txt" || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

if [ "$mode" = tests ]; then
  limit=${1:-240}
  shift || true
  binaries=("$@")
  [ ${#binaries[@]} -gt 0 ] || binaries=(test_core test_ops test_attention test_layers test_models
    test_train test_data test_io test_config)
  passed=0 failed=0
  for name in "${binaries[@]}"; do
    start=$(date +%s)
    # The tests read files relative to the repository (fixtures, scripts).
    (cd "$root" && timeout "$limit" "$pkg/bin/$name" --gtest_output="xml:$out/$name.xml") \
      >"$out/$name.log" 2>&1
    rc=$?
    p=$(grep -c '^\[       OK \]' "$out/$name.log" || true)
    f=$(grep -c '^\[  FAILED  \] .*(' "$out/$name.log" || true)
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1  # a crash or a time-out counts as a failure
    passed=$((passed + p))
    failed=$((failed + f))
    echo "$name: $p passed, $f failed, exit $rc, $(($(date +%s) - start)) s"
    [ "$rc" -eq 0 ] || grep -E '^\[  FAILED  \]|rror|abort|Assertion' "$out/$name.log" | head -n 20
  done
  echo "total: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || exit 1
  exit 0
fi

[ "$mode" = bench ] || { echo "gpu_run.sh: mode is '$mode' but must be tests or bench" >&2; exit 2; }
if ls "$root"/.gpu/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/reformer-gpu/site "$root"/.gpu/whl/*.whl
  export PYTHONPATH=/tmp/reformer-gpu/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
python3 - <<'PY' | tee "$out/sgemm.txt"
import time, torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(8192, 8192, device="cuda"); b = torch.randn(8192, 8192, device="cuda")
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter(); n = 10
for _ in range(n): a @ b
torch.cuda.synchronize()
print(f"{torch.cuda.get_device_name()}: float32 sgemm 8192^3 (no TF32) "
      f"{2 * 8192**3 * n / (time.perf_counter() - t) / 1e12:.1f} TFLOP/s, torch {torch.__version__}")
PY
echo "== attention layers against PyTorch's fused SDPA layer (forward + backward, L x 256, causal)"
timeout 240 python3 "$root/bench/torch_attention.py" --impl sdpa --device cuda --ours-layer \
  --ours "$pkg/bin/bench_attention" --ours-kinds full lsh local exact \
  --lengths 1024 4096 16384 | tee "$out/sdpa_layer.md"
echo "== the memory instrument on the GPU"
timeout 200 "$pkg/bin/reformer" memory --variants full,full-rev,lsh-2,lsh-8,local,exact,exact-rev,reformer \
  --lengths 4096,16384,65536 --steps 1 --out "$out/memory_lm" | tee "$out/memory_lm.txt"
echo "== the 6-layer Reformer step: ours and reformer-pytorch"
timeout 100 "$pkg/bin/reformer" memory --variants reformer --layers 6 --lengths 16384,65536 \
  --steps 2 --out "$out/memory_6" | tee "$out/memory_6.txt"
for length in 16384 65536; do
  timeout 120 python3 "$root/experiments/pytorch_step.py" --model reformer --length "$length" \
    --device cuda --steps 2 | tee -a "$out/reformer_pytorch.jsonl"
done
