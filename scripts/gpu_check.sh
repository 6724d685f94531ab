#!/usr/bin/env bash
# The GPU check of the CUDA backend (issues 4, 9, 11, 19, 21), in one device
# call of at most ~6 minutes: build (CMake + nvcc, the standalone tests/cuda
# project: libringkv.so, libringkv_cuda.so, the GPU programs, the
# backend-parity suite and the `ringkv` command), the fragment model, the
# differential test CUDA vs CPU (mma, then wgmma), the backend-parity suite
# (a CUDA rkv_model against the CPU reference engine), the whole-model frame
# in one CUDA graph (test_cuda_graph, with mma and with wgmma), `ringkv
# rollout --backend cuda` (graph and pass by pass, snapshots across
# backends), compute-sanitizer on the small wgmma case list the CPU executor
# runs (tests/cuda_exec; where the machine's runtime lets it), the GPU bench
# (`ringkv bench --backend cuda`, its rows to h200.jsonl), the reference
# module and its peers side by side (a fixed slot, before the Python
# steps), the Python binding's CUDA tests (pytest -k cuda) and the torch
# custom ops, and a summary table last.
# The library is built for sm_90a machine code and compute_90 PTX only
# (RKV_CUDA_ARCHS=90a-real;90-virtual): no sm_90 machine code the driver
# could load instead of the wgmma kernel's sm_90a one.
# CUDA_MODULE_LOADING=EAGER (kernels loaded at start, not lazily inside the
# first graph capture) is set for the C programs only.
# Every step runs under its own time limit (the table in docs/cuda.md), none
# past the run's deadline; a step that fails does not stop the others.
#
# Usage:
#   scripts/gpu_check.sh --prepare   here (network, ../shared): fills the
#       git-ignored .gpu/: the reference module, shared/spec and
#       shared/golden, the Debian packages of Jansson, xxHash, cJSON and stb
#       (apt-get download, dpkg -x into .gpu/deps: the device image lacks
#       them and cannot fetch), and .gpu/commit (git describe --always --dirty)
#   scripts/gpu_check.sh --dry-run [--quick] [--only ...]
#       prints the steps, their limits and commands, and checks that .gpu/
#       is prepared; runs nothing
#   scripts/gpu_check.sh [--quick] [--only build,tests,bench,reference]
#       on the GPU machine (the device call):
#       run(command="bash scripts/gpu_check.sh", carry=[".gpu"], timeout_s=420)
#       (--only: a shorter rerun; the build always runs. Without a GPU, as
#       here, everything builds and the GPU programs skip: e.g.
#       RKV_GPU_BUILD_SECONDS=3000 RKV_GPU_CHECK_SECONDS=4000 scripts/gpu_check.sh)
# Logs go to $OUT (or .gpu/out when OUT is unset): build.log (the
# environment first), tests.log, bench.log, reference.log, h200.jsonl (the
# bench's rows and the reference's, one JSON object per line: append it to
# bench/gpu/h200.jsonl), status (each step's exit status), summary.txt:
# seven files ($OUT returns at most 8); every step appends to one of them.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD

# The Debian packages the build needs from .gpu/deps (headers, libraries).
DEB_PACKAGES="libjansson-dev libjansson4 libxxhash-dev libxxhash0 libcjson-dev libcjson1
libstb-dev libstb0"

