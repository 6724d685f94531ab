"""Arrays in and out of the library: the dtype table, NumPy and PyTorch
buffers (host memory for the CPU backend, CUDA device memory for the CUDA
backend, which has not yet run on a GPU).

Inputs are passed to C by pointer, copied once only when not C-contiguous
(on a GPU also when not 16-byte aligned: :class:`CBuffer`); outputs are
views of the library's storage that keep its owner alive
(:func:`numpy_view`, :func:`to_torch`, :func:`cuda_view`). NumPy has no
bfloat16: bf16 data appears as ``uint16`` bit patterns (an
``ml_dtypes.bfloat16`` array is accepted too); with torch it is
``torch.bfloat16``. torch is imported only when a torch object is seen. An
array on another device than the layer's raises :class:`RingKVDeviceError`
(:func:`check_device`).
"""
from __future__ import annotations

import operator
import sys
from typing import Any, NamedTuple

import numpy as np

from ._args import is_bool
from ._handle import HandleOwner
from .errors import RingKVArrayError, RingKVDeviceError, RingKVDtypeError, RingKVRuntimeError


class DType(NamedTuple):
    """A row of the dtype table. ``real``: the torch dtype's name (and NumPy's
    or ml_dtypes'); ``host``: the NumPy dtype holding it (its bits when NumPy
    has no such type)."""
    code: int  # rkv_dtype
    name: str  # rkv_dtype_name
    aliases: tuple[str, ...]  # other spellings parse_dtype takes
    real: str
    host: str

    @property
    def bits(self) -> bool:
        return self.host != self.real


# The Python dtype table, in C enum order (src/dtype.c has the C one): a new
# storage dtype is a row here (docs/backends.md).
DTYPES = (DType(0, "f32", ("float32", "float", "fp32"), "float32", "float32"),
          DType(1, "f16", ("float16", "half", "fp16"), "float16", "float16"),
          DType(2, "bf16", ("bfloat16",), "bfloat16", "uint16"))
F32, F16, BF16 = (d.code for d in DTYPES[:3])
DTYPE_NAMES = {d.code: d.name for d in DTYPES}
_ALIASES = {n: d.code for d in DTYPES for n in (d.name, *d.aliases)}
_OF_REAL = {d.real: d.code for d in DTYPES}


def _either(words: list[str]) -> str:
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]


REALS = _either([d.real for d in DTYPES])  # "float32, float16 or bfloat16", for messages

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
    (float32, float16, bfloat16). RingKVDtypeError (a ValueError and a
    TypeError) otherwise, None included (NumPy would read it as float64)."""
    if dtype is None:
        raise RingKVDtypeError("dtype is None; expected float32, float16 or bfloat16 (a string "
                               "such as 'bf16', a NumPy or a torch dtype)")
    if isinstance(dtype, str):
        key = dtype.lower().removeprefix("torch.").removeprefix("numpy.")
        if key in _ALIASES:
            return _ALIASES[key]
        raise RingKVDtypeError(f"unknown dtype {dtype!r}; expected one of "
                               f"{', '.join(sorted(_ALIASES))}")
    if is_torch_dtype(dtype):
        name = str(dtype).removeprefix("torch.")
        if name in _OF_REAL:
            return _OF_REAL[name]
        raise RingKVDtypeError(
            f"unsupported torch dtype {dtype}: ringkv stores K/V as "
            f"{_either(['torch.' + d.real for d in DTYPES])} only (the reference class allocates "
            "any dtype; this difference is listed in python/README.md): convert the frames, "
            "e.g. x.to(torch.float32)")
    try:
        nd = np.dtype(dtype)
    except TypeError:
        raise RingKVDtypeError(f"unknown dtype {dtype!r}") from None
    code = _numpy_code(nd, bits=False)
    if code is not None:
        return code
    raise RingKVDtypeError(f"unsupported dtype {nd}; expected {REALS} (bf16 given as a string "
                           "or a torch/ml_dtypes dtype)")


def _numpy_code(nd: np.dtype, bits: bool) -> int | None:
    """The code of NumPy dtype ``nd`` in native byte order (float32,
    ``ml_dtypes.bfloat16``...), or of the bits NumPy holds a dtype in
    (uint16: bf16) when ``bits``; None otherwise."""
    for d in DTYPES:
        if nd.isnative and (nd.name == d.real or bits and nd.name == d.host) and \
                nd.itemsize == numpy_dtype(d.code).itemsize:
            return d.code
    return None


def numpy_dtype(code: int) -> np.dtype:
    """The NumPy dtype holding ringkv dtype ``code`` (bf16: uint16 bits)."""
    return np.dtype(DTYPES[code].host)


def torch_dtype(code: int):
    return getattr(torch_module(), DTYPES[code].real)


def array_dtype_code(x: Any) -> int | None:
    """ringkv dtype code of an array's elements, None when it has none. A
    NumPy array of a dtype's bits (``uint16``) is read as that dtype (bf16)."""
    if is_torch_tensor(x):
        return _OF_REAL.get(str(x.dtype).removeprefix("torch."))
    return _numpy_code(x.dtype, bits=True)


