"""ringkv: ring KV caches for streaming video world models (Python binding).

A drop-in for the reference PyTorch class: change
``from seed_ring_cache import LayerRingCache`` to
``from ringkv import LayerRingCache``. The C library (libringkv) is loaded
through ctypes (:mod:`ringkv._lib`: ``RINGKV_LIBRARY``, else next to this
package, else the system library path; python/README.md).

- :class:`LayerRingCache` (:mod:`ringkv.layer`): one layer's ring, on the CPU
  or, with ``device="cuda"``, on a GPU through the CUDA backend
  (``libringkv_cuda.so``, loaded on first use: :func:`cuda_device_count`;
  the CUDA backend has not yet run on a GPU: no GPU run is recorded).
- :class:`Model`, :class:`ModelConfig`, :func:`preset`, :func:`preset_names`,
  :func:`inspect_snapshot` (:mod:`ringkv.model`): a whole model's rings,
  sessions, clocks, snapshots, forks and batched steps.
- :class:`ThreadPool`, :func:`attention_isa` (:mod:`ringkv.threadpool`).
- Exceptions (:mod:`ringkv.errors`): one class per mistake, each a
  :class:`RingKVError` and the built-in type(s) a caller expects.
- Copies and pickles (:mod:`ringkv._handle`): ``copy``/``deepcopy`` of a
  LayerRingCache or Model give an independent object with equal contents
  on the same device; ``pickle`` round-trips CPU layers and models by value.
- :func:`convert`: element conversion between f32, f16 and bf16 (NumPy).
- PyTorch: torch tensors go through custom ops (:mod:`ringkv.ops`; torch >=
  2.6) that ``torch.compile(fullgraph=True)`` traces and CUDA graphs
  capture; :func:`flex_block_mask` (:mod:`ringkv.flex`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _arrays as _ar
from ._lib import RKV_BLOCK_TOKENS, library_path
from ._lib import lib as _clib
from ._lib import cuda_device_count, cuda_library_path
from .errors import (RingKVArrayError, RingKVDeviceError, RingKVDtypeError, RingKVError,
                     RingKVIndexError, RingKVKeyError, RingKVMemoryError, RingKVOSError,
                     RingKVRuntimeError, RingKVTypeError, RingKVValueError)
from .errors import python_call as _python_call
from .flex import flex_block_mask
from .layer import LayerGeometry, LayerRingCache, visible_frames_from_clock
from .model import (LayerSpec, Model, ModelConfig, SessionRegion, SnapshotInfo, inspect_snapshot,
                    preset, preset_names)
from .threadpool import ThreadPool, attention_isa

__all__ = ["LayerRingCache", "LayerGeometry", "visible_frames_from_clock", "flex_block_mask", "Model",
           "ModelConfig", "LayerSpec", "SessionRegion", "SnapshotInfo", "inspect_snapshot", "preset",
           "preset_names", "ThreadPool", "attention_isa", "convert", "dtype_size",
           "version", "library_path", "cuda_device_count", "cuda_library_path",
           "RKV_BLOCK_TOKENS", "RingKVError", "RingKVValueError", "RingKVIndexError",
           "RingKVKeyError", "RingKVRuntimeError", "RingKVMemoryError", "RingKVOSError",
           "RingKVTypeError", "RingKVDtypeError", "RingKVDeviceError", "RingKVArrayError",
           "__version__"]


def version() -> str:
    """Version of the loaded libringkv ("MAJOR.MINOR.PATCH")."""
    return _clib.rkv_version().decode()


__version__ = "0.2.0"


@_python_call("ringkv.dtype_size")
def dtype_size(dtype: Any) -> int:
    """Bytes per element of a dtype (4 for f32, 2 for f16 and bf16)."""
    return int(_clib.rkv_dtype_size(_ar.parse_dtype(dtype)))


@_python_call("ringkv.convert")
def convert(array: Any, to_dtype: Any, *, from_dtype: Any = None) -> np.ndarray:
    """Converts a NumPy array between f32, f16 and bf16 with the library's
    rounding (nearest even; NaN stays NaN). bf16 is uint16 bits on either
    side; ``from_dtype`` overrides the array's own (e.g. "bf16" for uint16).
    Returns a new C-contiguous array of the same shape."""
    from ._lib import check
    src = np.ascontiguousarray(array)
    src_code = (_ar.parse_dtype(from_dtype) if from_dtype is not None
                else _ar.array_dtype_code(src))
    if src_code is None or src.dtype.itemsize != int(_clib.rkv_dtype_size(src_code)):
        raise RingKVArrayError(f"cannot convert an array of dtype {src.dtype}")
    dst_code = _ar.parse_dtype(to_dtype)
    dst = np.empty(src.shape, dtype=_ar.numpy_dtype(dst_code))
    check(_clib.rkv_convert(src.ctypes.data, src_code, dst.ctypes.data, dst_code, src.size))
    return dst