prepare() {
  local shared=${RKV_SHARED_DIR:-$ROOT/../shared}
  local src=$shared/spec/seed_ring_cache.py
  rm -rf .gpu/out  # a local run's logs: not carried to the device
  mkdir -p .gpu/shared .gpu/debs
  install -m 0644 "$src" .gpu/seed_ring_cache.py || { echo "gpu_check: cannot copy $src"; return 1; }
  # the Python binding's tests want shared/spec and shared/golden
  rm -rf .gpu/shared/spec .gpu/shared/golden
  cp -r "$shared/spec" "$shared/golden" .gpu/shared/ || { echo "gpu_check: cannot copy $shared"; return 1; }
  # third-party libraries: fetched once (kept in .gpu/debs), unpacked afresh
  local need=() p f
  for p in $DEB_PACKAGES; do
    compgen -G ".gpu/debs/${p}_*.deb" >/dev/null || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    (cd .gpu/debs && apt-get download "${need[@]}") ||
      { echo "gpu_check: apt-get download ${need[*]} failed (no network? try apt-get update)"; return 1; }
  fi
  rm -rf .gpu/deps
  mkdir -p .gpu/deps
  for f in .gpu/debs/*.deb; do
    dpkg -x "$f" .gpu/deps || { echo "gpu_check: dpkg -x $f failed"; return 1; }
  done
  # headers and shared libraries are what the build uses (Debian's static
  # libraries are not position independent: libringkv.so cannot take them)
  rm -rf .gpu/deps/usr/share
  rm -f .gpu/deps/usr/lib/*/*.a
  # links become the files they name (what travels to the device is plain files)
  local l t
  while IFS= read -r l; do
    t=$(readlink -f "$l")
    if [ -f "$t" ]; then cp --remove-destination "$t" "$l"; else rm -f "$l"; fi
  done < <(find .gpu/deps -type l)
  for f in jansson.h xxhash.h cjson/cJSON.h stb/stb_image.h; do
    [ -f ".gpu/deps/usr/include/$f" ] || { echo "gpu_check: .gpu/deps lacks $f"; return 1; }
  done
  for f in libjansson.so libxxhash.so libcjson.so libstb.so; do
    [ -f ".gpu/deps/usr/lib/x86_64-linux-gnu/$f" ] || { echo "gpu_check: .gpu/deps lacks $f"; return 1; }
  done
  git describe --always --dirty >.gpu/commit 2>/dev/null || echo unknown >.gpu/commit
  grep -qxF '/.gpu/' .gitignore 2>/dev/null || echo "gpu_check: warning: /.gpu/ is not in .gitignore"
  echo "gpu_check: prepared .gpu/ ($(du -sh .gpu | cut -f1); commit $(cat .gpu/commit)):" \
       .gpu/*
}

if [ "${1:-}" = "--prepare" ]; then
  prepare
  exit $?
fi

QUICK=""
DRY=""
ONLY="tests,bench,reference"  # the build always runs
BUILD=${RKV_GPU_BUILD_DIR:-build-gpu}
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK="--quick" ;;
    --dry-run) DRY=1 ;;
    --only) [ $# -ge 2 ] || { echo "usage: --only needs a list"; exit 2; }; ONLY=$2; shift ;;
    *) echo "usage: $0 [--prepare] [--dry-run] [--quick] [--only build,tests,bench,reference]"; exit 2 ;;
  esac
  shift
done
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
OUTDIR=${OUT:-$ROOT/.gpu/out}
START=$(date +%s)
DEADLINE=$((START + ${RKV_GPU_CHECK_SECONDS:-345}))
left() { echo $((DEADLINE - $(date +%s))); }
COMMIT=$(cat .gpu/commit 2>/dev/null || echo unknown)
export RKV_COMMIT=$COMMIT

if [ -n "$DRY" ]; then
  echo "gpu_check: dry run (nothing is run); output would go to $OUTDIR; commit $COMMIT"
  for f in .gpu/seed_ring_cache.py .gpu/shared/spec .gpu/shared/golden \
           .gpu/deps/usr/include/jansson.h .gpu/deps/usr/lib/x86_64-linux-gnu/libcjson.so; do
    [ -e "$f" ] && echo "  prepared: $f" || echo "  MISSING:  $f (run scripts/gpu_check.sh --prepare here)"
  done
fi
[ -n "$DRY" ] || mkdir -p "$OUTDIR"

# run_step NAME MAX_SECONDS LOG CMD...: runs with a timeout that never passes
# the deadline, appends to LOG, records the exit status in $OUTDIR/status
# (124: its time limit; 77: skipped, no GPU).
run_step() {
  local name=$1 max=$2 log=$3; shift 3
  if [ -n "$DRY" ]; then
    printf '  step %-16s limit %4ss  log %-14s %s\n' "$name" "$max" "${log##*/}" "$*"
    return 0
  fi
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
if [ -z "$DRY" ]; then
  : >"$OUTDIR/status"
  : >"$OUTDIR/h200.jsonl"
  # ---- environment (the head of build.log) ----
  {
    date -u
    echo "commit $COMMIT"
    nvidia-smi || echo "nvidia-smi failed"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv || true
    command -v nvcc || ls /usr/local/cuda/bin/nvcc
    nvcc --version || /usr/local/cuda/bin/nvcc --version
    cmake --version | head -1
    gcc --version | head -1
    nproc
    ldd --version 2>&1 | head -1  # glibc: binaries carried from elsewhere need at most this one
    python3 -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)' || true
    ls -la .gpu || true
  } >"$OUTDIR/build.log" 2>&1
  echo "gpu_check: $(grep -m1 -E 'H200|H100|NVIDIA' "$OUTDIR/build.log" || echo 'no GPU line')"
fi

# ---- build ----
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
GEN=()
command -v ninja >/dev/null && [ ! -f "$BUILD/CMakeCache.txt" ] && GEN=(-G Ninja)
run_step configure 60 "$OUTDIR/build.log" \
  cmake -S tests/cuda -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DRKV_CUDA_PTXAS_VERBOSE=ON "-DRKV_CUDA_ARCHS=90a-real;90-virtual"
