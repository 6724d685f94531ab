"""Scalar arguments (integers, session indices, flags, request ids and
other strings, paths, byte buffers) checked before they reach the library,
each mistake with its one exception class (:mod:`ringkv.errors`): a wrong
Python type is RingKVTypeError, a value outside int64 RingKVValueError (a
session index: RingKVIndexError, as one out of range), a string C cannot
take whole (a NUL byte, not encodable, an empty path) RingKVValueError.

Integers and flags do not stand in for each other: a count, index or clock
refuses ``True``/``False`` (Python's bool is an int subclass, so
``LayerRingCache(True, ...)`` would silently mean 1 session), and a flag
(``commit``, ``build_visibility``...) takes a bool only, not any object
with a truth value (``commit="no"`` would commit).

Inside a region ``torch.compile`` traces, an int or bool argument of the
compiled function that Dynamo makes dynamic (``layer`` on the second layer's
call, ``p == 4`` of a pass counter) arrives as ``torch.SymInt`` /
``torch.SymBool``: they are taken wherever an int / bool is (a SymInt as it
is, int64 by construction; a SymBool as the bool it guards on)."""
from __future__ import annotations

import operator
import os
import sys
from typing import Any

import numpy as np

from .errors import RingKVIndexError, RingKVTypeError, RingKVValueError

