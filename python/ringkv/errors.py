"""Exceptions: each ``rkv_status`` of the C library becomes a Python exception
carrying the library's message (``rkv_last_error()``).

Every exception raised for a failed library call is a :class:`RingKVError`
and also an instance of the built-in type a Python caller expects, the same
types the reference ``LayerRingCache`` raises:

=====================  ====================================  ================
status                 meaning                               raises
=====================  ====================================  ================
RKV_ERR_INVALID_ARG    a value outside what the call takes   ``ValueError``
RKV_ERR_NULL           a required pointer was NULL           ``ValueError``
RKV_ERR_OVERFLOW       a size whose byte count overflows     ``ValueError``
RKV_ERR_DTYPE          dtype mismatch or unknown dtype       ``ValueError``
RKV_ERR_FORMAT         malformed or mismatched snapshot      ``ValueError``
RKV_ERR_RANGE          session or layer index out of range   ``IndexError``
RKV_ERR_NOT_FOUND      unknown preset or request id          ``KeyError``
RKV_ERR_CLOCK          frame clock rule violated             ``RuntimeError``
RKV_ERR_FULL           every session of a model is held      ``RuntimeError``
RKV_ERR_STATE          call not allowed in this state        ``RuntimeError``
RKV_ERR_NO_MEMORY      allocation failed                     ``MemoryError``
RKV_ERR_IO             file input/output failed              ``OSError``
=====================  ====================================  ================

``LayerRingCache.upsert`` checks its arguments in Python first and raises
``RuntimeError`` where the reference's ``torch._check`` fails (shapes, dtypes,
``B == 1`` with ``build_visibility``), with the reference's messages.

An array on the wrong device (a CUDA tensor given to a CPU layer, host memory
or another GPU's tensor given to a CUDA layer) raises
:class:`RingKVDeviceError`, both a ``ValueError`` and a ``RuntimeError``
(torch raises ``RuntimeError`` for tensors on different devices). A CUDA
layer's device errors (session ids and clocks checked by the kernels) come
from ``LayerRingCache.check()`` with the statuses above.
"""
from __future__ import annotations

from ._lib import lib

__all__ = ["RingKVError", "RingKVValueError", "RingKVIndexError", "RingKVKeyError",
           "RingKVRuntimeError", "RingKVMemoryError", "RingKVOSError", "RingKVDeviceError", "check",
           "STATUS_NAMES"]

RKV_OK = 0
STATUS_NAMES = {
    0: "RKV_OK", -1: "RKV_ERR_INVALID_ARG", -2: "RKV_ERR_NULL", -3: "RKV_ERR_RANGE",
    -4: "RKV_ERR_OVERFLOW", -5: "RKV_ERR_NO_MEMORY", -6: "RKV_ERR_DTYPE", -7: "RKV_ERR_CLOCK",
    -8: "RKV_ERR_FULL", -9: "RKV_ERR_NOT_FOUND", -10: "RKV_ERR_STATE", -11: "RKV_ERR_FORMAT",
    -12: "RKV_ERR_IO",
}


class RingKVError(Exception):
    """A failed ringkv call. ``status`` is the C status code (an int, 0 for
    errors raised by the Python layer itself) and ``status_name`` its name."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status
        self.status_name = STATUS_NAMES.get(status, "python")

    def __str__(self) -> str:  # KeyError would otherwise print the repr
        return str(self.args[0]) if self.args else ""


class RingKVValueError(RingKVError, ValueError):
    """Invalid argument (bad geometry, dtype, shape, duplicate session...)."""


class RingKVIndexError(RingKVError, IndexError):
    """A session or layer index out of range."""


class RingKVKeyError(RingKVError, KeyError):
    """An unknown preset name or request id."""


class RingKVRuntimeError(RingKVError, RuntimeError):
    """A call not allowed in the current state (clock rule, full model...), or
    a check the reference makes with ``torch._check``."""


class RingKVMemoryError(RingKVError, MemoryError):
    """The library could not allocate memory."""


class RingKVOSError(RingKVError, OSError):
    """File input/output failed."""


class RingKVDeviceError(RingKVError, ValueError, RuntimeError):
    """An array on another device than the layer's (raised by the Python
    layer before any library call; nothing is written)."""


_CLASS_OF = {
    -1: RingKVValueError, -2: RingKVValueError, -4: RingKVValueError, -6: RingKVValueError,
    -11: RingKVValueError, -3: RingKVIndexError, -9: RingKVKeyError, -7: RingKVRuntimeError,
    -8: RingKVRuntimeError, -10: RingKVRuntimeError, -5: RingKVMemoryError, -12: RingKVOSError,
}


def error_for(status: int) -> RingKVError:
    """The exception for a failed status, with ``rkv_last_error()``'s message
    (read at once: it is thread-local and replaced by the next failure)."""
    message = (lib.rkv_last_error() or b"").decode("utf-8", "replace")
    name = STATUS_NAMES.get(status, f"status {status}")
    cls = _CLASS_OF.get(status, RingKVRuntimeError)
    return cls(f"{message} [{name}]" if message else name, status)


def check(status: int) -> None:
    """Raises :func:`error_for` ``(status)`` unless ``status`` is ``RKV_OK``."""
    if status != RKV_OK:
        raise error_for(status)