# (RKV_GPU_BUILD_SECONDS: a longer limit for a build on a small machine)
run_step build "${RKV_GPU_BUILD_SECONDS:-170}" "$OUTDIR/build.log" cmake --build "$BUILD" -j "$(nproc)"
if [ -z "$DRY" ]; then
  grep -E "ptxas info *: Used|spill" "$OUTDIR/build.log" | sort | uniq -c | sort -rn | head -12 || true
  # the tensor-core and shared-memory instructions made it into the machine code
  for sm in sm_90a; do
    sass=$(mktemp)
    cuobjdump --gpu-architecture $sm --dump-sass "$BUILD"/libringkv_cuda.a >"$sass" 2>/dev/null
    echo "$sm: HGMMA $(grep -c HGMMA "$sass") HMMA $(grep -c HMMA "$sass")" \
         "LDSM $(grep -c LDSM "$sass") LDGSTS $(grep -c LDGSTS "$sass")"
    rm -f "$sass"
  done >>"$OUTDIR/build.log" 2>&1
fi
have() { [ -n "$DRY" ] || [ -x "$BUILD/$1" ]; }
missing() {
  echo "gpu_check: no $BUILD/$1 (build failed or a library missing: see build.log): $2 not run" \
    | tee -a "$OUTDIR/tests.log"
  echo "$2 skipped" >>"$OUTDIR/status"
}

# ---- tests ----
want tests && run_step fragment_model 30 "$OUTDIR/tests.log" python3 tests/cuda/fragment_model.py
# Kernels loaded at start (not lazily inside the first graph capture): the
# C programs' environment only (the Python steps keep torch's default).
EAGER=(env CUDA_MODULE_LOADING=EAGER)
if want tests; then
  if have test_cuda_diff; then
    # The wgmma kernel's pass apart: a fault there must not lose the rest.
    run_step cuda_diff 80 "$OUTDIR/tests.log" "${EAGER[@]}" "$BUILD"/test_cuda_diff $QUICK --kernel mma
    # (the wgmma pass fails if a call that should plan wgmma fell back to mma)
    run_step cuda_diff_wgmma 45 "$OUTDIR/tests.log" "${EAGER[@]}" "$BUILD"/test_cuda_diff $QUICK \
      --kernel wgmma
  else
    missing test_cuda_diff cuda_diff
  fi
  # a CUDA rkv_model against the CPU reference engine (after the CPU engines)
  if have test_backend_parity; then
    run_step backend_parity 45 "$OUTDIR/tests.log" "${EAGER[@]}" "$BUILD"/test_backend_parity
  else
    missing test_backend_parity backend_parity
  fi
  # the offload path (issue 13): a 720P session of a CUDA model offloaded
  # into pinned and pageable memory and paged in, its regions on the device,
  # an export into a second CUDA model (built with the snapshot files)
  if have test_cuda_offload; then
    run_step cuda_offload 30 "$OUTDIR/tests.log" "${EAGER[@]}" "$BUILD"/test_cuda_offload
  else
    missing test_cuda_offload cuda_offload
  fi
  # the whole-model frame recorded once in a graph, replayed 300 frames
  if have test_cuda_graph; then
    run_step cuda_graph 45 "$OUTDIR/tests.log" "${EAGER[@]}" "$BUILD"/test_cuda_graph --frames 300
    run_step cuda_graph_wgmma 30 "$OUTDIR/tests.log" "${EAGER[@]}" RKV_CUDA_ATTN_KERNEL=wgmma \
      "$BUILD"/test_cuda_graph --frames 100
  else
    missing test_cuda_graph cuda_graph
  fi
  # `ringkv rollout --backend cuda` through rkv_model: graph vs pass by pass,
  # snapshots across backends, and the CPU replay path
  if have ringkv; then
    run_step rollout_backend 75 "$OUTDIR/tests.log" \
      python3 tests/check_rollout_backend.py "$BUILD"/ringkv 1 --no-bench --image data/earth.jpg
  else
    missing ringkv rollout_backend
  fi
fi


# ---- the GPU bench: rows to h200.jsonl (stderr to bench.log) ----
if want bench; then
  if have ringkv; then
    if [ -n "$DRY" ]; then
      run_step bench 90 "$OUTDIR/bench.log" "$BUILD"/ringkv bench --backend cuda --json $QUICK
    else
      # shellcheck disable=SC2016 # expanded by the inner sh
      run_step bench 90 "$OUTDIR/bench.log" \
        sh -c '"$1" bench --backend cuda --json $2 >>"$3"' sh "$BUILD"/ringkv "$QUICK" \
        "$OUTDIR/h200.jsonl"
    fi
  else
    missing ringkv bench
  fi
