#!/usr/bin/env bash
# Builds the library and tests/test_threads.c under ThreadSanitizer
# (RKV_TSAN=ON, in build-tsan/) and runs it: any data race or lock-order
# problem fails the run. docs/thread-safety.md states the contract it tests.
# Usage: scripts/tsan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# No CUDA: test_threads does not use it, and finding nvcc costs the configure
# step 12 s.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRKV_TSAN=ON -DRKV_BUILD_TOOLS=OFF \
  -DRKV_CUDA=OFF
cmake --build build-tsan -j"$jobs" --target test_threads
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:exitcode=66} \
  ./build-tsan/tests/test_threads
