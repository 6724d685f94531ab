"""``LayerRingCache``: one attention layer's ring KV cache, a drop-in for the
reference class of ``shared/spec/seed_ring_cache.py`` backed by libringkv.
Its storage, views, devices and errors: the class docstring; the deliberate
differences from the reference (arguments checked completely before
anything is written, sessions and clocks checked, T >= 128, the visibility
row a new array per ``build_visibility`` call, dtypes and devices), with
their reasons: python/README.md.

A cache holds one ``rkv_layer*`` whatever its backend (:func:`_create`).
Torch tensors (torch >= 2.6) go through the custom ops of :mod:`ringkv.ops`
on the layer's storage tensors on either device, so that
``torch.compile(fullgraph=True)`` traces ``upsert`` and ``attend`` and CUDA
graphs capture them; NumPy arrays (and ``attend(pool=..., reference=True)``)
take the direct C calls, which read host memory. The CUDA backend has not
yet run on a GPU (no GPU run is recorded).
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, NamedTuple

import numpy as np

from . import _arrays as ar
from ._args import as_flag, as_instance, as_int, as_session
from ._handle import CopiedByValue, OwnedHandle, check_state, extras, malformed_state
from ._lib import Geometry as _GeometryStruct
from ._lib import check, cuda as _cuda_lib, cuda_library_path, lib
from .attention import _scale, attend_reference, check_out, prepare, set_visibility
from .errors import (RingKVArrayError, RingKVDeviceError, RingKVIndexError, RingKVRuntimeError,
                     RingKVTypeError, RingKVValueError, python_call, python_calls)

__all__ = ["LayerRingCache", "LayerGeometry", "visible_frames_from_clock"]

class LayerGeometry(NamedTuple):
    """One layer's geometry (SEMANTICS 2); ``dtype`` is "f32", "f16" or "bf16"."""
    num_sessions: int
    n_kv_heads: int
    ring_frames: int
    ring_buckets: int
    d_head: int
    tokens_per_frame: int
    pinned_dilation: int
    dtype: str

    def _struct(self) -> _GeometryStruct:
        return _GeometryStruct(*self[:7], ar.parse_dtype(self.dtype))

    def check(self) -> None:
        """Raises ValueError naming the first rule the geometry breaks."""
        check(lib.rkv_geometry_check(ctypes.byref(self._struct())))


def _parse_device(device: Any, array_kind: str | None = None,
                  what: str = "layer") -> tuple[str, int | None]:
    """("cpu", None) or ("cuda", index or None) for ``device``: None, "cpu",
    "cuda", "cuda:N" or a torch.device of those types. RingKVDeviceError (a
    ValueError and a RuntimeError, as torch.device raises) otherwise;
    RingKVValueError for a CUDA ``what`` ("layer", "model") whose
    ``array_kind`` is not None or "torch"."""
    if device is None:
        return "cpu", None
    if type(device).__module__.startswith("torch") and hasattr(device, "type"):
        kind, index = device.type, device.index
    elif isinstance(device, str):
        kind, _, idx = device.strip().partition(":")
        if idx and not idx.isdigit():
            raise RingKVDeviceError(f"unknown device {device!r}; expected 'cpu', 'cuda' or "
                                   "'cuda:N'")
        index = int(idx) if idx else None
    else:
        raise RingKVDeviceError(f"unknown device {device!r}; expected 'cpu', 'cuda', 'cuda:N' or "
                               "a torch.device")
    if kind == "cpu" and index in (None, 0):
        return "cpu", None
    if kind == "cuda":
        if array_kind not in (None, ar.TORCH):
            raise RingKVValueError(f"array_kind {array_kind!r}: a CUDA {what}'s views are "
                                   "torch CUDA tensors (array_kind 'torch')")
        return "cuda", index
    if kind == "meta":
        raise RingKVDeviceError(
            f"device {device!r} is not supported: a meta tensor has no storage, and ringkv's "
            "storage is host or GPU memory the library writes (the reference class accepts "
            "'meta'; this difference is listed in python/README.md). Use 'cpu' or 'cuda'")
    raise RingKVDeviceError(f"unknown device {device!r}; expected 'cpu', 'cuda', 'cuda:N' or a "
                           "torch.device of those")


def _cuda_device(device: Any, index: int | None) -> str:
    """"cuda:i" for a CUDA layer or model (i: torch's current device when
    ``index`` is None), after the checks made before anything is allocated:
    RuntimeError without libringkv_cuda.so, a GPU it sees, torch with CUDA,
    or torch >= 2.6 (the ops); IndexError for a device the runtime lacks."""
    n = int(_cuda_lib().rkv_cuda_device_count())  # RuntimeError: no libringkv_cuda.so
    if n == 0:
        raise RingKVRuntimeError(
            f"ringkv: device {str(device)!r} asked for, but the CUDA backend "
            f"({cuda_library_path()}) sees no CUDA device: rkv_cuda_device_count() == 0 (no GPU, "
            "no NVIDIA driver, or a driver older than the CUDA runtime the library was built "
            "with). Use device='cpu'.")
    torch = ar.torch_module()
    if torch is None:
        raise RingKVRuntimeError("ringkv: CUDA layers need torch (their inputs and views are "
                                 "torch CUDA tensors); torch is not importable")
    if not torch.cuda.is_available():
        raise RingKVRuntimeError(
            f"ringkv: the CUDA backend sees a GPU but this torch ({torch.__version__}) cannot use "
            "CUDA (a CPU-only build, or its CUDA runtime is newer than the driver); CUDA layers "
            "take and return torch CUDA tensors")
    if _torch_ops() is None:
        raise RingKVRuntimeError(f"ringkv: CUDA layers run through the torch custom ops "
                                 f"(ringkv.ops), which need torch >= 2.6; this is "
                                 f"{torch.__version__}")
    index = torch.cuda.current_device() if index is None else index
    if index >= n:
        raise RingKVIndexError(f"ringkv: device cuda:{index}; the CUDA runtime sees {n} "
                               "device(s)")
    return f"cuda:{index}"