fi

# ---- the reference side by side: a fixed slot, before the Python steps ----
# (the reference module with FlexAttention and a prebuilt mask, and cuDNN
# attention on gathered keys: the anchors the bench's goals are ratios to)
ref_budget=100
want reference && PYTHONUNBUFFERED=1 run_step reference $((ref_budget + 15)) "$OUTDIR/reference.log" \
  python3 bench/gpu/reference_bench.py --budget "$((ref_budget - 45))" \
  --jsonl "$OUTDIR/h200.jsonl" $QUICK

# the Python binding on this machine's torch, its GPU-relevant tests (-k
# cuda; the CPU ones run in CI): the differential test against the
# reference module on CUDA tensors, and test_cuda.py (zero-copy views, CUDA vs CPU
# layers, device errors, graph capture, Model(device="cuda")). The libraries
# are the build's own: libringkv.so and libringkv_cuda.so linked to it
# (tests/cuda/CMakeLists.txt). Where torch sees a GPU the CUDA tests do not
# skip: a missing or broken libringkv_cuda.so fails them.
if want tests && { [ -n "$DRY" ] || [ -d .gpu/shared/spec ]; }; then
  if have libringkv.so; then
    RINGKV_LIBRARY="$ROOT/$BUILD/libringkv.so" RINGKV_CUDA_LIBRARY="$ROOT/$BUILD/libringkv_cuda.so" \
      RKV_SHARED_DIR="$ROOT/.gpu/shared" \
      run_step python_binding 100 "$OUTDIR/tests.log" \
      python3 -m pytest -q -rs -p no:cacheprovider -k cuda python/tests/test_differential.py \
        python/tests/test_golden.py python/tests/test_cuda.py
  else
    missing libringkv.so python_binding
  fi
fi

# the torch custom ops (issue 12) on this machine's torch: compile,
# FlexAttention, opcheck on CUDA tensors, a frame captured with
# torch.cuda.graph, examples/torch_engine.py --device cuda, device errors
if want tests && { [ -n "$DRY" ] || [ -d .gpu/shared/spec ]; }; then
  if have libringkv.so; then
    RINGKV_LIBRARY="$ROOT/$BUILD/libringkv.so" RINGKV_CUDA_LIBRARY="$ROOT/$BUILD/libringkv_cuda.so" \
      RKV_SHARED_DIR="$ROOT/.gpu/shared" \
      run_step torch_ops 90 "$OUTDIR/tests.log" \
      python3 -m pytest -q -rs -p no:cacheprovider -k cuda python/tests/test_torch_ops.py
  else
    missing libringkv.so torch_ops
  fi
fi

# compute-sanitizer (memcheck, then racecheck of shared memory) on the CPU
# executor's small wgmma case list (test_cuda_diff --exec: tests/cuda_exec
# runs it on every CI machine): bounds and races on the hardware, where the
# executor checks them on the CPU; last, with what time is left. It works on
# the Firecracker machines, not under gVisor ("Device not supported"): then
# the steps fail and say so.
if want tests; then
  if have test_cuda_diff && { [ -n "$DRY" ] || command -v compute-sanitizer >/dev/null; }; then
    run_step sanitizer_wgmma 45 "$OUTDIR/tests.log" "${EAGER[@]}" \
      compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$BUILD"/test_cuda_diff --exec --kernel wgmma
    run_step racecheck_wgmma 45 "$OUTDIR/tests.log" "${EAGER[@]}" \
      compute-sanitizer --tool racecheck --error-exitcode 9 \
      "$BUILD"/test_cuda_diff --exec --kernel wgmma
  else
    echo "gpu_check: no compute-sanitizer (or no test_cuda_diff): sanitizer steps not run" \
      | tee -a "$OUTDIR/tests.log"
    echo "sanitizer_wgmma skipped" >>"$OUTDIR/status"
  fi
fi

[ -z "$DRY" ] &&
  grep -E "FAIL|operation|^(upsert|visibility|attend|device|f64)|RESULT (test|cuda_)|case |PASS:|SKIP|no GPU" \
    "$OUTDIR/tests.log" 2>/dev/null | head -60

# ---- summary, last ----
if [ -n "$DRY" ]; then
  echo "  then: python3 bench/gpu/summary.py $OUTDIR (the goals against the rows)"
  exit 0
fi
python3 bench/gpu/summary.py "$OUTDIR" | tee "$OUTDIR/summary.txt"
echo "gpu_check: total $(( $(date +%s) - START ))s; logs in $OUTDIR"
