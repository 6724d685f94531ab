#!/usr/bin/env bash
# The GPU check of the CUDA backend (issue 4), in one call of at most ~6 min:
# build (CMake + nvcc, standalone tests/cuda project: the GPU programs,
# libringkv.so and libringkv_cuda.so), the fragment model, the differential
# test CUDA vs CPU, the graph-capture test (300 frames), the Python binding's
# tests on CPU and CUDA tensors, the torch custom ops (torch_ops),
# the benchmark at 720P/360P, the reference module and its peers (cuDNN,
# flash SDPA, FlexAttention) side by side, and a summary table printed last.
#
# Usage:
#   scripts/gpu_check.sh --prepare   here, where ../shared exists: copies the
#                                    reference module into .gpu/ (git-ignored)
#   scripts/gpu_check.sh [--quick] [--only tests,bench,reference]
#                                    on the GPU machine (the device call):
#       run(command="bash scripts/gpu_check.sh", carry=[".gpu"], timeout_s=420)
#   (--only: a shorter rerun; the build always runs)
# Logs go to $OUT (or .gpu/out when OUT is unset): env.txt, build.log,
# tests.log, bench.log, reference.log, summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ "${1:-}" = "--prepare" ]; then
  shared=${RKV_SHARED_DIR:-$ROOT/../shared}
  src=$shared/spec/seed_ring_cache.py
  mkdir -p .gpu/shared
  install -m 0644 "$src" .gpu/seed_ring_cache.py || { echo "gpu_check: cannot copy $src"; exit 1; }
  # the Python binding's tests want shared/spec and shared/golden
  rm -rf .gpu/shared/spec .gpu/shared/golden
  cp -r "$shared/spec" "$shared/golden" .gpu/shared/ || { echo "gpu_check: cannot copy $shared"; exit 1; }
  grep -qxF '/.gpu/' .gitignore 2>/dev/null || echo "gpu_check: warning: /.gpu/ is not in .gitignore"
  echo "gpu_check: prepared .gpu/ ($(ls .gpu | tr '\n' ' '))"
  exit 0
fi

QUICK=""
ONLY="tests,bench,reference"  # the build always runs
BUILD=${RKV_GPU_BUILD_DIR:-build-gpu}
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK="--quick" ;;
    --only) ONLY=$2; shift ;;
    *) echo "usage: $0 [--prepare] [--quick] [--only tests,bench,reference]"; exit 2 ;;
  esac
  shift
done
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
OUTDIR=${OUT:-$ROOT/.gpu/out}
mkdir -p "$OUTDIR"
START=$(date +%s)
DEADLINE=$((START + ${RKV_GPU_CHECK_SECONDS:-350}))
left() { echo $((DEADLINE - $(date +%s))); }
# run_step NAME MAX_SECONDS LOG CMD...: runs with a timeout that never passes
# the deadline, appends to LOG, records the exit status in $OUTDIR/status.
run_step() {
  local name=$1 max=$2 log=$3; shift 3
  local budget; budget=$(left)
  [ "$budget" -gt "$max" ] && budget=$max
  if [ "$budget" -lt 10 ]; then
    echo "STEP $name skipped (out of time)" | tee -a "$log"
    echo "$name skipped" >>"$OUTDIR/status"
    return 0
  fi
  echo "=== $name (limit ${budget}s) ===" | tee -a "$log"
  local t0; t0=$(date +%s)
  timeout --kill-after=5 "$budget" "$@" >>"$log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $(( $(date +%s) - t0 ))s ===" | tee -a "$log"
  echo "$name $rc" >>"$OUTDIR/status"
  return 0
}
: >"$OUTDIR/status"

# ---- environment ----
{
  date -u
  nvidia-smi || echo "nvidia-smi failed"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv || true
  command -v nvcc || ls /usr/local/cuda/bin/nvcc
  nvcc --version || /usr/local/cuda/bin/nvcc --version
  cmake --version | head -1
  gcc --version | head -1
  nproc
  python3 -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)' || true
  ls -la .gpu || true
} >"$OUTDIR/env.txt" 2>&1
echo "gpu_check: $(head -20 "$OUTDIR/env.txt" | grep -m1 -E 'H200|H100|NVIDIA' || echo 'no GPU line')"

# ---- build ----
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
GEN=()
command -v ninja >/dev/null && [ ! -f "$BUILD/CMakeCache.txt" ] && GEN=(-G Ninja)
run_step configure 60 "$OUTDIR/build.log" \
  cmake -S tests/cuda -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DRKV_CUDA_PTXAS_VERBOSE=ON
run_step build 150 "$OUTDIR/build.log" cmake --build "$BUILD" -j "$(nproc)"
grep -E "ptxas info *: Used|spill" "$OUTDIR/build.log" | sort | uniq -c | sort -rn | head -12 || true
# the tensor-core and shared-memory instructions made it into the machine code
for sm in sm_90a sm_90; do
  sass=$(mktemp)
  cuobjdump --gpu-architecture $sm --dump-sass "$BUILD"/libringkv_cuda.a >"$sass" 2>/dev/null
  echo "$sm: HGMMA $(grep -c HGMMA "$sass") HMMA $(grep -c HMMA "$sass")" \
       "LDSM $(grep -c LDSM "$sass") LDGSTS $(grep -c LDGSTS "$sass")"
  rm -f "$sass"