__all__ = ["as_int", "as_session", "as_flag", "as_text", "as_request_id", "as_path",
           "as_bytes", "as_instance", "is_bool", "short_repr"]

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def _symbolic(value: Any, kind: str) -> bool:
    """Whether ``value`` is a ``torch.SymInt`` / ``torch.SymBool`` (``kind``)
    of a traced region; never imports torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, getattr(torch, kind))


def is_bool(value: Any) -> bool:
    """Whether ``value`` is a boolean scalar: ``bool``, ``numpy.bool_``,
    ``torch.SymBool``, or a 0-d bool array or tensor (whose ``__index__``
    torch would answer). A ``torch.SymInt`` is not (and has no dtype)."""
    if isinstance(value, (bool, np.bool_)) or _symbolic(value, "SymBool"):
        return True
    # an int (a SymInt while Dynamo traces: an int there), a SymInt elsewhere
    if isinstance(value, int) or _symbolic(value, "SymInt") or _symbolic(value, "SymFloat"):
        return False
    dtype = getattr(value, "dtype", None)
    return dtype is not None and getattr(value, "ndim", None) == 0 and \
        str(dtype) in ("bool", "torch.bool")


def _integer(value: Any, name: str) -> int:
    if is_bool(value):
        raise RingKVTypeError(f"{name} must be an int, not a bool; got {value!r}")
    # an int as it is: also a dynamic int while Dynamo traces (an int there;
    # operator.index would specialize the graph on its value), and a SymInt
    if isinstance(value, int) or _symbolic(value, "SymInt"):
        return value
    try:
        return operator.index(value)
    except TypeError:
        raise RingKVTypeError(f"{name} must be an int; got {value!r}") from None


def as_int(value: Any, name: str) -> int:
    """``value`` as an int64 (anything with ``__index__``: int, NumPy
    integers, 0-d integer tensors; a ``torch.SymInt`` as it is).
    RingKVTypeError for a non-integer (float, str, None...) and for a bool;
    RingKVValueError outside int64."""
    v = _integer(value, name)
    if isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX:
        raise RingKVValueError(f"{name} = {v} does not fit int64")
    return v


def as_session(value: Any, name: str = "session_idx") -> int:
    """A session index (a ``torch.SymInt`` as it is): RingKVTypeError for a
    non-integer or a bool; RingKVIndexError outside int64 (out of range for
    any model)."""
    v = _integer(value, name)
    if isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX:
        raise RingKVIndexError(f"{name} {v} out of range")
    return v


def as_flag(value: Any, name: str) -> bool:
    """A flag argument (``commit``, ``build_visibility``...) as a bool: what
    :func:`is_bool` accepts (a 0-d bool array or tensor as a 0-d integer
    tensor is taken for an int; a ``torch.SymBool`` becomes the bool
    torch.compile guards on; a 0-d tensor there is data: a graph break).
    RingKVTypeError for anything else, 0/1, integer tensors and strings
    included (see the module docstring)."""
    if is_bool(value):
        return bool(value)
    raise RingKVTypeError(f"{name} must be a bool (True or False); got {value!r} "
                          f"({type(value).__name__})")


def _refuse_nul(raw: bytes, value: Any, name: str) -> None:
    if b"\0" in raw:
        raise RingKVValueError(f"{name} {value!r} contains a NUL byte (the library takes it "
                               "as a C string, which would end there)")


def as_text(value: Any, name: str, *, allow_bytes: bool = False) -> bytes:
    """A string argument the library takes as a C string (a request id, a
    preset or model name): a str, UTF-8 encoded, or with ``allow_bytes``
    bytes as they are. RingKVTypeError for other types; RingKVValueError
    for a str that UTF-8 cannot encode (a lone surrogate) and for a NUL
    byte (C would read the string cut short there)."""
    if isinstance(value, str):
        try:
            raw = value.encode()
        except UnicodeEncodeError as exc:
            raise RingKVValueError(f"{name} {value!r} cannot be encoded as UTF-8: {exc.reason} "
                                   f"at position {exc.start}") from None
    elif allow_bytes and isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
    else:
        kinds = "a str or bytes" if allow_bytes else "a str"
        raise RingKVTypeError(f"{name} must be {kinds}; got {value!r}")
    _refuse_nul(raw, value, name)
    return raw


def as_request_id(request_id: Any, name: str = "request_id") -> bytes:
    """A request id (str, UTF-8 encoded, or bytes) as bytes: :func:`as_text`
    (the library checks the length: empty or longer than 255 bytes is
    RingKVValueError too)."""
    return as_text(request_id, name, allow_bytes=True)


def as_path(path: Any, name: str = "path") -> bytes:
    """A file path (str, bytes or os.PathLike) as the bytes ``open()`` would
    use (``os.fsencode``). RingKVTypeError for other types; RingKVValueError,
    before anything is read or written, for an empty path, a NUL byte
    (``open()`` refuses it too; C would act on the path cut short there)
    and a str the file-system encoding cannot encode. ``name`` is the
    argument's name in the messages."""
    try:
        fs = os.fspath(path)
    except TypeError:
        raise RingKVTypeError(f"{name} must be a str, bytes or os.PathLike; got {path!r}") from None
    if not fs:
        raise RingKVValueError(f"{name} is empty; expected a file path")
    try:
        raw = os.fsencode(fs)
    except UnicodeEncodeError as exc:
        raise RingKVValueError(f"{name} {fs!r} cannot be encoded for the file system: "
                               f"{exc.reason} at position {exc.start}") from None
    _refuse_nul(raw, fs, name)
    return raw


def as_instance(value: Any, cls: type, name: str, hint: str = "") -> Any:
    """``value`` when it is a ``cls`` (a ringkv object a call works on: a
    cache, a model, a config, a pool...); else RingKVTypeError naming the
    argument, the class expected (``hint`` after it, e.g. "(e.g.
    cache.geometry)") and what came, None included, before any attribute of
    it is read (an AttributeError would name neither)."""
    if isinstance(value, cls):
        return value
    raise RingKVTypeError(f"{name} must be a ringkv.{cls.__name__}{hint}; got "
                          f"{short_repr(value)} ({type(value).__name__})")


def short_repr(value: Any, n: int = 80) -> str:
    """``repr(value)``, cut to ``n`` characters (with "...") for a message."""
    text = repr(value)
    return text if len(text) <= n else text[:n - 3] + "..."


def as_bytes(data: Any, name: str) -> memoryview:
    """A bytes-like object (bytes, bytearray, memoryview, a C-contiguous
    NumPy array...) as a flat memoryview of unsigned bytes; RingKVTypeError
    for anything else."""
    try:
        return memoryview(data).cast("B")
    except TypeError:
        raise RingKVTypeError(f"{name} must be a bytes-like object (bytes, bytearray, "
                              f"memoryview); got {type(data).__name__}") from None