class _Interface(HandleOwner):
    """Exposes a C pointer to NumPy (``__array_interface__``) and keeps the
    object owning that memory alive for as long as any view exists. Never
    copied or pickled (it holds an address); the views built on it copy and
    pickle as ordinary arrays, by value."""

    _copy_hint = "it holds an address of this process; copy or pickle the array built on it"

    __slots__ = ("__array_interface__", "owner")
    _ATTR, _EXTRA = "__array_interface__", {}

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any, owner: Any):
        setattr(self, self._ATTR, {"version": 3, "shape": tuple(int(s) for s in shape),
                                   "typestr": np.dtype(dtype).str, "data": (int(ptr), False),
                                   **self._EXTRA})
        self.owner = owner


def numpy_view(ptr: int, shape: tuple[int, ...], dtype: np.dtype, owner: Any) -> np.ndarray:
    """A writable NumPy array over ``ptr`` (no copy) that keeps ``owner`` alive."""
    if not ptr:
        raise RingKVRuntimeError("ringkv: the library returned a NULL buffer")
    return np.asarray(_Interface(ptr, shape, dtype, owner))


def to_torch(arr: np.ndarray, code: int | None = None):
    """``arr`` as a torch CPU tensor sharing its memory. A ``code`` held as
    bits (BF16) turns them into its torch dtype (``torch.bfloat16``)."""
    torch = torch_module()
    if code is not None and DTYPES[code].bits and arr.dtype == numpy_dtype(code):
        return torch.from_numpy(arr.view(f"i{arr.itemsize}")).view(torch_dtype(code))
    return torch.from_numpy(arr)


def as_kind(arr: np.ndarray, kind: str):
    """``arr`` (a NumPy view) as the requested kind of array, without copying."""
    return to_torch(arr) if kind == TORCH else arr


def check_kv(kv: Any, expect: tuple, storage_code: int) -> None:
    """RingKVArrayError unless an upsert's ``kv`` (an array or tensor) is
    ``expect`` ([2, 1, H, B*T, D], or the same without the 1) in the storage
    dtype. The dtype hint names the conversion."""
    shape = tuple(kv.shape)
    if shape not in (tuple(expect), tuple(expect[:1]) + tuple(expect[2:])):
        raise RingKVArrayError(f"kv must be [2, 1, H, B*T, D] = {list(expect)} or [2, H, B*T, D] "
                               f"= {[expect[0]] + list(expect[2:])}; got {list(shape)}")
    if array_dtype_code(kv) != storage_code:
        name = DTYPE_NAMES[storage_code]
        hint = (f"x.to(torch.{DTYPES[storage_code].real})"
                if is_torch_tensor(kv) else f"ringkv.convert(x, {name!r})")
        raise RingKVArrayError(f"kv dtype {kv.dtype} does not match the storage dtype {name} "
                               f"(convert it first: {hint})")