done >>"$OUTDIR/build.log" 2>&1

# ---- tests ----
want tests && run_step fragment_model 30 "$OUTDIR/tests.log" python3 tests/cuda/fragment_model.py
# Kernels loaded at start (not lazily inside the first graph capture).
export CUDA_MODULE_LOADING=EAGER
if [ -x "$BUILD"/test_cuda_diff ]; then
  # The wgmma kernel's pass apart: a fault there must not lose the rest.
  want tests && run_step cuda_diff 80 "$OUTDIR/tests.log" "$BUILD"/test_cuda_diff $QUICK --kernel mma
  want tests && run_step cuda_diff_wgmma 45 "$OUTDIR/tests.log" \
    "$BUILD"/test_cuda_diff $QUICK --kernel wgmma
  want tests && run_step cuda_graph 60 "$OUTDIR/tests.log" "$BUILD"/test_cuda_graph --frames 300
  # the offload path (issue 13): a 720P session offloaded into pinned and
  # pageable memory and paged in, its regions, an export into a second CUDA
  # model; built where the core has its snapshot files (Jansson, xxHash)
  if [ -x "$BUILD"/test_cuda_offload ]; then
    want tests && run_step cuda_offload 30 "$OUTDIR/tests.log" "$BUILD"/test_cuda_offload
  else
    echo "gpu_check: cuda_offload not built (the core here has no snapshot files: Jansson and xxHash missing)" \
      | tee -a "$OUTDIR/tests.log"
  fi
  want bench && run_step bench_cuda 100 "$OUTDIR/bench.log" "$BUILD"/bench_cuda $QUICK
else
  echo "gpu_check: build failed, see build.log" | tee -a "$OUTDIR/tests.log"
  tail -40 "$OUTDIR/build.log"
fi

# the Python binding on this machine's torch, CPU and CUDA layers: golden
# traces, the differential test against the reference module (on the CPU and
# on CUDA tensors), and test_cuda.py (zero-copy views, CUDA vs CPU layers,
# device errors, graph capture). The libraries are the build's own:
# libringkv.so (the core minus snapshot files, which need Jansson/xxHash that
# this machine may lack; the binding binds those functions only where the
# library has them) and libringkv_cuda.so linked to it (tests/cuda/CMakeLists.txt).
# Where torch sees a GPU the CUDA tests do not skip: a missing or broken
# libringkv_cuda.so fails them.
if want tests && [ -d .gpu/shared/spec ]; then
  if [ -f "$BUILD/libringkv.so" ]; then
    RINGKV_LIBRARY="$ROOT/$BUILD/libringkv.so" RINGKV_CUDA_LIBRARY="$ROOT/$BUILD/libringkv_cuda.so" \
      RKV_SHARED_DIR="$ROOT/.gpu/shared" \
      run_step python_binding 120 "$OUTDIR/tests.log" \
      python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_differential.py \
        python/tests/test_golden.py python/tests/test_cuda.py
  else
    echo "gpu_check: no $BUILD/libringkv.so (build failed?): Python binding not tested" \
      | tee -a "$OUTDIR/tests.log"
    echo "python_binding skipped" >>"$OUTDIR/status"
  fi
fi

# the torch custom ops (issue 12) on this machine's torch: compile,
# FlexAttention, opcheck on CUDA tensors, a frame captured with
# torch.cuda.graph, examples/torch_engine.py --device cuda, device errors
if want tests && [ -d .gpu/shared/spec ] && [ -f "$BUILD/libringkv.so" ]; then
  RINGKV_LIBRARY="$ROOT/$BUILD/libringkv.so" RINGKV_CUDA_LIBRARY="$ROOT/$BUILD/libringkv_cuda.so" \
    RKV_SHARED_DIR="$ROOT/.gpu/shared" \
    run_step torch_ops 90 "$OUTDIR/tests.log" \
    python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_torch_ops.py
fi

# failures and per-operation tables on the console too (the logs come back as files)
grep -E "FAIL|operation|^(upsert|visibility|attend|device|f64)|RESULT (test|cuda_)|case " "$OUTDIR/tests.log" 2>/dev/null | head -60

# ---- the reference side by side ----
ref_budget=$(( $(left) - 25 ))
[ $ref_budget -gt 140 ] && ref_budget=140
want reference && PYTHONUNBUFFERED=1 run_step reference $((ref_budget + 20)) "$OUTDIR/reference.log" \
  python3 bench/gpu/reference_bench.py --budget "$(( ref_budget > 60 ? ref_budget - 50 : 10 ))" $QUICK

# ---- summary, last ----
python3 bench/gpu/summary.py "$OUTDIR" | tee "$OUTDIR/summary.txt"
echo "gpu_check: total $(( $(date +%s) - START ))s; logs in $OUTDIR"
