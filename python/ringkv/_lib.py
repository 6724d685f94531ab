"""Loading ``libringkv`` and declaring its C functions for :mod:`ctypes`.

The library is looked up as python/README.md ("Building and installing") lists:
``RINGKV_LIBRARY``, else ``libringkv.so`` (or ``.so.0.2``, ``.dylib``)
next to this file, else the system's library path. The CUDA backend
(``include/ringkv_cuda.h``; not yet run on a GPU), ``libringkv_cuda.so``,
is loaded by :func:`cuda` on first use, never at import, the same way
(``RINGKV_CUDA_LIBRARY``, beside the loaded ``libringkv.so``, the system
path); it must link that same ``libringkv.so``, whose ``rkv_last_error()``
reports the CUDA calls' errors (:func:`cuda` checks).

The structures below mirror ``include/ringkv.h`` field for field; that header
is the contract.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint8, c_uint64, c_void_p, sizeof)

from .errors import CLASS_OF, STATUS_NAMES, RingKVError, RingKVRuntimeError, python_message

__all__ = ["lib", "library_path", "RKV_MAX_LAYERS", "RKV_MAX_NAME", "RKV_MAX_REQUEST_ID",
           "RKV_BLOCK_TOKENS", "RKV_CUDA_MAX_BATCH", "Geometry", "LayerSpec",
           "ModelConfigStruct", "SessionRegion", "AttentionArgs", "SnapshotInfo",
           "BackendStorage", "has",
           "cuda", "cuda_library_path", "cuda_device_count", "check", "error_for"]

RKV_BLOCK_TOKENS = 128
RKV_MAX_LAYERS = 256
RKV_MAX_NAME = 64
RKV_MAX_REQUEST_ID = 256
RKV_CUDA_MAX_BATCH = 1024  # include/ringkv_cuda.h

c_status = c_int  # rkv_status (a C enum: int)
c_dtype = c_int   # rkv_dtype


class _Sized(Structure):
    """A struct that grows (include/ringkv.h, "Structs that grow"): its first
    member, struct_size, is set to the struct's size on construction, as the
    header's *_INIT macros do."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.struct_size:
            self.struct_size = sizeof(self)


class Geometry(Structure):
    """``rkv_geometry``."""
    _fields_ = [("num_sessions", c_int64), ("n_kv_heads", c_int64), ("ring_frames", c_int64),
                ("ring_buckets", c_int64), ("d_head", c_int64), ("tokens_per_frame", c_int64),
                ("pinned_dilation", c_int64), ("dtype", c_dtype)]


class LayerSpec(Structure):
    """``rkv_layer_spec``."""
    _fields_ = [("ring_frames", c_int64), ("ring_buckets", c_int64),
                ("pinned_dilation", c_int64)]


class ModelConfigStruct(_Sized):
    """``rkv_model_config``."""
    _fields_ = [("struct_size", c_size_t), ("name", c_char * RKV_MAX_NAME), ("n_layers", c_int64),
                ("layers", LayerSpec * RKV_MAX_LAYERS), ("num_sessions", c_int64),
                ("n_q_heads", c_int64), ("n_kv_heads", c_int64), ("d_head", c_int64),
                ("tokens_per_frame", c_int64), ("dtype", c_dtype), ("max_offloaded", c_int64)]


class SessionRegion(Structure):
    """``rkv_session_region``: one region of a session's storage."""
    _fields_ = [("ptr", c_void_p), ("bytes", c_size_t), ("device", c_int32), ("part", c_int32),
                ("layer", c_int64), ("head", c_int64)]


