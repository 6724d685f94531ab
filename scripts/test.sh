#!/usr/bin/env bash
# Builds ringkv and runs the whole test suite twice: a Release build, then a
# build under AddressSanitizer + UndefinedBehaviorSanitizer. Both halves run
# whatever the first one gives; each ends with one summary line
# ("test.sh: release: ...", "test.sh: sanitize: ..."), then one line for all
# ("test.sh: all: ..."). Exit status: 0 when every half that ran passed,
# 1 otherwise.
# Usage: scripts/test.sh [--no-sanitize]
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

# half NAME BUILD_DIR CMAKE_ARGS... -- ENV...: configure, build, ctest; sets
# summary_NAME to a line and returns ctest's (or the build's) status.
declare -A summary
failed=0
half() {
  local name=$1 dir=$2; shift 2
  local args=() envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  envs=("$@")
  local log start
  log=$(mktemp); start=$(date +%s)
  if ! cmake -S . -B "$dir" "${args[@]}"; then
    summary[$name]="FAILED: cmake configure ($dir)"; failed=1; rm -f "$log"; return
  fi
  if ! cmake --build "$dir" -j"$jobs"; then
    summary[$name]="FAILED: build ($dir)"; failed=1; rm -f "$log"; return
  fi
  env "${envs[@]}" ctest --test-dir "$dir" --output-on-failure -j"$jobs" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -1)
  local skipped
  skipped=$(grep -cE "\*\*\*(Skipped|Not Run)" "$log" || true)
  [ -n "$line" ] || line="no ctest summary"
  if [ "$rc" -eq 0 ]; then
    summary[$name]="passed: $line, $skipped skipped, $(( $(date +%s) - start )) s"
  else
    summary[$name]="FAILED (ctest exit $rc): $line, $skipped skipped, $(( $(date +%s) - start )) s"
    failed=1
  fi
  rm -f "$log"
}

order=(release)
half release build -DCMAKE_BUILD_TYPE=Release --
if [ "${1:-}" != "--no-sanitize" ]; then
  order+=(sanitize)
  half sanitize build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRKV_SANITIZE=ON -- \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 RKV_SANITIZED=1
fi

echo
for n in "${order[@]}"; do echo "test.sh: $n: ${summary[$n]}"; done
if [ "$failed" -eq 0 ]; then
  echo "test.sh: all: passed (${order[*]})"
else
  echo "test.sh: all: FAILED (see the lines above)"
fi
exit "$failed"