class CBuffer(HandleOwner):
    """A contiguous input buffer handed to C: ``ptr``, ``shape``, ``code``
    (ringkv dtype or None), ``kind``, ``copied`` (it had to be copied) and
    a reference keeping it alive (``keep``). ``device`` None: host memory (a
    NumPy array or a CPU tensor); a CUDA ``torch.device``: a torch tensor
    there, 16-byte aligned (RingKVDeviceError otherwise; not yet run on a
    GPU). A call's temporary: never copied or pickled (it holds an address)."""

    _copy_hint = "it holds the address of an input array for one library call"

    __slots__ = ("ptr", "shape", "code", "kind", "keep", "copied")

    def __init__(self, x: Any, name: str, *, np_dtype: Any = None, device: Any = None,
                 owner: str = "LayerRingCache"):
        self.kind = TORCH if is_torch_tensor(x) else NUMPY
        check_device(x, name, device, owner)
        if self.kind == TORCH:
            self.copied = not x.is_contiguous() or (device is not None and x.data_ptr() % 16 != 0)
            if self.copied:
                x = x.clone(memory_format=torch_module().contiguous_format)
            self.ptr = x.data_ptr()
        else:
            x = np.asarray(x, dtype=np_dtype)
            self.copied = not x.flags.c_contiguous
            if self.copied:
                x = np.ascontiguousarray(x)
            self.ptr = x.ctypes.data
        self.code = array_dtype_code(x)
        self.shape = tuple(x.shape)
        self.keep = x