class AttentionArgs(_Sized):
    """``rkv_attention_args``."""
    _fields_ = [("struct_size", c_size_t), ("batch", c_int64), ("n_q_heads", c_int64), ("n_queries", c_int64),
                ("q", c_void_p), ("q_dtype", c_dtype), ("out", c_void_p),
                ("out_dtype", c_dtype), ("session_idx", POINTER(c_int64)),
                ("frame_pos", POINTER(c_int64)), ("visible", POINTER(c_uint8)),
                ("scale", c_float), ("pool", c_void_p),
                # version 2: the layer call's workspace (BACKEND memory)
                ("workspace", c_void_p), ("workspace_bytes", c_size_t)]


class BackendStorage(Structure):
    """``rkv_backend_storage`` (include/ringkv_backend.h): a layer's storage
    in its backend's memory (what ``rkv_layer_wrap`` wraps)."""
    _fields_ = [("kv", c_void_p), ("written", c_void_p), ("error", c_void_p)]


class SnapshotInfo(_Sized):
    """``rkv_snapshot_info``."""
    _fields_ = [("struct_size", c_size_t), ("format_version", c_int64), ("ringkv_version", c_char * 16),
                ("request_id", c_char * RKV_MAX_REQUEST_ID), ("source_session", c_int64),
                ("config", ModelConfigStruct), ("last_committed", c_int64),
                ("file_bytes", c_uint64), ("header_bytes", c_uint64), ("data_bytes", c_uint64),
                ("header_xxh3", c_uint64), ("data_xxh3", c_uint64)]


_P64 = POINTER(c_int64)
_GEOM = POINTER(Geometry)
_CFG = POINTER(ModelConfigStruct)

# name: (restype, argtypes). Handles are opaque: c_void_p.
_PROTOTYPES = {
    "rkv_version": (c_char_p, []),
    "rkv_status_str": (c_char_p, [c_status]),
    "rkv_last_error": (c_char_p, []),
    "rkv_dtype_size": (c_size_t, [c_dtype]),
    "rkv_dtype_name": (c_char_p, [c_dtype]),
    "rkv_dtype_parse": (c_status, [c_char_p, POINTER(c_dtype)]),
    "rkv_convert": (c_status, [c_void_p, c_dtype, c_void_p, c_dtype, c_size_t]),
    "rkv_geometry_check": (c_status, [_GEOM]),
    "rkv_geometry_capacity": (c_int64, [_GEOM]),
    "rkv_geometry_total_slots": (c_int64, [_GEOM]),
    "rkv_geometry_memory_bytes": (c_size_t, [_GEOM]),
    "rkv_ring_slot": (c_int64, [_GEOM, c_int64, POINTER(c_int)]),
    "rkv_layer_create": (c_status, [_GEOM, POINTER(c_void_p)]),
    "rkv_layer_destroy": (None, [c_void_p]),
    "rkv_layer_geometry": (_GEOM, [c_void_p]),
    "rkv_layer_kv": (c_void_p, [c_void_p]),
    "rkv_layer_written": (c_void_p, [c_void_p]),
    "rkv_layer_session_span": (c_status, [c_void_p, c_int64, _P64, _P64]),
    "rkv_layer_reset": (c_status, [c_void_p, c_int64]),
    "rkv_layer_upsert": (c_status, [c_void_p, c_void_p, c_dtype, c_int64, c_void_p, c_void_p,
                                    c_int, c_void_p]),
    "rkv_layer_visible_frames": (c_status, [c_void_p, c_int64, c_int64, _P64, _P64]),
    "rkv_visible_frames_from_clock": (c_status, [_GEOM, c_int64, _P64, _P64]),
    "rkv_visible_row_from_frames": (c_status, [_GEOM, c_int64, c_void_p, c_int64, c_void_p]),
    "rkv_layer_block_mask": (c_status, [c_void_p, c_int64, c_int64, c_void_p, c_void_p]),
    "rkv_layer_attend": (c_status, [c_void_p, POINTER(AttentionArgs)]),
    "rkv_model_preset": (c_status, [c_char_p, c_int, _CFG]),
    "rkv_model_preset_names": (POINTER(c_char_p), []),
    "rkv_model_config_layer_geometry": (c_status, [_CFG, c_int64, _GEOM]),
    "rkv_model_config_memory": (c_status, [_CFG, POINTER(c_size_t), POINTER(c_size_t)]),
    "rkv_model_create": (c_status, [_CFG, POINTER(c_void_p)]),
    "rkv_model_destroy": (None, [c_void_p]),
    "rkv_model_get_config": (_CFG, [c_void_p]),
    "rkv_model_layer": (c_void_p, [c_void_p, c_int64]),
    "rkv_model_claim": (c_status, [c_void_p, c_char_p, _P64]),
    "rkv_model_lookup": (c_status, [c_void_p, c_char_p, _P64]),
    "rkv_model_release": (c_status, [c_void_p, c_int64]),
    "rkv_model_reset": (c_status, [c_void_p, c_int64]),
    "rkv_model_clock": (c_status, [c_void_p, c_int64, _P64]),
    "rkv_model_begin_frame": (c_status, [c_void_p, c_int64, c_void_p, c_void_p]),
    "rkv_model_upsert": (c_status, [c_void_p, c_int64, c_void_p, c_int64, c_void_p, c_void_p,
                                    c_dtype, c_int]),
    "rkv_model_attend": (c_status, [c_void_p, c_int64, c_void_p, c_int64, c_void_p,
                                    POINTER(AttentionArgs)]),
    "rkv_model_snapshot_bytes": (c_size_t, [c_void_p]),
    "rkv_model_snapshot": (c_status, [c_void_p, c_int64, c_void_p, c_size_t]),
    "rkv_model_restore": (c_status, [c_void_p, c_int64, c_void_p, c_size_t]),
}

