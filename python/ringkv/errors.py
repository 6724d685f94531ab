"""Exceptions: one type per mistake, the same from every entry point.

Every exception the binding raises for a mistake (a failed library call, or
an argument the Python layer refuses before calling the library) is a
:class:`RingKVError` and an instance of the built-in type a Python caller
expects; where the reference ``LayerRingCache``
(``shared/spec/seed_ring_cache.py``) raises for the same mistake, that type
too (the dual classes: the reference raises ``RuntimeError`` for a wrong
``kv`` or device and ``TypeError`` for a dtype, ringkv documented
``ValueError``; either catches them). A mistake has ONE class whichever call
finds it: each class's docstring says which are its own; python/README.md
("Errors") has the table. Library statuses map onto the same classes
(:data:`CLASS_OF`; include/ringkv.h, ``rkv_status``, says what each means).

The Python layer checks array shapes and dtypes (and a negative clock in
``Model.begin_frame``, which the library reports as RKV_ERR_CLOCK) before
calling the library, so those raise the class CLASS_OF gives; errors
it raises have ``status`` 0 (``status_name`` "python"). A CUDA layer's
device errors come from ``LayerRingCache.check()`` with the statuses above.

Messages name the Python calls (:data:`PYTHON_NAMES`, :func:`python_call`),
not the C calls of the library's text. This module imports nothing of
ringkv's (``ringkv._lib.check`` turns statuses into these exceptions).
"""
from __future__ import annotations