class _LayerHandle(OwnedHandle):
    """Owns an ``rkv_layer*`` (``free``: ``rkv_layer_destroy``; ``owner``: on
    a GPU the backend context) or borrows one from a model (``free`` None;
    ``owner``: the model). A layer on a GPU is freed (it synchronizes the
    device first) once the cache and every view of its storage are gone:
    not inside a CUDA graph capture."""

    _copy_hint = ("it holds an rkv_layer* (an address in this process); copy or pickle the "
                  "LayerRingCache instead")
    __slots__ = ()


def _create(g: _GeometryStruct, device: str) -> _LayerHandle:
    """A new layer of geometry ``g`` (checked before anything is allocated)
    on ``device``: "cpu", ``rkv_layer_create``; "cuda:i",
    ``rkv_layer_create_on`` the CUDA table and the context of torch's
    current stream there (``ringkv.ops.context``, kept alive by the layer;
    K/V zeroed, written bits armed; it synchronizes), torch's current device
    left as it was. Not yet run on a GPU."""
    ptr, ctx = ctypes.c_void_p(), None
    if device == "cpu":
        check(lib.rkv_layer_create(ctypes.byref(g), ctypes.byref(ptr)))
    else:
        check(lib.rkv_geometry_check(ctypes.byref(g)))  # geometry errors before any CUDA call
        with ar.torch_module().cuda.device(device):
            ctx = _OPS.context(device)
            check(lib.rkv_layer_create_on(ctx.table, ctx.ptr, ctypes.byref(g), ctypes.byref(ptr)))
    return _LayerHandle(ptr.value, ctx, lib.rkv_layer_destroy)  # the layer first, then ctx