# Later additions to the API: bound when the loaded library has them; a
# call of one it lacks raises NotImplementedError (_Missing).
_OPTIONAL = {
    "rkv_threadpool_create": (c_status, [c_int, POINTER(c_void_p)]),
    "rkv_threadpool_destroy": (None, [c_void_p]),
    "rkv_threadpool_size": (c_int, [c_void_p]),
    "rkv_backend_cpu_reference": (c_void_p, []),
    "rkv_attention_isa": (c_char_p, [c_void_p]),
    "rkv_model_save_session": (c_status, [c_void_p, c_int64, c_char_p]),
    "rkv_model_save_session_mem": (c_status, [c_void_p, c_int64, c_void_p, c_size_t,
                                              POINTER(c_size_t)]),
    "rkv_model_load_session": (c_status, [c_void_p, c_int64, c_char_p]),
    "rkv_snapshot_inspect": (c_status, [c_char_p, c_void_p, c_size_t, POINTER(SnapshotInfo)]),
    "rkv_model_fork": (c_status, [c_void_p, c_int64, c_int64]),
    "rkv_model_step": (c_status, [c_void_p, c_int64, c_int64, c_void_p, c_void_p, c_dtype, c_int,
                                  POINTER(AttentionArgs)]),
    # one model, two backends (issue 11): spans, the frame's batch set once
    "rkv_layer_read_span": (c_status, [c_void_p, c_int64, c_int, c_int64, c_void_p]),
    "rkv_layer_write_span": (c_status, [c_void_p, c_int64, c_int, c_int64, c_void_p]),
    "rkv_layer_copy_span": (c_status, [c_void_p, c_int64, c_int64]),
    "rkv_model_backend_name": (c_char_p, [c_void_p]),
    "rkv_model_frame_upsert": (c_status, [c_void_p, c_int64, c_void_p, c_dtype, c_int]),
    "rkv_model_frame_attend": (c_status, [c_void_p, c_int64, POINTER(AttentionArgs)]),
    "rkv_model_frame_step": (c_status, [c_void_p, c_int64, c_void_p, c_dtype, c_int,
                                        POINTER(AttentionArgs)]),
    "rkv_model_end_frame": (c_status, [c_void_p]),
    "rkv_model_abandon_frame": (c_status, [c_void_p]),
    "rkv_model_synchronize": (c_status, [c_void_p]),
    # sessions that leave and move (issue 13)
    "rkv_model_offload_capacity": (c_int64, [c_void_p]),
    "rkv_model_offloaded_count": (c_int64, [c_void_p]),
    "rkv_model_offload": (c_status, [c_void_p, c_int64, c_void_p, c_size_t, POINTER(c_size_t)]),
    "rkv_model_offload_file": (c_status, [c_void_p, c_int64, c_char_p]),
    "rkv_model_page_in": (c_status, [c_void_p, c_void_p, c_size_t, _P64]),
    "rkv_model_page_in_file": (c_status, [c_void_p, c_char_p, _P64]),
    "rkv_model_offloaded_clock": (c_status, [c_void_p, c_char_p, _P64]),
    "rkv_model_offload_discard": (c_status, [c_void_p, c_char_p]),
    "rkv_model_session_region_count": (c_size_t, [c_void_p]),
    "rkv_model_session_regions": (c_status, [c_void_p, c_int64, POINTER(SessionRegion), c_size_t,
                                             POINTER(c_size_t)]),
    "rkv_model_session_meta_bytes": (c_size_t, [c_void_p]),
    "rkv_model_session_export_meta": (c_status, [c_void_p, c_int64, c_void_p, c_size_t]),
    "rkv_model_session_digest": (c_status, [c_void_p, c_int64, POINTER(c_uint64)]),
    "rkv_model_import_reserve": (c_status, [c_void_p, c_void_p, c_size_t, _P64]),
    "rkv_model_import_check": (c_status, [c_void_p, c_int64, c_void_p, c_size_t]),
    "rkv_model_session_import": (c_status, [c_void_p, c_int64, c_void_p, c_size_t]),
    "rkv_model_import_cancel": (c_status, [c_void_p, c_int64]),
    "rkv_model_transfer_session": (c_status, [c_void_p, c_int64, c_void_p, c_int64]),
    "rkv_model_host_alloc": (c_status, [c_void_p, c_size_t, POINTER(c_void_p)]),
    "rkv_model_host_free": (None, [c_void_p, c_void_p]),
    # layers over caller-owned storage, on any backend: what the torch
    # custom ops call (ops.py)
    "rkv_layer_wrap": (c_status, [c_void_p, c_void_p, _GEOM, POINTER(BackendStorage),
                                  POINTER(c_void_p)]),
    "rkv_layer_create_on": (c_status, [c_void_p, c_void_p, _GEOM, POINTER(c_void_p)]),
    "rkv_layer_backend_handle": (c_void_p, [c_void_p, POINTER(c_void_p), POINTER(c_void_p)]),
    "rkv_layer_visible_row": (c_status, [c_void_p, c_void_p, c_void_p, c_void_p]),
    "rkv_layer_check": (c_status, [c_void_p]),
    "rkv_layer_attend_workspace_bytes": (c_size_t, [c_void_p, c_void_p]),
}

