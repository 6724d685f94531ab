"""Scalar arguments (integers, session indices, flags, request ids, paths,
byte buffers) checked before they reach the library, each mistake with its
one exception class (:mod:`ringkv.errors`): a wrong Python type is
RingKVTypeError, a value outside int64 RingKVValueError (a session index:
RingKVIndexError, as one out of range).

Integers and flags do not stand in for each other: a count, index or clock
refuses ``True``/``False`` (Python's bool is an int subclass, so
``LayerRingCache(True, ...)`` would silently mean 1 session), and a flag
(``commit``, ``build_visibility``...) takes a bool only, not any object
with a truth value (``commit="no"`` would commit)."""
from __future__ import annotations

import operator
import os
from typing import Any

import numpy as np

from .errors import RingKVIndexError, RingKVTypeError, RingKVValueError

__all__ = ["as_int", "as_session", "as_flag", "as_request_id", "as_path", "as_bytes",
           "is_bool"]

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def is_bool(value: Any) -> bool:
    """Whether ``value`` is a boolean scalar: ``bool``, ``numpy.bool_``, or
    a 0-d bool array or tensor (whose ``__index__`` torch would answer)."""
    if isinstance(value, (bool, np.bool_)):
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and getattr(value, "ndim", None) == 0 and \
        str(dtype) in ("bool", "torch.bool")


def _integer(value: Any, name: str) -> int:
    if is_bool(value):
        raise RingKVTypeError(f"{name} must be an int, not a bool; got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise RingKVTypeError(f"{name} must be an int; got {value!r}") from None


def as_int(value: Any, name: str) -> int:
    """``value`` as an int64 (anything with ``__index__``: int, NumPy
    integers, 0-d integer tensors). RingKVTypeError for a non-integer
    (float, str, None...) and for a bool; RingKVValueError outside int64."""
    v = _integer(value, name)
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise RingKVValueError(f"{name} = {v} does not fit int64")
    return v


def as_session(value: Any, name: str = "session_idx") -> int:
    """A session index: RingKVTypeError for a non-integer or a bool;
    RingKVIndexError outside int64 (out of range for any model)."""
    v = _integer(value, name)
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise RingKVIndexError(f"{name} {v} out of range")
    return v


def as_flag(value: Any, name: str) -> bool:
    """A flag argument (``commit``, ``build_visibility``...) as a bool:
    ``True``/``False`` or a NumPy bool (the reference types these ``bool``).
    RingKVTypeError for anything else, 0/1 and strings included: ``"no"``
    and ``"False"`` are truthy, so accepting them would turn a typo into
    the opposite of what was meant."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise RingKVTypeError(f"{name} must be a bool (True or False); got {value!r} "
                          f"({type(value).__name__})")


def as_request_id(request_id: Any) -> bytes:
    """A request id (str, UTF-8 encoded, or bytes) as bytes. RingKVTypeError
    for other types; RingKVValueError for a NUL byte (the library checks
    the length: empty or longer than 255 bytes is RingKVValueError too)."""
    if isinstance(request_id, str):
        raw = request_id.encode()
    elif isinstance(request_id, (bytes, bytearray, memoryview)):
        raw = bytes(request_id)
    else:
        raise RingKVTypeError(f"request_id must be a str or bytes; got {request_id!r}")
    if b"\0" in raw:
        raise RingKVValueError("request_id must not contain NUL bytes")
    return raw


def as_path(path: Any) -> bytes:
    """A file path (str, bytes or os.PathLike) as bytes; RingKVTypeError for
    other types."""
    try:
        return os.fsencode(path)
    except TypeError:
        raise RingKVTypeError(f"path must be a str, bytes or os.PathLike; got {path!r}") from None


def as_bytes(data: Any, name: str) -> memoryview:
    """A bytes-like object (bytes, bytearray, memoryview, a C-contiguous
    NumPy array...) as a flat memoryview of unsigned bytes; RingKVTypeError
    for anything else."""
    try:
        return memoryview(data).cast("B")
    except TypeError:
        raise RingKVTypeError(f"{name} must be a bytes-like object (bytes, bytearray, "
                              f"memoryview); got {type(data).__name__}") from None
