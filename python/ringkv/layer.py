"""``LayerRingCache``: one attention layer's ring KV cache, a drop-in for the
reference class of ``shared/spec/seed_ring_cache.py`` backed by libringkv.

Storage is one buffer ``[2, 1, H, N, D]`` (``N = num_sessions * capacity``;
index 0 = K, 1 = V) owned by the library. ``kv``, ``written`` and the
``(k, v)`` returned by ``upsert`` are views of it, never copies: they change
with every upsert/reset and stay valid while any of them is alive (each view
keeps the library's buffer alive).

Differences from the reference (all deliberate, see SEMANTICS.md):

- arguments are validated completely before anything is written: a failed
  ``upsert`` changes nothing (the reference writes the scratch before its
  ``B == 1`` check);
- sessions must be in range and distinct within a batch, and ``frame_pos``
  must be >= 0 (``IndexError`` / ``ValueError``; the reference does not check);
- ``tokens_per_frame`` must be >= 128 (the reference lets 0 through);
- the visibility row is a fresh array owned by the caller, not the layer's
  scratch (no aliasing hazard); with ``build_visibility=False`` it is
  ``None`` (the reference returns a stale row that must be ignored).
"""
from __future__ import annotations

import ctypes
import operator
from typing import Any, NamedTuple

import numpy as np

from . import _arrays as ar
from ._lib import Geometry as _GeometryStruct
from ._lib import lib
from .attention import attend_layer
from .errors import (RingKVIndexError, RingKVRuntimeError, RingKVValueError, check)

__all__ = ["LayerRingCache", "LayerGeometry", "visible_frames_from_clock"]

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


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
        return _GeometryStruct(self.num_sessions, self.n_kv_heads, self.ring_frames,
                               self.ring_buckets, self.d_head, self.tokens_per_frame,
                               self.pinned_dilation, ar.parse_dtype(self.dtype))

    def check(self) -> None:
        """Raises ValueError naming the first rule the geometry breaks."""
        check(lib.rkv_geometry_check(ctypes.byref(self._struct())))


def _int(value: Any, name: str) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise RingKVValueError(f"{name} must be an int; got {value!r}") from None
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise RingKVValueError(f"{name} = {v} does not fit int64")
    return v


def _session(value: Any) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"session_idx must be an int; got {value!r}") from None
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise RingKVIndexError(f"session_idx {v} out of range")
    return v


def _parse_device(device: Any) -> None:
    if device is None:
        return
    dev = str(device)
    if dev == "cpu":
        return
    if dev.startswith("cuda"):
        raise NotImplementedError(
            f"ringkv: device {dev!r} is not supported yet: the Python binding drives only the CPU "
            "backend so far (CUDA comes once the CUDA backend has run on a GPU). Use device='cpu'.")
    raise RingKVValueError(f"unknown device {device!r}; expected 'cpu'")


class _LayerHandle:
    """Owns an ``rkv_layer*`` (``owner`` None) or borrows one from a model
    (``owner`` keeps the model alive)."""

    __slots__ = ("ptr", "owner")

    def __init__(self, ptr: int, owner: Any = None):
        self.ptr = ptr
        self.owner = owner

    def __del__(self):
        if self.owner is None and self.ptr and lib is not None:
            lib.rkv_layer_destroy(self.ptr)
            self.ptr = None