import functools
import inspect
import re
import sys
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["RingKVError", "RingKVValueError", "RingKVIndexError", "RingKVKeyError",
           "RingKVRuntimeError", "RingKVMemoryError", "RingKVOSError", "RingKVTypeError",
           "RingKVDtypeError", "RingKVDeviceError", "RingKVArrayError",
           "python_message", "python_call", "python_calls", "called_as", "PYTHON_NAMES",
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
        self.status_name = "python" if status == RKV_OK else \
            STATUS_NAMES.get(status, f"status {status}")

    def __str__(self) -> str:  # KeyError would otherwise print the repr
        return str(self.args[0]) if self.args else ""


class RingKVValueError(RingKVError, ValueError):
    """A bad value: geometry or config, a session twice in one batch, a clock
    < 0, an empty request id, a malformed snapshot or pickle."""


class RingKVIndexError(RingKVError, IndexError):
    """A session or layer index out of range."""


class RingKVKeyError(RingKVError, KeyError):
    """An unknown preset name or request id."""


class RingKVRuntimeError(RingKVError, RuntimeError):
    """A call not allowed in the current state (clock rule, full model, a
    session inside a frame or not claimed...), or a check the reference makes
    with ``torch._check`` that is not about an array's shape or dtype."""


class RingKVMemoryError(RingKVError, MemoryError):
    """The library could not allocate memory."""


class RingKVOSError(RingKVError, OSError):
    """File input/output failed."""


class RingKVTypeError(RingKVError, TypeError):
    """An argument of the wrong Python type (an index, size or clock that is
    not an integer, a pool that is not a ThreadPool...), or copying/pickling
    an object that cannot be copied or pickled."""


class RingKVDtypeError(RingKVValueError, RingKVTypeError):
    """An unknown or unsupported dtype spec (``dtype=``, ``out_dtype=``,
    ``convert``): a ValueError, and a TypeError as torch (the reference's
    ``torch.zeros(dtype=...)``) and NumPy raise for a dtype they do not know."""


class RingKVDeviceError(RingKVValueError, RingKVRuntimeError):
    """An unknown device, or an array on another device than the layer's
    (raised by the Python layer before any library call; nothing is
    written): a ValueError and a RuntimeError (torch raises RuntimeError for
    both)."""


class RingKVArrayError(RingKVValueError, RingKVRuntimeError):
    """An array argument (``kv``, ``q``, ``out``, ``visible``, ``frame_pos``,
    ``session_idx``) whose shape, dtype or layout is not what the call takes,
    or rows that do not match each other: a ValueError, and a RuntimeError as
    the reference's ``torch._check`` and ``index_copy_`` raise."""


CLASS_OF = {  # the class of each failed status
    -1: RingKVValueError, -2: RingKVValueError, -4: RingKVValueError, -6: RingKVArrayError,
    -11: RingKVValueError, -3: RingKVIndexError, -9: RingKVKeyError, -7: RingKVRuntimeError,
    -8: RingKVRuntimeError, -10: RingKVRuntimeError, -5: RingKVMemoryError, -12: RingKVOSError,
}


_L, _M = "LayerRingCache", "Model"

#: The Python call for each C function a library message names (the one
#: that failed, or one it advises). Names missing here have no Python
#: counterpart and stay as they are (python/tests/test_errors.py checks
#: every rkv_ name of src/ is one or the other).
PYTHON_NAMES = {
    "rkv_convert": "ringkv.convert",
    "rkv_threadpool_create": "ThreadPool",
    "rkv_visible_frames_from_clock": "ringkv.visible_frames_from_clock",
    "rkv_snapshot_inspect": "ringkv.inspect_snapshot",
    "rkv_model_preset": "ringkv.preset",
    "rkv_model_config_layer_geometry": "ModelConfig.layer_geometry",
    "rkv_model_config_memory": "ModelConfig.memory",
    # one layer (CPU, torch-op and CUDA forms alike: one set of calls)
    "rkv_layer_create": _L,
    "rkv_layer_create_on": f'{_L}(device="cuda")',
    "rkv_layer_wrap": _L,
    "rkv_cuda_backend": f'{_L}(device="cuda")',
    **{f"rkv_layer_{n}": f"{_L}.{n}" for n in (
        "session_span", "reset", "upsert", "attend", "visible_frames", "block_mask", "check")},
    "rkv_layer_attend_workspace_bytes": f"{_L}.attend",
    "rkv_visible_row_from_frames": f"{_L}.visible_row",
    # the row upsert(build_visibility=True) returns, reached from the
    # drop-in through upsert only (visible_row reads rkv_layer_visible_frames;
    # a CUDA layer has no visible_row): a device check of it says upsert
    "rkv_layer_visible_row": f"{_L}.upsert",
    # a model
    "rkv_model_create": f'{_M}(device="cpu")',
    "rkv_model_create_cuda": f'{_M}(device="cuda")',
    # rkv_model_create_cuda's config and table checks run in it
    "rkv_model_create_with_backend": f'{_M}(device="cuda")',
    "rkv_model_synchronize": f"{_M}.synchronize",
    "rkv_model_save_session": f"{_M}.save_session",
    "rkv_model_load_session": f"{_M}.load_session",
    "rkv_model_save_session_mem": f"{_M}.save_session_bytes",
    "rkv_model_offload_file": f"{_M}.offload_to_file",
    "rkv_model_session_export_meta": f"{_M}.export_meta",
    "rkv_model_session_import": f"{_M}.import_session",
    **{f"rkv_model_{n}": f"{_M}.{n}" for n in (
        "claim", "lookup", "release", "reset", "clock", "fork", "snapshot", "restore",
        "begin_frame", "end_frame", "abandon_frame", "upsert", "attend", "step", "offload",
        "page_in", "page_in_file", "offloaded_clock", "offload_discard", "session_regions",
        "session_digest", "import_reserve", "import_check", "import_cancel",
        "transfer_session")},
}

_C_NAME = re.compile(r"\brkv_[a-z0-9_]+")


def python_message(message: str) -> str:
    """``message`` with each C call of :data:`PYTHON_NAMES` replaced by its
    Python call; nothing else changes."""
    return _C_NAME.sub(lambda m: PYTHON_NAMES.get(m.group(0), m.group(0)), message)


# A call name leading a message: a Python call ("Model.claim",
# 'Model(device="cpu")', "LayerRingCache.attend(reference=True)",
# "ringkv.preset", the bare "ringkv" of some binding messages) or a C call
# with no Python name, followed by ": ".
_LEADING_CALL = re.compile(
    r"^((?:ringkv\.)?(?:Model|ModelConfig|LayerRingCache|LayerGeometry|ThreadPool)"
    r"(?:\.\w+)?(?:\([^)]*\))?|ringkv(?:\.\w+)?|rkv_\w+): ")


def called_as(message: str, name: str, prefix: bool = True) -> str:
    """``message`` naming the call ``name`` the user made: a different call
    name leading it is replaced by ``name`` (one with arguments that names
    the same call, ``LayerRingCache.attend(reference=True)``, stays); with
    ``prefix``, a message led by no call name gets ``name: `` in front.
    Without ``prefix`` (the drop-in's wording) a bare "ringkv: " stays."""
    m = _LEADING_CALL.match(message)
    if m:
        if m.group(1).split("(")[0] == name or (m.group(1) == "ringkv" and not prefix):
            return message
        return f"{name}: {message[m.end():]}"
    return f"{name}: {message}" if prefix else message


def python_call(name: str, prefix: bool = True) -> Callable[[F], F]:
    """Decorates a public function or method so that a :class:`RingKVError`
    it raises names it (:func:`called_as`): the same exception, its message
    rewritten in place (type, status and traceback unchanged). Nested
    public calls each rename on the way out, so the outermost (the user's)
    name wins. Under torch.compile tracing the function runs as it is."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def named(*args: Any, **kwargs: Any) -> Any:
            # the compile check only on the way out of a refusal: a call
            # that succeeds pays for the try alone (is_compiling costs
            # 0.1-0.3 us, and Model.upsert nests three of these)
            try:
                return fn(*args, **kwargs)
            except RingKVError as exc:
                torch = sys.modules.get("torch")
                if (exc.args and isinstance(exc.args[0], str)
                        and not (torch is not None and torch.compiler.is_compiling())):
                    exc.args = (called_as(exc.args[0], name, prefix),) + exc.args[1:]
                raise
        return named  # type: ignore[return-value]
    return decorate


def python_calls(cls_name: str, prefix: bool = True) -> Callable[[type], type]:
    """Class decorator: :func:`python_call` on every public method (plain
    and class methods; ``__init__`` as the class's name), named
    ``cls_name.method``. Properties, static methods and other dunders are
    left alone."""
    def decorate(cls: type) -> type:
        for attr, member in list(vars(cls).items()):
            if attr.startswith("_") and attr != "__init__":
                continue
            name = cls_name if attr == "__init__" else f"{cls_name}.{attr}"
            if isinstance(member, classmethod):
                setattr(cls, attr, classmethod(python_call(name, prefix)(member.__func__)))
            elif inspect.isfunction(member):
                setattr(cls, attr, python_call(name, prefix)(member))
        return cls
    return decorate