# include/ringkv_cuda.h: what is CUDA's own (a CUDA layer is an rkv_layer,
# driven by the core's rkv_layer_* calls). `void *stream` is a cudaStream_t
# passed as an integer (torch's Stream.cuda_stream).
_CUDA_PROTOTYPES = {
    "rkv_cuda_device_count": (c_int, []),
    "rkv_cuda_backend": (c_status, [c_int, c_void_p, POINTER(c_void_p), POINTER(c_void_p)]),
    "rkv_cuda_attention_describe": (c_status, [c_void_p, POINTER(AttentionArgs), c_void_p,
                                               c_size_t]),
    "rkv_cuda_clock_advance": (c_status, [c_void_p, c_int64, c_int64, c_void_p]),
    # a whole rkv_model on the GPU (issue 11): created here, then driven by
    # the core's rkv_model_* calls like any model
    "rkv_model_create_cuda": (c_status, [_CFG, c_int, c_void_p, POINTER(c_void_p)]),
}
_CUDA_OPTIONAL: dict = {}

_HERE = os.path.dirname(os.path.abspath(__file__))
_BUNDLED = ("libringkv.so", "libringkv.so.0.2", "libringkv.dylib")


def _candidates(env: str, here: str | None, names: tuple[str, ...], system: str) -> list[str]:
    """The paths to try: ``$env`` alone when set (an explicit choice: no
    silent fallback to another copy; a relative path is made absolute, in the
    environment too, for processes started in another folder), else those of
    ``names`` in the folder ``here`` (None: none), then ``system`` on the system library path."""
    if path := os.environ.get(env):  # a bare name stays one: the loader searches for it
        os.environ[env] = path = os.path.join(os.getcwd(), path) if os.sep in path else path
        return [path]
    found = [os.path.join(here, n) for n in names if here and os.path.exists(os.path.join(here, n))]
    return found + [p for p in (ctypes.util.find_library(system),) if p]