# The reference's messages stay as they are; a call name one carries is the
# method called (errors.python_calls): upsert never reports visible_row.
@python_calls("LayerRingCache", prefix=False)
class LayerRingCache(CopiedByValue):
    """One attention layer's ring: ``ring_frames`` frame slots of history plus
    one scratch frame at the tail, times ``num_sessions`` resident sessions.

    Same constructor as the reference::

        LayerRingCache(num_sessions, n_kv_heads, ring_frames, ring_buckets,
                       d_head, tokens_per_frame, pinned_dilation, dtype, device)

    ``dtype``: a torch dtype (float32, float16, bfloat16), a NumPy dtype
    (float32, float16, ``ml_dtypes.bfloat16``) or a string ("f32", "float32",
    "f16", "bf16", "bfloat16", ...). ``device``: "cpu" (or
    ``torch.device("cpu")``): the CPU backend, host memory; "cuda" (torch's
    current device), "cuda:N" or ``torch.device("cuda", N)``: the CUDA
    backend (``libringkv_cuda.so``) on that GPU, device memory (see below).
    ``array_kind`` ("numpy" or "torch") chooses what ``kv``, ``written`` and
    ``frame_offsets`` are; by default torch when ``dtype`` is a torch dtype
    or ``device`` a ``torch.device``, else NumPy. ``upsert`` returns views
    of the same kind as its ``kv`` input, whatever this is.

    Attributes: ``num_sessions``, ``n_kv_heads``, ``ring_frames``,
    ``ring_buckets``, ``d_head``, ``tokens_per_frame``, ``pinned_dilation``,
    ``ring_len`` (RF*T), ``capacity`` (ring_len + T, one session's slots),
    ``total_slots`` (N = num_sessions * capacity), ``dtype_name``, ``dtype``
    (of ``kv``), ``device`` ("cpu" or "cuda:N"), ``kv`` ([2, 1, H, N, D],
    index 0 = K, 1 = V), ``written`` ([N] bool), ``memory_bytes``,
    ``frame_offsets`` ([T] int64). The storage is owned by the library;
    ``kv``, ``written`` and the ``(k, v)`` of ``upsert`` are views of it,
    never copies: they change with every upsert/reset and stay valid while
    any of them is alive (each keeps the storage alive). Errors at
    construction: ValueError for a bad geometry, TypeError for a size that
    is not an integer, RingKVDtypeError (a ValueError and a TypeError) for
    an unknown dtype, RingKVDeviceError (a ValueError and a RuntimeError)
    for an unknown device (ringkv.errors).

    ``copy.copy``, ``copy.deepcopy`` and ``pickle`` (CPU layers only) work by
    value: :meth:`_copy`, :meth:`__reduce__`.

    **CUDA layers** (python/README.md, "CUDA devices"; the CUDA backend has
    not yet run on a GPU: no GPU run is recorded): RuntimeError at
    construction, before anything is allocated, without
    ``libringkv_cuda.so``, a GPU it sees or torch with CUDA; IndexError for
    a device the runtime lacks. Views are torch CUDA tensors over the
    layer's device memory; inputs torch CUDA tensors on its GPU
    (RingKVDeviceError otherwise; ``frame_pos``, ``session_idx`` and
    ``visible`` may be host data, copied once: not capture-safe).
    ``upsert``, ``attend`` and ``reset`` enqueue on
    ``torch.cuda.current_stream(device)`` without synchronizing; session
    ids and clocks there are the kernels' to check (:meth:`check`).
    ``visible_frames``, ``visible_row`` and ``block_mask`` raise
    NotImplementedError (they read the written bits on the host).
    """

    def __init__(self, num_sessions: int, n_kv_heads: int, ring_frames: int, ring_buckets: int,
                 d_head: int, tokens_per_frame: int, pinned_dilation: int, dtype: Any,
                 device: Any = "cpu", *, array_kind: str | None = None):
        kind, index = _parse_device(device, array_kind)
        code = ar.parse_dtype(dtype)
        sizes = dict(num_sessions=num_sessions, n_kv_heads=n_kv_heads, ring_frames=ring_frames,
                     ring_buckets=ring_buckets, d_head=d_head, tokens_per_frame=tokens_per_frame,
                     pinned_dilation=pinned_dilation)
        g = _GeometryStruct(*(as_int(v, k) for k, v in sizes.items()), code)
        where = "cpu" if kind == "cpu" else _cuda_device(device, index)
        if array_kind is None:
            torchy = (kind == "cuda" or ar.is_torch_dtype(dtype)
                      or type(device).__module__.startswith("torch"))
            array_kind = ar.TORCH if torchy else ar.NUMPY
        self._init(_create(g, where), array_kind, where)

    @classmethod
    def _borrow(cls, ptr: int, owner: Any, array_kind: str,
                device: str = "cpu") -> "LayerRingCache":
        """A LayerRingCache over a layer owned by a model (``rkv_model_layer``;
        kept alive by ``owner``, never freed here) on ``device``."""
        if not ptr:
            raise RingKVRuntimeError("ringkv: rkv_model_layer returned NULL")
        self = cls.__new__(cls)
        self._init(_LayerHandle(ptr, owner), array_kind, device)
        return self

    def _init(self, handle: _LayerHandle, array_kind: str, device: str = "cpu") -> None:
        """The cache over ``handle`` on ``device`` ("cpu" or "cuda:i"; the
        CUDA backend has not yet run on a GPU): its geometry and views."""
        if array_kind not in (ar.NUMPY, ar.TORCH):
            raise RingKVValueError(f"array_kind must be 'numpy' or 'torch'; got {array_kind!r}")
        if array_kind == ar.TORCH and ar.torch_module() is None:
            raise RingKVValueError("array_kind 'torch' needs torch, which is not importable")
        self._h = handle
        g = lib.rkv_layer_geometry(handle.ptr).contents
        self._g = _GeometryStruct.from_buffer_copy(g)
        for name, _ in _GeometryStruct._fields_[:7]:
            setattr(self, name, int(getattr(g, name)))
        self._code = int(g.dtype)
        self.dtype_name = ar.DTYPE_NAMES[self._code]
        self.ring_len = self.ring_frames * self.tokens_per_frame
        self.capacity = self.ring_len + self.tokens_per_frame
        self.total_slots = self.num_sessions * self.capacity
        self.device = device
        self.array_kind = array_kind
        H, N, D = self.n_kv_heads, self.total_slots, self.d_head
        kv, written = lib.rkv_layer_kv(handle.ptr), lib.rkv_layer_written(handle.ptr)
        if self.device == "cpu":
            np_kv = ar.numpy_view(kv, (2, 1, H, N, D), ar.numpy_dtype(self._code), handle)
            self._views = {ar.NUMPY: (np_kv, np_kv[0], np_kv[1],
                                      ar.numpy_view(written, (N,), np.bool_, handle))}
            self._keep_row(np.zeros(N, dtype=np.bool_), ar.NUMPY)  # calloc: no page touched
        else:  # device memory: torch CUDA tensors over it (not yet run on a GPU)
            t_kv = ar.cuda_view(kv, (2, 1, H, N, D), self._code, self.device, handle)
            t_written = ar.cuda_view(written, (N,), "bool", self.device, handle)
            self._views = {ar.TORCH: (t_kv, t_kv[0], t_kv[1], t_written)}
            self._keep_row(t_written.new_zeros(N), ar.TORCH)
        # the error word the ops take: the kernels' on a GPU (check() reads
        # it), never written on the CPU. The torch views are made now: code
        # torch.compile traces cannot make them.
        self._error = None
        if "torch" in sys.modules:
            self.views(ar.TORCH)
            if _torch_ops():
                self._error = _OPS.error_word(self.views(ar.TORCH)[3].device)

    # ---- views ----------------------------------------------------------
    def views(self, kind: str | None = None) -> tuple[Any, Any, Any, Any]:
        """``(kv [2,1,H,N,D], k [1,H,N,D], v [1,H,N,D], written [N] bool)``,
        views of the library's storage as NumPy arrays or torch tensors (a
        CUDA layer: torch CUDA tensors over its device memory, "torch" only)."""
        kind = kind or self.array_kind
        v = self._views.get(kind)
        if v is None:
            if kind != ar.TORCH:
                raise RingKVValueError(
                    f"kind must be 'numpy' or 'torch'; got {kind!r}" if kind != ar.NUMPY else
                    f"kind {kind!r}: a CUDA layer's storage is device memory; its views are "
                    "torch CUDA tensors only (kind 'torch'; copy to the host with .cpu())")
            np_kv, _, _, np_written = self._views[ar.NUMPY]
            t_kv = ar.to_torch(np_kv, self._code)
            v = (t_kv, t_kv[0], t_kv[1], ar.to_torch(np_written))
            self._views[kind] = v
        return v

    @property
    def kv(self) -> Any:
        """``[2, 1, H, N, D]`` view of the K/V storage (index 0 = K, 1 = V);
        float32 / float16 / bf16 (NumPy: uint16 bits). Writing into it
        bypasses the library's checks, as with the reference's tensor."""
        return self.views()[0]

    @property
    def written(self) -> Any:
        """``[N]`` bool view of the written bits (ring slots that hold a frame;
        every scratch slot is always set)."""
        return self.views()[3]

    @property
    def dtype(self) -> Any:
        """The dtype of ``kv`` (NumPy uint16 for bf16 storage)."""
        return self.kv.dtype

    @property
    def frame_offsets(self) -> Any:
        """``arange(tokens_per_frame)`` as int64 (the reference's attribute),
        on the layer's device."""
        if self.array_kind == ar.TORCH:
            torch = ar.torch_module()
            return torch.arange(self.tokens_per_frame, dtype=torch.int64,
                                device=self.views()[3].device)
        return np.arange(self.tokens_per_frame, dtype=np.int64)

    @property
    def geometry(self) -> LayerGeometry:
        return LayerGeometry(*self.geometry_list, self.dtype_name)

    @property
    def error_word(self) -> Any:
        """The int32 tensor the custom ops take as ``error`` (:mod:`ringkv.ops`):
        a CUDA layer's own device error word (what :meth:`check` reads), a
        CPU layer's never written (the library raises at once)."""
        if self._error is None:  # a CPU layer made before torch was imported
            self._error = _torch_ops().error_word("cpu")
        return self._error

    @property
    def geometry_list(self) -> list[int]:
        """``[S, H, RF, RB, D, T, PD]``: the ``geometry`` argument of the
        custom ops (:mod:`ringkv.ops`)."""
        return [getattr(self, name) for name, _ in _GeometryStruct._fields_[:7]]

    @property
    def memory_bytes(self) -> int:
        """Resident bytes of K/V storage, all sessions: 2*H*N*D*sizeof(dtype)
        (device memory for a CUDA layer)."""
        return int(lib.rkv_geometry_memory_bytes(lib.rkv_layer_geometry(self._h.ptr)))

    def __repr__(self) -> str:
        args = {**self.geometry._asdict(), **({} if self.device == "cpu" else
                                              {"device": self.device})}
        return f"ringkv.LayerRingCache({', '.join(f'{k}={v!r}' for k, v in args.items())})"

    # ---- the calls on the layer ------------------------------------------
    def _call(self, fn: Any, *args: Any) -> None:
        """``fn(layer, *args)``, checked: on this layer's own handle when its
        storage is host memory; on a GPU on a layer over the same storage
        and error word on the context of torch's current stream, that GPU
        current (``ringkv.ops.wrapped``, as the ops do; not yet run on a
        GPU), so that the call is ordered with the ops."""
        if self.device == "cpu":
            check(fn(self._h.ptr, *args))
            return
        ring, _, _, written = self._views[ar.TORCH]
        with _OPS.wrapped(ring, written, self._error, self._g) as h:
            check(fn(h, *args))

    def _host(self, x: Any, name: str, options: bool = False) -> None:
        """The direct C calls (NumPy arrays; ``pool`` and ``reference``,
        ``options``) read host memory: on a CUDA layer they raise
        RingKVValueError (options) or RingKVDeviceError (``x`` not a torch
        tensor on its GPU). Nothing on the CPU."""
        if self.device == "cpu":
            return
        if options:
            raise RingKVValueError("pool and reference=True are CPU-backend options; this "
                                   f"layer is on {self.device}")
        ar.check_device(x, name, self.views()[3].device)

    def _host_only(self, what: str) -> None:
        if self.device != "cpu":
            raise NotImplementedError(
                f"ringkv: {what} is not available for a CUDA layer ({self.device}): it needs the "
                "written bits on the host. Use the visibility row upsert(..., "
                "build_visibility=True) returns (a CUDA tensor), "
                "ringkv.visible_frames_from_clock(cache.geometry, frame_pos) for the clock-only "
                "rule, or replay the same operations on a CPU layer.")

    # ---- copies and pickles ------------------------------------------------
    # what _init sets (the geometry's names too): a copy or pickle rebuilds these
    _OWN_ATTRS = frozenset({"_h", "_views", "_code", "_g", "dtype_name", "ring_len", "capacity",
                            "total_slots", "device", "array_kind", "_error", "_last_row",
                            *(name for name, _ in _GeometryStruct._fields_[:7])})

    def _copy(self) -> "LayerRingCache":
        """A new layer on the same device with its own C handle and views and
        this one's geometry, array kind, K/V and written bits (as the
        reference's tensors copy, never a second name for this storage). A layer
        borrowed from a Model copies into a standalone (owned) layer. A CUDA
        layer: a new ``rkv_layer`` on the same GPU (it synchronizes, as
        any construction), filled by device-to-device copies enqueued on the
        current stream (after this layer's pending kernels); its pending
        device errors (:meth:`check`) are not copied."""
        new = type(self).__new__(type(self))
        new._init(_create(self._g, self.device), self.array_kind, self.device)
        kind = next(iter(self._views))  # the storage's own kind (NumPy on the host)
        for src, dst in zip(self._views[kind][::3], new._views[kind][::3]):
            dst[...] = src  # K/V, then the written bits
        kind, row = next(iter(self._last_row.items()))
        new._keep_row(row.copy() if isinstance(row, np.ndarray) else row.clone(), kind)
        return new

    def __reduce__(self) -> tuple:
        """Pickles a CPU layer by value: geometry, array kind, K/V bytes
        (little-endian) and written bits (one byte per slot), plus the
        attributes the caller added; unpickling creates a new layer (owned,
        also for a layer borrowed from a Model). A CUDA layer refuses
        (RingKVTypeError): its storage is device memory."""
        if self.device != "cpu":
            raise RingKVTypeError(
                f"cannot pickle a ringkv.LayerRingCache on {self.device}: its storage is device "
                "memory held through an rkv_layer* of this process. copy.deepcopy works "
                "(a new layer on the same GPU); for a byte stream pickle cache.kv.cpu() and "
                "cache.written.cpu(), or keep the cache on a CPU layer")
        np_kv, _, _, np_written = self._views[ar.NUMPY]
        state = {"format": _LAYER_FORMAT, "version": _LAYER_VERSION,
                 "geometry": tuple(self.geometry), "array_kind": self.array_kind,
                 "kv": np_kv.astype(np_kv.dtype.newbyteorder("<"), copy=False).tobytes(),
                 "written": np_written.view(np.uint8).tobytes()}
        return (_layer_from_state, (type(self), state), extras(self, self._OWN_ATTRS))

    # ---- sessions ---------------------------------------------------------
    def session_span(self, session_idx: int) -> tuple[int, int]:
        """``[lo, hi)`` token slots owned by ``session_idx``; IndexError when it
        is not in ``[0, num_sessions)`` (host arithmetic on every backend)."""
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        check(lib.rkv_layer_session_span(self._h.ptr, as_session(session_idx), ctypes.byref(lo),
                                         ctypes.byref(hi)))
        return lo.value, hi.value

    def reset(self, session_idx: int) -> None:
        """Drops ONE session's state (K/V zeroed, ring slots unwritten) and
        re-arms its scratch tail. IndexError when out of range. A CUDA layer:
        enqueued on the current stream (capture-safe, no synchronization;
        ``session_idx`` is a host int)."""
        self._call(lib.rkv_layer_reset, as_session(session_idx))

    def check(self) -> None:
        """Reports the device errors of a CUDA layer: ``rkv_layer_check``
        reads and clears the error word the kernels set when a call's session
        ids or clocks (device values, not checked by the host) were invalid;
        such a call wrote nothing. Raises IndexError (a session out of range)
        or ValueError (a session twice in one call, or a clock < 0) with the
        operation and row, for the first such call since the last check.
        Synchronizes the current stream: not capture-safe. A CPU layer
        checks everything before writing, so this is a no-op there."""
        self._call(lib.rkv_layer_check)

    # ---- upsert -----------------------------------------------------------
    def upsert(self, kv: Any, frame_pos: Any, commit: bool, session_idx: Any, *,
               build_visibility: bool = True) -> tuple[Any, Any, Any]:
        """Writes one frame for each of B sessions (SEMANTICS 3).

        - ``kv``: ``[2, 1, H, B*T, D]`` (or ``[2, H, B*T, D]``), tokens ordered
          (row b, token t), in the storage dtype (NumPy bf16: uint16 bits or
          ``ml_dtypes.bfloat16``); a NumPy array or a CPU torch tensor (a
          CUDA layer: a torch CUDA tensor on its GPU), passed without copying
          when C-contiguous (copied once otherwise).
        - ``frame_pos``: ``[B]`` int64 clocks, each >= 0. B may be 0 (``kv``
          with no tokens, empty ``frame_pos`` and ``session_idx``): nothing
          is written, as in the reference (with ``build_visibility`` it
          raises, the reference's B == 1 check).
        - ``commit``: write the frame into its ring slot (on write steps,
          ``frame_pos % pinned_dilation == 0``; else the scratch again) and
          mark it written.
        - ``session_idx``: ``[B]`` int64, each in range, distinct.
        - ``build_visibility``: also compute the reference's visibility row
          (B == 1 only), before the commit.

        Returns ``(k, v, visible)``: ``k``, ``v`` are ``[1, H, N, D]`` views of
        the whole storage (NumPy views for NumPy ``kv``, torch tensors for a
        torch ``kv``); ``visible`` is a new ``[N]`` bool array/tensor per
        ``build_visibility`` call (``written AND slot of the session``, minus
        the ring frame about to be overwritten on a write step); without
        ``build_visibility``, the last row built itself (:meth:`_row_result`;
        engines ignore it: ``k, v, _ = cache.upsert(...,
        build_visibility=False)``).

        Raises RingKVArrayError (a RuntimeError, as the reference's
        ``torch._check`` and ``index_copy_``, and a ValueError) for frame_pos
        not a [B] int64, a token count != B*T, session_idx not matching, or a
        kv shape or dtype not the storage's; RuntimeError for B != 1 with
        build_visibility (the reference's); IndexError for a session out of
        range; ValueError for frame_pos < 0 or a session twice in one batch;
        RingKVDeviceError for an array on another device than the layer's.
        RingKVTypeError (a TypeError) for ``commit`` or ``build_visibility``
        not a bool. Nothing is written when it raises (on a CUDA layer the
        session range, duplicates and negative clocks are the kernel's:
        :meth:`check` raises them later).

        Torch ``kv``: the ops ``ringkv::visible_row`` (with
        ``build_visibility``) then ``ringkv::upsert`` on :attr:`kv` and
        :attr:`written` (traceable by torch.compile), whatever the device.
        """
        commit = as_flag(commit, "commit")
        build_visibility = as_flag(build_visibility, "build_visibility")
        ops = _torch_ops() if ar.is_torch_tensor(kv) else None
        if ops is not None:  # the host checks, then the ops
            ring, k, v, written = self.views(ar.TORCH)
            dev = written.device
            fp = ar.torch_index(frame_pos, "frame_pos", _FRAME_POS_MSG, dev)
            ar.check_device(kv, "kv", dev)
            si = self._check_upsert(kv, fp.shape, session_idx, build_visibility, dev)
            geometry, err = self.geometry_list, self.error_word
            row = ops.visible_row(written, fp, si, geometry, err) if build_visibility else None
            ops.upsert(ring, written, kv, fp, si, geometry, commit, err)
            return k, v, self._row_result(row, ar.TORCH)
        self._host(kv, "kv")
        fp = ar.int64_vector(frame_pos, "frame_pos", _FRAME_POS_MSG)
        buf = ar.CBuffer(kv, "kv")
        si = self._check_upsert(buf.keep, fp.shape, session_idx, build_visibility)
        visible = np.empty(self.total_slots, dtype=np.bool_) if build_visibility else None
        if fp.shape[0]:  # an empty batch writes nothing, as the reference's (no C call: B >= 1)
            check(lib.rkv_layer_upsert(self._h.ptr, buf.ptr, self._code, fp.shape[0],
                                       fp.ctypes.data, si.ctypes.data, 1 if commit else 0,
                                       None if visible is None else visible.ctypes.data))
        _, k, v, _ = self.views(buf.kind)
        return k, v, self._row_result(visible, buf.kind)

    def _check_upsert(self, kv: Any, fp_shape: Any, session_idx: Any, build_visibility: bool,
                      device: Any = None) -> Any:
        """The host checks of upsert, in the reference's order and with its
        messages (torch._check in seed_ring_cache.py), on both routes; the
        ``[B]`` int64 sessions (NumPy; a tensor on ``device`` when given)."""
        B, T, shape = fp_shape[0], self.tokens_per_frame, tuple(kv.shape)
        if len(shape) not in (4, 5):
            raise RingKVArrayError(f"kv must be [2, 1, H, B*T, D]; got shape {shape}")
        if shape[-2] != B * T:
            raise RingKVArrayError("ring cache expects exactly one frame per session; got "
                                   f"{shape[-2]} tokens for B={B}")
        try:
            si = (ar.int64_vector(session_idx, "session_idx", "{got}") if device is None
                  else ar.torch_index(session_idx, "session_idx", "{got}", device))
        except RingKVArrayError:  # not RingKVDeviceError: a device mismatch says so
            si = None
        if si is None or tuple(si.shape) != tuple(fp_shape):
            desc = (f"{tuple(session_idx.shape)} {session_idx.dtype}"
                    if hasattr(session_idx, "shape") else repr(session_idx))
            raise RingKVArrayError(f"session_idx must be a {list(fp_shape)} int64 tensor "
                                   f"matching frame_pos; got {desc}")
        if build_visibility and B != 1:
            raise RingKVRuntimeError("ring cache's fallback visibility row only supports B == 1; "
                                     "the engine path passes build_visibility=False.")
        self._check_kv(kv, B)  # a RuntimeError as the reference's index_copy_, and a ValueError
        return si

    def _check_kv(self, kv: Any, B: int) -> None:
        """:func:`ringkv._arrays.check_kv` of ``kv`` for B rows of this layer."""
        ar.check_kv(kv, (2, 1, self.n_kv_heads, B * self.tokens_per_frame, self.d_head),
                    self._code)

    def _row_result(self, row: Any, kind: str) -> Any:
        """The third value of upsert. ``row`` (a new row, of ``kind``) is
        kept as the layer's last row and returned. None (no row asked
        for): the last row built, itself, not a copy (the same object every
        call until upsert builds another; all False before the first), as
        the reference returns its row buffer. O(1): no ring-sized work on
        the engine path (:meth:`_keep_row`)."""
        if row is not None:  # a NumPy row also on the torch route of an older torch
            self._keep_row(row, ar.NUMPY if isinstance(row, np.ndarray) else ar.TORCH)
        last = self._last_row.get(kind)
        if last is None:  # the other kind's row, shared (CPU memory)
            other = next(iter(self._last_row.values()))
            last = ar.to_torch(other) if kind == ar.TORCH else other.numpy()
            self._last_row[kind] = last
        return last

    def _keep_row(self, row: Any, kind: str) -> None:
        """Keeps ``row`` (of ``kind``) as the last row built; a NumPy row
        also as a torch tensor over it when torch is loaded (code that
        torch.compile traces cannot make one)."""
        self._last_row = {kind: row}
        if kind == ar.NUMPY and "torch" in sys.modules:
            self._last_row[ar.TORCH] = ar.to_torch(row)

    # ---- visibility (host memory) ------------------------------------------
    def visible_frames(self, session_idx: int, frame_pos: int) -> list[int]:
        """Visible frame slots of a session at clock ``frame_pos`` by the
        bits-and-clock rule (SEMANTICS 4): ring frames ascending, then
        ``ring_frames`` (the scratch)."""
        self._host_only("visible_frames")
        return _frames(self.ring_frames, lib.rkv_layer_visible_frames, self._h.ptr,
                       as_session(session_idx), as_int(frame_pos, "frame_pos"))

    def visible_row(self, session_idx: int, frame_pos: int) -> Any:
        """``[N]`` bool row of the bits-and-clock rule (the reference's row
        format), in this cache's array kind."""
        self._host_only("visible_row")
        frames = self.visible_frames(session_idx, frame_pos)
        arr = (ctypes.c_int64 * max(1, len(frames)))(*frames)
        row = np.empty(self.total_slots, dtype=np.bool_)
        check(lib.rkv_visible_row_from_frames(ctypes.byref(self._g), as_session(session_idx), arr,
                                              len(frames), row.ctypes.data))
        return ar.as_kind(row, self.array_kind)

    def block_mask(self, session_idx: int, frame_pos: int) -> tuple[Any, Any]:
        """FlexAttention BlockMask data of one session row (SEMANTICS 5):
        ``kv_num_blocks`` ``[T/128]`` int32 and ``kv_indices``
        ``[T/128, N/128]`` int32 (visible key blocks ascending, padded with 0)."""
        self._host_only("block_mask")
        qb, kb = self.tokens_per_frame // 128, self.total_slots // 128
        num = np.empty(qb, dtype=np.int32)
        idx = np.empty((qb, kb), dtype=np.int32)
        check(lib.rkv_layer_block_mask(self._h.ptr, as_session(session_idx),
                                       as_int(frame_pos, "frame_pos"), num.ctypes.data,
                                       idx.ctypes.data))
        return ar.as_kind(num, self.array_kind), ar.as_kind(idx, self.array_kind)

    # ---- attention --------------------------------------------------------
    def attend(self, q: Any, session_idx: Any, frame_pos: Any = None, *, visible: Any = None,
               scale: float | None = None, out: Any = None, out_dtype: Any = None,
               pool: Any = None, reference: bool = False) -> Any:
        """Attention of ``q`` ``[B, Hq, Tq, D]`` over the ring (SEMANTICS 5),
        visible from ``frame_pos`` ([B] int64 clocks, bits-and-clock rule) or
        from the rows ``visible`` ([B, N] or [N] bool/uint8, e.g. the row
        ``upsert`` returned); returns ``out`` ``[B, Hq, Tq, D]``. Arguments,
        shapes and dtypes (``scale``, ``out``, ``out_dtype``, ``pool``,
        ``reference``): :mod:`ringkv.attention`.

        Torch ``q`` (without ``pool``/``reference``): the op
        ``ringkv::attend`` (traceable by torch.compile), on either device; a
        given ``out`` receives its result. A CUDA layer (inputs as the class
        docstring says): ``pool`` and ``reference`` do not apply
        (ValueError); invalid session ids or clocks on the device make it
        write nothing: :meth:`check` reports them.
        """
        reference = as_flag(reference, "reference")
        self._host(q, "q", pool is not None or reference)
        ops = (_torch_ops() if ar.is_torch_tensor(q) and pool is None and not reference
               else None)
        if ops is not None:  # ringkv::attend; a given ``out`` receives its result
            ring, _, _, written = self.views(ar.TORCH)
            dev = written.device
            ar.check_device(q, "q", dev)
            si = ar.torch_index(session_idx, "session_idx", _SI_MSG, dev)
            fp = rows = None
            if visible is not None:
                rows = visible if ar.is_torch_tensor(visible) else \
                    ar.torch_module().from_numpy(np.ascontiguousarray(visible))
                if rows.device.type == "cpu" and dev.type == "cuda":
                    rows = rows.to(dev)  # host rows: one copy (not capture-safe)
                ar.check_device(rows, "visible", dev)
            elif frame_pos is not None:
                fp = ar.torch_index(frame_pos, "frame_pos", _FP_ATTEND_MSG, dev)
            dt = None if out_dtype is None else ar.torch_dtype(ar.parse_dtype(out_dtype))
            if out is not None:
                ar.check_device(out, "out", dev)
                check_out(out, q.shape, out.is_contiguous())
                dt = out.dtype
            res = ops.attend(ring, written, q, si, fp, rows, self.geometry_list, _scale(scale), dt,
                             self.error_word)
            return res if out is None else out.copy_(res)
        si = ar.int64_vector(session_idx, "session_idx", _SI_MSG)
        args, out, keep = prepare(q, self.d_head, si.shape[0], out, out_dtype, scale, pool,
                                  kv_heads=self.n_kv_heads)
        args.session_idx = ctypes.cast(si.ctypes.data, ctypes.POINTER(ctypes.c_int64))
        rows = None if visible is None else ar.CBuffer(visible, "visible").keep
        fp = None if visible is not None or frame_pos is None else ar.int64_vector(
            frame_pos, "frame_pos", _FP_ATTEND_MSG)
        set_visibility(args, self.total_slots, fp, rows)  # keep, rows, fp: alive until the call
        check((attend_reference if reference else lib.rkv_layer_attend)(self._h.ptr,
                                                                        ctypes.byref(args)))
        return out


