#!/usr/bin/env bash
# Installs what ringkv needs to build and test on Debian (run as root):
# a C toolchain and CMake, stb (image decoding/encoding), Jansson (the
# snapshot header's strict JSON parser), cJSON (the tools' JSON), xxHash,
# cmocka (unit tests), OpenBLAS and oneDNN (`ringkv bench`'s sgemm and bf16
# matmul ceilings), clang's sanitizer runtimes, python3 (and its headers, for
# Inductor's C++ kernels) for the check scripts; then NumPy and pytest from
# PyPI for the Python binding's tests (python/tests), and torch >= 2.6 (a
# large download: PyPI's wheel bundles CUDA) for their torch part: the
# reference differential test, the custom ops, torch.compile, FlexAttention.
# Idempotent: what is already installed is skipped.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libstb-dev libjansson-dev libcjson-dev libxxhash-dev libcmocka-dev libopenblas-dev
      libdnnl-dev python3 python3-dev
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

# torch >= 2.6 (custom_op, opcheck, FlexAttention's BlockMask.from_kv_blocks
# with seq_lengths): skipped when an importable one is new enough.
if ! python3 -c 'import sys, torch; v = torch.__version__.split("+")[0].split(".");
sys.exit(0 if (int(v[0]), int(v[1])) >= (2, 6) else 1)' 2>/dev/null; then
  echo "installing torch >= 2.6 for $(command -v python3) from PyPI (a large download)"
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  python3 -m pip install -q "torch>=2.6" \
    || python3 -m pip install -q --break-system-packages "torch>=2.6"
fi