def _bind(path: str, required: dict, optional: dict, older: str,
          errors: list[str]) -> ctypes.CDLL | None:
    """The library at ``path`` with the prototypes of ``required`` (all must
    be exported) and of those of ``optional`` it exports declared; None, with
    the reason appended to ``errors``, when it cannot be loaded or lacks a
    required function (``older`` names what it would then be)."""
    try:
        handle = ctypes.CDLL(path)
    except OSError as exc:
        errors.append(f"{path}: {exc}")
        return None
    missing = [name for name in required if not hasattr(handle, name)]
    if missing:
        errors.append(f"{path}: lacks {', '.join(missing)} ({older})")
        return None
    protos = dict(required)
    protos.update({n: p for n, p in optional.items() if hasattr(handle, n)})
    for name, (restype, argtypes) in protos.items():
        fn = getattr(handle, name)
        fn.restype = restype
        fn.argtypes = argtypes
    for name in optional.keys() - protos.keys():
        setattr(handle, name, _Missing(name, path))
    return handle


class _Missing:
    """An optional C function the loaded library lacks: calling it raises
    NotImplementedError."""

    def __init__(self, name: str, path: str):
        self.name, self.path = name, path

    def __call__(self, *args):
        raise NotImplementedError(f"ringkv: the loaded libringkv ({self.path}) lacks "
                                  f"{self.name}; rebuild the library from a newer tree")


def _load() -> tuple[ctypes.CDLL, str]:
    candidates = _candidates("RINGKV_LIBRARY", _HERE, _BUNDLED, "ringkv")
    if not candidates:
        raise ImportError(
            "ringkv: cannot find libringkv. Build it (cmake -S . -B build && cmake --build build "
            "--target ringkv_shared) and either set RINGKV_LIBRARY=build/libringkv.so or install "
            "the package with the library bundled (see python/README.md).")
    errors: list[str] = []
    for path in candidates:
        handle = _bind(path, _PROTOTYPES, _OPTIONAL, "an older libringkv?", errors)
        if handle is not None:
            return handle, path
    raise ImportError("ringkv: cannot load libringkv:\n  " + "\n  ".join(errors))


lib, library_path = _load()


def has(name: str) -> bool:
    """Whether the loaded library exports the C function ``name``."""
    return not isinstance(getattr(lib, name, _Missing), (_Missing, type))


# ---- the CUDA backend: libringkv_cuda.so, loaded on first use ---------------

_CUDA_NAMES = ("libringkv_cuda.so",)
_cuda_state: dict = {}  # "lib", "path" once loaded (a failed load is not cached)

_BUILD_HINT = ("Build it where nvcc is installed: cmake -S . -B build && cmake --build build "
               "--target ringkv_cuda_shared (it lands beside build/libringkv.so), or set "
               "RINGKV_CUDA_LIBRARY=/path/to/libringkv_cuda.so")