_FRAME_POS_MSG = "frame_pos must be a [B] int64 tensor; got {got}"  # upsert's (the reference's)
_FP_ATTEND_MSG = "frame_pos must be a [B] int64 array or tensor; got {got}"
_SI_MSG = "session_idx must be a [B] int64 array or tensor; got {got}"


_OPS: Any = None  # ringkv.ops once loaded; False: torch is too old for it


def _torch_ops() -> Any:
    """:mod:`ringkv.ops` (the torch custom ops), or None when torch is older
    than they need (then torch CPU tensors take the direct C calls). Loaded
    at the first LayerRingCache made while torch is imported (so that code
    torch.compile traces only reads this module's global)."""
    global _OPS
    if _OPS is None:
        torch = ar.torch_module()
        version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
        if version < (2, 6):
            _OPS = False
        else:
            from . import ops
            _OPS = ops
    return _OPS or None


_LAYER_FORMAT, _LAYER_VERSION = "ringkv.LayerRingCache", 1


def _layer_from_state(cls: type, state: Any) -> LayerRingCache:
    """Unpickles a CPU layer (see ``LayerRingCache.__reduce__``): a new layer
    of the pickled geometry, filled with the pickled K/V and written bits.
    RingKVValueError for a state of another format or version, or whose
    sizes do not match its geometry; nothing is kept then."""
    check_state(state, _LAYER_FORMAT, _LAYER_VERSION)
    try:
        geometry = LayerGeometry(*state["geometry"])
        kv_bytes, written_bytes = bytes(state["kv"]), bytes(state["written"])
        array_kind = state["array_kind"]
    except (KeyError, TypeError) as exc:
        raise malformed_state(_LAYER_FORMAT, f"{type(exc).__name__}: {exc}") from None
    self = cls.__new__(cls)
    self._init(_create(geometry._struct(), "cpu"), array_kind)
    np_kv, _, _, np_written = self._views[ar.NUMPY]
    if len(kv_bytes) != np_kv.nbytes or len(written_bytes) != np_written.nbytes:
        raise malformed_state(_LAYER_FORMAT, f"{len(kv_bytes)} K/V bytes and {len(written_bytes)} "
                              f"written bits; the geometry {tuple(geometry)} has {np_kv.nbytes} "
                              f"and {np_written.nbytes}")
    written = np.frombuffer(written_bytes, dtype=np.uint8)
    if written.max(initial=0) > 1:
        raise malformed_state(_LAYER_FORMAT, "a written bit that is neither 0 nor 1")
    np.copyto(np_kv, np.frombuffer(kv_bytes, dtype=np_kv.dtype.newbyteorder("<"))
              .reshape(np_kv.shape))
    np.copyto(np_written.view(np.uint8), written)
    return self


@python_call("ringkv.visible_frames_from_clock")
def visible_frames_from_clock(geometry: LayerGeometry, frame_pos: int) -> list[int]:
    """The clock-only rule (SEMANTICS 4) for a session that committed frames
    ``0 .. frame_pos-1`` in order: visible ring frame slots ascending, then
    ``ring_frames`` (the scratch)."""
    as_instance(geometry, LayerGeometry, "geometry", " (e.g. cache.geometry)")
    return _frames(geometry.ring_frames, lib.rkv_visible_frames_from_clock,
                   ctypes.byref(geometry._struct()), as_int(frame_pos, "frame_pos"))


def _frames(ring_frames: int, fn: Any, *args: Any) -> list[int]:
    """The frame list ``fn(*args, frames, &count)`` writes (at most
    ``ring_frames + 1``)."""
    frames, count = (ctypes.c_int64 * (ring_frames + 1))(), ctypes.c_int64()
    check(fn(*args, frames, ctypes.byref(count)))
    return list(frames[:count.value])
