#!/usr/bin/env bash
# Installs what ringkv needs to build and test on Debian (run as root):
# a C toolchain and CMake, stb (image decoding/encoding), Jansson (the
# snapshot header's strict JSON parser), cJSON (the tools' JSON), xxHash,
# cmocka (unit tests), OpenBLAS and oneDNN (`ringkv bench`'s sgemm and bf16
# matmul ceilings), clang's sanitizer runtimes, and python3 for the
# rollout check script; then NumPy and pytest from PyPI for the Python
# binding's tests (python/tests; not torch, a multi-GB CUDA bundle: the tests
# that need it are skipped without it); then Ray (plain `ray`: the core, no
# dashboard) and xxhash for ringkv.ray and its tests (python/tests/test_ray.py,
# test_migration.py, test_offload.py), skipped when already importable.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libstb-dev libjansson-dev libcjson-dev libxxhash-dev libcmocka-dev libopenblas-dev
      libdnnl-dev python3
      clang-14 libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi

# The Python binding's tests run under the python3 on PATH (ctest's
# python_binding). A Debian python3 refuses pip without
# --break-system-packages (PEP 668); with no pip at all, Debian's packages.
if ! python3 -c 'import numpy, pytest' 2>/dev/null; then
  echo "installing numpy and pytest for $(command -v python3)"
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  python3 -m pip install -q numpy pytest \
    || python3 -m pip install -q --break-system-packages numpy pytest \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy python3-pytest; }
fi

# ringkv.ray (pip install ringkv[ray]): Ray from PyPI, plain `ray` (the
# dashboard and its agents of ray[default] are not needed), and xxhash.
if ! python3 -c 'import ray, xxhash' 2>/dev/null; then
  echo "installing ray and xxhash for $(command -v python3)"
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  python3 -m pip install -q ray xxhash \
    || python3 -m pip install -q --break-system-packages ray xxhash
fi
