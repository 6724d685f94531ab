#!/usr/bin/env bash
# Installs what ringkv needs to build and test on Debian (run as root):
# a C toolchain and CMake, stb (image decoding/encoding), Jansson (the
# snapshot header's strict JSON parser), cJSON (the tools' JSON), xxHash,
# cmocka (unit tests), OpenBLAS and oneDNN (`ringkv bench`'s sgemm and bf16
# matmul ceilings), clang's sanitizer runtimes, python3 (and its headers, for
# Inductor's C++ kernels) for the check scripts; then NumPy and pytest from
# PyPI for the Python binding's tests (python/tests), torch >= 2.6 (a
# large download: PyPI's wheel bundles CUDA) for their torch part: the
# reference differential test, the custom ops, torch.compile, FlexAttention;
# and Ray (plain `ray`: the core, no dashboard) and xxhash for ringkv.ray and
# its tests (python/tests/test_ray.py, test_migration.py, test_offload.py).
# Idempotent: what is already installed is skipped.
# Usage: scripts/install-deps.sh [--cli]
#   --cli: only what the library and the `ringkv` command need (the C
#          toolchain, CMake and the Debian -dev packages above, no test
#          tools, no Python packages): the README's quick start.
set -euo pipefail
cli_only=0
case "${1:-}" in
  --cli) cli_only=1 ;;
  "") ;;
  *) echo "install-deps.sh: unknown option '$1' (usage: install-deps.sh [--cli])" >&2; exit 2 ;;
esac
pkgs=(build-essential cmake pkg-config libstb-dev libjansson-dev libcjson-dev libxxhash-dev libopenblas-dev
      libdnnl-dev)
if [ "$cli_only" -eq 0 ]; then
  pkgs+=(libcmocka-dev python3 python3-dev clang-14 libclang-rt-14-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
else
  echo "install-deps.sh: the ${#pkgs[@]} Debian packages are already installed"
fi

[ "$cli_only" -eq 1 ] && exit 0

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

# torch >= 2.6 (custom_op, opcheck, FlexAttention's BlockMask.from_kv_blocks
# with seq_lengths): skipped when an importable one is new enough.
if ! python3 -c 'import sys, torch; v = torch.__version__.split("+")[0].split(".");
sys.exit(0 if (int(v[0]), int(v[1])) >= (2, 6) else 1)' 2>/dev/null; then
  echo "installing torch >= 2.6 for $(command -v python3) from PyPI (a large download)"
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  python3 -m pip install -q "torch>=2.6" \
    || python3 -m pip install -q --break-system-packages "torch>=2.6"
fi

# ringkv.ray (pip install ringkv[ray]): Ray from PyPI, plain `ray` (the
# dashboard and its agents of ray[default] are not needed), and xxhash.
if ! python3 -c 'import ray, xxhash' 2>/dev/null; then
  echo "installing ray and xxhash for $(command -v python3)"
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  python3 -m pip install -q ray xxhash \
    || python3 -m pip install -q --break-system-packages ray xxhash
fi
echo "install-deps.sh: everything is installed (numpy, pytest, torch, ray, xxhash for $(command -v python3))"
