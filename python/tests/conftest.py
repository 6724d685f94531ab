"""Test setup: import ringkv from this checkout, find shared/ and the library.

- ``python/`` is put first on sys.path, so ``python3 -m pytest python/tests``
  tests this checkout's package (no install needed).
- The library: ``RINGKV_LIBRARY`` when set (ctest sets it to the build's
  libringkv.so; a relative path is made absolute, as ringkv._lib does);
  otherwise ``<repo>/build/libringkv.so`` when present and nothing is
  bundled in the package.
- shared/ (golden data, the reference): ``RKV_SHARED_DIR``, default
  ``<repo>/../shared``.
- The CUDA backend: ``RINGKV_CUDA_LIBRARY`` when set (scripts/gpu_check.sh
  sets it on the GPU machine), else libringkv_cuda.so beside the library
  (ctest: the build's, with ``RKV_CUDA_BUILT=1`` in CUDA builds so that
  test_cuda.py fails rather than skips when it does not load). Tests marked
  :data:`requires_cuda` run where torch sees a CUDA device and skip
  elsewhere; where torch sees one they do NOT skip when the backend is
  missing or sees no device (they fail with its error), so a GPU run cannot
  pass by skipping them.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR))
if not os.environ.get("RINGKV_LIBRARY"):
    bundled = any((PYTHON_DIR / "ringkv" / n).exists() for n in ("libringkv.so", "libringkv.so.0.2"))
    default = REPO / "build" / "libringkv.so"
    if not bundled and default.exists():
        os.environ["RINGKV_LIBRARY"] = str(default)
elif os.sep in os.environ["RINGKV_LIBRARY"]:  # python/README.md's build/libringkv.so, for the
    # tests that run Python in another folder (test_readme.py's snippets) before any import
    os.environ["RINGKV_LIBRARY"] = os.path.join(os.getcwd(), os.environ["RINGKV_LIBRARY"])

SHARED = Path(os.environ.get("RKV_SHARED_DIR") or (REPO.parent / "shared")).resolve()
GOLDEN = SHARED / "golden"
SPEC = SHARED / "spec"


def _cuda_skip_reason() -> str | None:
    """Why CUDA layers cannot be tested here (None: they can, or they must)."""
    try:
        import torch
    except ImportError:
        return "torch is not importable"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    return None


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (a second process: nothing of this one
    is loaded or shared), importing this checkout's ringkv and, as
    ``import copy_workload``, this folder's modules; ``env`` is added to the
    environment (which carries RINGKV_LIBRARY)."""
    path = os.pathsep.join([str(PYTHON_DIR), str(Path(__file__).resolve().parent)])
    full = dict(os.environ, PYTHONPATH=path, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, timeout=300)


CUDA_SKIP_REASON = _cuda_skip_reason()
requires_cuda = pytest.mark.skipif(CUDA_SKIP_REASON is not None,
                                   reason=f"needs a CUDA device: {CUDA_SKIP_REASON}")


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


@pytest.fixture(scope="session")
def reference():
    """The reference module (shared/spec/seed_ring_cache.py), which needs
    torch >= 2.5 (skipped without it)."""
    torch_or_skip((2, 5))
    path = SPEC / "seed_ring_cache.py"
    if not path.exists():
        pytest.fail(f"no reference at {path}: set RKV_SHARED_DIR to the shared/ folder")
    spec = importlib.util.spec_from_file_location("seed_ring_cache", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster on loopback for the whole test session (the ray
    module; ray_cluster.py): started on first use, shut down in a
    ``finally`` at the end, after which none of its processes may be left.
    Skipped without Ray or xxhash."""
    from ray_cluster import start_cluster, stop_cluster
    ray, pids = start_cluster()
    try:
        yield ray
    finally:
        stop_cluster(ray, pids)
