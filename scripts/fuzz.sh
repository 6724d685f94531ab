#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer + UndefinedBehavior-
# Sanitizer, RKV_FUZZ=ON) in build-fuzz/ and runs each for a bounded time:
#   fuzz_api       model API call sequences against a reference of the rules
#   fuzz_snapshot  the snapshot-file loader on arbitrary bytes
#   fuzz_trace     the golden-trace parser (tools/trace.c)
# First every input under fuzz/regressions/TARGET/ (crashes found earlier)
# is replayed once. Exits non-zero when any target crashes; the reproducer
# is left in build-fuzz/artifacts/ (copy it to fuzz/regressions/TARGET/ to
# keep it as a regression test).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default: $FUZZ_SECONDS or 20)
# FUZZ_SEED=N fixes libFuzzer's random seed, so a run explores the same
# inputs in the same order wherever it starts from the same corpus (CI sets
# it and starts from an empty build-fuzz/: a CI failure reproduces with the
# same seed, and a longer local run from an empty corpus with that seed goes
# through the inputs a CI run tries, and more). Unset: a new seed each run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECONDS:-20}}
seed_arg=()
if [ -n "${FUZZ_SEED:-}" ]; then seed_arg=(-seed="$FUZZ_SEED"); fi
jobs=$(nproc 2>/dev/null || echo 2)
cc=${FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}
if [ -z "$cc" ]; then
  echo "fuzz.sh: clang not found (Debian: clang-14 and libclang-rt-14-dev)" >&2
  exit 1
fi
build=build-fuzz
shared=${RKV_SHARED_DIR:-$(pwd)/../shared}
targets=(fuzz_api fuzz_snapshot fuzz_trace)

# No CUDA: the fuzz targets do not use it (and finding nvcc costs 12 s).
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRKV_FUZZ=ON -DRKV_BUILD_TESTS=OFF -DRKV_BUILD_TOOLS=OFF -DRKV_CUDA=OFF
cmake --build "$build" -j"$jobs" --target "${targets[@]}" fuzz_gen_seeds

# Corpora: kept between runs in build-fuzz/corpus, seeded every time.
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do mkdir -p "$build/corpus/${t#fuzz_}"; done
"$build/fuzz/fuzz_gen_seeds" "$build/corpus/snapshot"
if compgen -G "$shared/golden/trace_*.txt" > /dev/null; then
  cp "$shared"/golden/trace_*.txt "$build/corpus/trace/"
else
  echo "fuzz.sh: no golden traces under $shared/golden; fuzz_trace starts from nothing" >&2
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  if compgen -G "fuzz/regressions/$name/*" > /dev/null; then
    echo "== $t: replaying fuzz/regressions/$name"
    "$build/fuzz/$t" -runs=1 fuzz/regressions/"$name"/* || status=1
  fi
  echo "== $t: fuzzing for ${secs}s"
  if ! "$build/fuzz/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 \
      ${seed_arg[@]+"${seed_arg[@]}"} -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$name" \
      > "$build/$t.log" 2>&1; then
    status=1
    echo "fuzz.sh: $t FAILED; the last lines of $build/$t.log:" >&2
    tail -40 "$build/$t.log" >&2
  fi
  grep -E "DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$build/$t.log" || true
done
if [ "$status" != 0 ]; then
  echo "fuzz.sh: reproducers in $build/artifacts/ (run: $build/fuzz/TARGET FILE)" >&2
fi
exit "$status"
