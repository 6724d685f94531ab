"""Arrays in and out of the library: dtypes, NumPy and PyTorch (CPU) buffers.

Inputs are passed to C by pointer, without copying, when they are
C-contiguous, on the CPU and of the expected dtype. A non-contiguous input is
copied once into a contiguous temporary (``numpy.ascontiguousarray`` /
``Tensor.contiguous()``); nothing else is ever copied. Outputs are views of
the library's storage: NumPy arrays built on the C pointer (they keep the
owning handle alive), or torch tensors sharing that memory through
``torch.from_numpy``.

NumPy has no bfloat16: bf16 data appears as ``uint16`` bit patterns (an
``ml_dtypes.bfloat16`` array is accepted too); with torch it is
``torch.bfloat16``. torch is imported only when a torch object is seen.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .errors import RingKVRuntimeError, RingKVValueError

F32, F16, BF16 = 0, 1, 2
DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16"}
_ALIASES = {"f32": F32, "float32": F32, "float": F32, "fp32": F32,
            "f16": F16, "float16": F16, "half": F16, "fp16": F16,
            "bf16": BF16, "bfloat16": BF16}
_NUMPY_OF = {F32: np.dtype(np.float32), F16: np.dtype(np.float16), BF16: np.dtype(np.uint16)}

NUMPY, TORCH = "numpy", "torch"


def torch_module():
    """The torch module if it is importable, else None (imported lazily)."""
    mod = sys.modules.get("torch")
    if mod is not None:
        return mod
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    return sys.modules["torch"]


def is_torch_tensor(x: Any) -> bool:
    mod = sys.modules.get("torch")
    return mod is not None and isinstance(x, mod.Tensor)


def is_torch_dtype(x: Any) -> bool:
    mod = sys.modules.get("torch")
    return mod is not None and isinstance(x, mod.dtype)


def parse_dtype(dtype: Any) -> int:
    """ringkv dtype code of ``dtype``: a string ("f32", "float32", "bf16",
    "bfloat16", "f16", "half", "torch.bfloat16"...), a NumPy dtype or scalar
    type (float32, float16, ``ml_dtypes.bfloat16``), or a torch dtype
    (float32, float16, bfloat16). ValueError otherwise."""
    if isinstance(dtype, str):
        key = dtype.lower().removeprefix("torch.").removeprefix("numpy.")
        if key in _ALIASES:
            return _ALIASES[key]
        raise RingKVValueError(f"unknown dtype {dtype!r}; expected one of "
                               f"{', '.join(sorted(_ALIASES))}")
    if is_torch_dtype(dtype):
        name = str(dtype).removeprefix("torch.")
        if name in ("float32", "float16", "bfloat16"):
            return _ALIASES[name]
        raise RingKVValueError(f"unsupported torch dtype {dtype}; expected torch.float32, "
                               "torch.float16 or torch.bfloat16")
    try:
        nd = np.dtype(dtype)
    except TypeError:
        raise RingKVValueError(f"unknown dtype {dtype!r}") from None
    if nd == np.float32:
        return F32
    if nd == np.float16:
        return F16
    if nd.name == "bfloat16" and nd.itemsize == 2:
        return BF16
    raise RingKVValueError(f"unsupported dtype {nd}; expected float32, float16 or bfloat16 "
                           "(bf16 given as a string or a torch/ml_dtypes dtype)")


def numpy_dtype(code: int) -> np.dtype:
    """The NumPy dtype holding ringkv dtype ``code`` (bf16: uint16 bits)."""
    return _NUMPY_OF[code]


def torch_dtype(code: int):
    torch = torch_module()
    return {F32: torch.float32, F16: torch.float16, BF16: torch.bfloat16}[code]


def array_dtype_code(x: Any) -> int | None:
    """ringkv dtype code of an array's elements, None when it has none. A
    NumPy ``uint16`` array is read as bf16 bits."""
    if is_torch_tensor(x):
        name = str(x.dtype).removeprefix("torch.")
        return {"float32": F32, "float16": F16, "bfloat16": BF16}.get(name)
    nd = x.dtype
    if nd == np.float32:
        return F32
    if nd == np.float16:
        return F16
    if nd == np.uint16 or (nd.name == "bfloat16" and nd.itemsize == 2):
        return BF16
    return None


class _Interface:
    """Exposes a C pointer to NumPy (``__array_interface__``) and keeps the
    object owning that memory alive for as long as any view exists."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype, owner: Any):
        self.__array_interface__ = {"version": 3, "shape": tuple(int(s) for s in shape),
                                    "typestr": np.dtype(dtype).str, "data": (int(ptr), False)}
        self.owner = owner