class LayerRingCache:
    """One attention layer's ring: ``ring_frames`` frame slots of history plus
    one scratch frame at the tail, times ``num_sessions`` resident sessions.

    Same constructor as the reference::

        LayerRingCache(num_sessions, n_kv_heads, ring_frames, ring_buckets,
                       d_head, tokens_per_frame, pinned_dilation, dtype, device)

    ``dtype``: a torch dtype (float32, float16, bfloat16), a NumPy dtype
    (float32, float16, ``ml_dtypes.bfloat16``) or a string ("f32", "float32",
    "f16", "bf16", "bfloat16", ...). ``device``: "cpu" (or
    ``torch.device("cpu")``); a CUDA device raises NotImplementedError: the
    binding does not drive the (not yet GPU-verified) CUDA backend.

    ``array_kind`` ("numpy" or "torch") chooses what the attributes ``kv``,
    ``written`` and ``frame_offsets`` are; by default torch when ``dtype`` is
    a torch dtype or ``device`` a ``torch.device``, else NumPy. ``upsert``
    returns views of the same kind as its ``kv`` input, whatever this is.

    Attributes: ``num_sessions``, ``n_kv_heads``, ``ring_frames``,
    ``ring_buckets``, ``d_head``, ``tokens_per_frame``, ``pinned_dilation``,
    ``ring_len`` (RF*T), ``capacity`` (ring_len + T, one session's slots),
    ``total_slots`` (N = num_sessions * capacity), ``dtype_name``, ``dtype``
    (of ``kv``), ``device`` ("cpu"), ``kv`` ([2, 1, H, N, D] view), ``written``
    ([N] bool view), ``memory_bytes``, ``frame_offsets`` ([T] int64).
    Errors at construction raise ValueError (bad geometry or dtype).
    """

    def __init__(self, num_sessions: int, n_kv_heads: int, ring_frames: int, ring_buckets: int,
                 d_head: int, tokens_per_frame: int, pinned_dilation: int, dtype: Any,
                 device: Any = "cpu", *, array_kind: str | None = None):
        _parse_device(device)
        code = ar.parse_dtype(dtype)
        g = _GeometryStruct(_int(num_sessions, "num_sessions"), _int(n_kv_heads, "n_kv_heads"),
                            _int(ring_frames, "ring_frames"), _int(ring_buckets, "ring_buckets"),
                            _int(d_head, "d_head"), _int(tokens_per_frame, "tokens_per_frame"),
                            _int(pinned_dilation, "pinned_dilation"), code)
        ptr = ctypes.c_void_p()
        check(lib.rkv_layer_create(ctypes.byref(g), ctypes.byref(ptr)))
        if array_kind is None:
            torchy = ar.is_torch_dtype(dtype) or type(device).__module__.startswith("torch")
            array_kind = ar.TORCH if torchy else ar.NUMPY
        self._init(_LayerHandle(ptr.value), array_kind)

    @classmethod
    def _borrow(cls, ptr: int, owner: Any, array_kind: str) -> "LayerRingCache":
        """A LayerRingCache over a layer owned by a model (kept alive by ``owner``)."""
        self = cls.__new__(cls)
        self._init(_LayerHandle(ptr, owner), array_kind)
        return self

    def _init(self, handle: _LayerHandle, array_kind: str) -> None:
        if array_kind not in (ar.NUMPY, ar.TORCH):
            raise RingKVValueError(f"array_kind must be 'numpy' or 'torch'; got {array_kind!r}")
        if array_kind == ar.TORCH and ar.torch_module() is None:
            raise RingKVValueError("array_kind 'torch' needs torch, which is not importable")
        self._h = handle
        g = lib.rkv_layer_geometry(handle.ptr).contents
        self.num_sessions = int(g.num_sessions)
        self.n_kv_heads = int(g.n_kv_heads)
        self.ring_frames = int(g.ring_frames)
        self.ring_buckets = int(g.ring_buckets)
        self.d_head = int(g.d_head)
        self.tokens_per_frame = int(g.tokens_per_frame)
        self.pinned_dilation = int(g.pinned_dilation)
        self._code = int(g.dtype)
        self.dtype_name = ar.DTYPE_NAMES[self._code]
        self.ring_len = self.ring_frames * self.tokens_per_frame
        self.capacity = int(lib.rkv_layer_capacity(handle.ptr))
        self.total_slots = int(lib.rkv_layer_total_slots(handle.ptr))
        self.device = "cpu"
        self.array_kind = array_kind
        self._g = _GeometryStruct(g.num_sessions, g.n_kv_heads, g.ring_frames, g.ring_buckets,
                                  g.d_head, g.tokens_per_frame, g.pinned_dilation, g.dtype)
        H, N, D = self.n_kv_heads, self.total_slots, self.d_head
        np_kv = ar.numpy_view(lib.rkv_layer_kv(handle.ptr), (2, 1, H, N, D),
                              ar.numpy_dtype(self._code), handle)
        np_written = ar.numpy_view(lib.rkv_layer_written(handle.ptr), (N,), np.bool_, handle)
        self._views = {ar.NUMPY: (np_kv, np_kv[0], np_kv[1], np_written)}

    # ---- views ----------------------------------------------------------
    def views(self, kind: str | None = None) -> tuple[Any, Any, Any, Any]:
        """``(kv [2,1,H,N,D], k [1,H,N,D], v [1,H,N,D], written [N] bool)``,
        views of the library's storage as NumPy arrays or torch tensors."""
        kind = kind or self.array_kind
        v = self._views.get(kind)
        if v is None:
            if kind != ar.TORCH:
                raise RingKVValueError(f"kind must be 'numpy' or 'torch'; got {kind!r}")
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
        """``arange(tokens_per_frame)`` as int64 (the reference's attribute)."""
        arr = np.arange(self.tokens_per_frame, dtype=np.int64)
        return ar.as_kind(arr, self.array_kind)

    @property
    def geometry(self) -> LayerGeometry:
        return LayerGeometry(self.num_sessions, self.n_kv_heads, self.ring_frames,
                             self.ring_buckets, self.d_head, self.tokens_per_frame,
                             self.pinned_dilation, self.dtype_name)

    @property
    def memory_bytes(self) -> int:
        """Resident bytes of K/V storage, all sessions: 2*H*N*D*sizeof(dtype)."""
        return int(lib.rkv_layer_memory_bytes(self._h.ptr))

    def __repr__(self) -> str:
        g = self.geometry
        return (f"ringkv.LayerRingCache(num_sessions={g.num_sessions}, n_kv_heads="
                f"{g.n_kv_heads}, ring_frames={g.ring_frames}, ring_buckets={g.ring_buckets}, "
                f"d_head={g.d_head}, tokens_per_frame={g.tokens_per_frame}, pinned_dilation="
                f"{g.pinned_dilation}, dtype={g.dtype!r})")

    # ---- sessions ---------------------------------------------------------
    def session_span(self, session_idx: int) -> tuple[int, int]:
        """``[lo, hi)`` token slots owned by ``session_idx``; IndexError when it
        is not in ``[0, num_sessions)``."""
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        check(lib.rkv_layer_session_span(self._h.ptr, _session(session_idx), ctypes.byref(lo),
                                         ctypes.byref(hi)))
        return lo.value, hi.value

    def reset(self, session_idx: int) -> None:
        """Drops ONE session's state (K/V zeroed, ring slots unwritten) and
        re-arms its scratch tail. IndexError when out of range."""
        check(lib.rkv_layer_reset(self._h.ptr, _session(session_idx)))

    # ---- upsert -----------------------------------------------------------
    def upsert(self, kv: Any, frame_pos: Any, commit: bool, session_idx: Any, *,
               build_visibility: bool = True) -> tuple[Any, Any, Any]:
        """Writes one frame for each of B sessions (SEMANTICS 3).

        - ``kv``: ``[2, 1, H, B*T, D]`` (or ``[2, H, B*T, D]``), tokens ordered
          (row b, token t), in the storage dtype (NumPy bf16: uint16 bits or
          ``ml_dtypes.bfloat16``); a NumPy array or a CPU torch tensor, passed
          without copying when C-contiguous (copied once otherwise).
        - ``frame_pos``: ``[B]`` int64 clocks, each >= 0.
        - ``commit``: write the frame into its ring slot (on write steps,
          ``frame_pos % pinned_dilation == 0``; else the scratch again) and
          mark it written.
        - ``session_idx``: ``[B]`` int64, each in range, distinct.
        - ``build_visibility``: also compute the reference's visibility row
          (B == 1 only), before the commit.

        Returns ``(k, v, visible)``: ``k``, ``v`` are ``[1, H, N, D]`` views of
        the whole storage (NumPy views for NumPy ``kv``, torch tensors for a
        torch ``kv``); ``visible`` is a fresh ``[N]`` bool array/tensor
        (``written AND slot of the session``, minus the ring frame about to be
        overwritten on a write step), or None without ``build_visibility``.

        Raises RuntimeError where the reference's checks fail (frame_pos not a
        [B] int64, token count != B*T, session_idx not matching, B != 1 with
        build_visibility, kv shape or dtype not the storage's); IndexError for
        a session out of range; ValueError for frame_pos < 0 or a session
        twice in one batch. Nothing is written when it raises.
        """
        T = self.tokens_per_frame
        fp, _ = ar.int64_vector(frame_pos, "frame_pos",
                                "frame_pos must be a [B] int64 tensor; got {got}")
        B = fp.shape[0]
        buf = ar.CBuffer(kv, "kv")
        shape = buf.shape
        if len(shape) not in (4, 5):
            raise RingKVRuntimeError(f"kv must be [2, 1, H, B*T, D]; got shape {shape}")
        if shape[-2] != B * T:
            raise RingKVRuntimeError("ring cache expects exactly one frame per session; got "
                                     f"{shape[-2]} tokens for B={B}")
        si_desc = (f"{tuple(session_idx.shape)} {session_idx.dtype}"
                   if hasattr(session_idx, "shape") else repr(session_idx))
        try:
            si, _ = ar.int64_vector(session_idx, "session_idx", "{got}")
        except RingKVRuntimeError:
            si = None
        if si is None or si.shape != fp.shape:
            raise RingKVRuntimeError(f"session_idx must be a {list(fp.shape)} int64 tensor "
                                     f"matching frame_pos; got {si_desc}")
        if build_visibility and B != 1:
            raise RingKVRuntimeError("ring cache's fallback visibility row only supports B == 1; "
                                     "the engine path passes build_visibility=False.")
        expect = (2, 1, self.n_kv_heads, B * T, self.d_head)
        if tuple(shape) != (expect if len(shape) == 5 else expect[:1] + expect[2:]):
            raise RingKVRuntimeError(f"kv must be [2, 1, H, B*T, D] = {list(expect)}; got "
                                     f"{list(shape)}")
        if buf.code != self._code:
            raise RingKVRuntimeError(f"kv dtype {buf.keep.dtype} does not match the storage dtype "
                                     f"{self.dtype_name}")
        visible = np.empty(self.total_slots, dtype=np.bool_) if build_visibility else None
        check(lib.rkv_layer_upsert(self._h.ptr, buf.ptr, self._code, B, fp.ctypes.data,
                                   si.ctypes.data, 1 if commit else 0,
                                   None if visible is None else visible.ctypes.data))
        _, k, v, _ = self.views(buf.kind)
        if visible is not None and buf.kind == ar.TORCH:
            visible = ar.to_torch(visible)
        return k, v, visible

    # ---- visibility -------------------------------------------------------
    def visible_frames(self, session_idx: int, frame_pos: int) -> list[int]:
        """Visible frame slots of a session at clock ``frame_pos`` by the
        bits-and-clock rule (SEMANTICS 4): ring frames ascending, then
        ``ring_frames`` (the scratch)."""
        frames = (ctypes.c_int64 * (self.ring_frames + 1))()
        count = ctypes.c_int64()
        check(lib.rkv_layer_visible_frames(self._h.ptr, _session(session_idx),
                                           _int(frame_pos, "frame_pos"), frames,
                                           ctypes.byref(count)))
        return list(frames[:count.value])

    def visible_row(self, session_idx: int, frame_pos: int) -> Any:
        """``[N]`` bool row of the bits-and-clock rule (the reference's row
        format), in this cache's array kind."""
        frames = self.visible_frames(session_idx, frame_pos)
        arr = (ctypes.c_int64 * max(1, len(frames)))(*frames)
        row = np.empty(self.total_slots, dtype=np.bool_)
        check(lib.rkv_visible_row_from_frames(ctypes.byref(self._g), _session(session_idx), arr,
                                              len(frames), row.ctypes.data))
        return ar.as_kind(row, self.array_kind)

    def block_mask(self, session_idx: int, frame_pos: int) -> tuple[Any, Any]:
        """FlexAttention BlockMask data of one session row (SEMANTICS 5):
        ``kv_num_blocks`` ``[T/128]`` int32 and ``kv_indices``
        ``[T/128, N/128]`` int32 (visible key blocks ascending, padded with 0)."""
        qb, kb = self.tokens_per_frame // 128, self.total_slots // 128
        num = np.empty(qb, dtype=np.int32)
        idx = np.empty((qb, kb), dtype=np.int32)
        check(lib.rkv_layer_block_mask(self._h.ptr, _session(session_idx),
                                       _int(frame_pos, "frame_pos"), num.ctypes.data,
                                       idx.ctypes.data))
        return ar.as_kind(num, self.array_kind), ar.as_kind(idx, self.array_kind)

    # ---- attention --------------------------------------------------------
    def attend(self, q: Any, session_idx: Any, frame_pos: Any = None, *, visible: Any = None,
               scale: float | None = None, out: Any = None, out_dtype: Any = None,
               pool: Any = None, reference: bool = False) -> Any:
        """Attention of ``q`` ``[B, Hq, Tq, D]`` over the ring (SEMANTICS 5).

        Visibility from ``frame_pos`` ([B] int64 clocks, bits-and-clock rule)
        or from explicit rows ``visible`` ([B, N] or [N] bool/uint8, e.g. the
        row ``upsert`` returned). ``scale`` defaults to 1/sqrt(D). Returns
        ``out`` ``[B, Hq, Tq, D]`` (same kind as ``q``; dtype ``out_dtype`` or
        ``q``'s unless ``out`` is given). ``pool``: a :class:`ringkv.ThreadPool`;
        ``reference=True``: the single-thread oracle. See :mod:`ringkv.attention`.
        """
        return attend_layer(self._h.ptr, self.d_head, self.total_slots, q, session_idx,
                            frame_pos, visible=visible, scale=scale, out=out,
                            out_dtype=out_dtype, pool=pool, reference=reference)


def visible_frames_from_clock(geometry: LayerGeometry, frame_pos: int) -> list[int]:
    """The clock-only rule (SEMANTICS 4) for a session that committed frames
    ``0 .. frame_pos-1`` in order: visible ring frame slots ascending, then
    ``ring_frames`` (the scratch)."""
    g = geometry._struct()
    frames = (ctypes.c_int64 * (geometry.ring_frames + 1))()
    count = ctypes.c_int64()
    check(lib.rkv_visible_frames_from_clock(ctypes.byref(g), _int(frame_pos, "frame_pos"),
                                            frames, ctypes.byref(count)))
    return list(frames[:count.value])
