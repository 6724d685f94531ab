"""Test setup: import ringkv from this checkout, find shared/ and the library.

- ``python/`` is put first on sys.path, so ``python3 -m pytest python/tests``
  tests this checkout's package (no install needed).
- The library: ``RINGKV_LIBRARY`` when set (ctest sets it to the build's
  libringkv.so); otherwise ``<repo>/build/libringkv.so`` when present and
  nothing is bundled in the package.
- shared/ (golden data, the reference): ``RKV_SHARED_DIR``, default
  ``<repo>/../shared``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR))
if not os.environ.get("RINGKV_LIBRARY"):
    bundled = any((PYTHON_DIR / "ringkv" / n).exists() for n in ("libringkv.so", "libringkv.so.0"))
    default = REPO / "build" / "libringkv.so"
    if not bundled and default.exists():
        os.environ["RINGKV_LIBRARY"] = str(default)

SHARED = Path(os.environ.get("RKV_SHARED_DIR") or (REPO.parent / "shared")).resolve()
GOLDEN = SHARED / "golden"
SPEC = SHARED / "spec"


def torch_or_skip(min_version: tuple[int, int] | None = None):
    """The torch module, or skip the test when it is not importable (or older
    than ``min_version``)."""
    torch = pytest.importorskip("torch")
    if min_version is not None:
        major, minor = (int(p) for p in torch.__version__.split(".")[:2])
        if (major, minor) < min_version:
            pytest.skip(f"needs torch >= {min_version[0]}.{min_version[1]}; have "
                        f"{torch.__version__}")
    return torch


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    if not GOLDEN.is_dir():
        pytest.fail(f"no golden data at {GOLDEN}: set RKV_SHARED_DIR to the shared/ folder")
    return GOLDEN