def cuda() -> ctypes.CDLL:
    """``libringkv_cuda.so`` with its prototypes declared, loaded on the first
    call (later calls return it). RuntimeError, before anything is allocated,
    when it is not found or cannot be loaded, or when it reports its errors
    through another copy of libringkv than :data:`lib`."""
    handle = _cuda_state.get("lib")
    if handle is not None:
        return handle
    env = os.environ.get("RINGKV_CUDA_LIBRARY")
    beside = os.path.dirname(os.path.abspath(library_path)) if os.sep in library_path else None
    candidates = [c for c in _candidates("RINGKV_CUDA_LIBRARY", beside, _CUDA_NAMES, "ringkv_cuda")
                  if os.sep not in c or os.path.exists(c)]
    if not candidates:
        where = (f"RINGKV_CUDA_LIBRARY={env} does not exist" if env else
                 (f"not beside libringkv.so in {beside}, " if beside else "")
                 + "not on the system library path, and RINGKV_CUDA_LIBRARY is not set")
        raise RingKVRuntimeError(
            "ringkv: CUDA devices need the CUDA backend library libringkv_cuda.so, which was not "
            f"found ({where}). {_BUILD_HINT}.")
    errors: list[str] = []
    for path in candidates:
        handle = _bind(path, _CUDA_PROTOTYPES, _CUDA_OPTIONAL, "an older libringkv_cuda?",
                       errors)
        if handle is None:
            continue
        # One error message for both libraries: a failed host check of the
        # CUDA library (no CUDA call is made: ops is NULL) must be what
        # rkv_last_error() of the loaded libringkv reports. It is not when
        # libringkv_cuda.so was linked against, or found, another libringkv.
        status = handle.rkv_cuda_backend(0, None, None, None)
        message = lib.rkv_last_error() or b""
        if status == 0 or not message.startswith(b"rkv_cuda_backend"):
            errors.append(f"{path}: its errors are not reported by the loaded libringkv "
                          f"({library_path}); it must link that same library (build both "
                          "from one tree and keep them side by side)")
            continue
        _cuda_state.update(lib=handle, path=path)
        return handle
    raise RingKVRuntimeError("ringkv: cannot load the CUDA backend library libringkv_cuda.so:\n  "
                             + "\n  ".join(errors) + f"\n{_BUILD_HINT}.")


def cuda_library_path() -> str | None:
    """Path of the loaded libringkv_cuda.so, None when it has not been loaded."""
    return _cuda_state.get("path")


def cuda_device_count() -> int:
    """``rkv_cuda_device_count()``: CUDA devices the backend's runtime sees;
    0 without GPU or driver, and 0 when libringkv_cuda.so is not found or
    cannot be loaded (a cheap "can ringkv use CUDA here?", like
    ``torch.cuda.device_count()``; ``LayerRingCache(..., device="cuda")``
    then says why). The CUDA backend has not yet run on a GPU (no GPU run
    is recorded)."""
    try:
        clib = cuda()
    except RingKVRuntimeError:
        return 0
    return int(clib.rkv_cuda_device_count())


# ---- statuses as exceptions (the classes: ringkv.errors) ----------------------

def error_for(status: int) -> RingKVError:
    """The exception for a failed status, with ``rkv_last_error()``'s message
    (read at once: it is thread-local and replaced by the next failure), its
    C calls named as the Python calls (:func:`ringkv.errors.python_message`)."""
    message = python_message((lib.rkv_last_error() or b"").decode("utf-8", "replace"))
    name = STATUS_NAMES.get(status, f"status {status}")
    cls = CLASS_OF.get(status, RingKVRuntimeError)
    return cls(f"{message} [{name}]" if message else name, status)


def check(status: int) -> None:
    """Raises :func:`error_for` ``(status)`` unless ``status`` is ``RKV_OK`` (0)."""
    if status:
        raise error_for(status)