def numpy_view(ptr: int, shape: tuple[int, ...], dtype: np.dtype, owner: Any) -> np.ndarray:
    """A writable NumPy array over ``ptr`` (no copy) that keeps ``owner`` alive."""
    if not ptr:
        raise RingKVRuntimeError("ringkv: the library returned a NULL buffer")
    return np.asarray(_Interface(ptr, shape, dtype, owner))


def to_torch(arr: np.ndarray, code: int | None = None):
    """``arr`` as a torch CPU tensor sharing its memory. ``code`` BF16 turns
    uint16 bits into ``torch.bfloat16``."""
    torch = torch_module()
    if code == BF16 and arr.dtype == np.uint16:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def as_kind(arr: np.ndarray, kind: str, code: int | None = None):
    """``arr`` (a NumPy view) as the requested kind of array, without copying."""
    return to_torch(arr, code) if kind == TORCH else arr


def kind_of(x: Any) -> str:
    return TORCH if is_torch_tensor(x) else NUMPY


def _check_cpu(x: Any, name: str) -> None:
    if x.device.type != "cpu":
        raise NotImplementedError(
            f"ringkv: {name} is a {x.device.type} tensor; the Python binding drives only the CPU "
            "backend so far (CUDA tensors come once the CUDA backend has run on a GPU). Pass CPU "
            "tensors.")


class CBuffer:
    """A contiguous input buffer handed to C: ``ptr``, ``shape``, ``code``
    (ringkv dtype or None), ``kind`` and a reference keeping it alive."""

    __slots__ = ("ptr", "shape", "code", "kind", "keep", "copied")

    def __init__(self, x: Any, name: str, *, np_dtype: Any = None):
        self.kind = kind_of(x)
        self.copied = False
        if self.kind == TORCH:
            _check_cpu(x, name)
            if not x.is_contiguous():
                x = x.contiguous()
                self.copied = True
            self.code = array_dtype_code(x)
            self.shape = tuple(x.shape)
            self.keep = x
            self.ptr = x.data_ptr()
        else:
            arr = np.asarray(x, dtype=np_dtype)
            if not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr)
                self.copied = True
            self.code = array_dtype_code(arr)
            self.shape = arr.shape
            self.keep = arr
            self.ptr = arr.ctypes.data


def int64_vector(x: Any, name: str, what: str,
                 error: type = RingKVRuntimeError) -> tuple[np.ndarray, str]:
    """A 1-D int64 NumPy array of ``x`` (no copy for a contiguous int64 CPU
    array or tensor) and a description of what was given, for messages.
    Lists and tuples of ints are converted; arrays and tensors must already
    be int64 (as in the reference). Raises ``error`` (RingKVRuntimeError, as
    the reference's ``torch._check``) with ``what``."""
    if is_torch_tensor(x):
        _check_cpu(x, name)
        desc = f"{tuple(x.shape)} {x.dtype}"
        if x.ndim != 1 or str(x.dtype) != "torch.int64":
            raise error(what.format(got=desc))
        return np.ascontiguousarray(x.detach().numpy()), desc
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise error(what.format(got=repr(x))) from None
    else:
        arr = np.asarray(x)
    desc = f"{tuple(arr.shape)} {arr.dtype}"
    if arr.ndim != 1 or arr.dtype != np.int64:
        raise error(what.format(got=desc))
    return np.ascontiguousarray(arr), desc