def int64_vector(x: Any, name: str, what: str, error: type = RingKVArrayError,
                 owner: str = "LayerRingCache") -> np.ndarray:
    """A 1-D int64 NumPy array of ``x`` (no copy for a contiguous int64 CPU
    array or tensor).
    Lists and tuples of integers are converted (not of bools, floats or
    strings, which NumPy would turn into 0/1, truncate or parse); arrays and
    tensors must already be int64 (as in the reference). Raises ``error``
    (RingKVArrayError, a RuntimeError as the reference's ``torch._check``
    and a ValueError) with ``what``."""
    if is_torch_tensor(x):
        check_device(x, name, owner=owner)
        if x.ndim != 1 or str(x.dtype) != "torch.int64":
            raise error(what.format(got=f"{tuple(x.shape)} {x.dtype}"))
        return np.ascontiguousarray(x.detach().numpy())
    if isinstance(x, (list, tuple)):
        try:
            if any(is_bool(v) for v in x):
                raise TypeError("a bool is not an index")
            arr = np.asarray([operator.index(v) for v in x], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise error(what.format(got=repr(x))) from None
    else:
        arr = np.asarray(x)
    if arr.ndim != 1 or arr.dtype != np.int64:
        raise error(what.format(got=f"{tuple(arr.shape)} {arr.dtype}"))
    return np.ascontiguousarray(arr)


# ---- CUDA (torch) -------------------------------------------------------------

_CUDA_TYPESTR = {"bool": "|b1", "int32": "<i4",
                 **{d.code: np.dtype(f"i{numpy_dtype(d.code).itemsize}" if d.bits else d.host).str
                    for d in DTYPES}}


class CudaInterface(_Interface):
    """:class:`_Interface` for a DEVICE pointer, to torch
    (``__cuda_array_interface__``; ``dtype`` a typestr): torch keeps it, and
    so ``owner`` (the layer handle), for as long as a tensor built from it
    exists. Version 3, C order (no strides), no stream: the library's kernels
    are ordered by the caller's stream, nothing is in flight for the
    consumer."""

    _copy_hint = "it holds a device address; copy or pickle the tensor built on it"
    __slots__ = ("__cuda_array_interface__",)
    _ATTR, _EXTRA = "__cuda_array_interface__", {"strides": None, "stream": None}


def cuda_view(ptr: int, shape: tuple[int, ...], code: Any, device: str, owner: Any):
    """A torch CUDA tensor over the DEVICE buffer at ``ptr`` on GPU
    ``device`` ("cuda:i"), without copying; ``code`` a ringkv dtype code or "bool".
    bf16 goes through int16 (the interface has no bfloat16 typestr) and is
    reinterpreted with ``.view(torch.bfloat16)`` (any dtype NumPy holds as bits
    likewise)."""
    if not ptr:
        raise RingKVRuntimeError("ringkv: the CUDA library returned a NULL device buffer")
    torch = torch_module()
    t = torch.as_tensor(CudaInterface(ptr, shape, _CUDA_TYPESTR[code], owner),
                        device=torch.device(device))
    if t.data_ptr() != int(ptr):  # as_tensor copies only across devices/dtypes
        raise RingKVRuntimeError(f"ringkv: torch copied the device buffer {ptr:#x} instead of "
                                 "viewing it")
    return t.view(torch_dtype(code)) if isinstance(code, int) and DTYPES[code].bits else t


def check_device(x: Any, name: str, device: Any = None, owner: str = "LayerRingCache") -> None:
    """RingKVDeviceError unless ``x`` is where the layer reads it: ``device``
    None or a CPU ``torch.device``, host memory (a NumPy array or a CPU
    tensor: the CPU backend); a CUDA ``torch.device``, a torch tensor on
    that GPU (a CUDA layer reads device memory of its own GPU only).
    ``owner``: the class the caller holds, which the hint says to create
    on the GPU ("LayerRingCache", "Model")."""
    if device is None or device.type == "cpu":
        if is_torch_tensor(x) and x.device.type != "cpu":
            raise RingKVDeviceError(
                f"ringkv: {name} is a tensor on {x.device}, but the layer is on cpu (the CPU "
                f"backend reads host memory): pass a CPU tensor ({name}.cpu()), or create the "
                f"{owner} with device='cuda' to run on the GPU")
        return
    if is_torch_tensor(x) and x.device == device:
        return
    where = (str(x.device) if is_torch_tensor(x) else "host memory (a NumPy array)"
             if isinstance(x, np.ndarray) else "host memory")
    hint = (f"copy it there first ({name}.to('{device}'))" if is_torch_tensor(x) or
            isinstance(x, np.ndarray) else f"pass a torch tensor on {device}")
    raise RingKVDeviceError(f"ringkv: {name} is on {where}, but the layer is on {device} (a CUDA "
                            f"layer reads device memory of its own GPU only): {hint}")


# ---- the torch route (custom ops, ringkv.ops) ----------------------------------

def torch_index(x: Any, name: str, what: str, device: Any,
                error: type = RingKVArrayError, owner: str = "LayerRingCache") -> Any:
    """A ``[B]`` int64 torch tensor on ``device`` for ``x`` (the clocks and
    sessions an op reads). A tensor must already be 1-D int64 (``error``
    with ``what`` otherwise) and on ``device``; on a CUDA device a CPU tensor
    is copied there (not capture-safe), as lists and NumPy arrays are
    (checked as :func:`int64_vector` does)."""
    torch = torch_module()
    if is_torch_tensor(x):
        if x.ndim != 1 or x.dtype != torch.int64:
            raise error(what.format(got=f"{tuple(x.shape)} {x.dtype}"))
        if x.device != device and not (device.type == "cuda" and x.device.type == "cpu"):
            check_device(x, name, device, owner)
        return x if x.device == device else x.to(device)
    if isinstance(x, (list, tuple)) and torch.compiler.is_compiling():
        # a list traced by torch.compile (no NumPy there): ints (SymInts while
        # Dynamo traces), not bools, each kept symbolic (torch.full: no graph
        # specialized on a value)
        if any(is_bool(v) or not isinstance(v, int) for v in x):
            raise error(what.format(got=repr(x)))
        return (torch.cat([torch.full((1,), v, dtype=torch.int64, device=device) for v in x])
                if x else torch.zeros(0, dtype=torch.int64, device=device))
    t = torch.from_numpy(int64_vector(x, name, what, error, owner))
    return t if device.type == "cpu" else t.to(device)
