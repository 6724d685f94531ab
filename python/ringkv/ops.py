"""ringkv as PyTorch custom ops (namespace ``ringkv``), for ``torch.compile``
and CUDA graphs. Needs torch >= 2.6; imported on first use of torch tensors
(``import ringkv`` never imports torch).

Every op acts on the tensors it is given and on nothing else: each call
wraps them in a layer (:func:`wrapped`: ``rkv_layer_wrap``, no copy) and
runs the ``rkv_layer_*`` calls of ``include/ringkv.h`` on it, whatever the
device (python/README.md, "PyTorch engines", lists the ops and why). Each
op's ``@_op`` line names the arguments it mutates, its docstring what it
does.

Arguments, all on the storage's device:

- ``ring``: the K/V storage ``[2, 1, H, N, D]`` (or ``[2, H, N, D]``),
  float32, float16 or bfloat16, C-contiguous; ``written``: ``[N]`` bool (or
  uint8), contiguous; both on one device (CPU, or a CUDA GPU).
- ``geometry``: ``[S, H, RF, RB, D, T, PD]`` (``cache.geometry_list``); the
  shapes must agree with it (RingKVArrayError otherwise).
- ``kv``: ``[2, 1, H, B*T, D]`` or ``[2, H, B*T, D]`` in the storage dtype;
  ``q``: ``[B, Hq, Tq, D]``; ``frame_pos``, ``session_idx``: ``[B]`` int64;
  ``visible``: ``[B, N]`` or ``[N]`` bool/uint8 rows (then ``frame_pos`` may
  be None); ``scale`` 0.0 means ``1/sqrt(D)``; ``out_dtype`` None means
  ``q``'s; ``model``: a CPU model's key (:func:`model_key`).
- ``error``: a zeroed int32 tensor of at least one element
  (:func:`error_word`; a cache's own: ``cache.error_word``). On CUDA the
  kernels record there the first invalid session id or clock (such a call
  writes nothing): :func:`check_error` or ``LayerRingCache.check()`` reads
  and clears it. The CPU never writes it (the library checks before
  writing). Required and declared mutated on every device: Inductor
  mishandles an optional mutated argument passed as None in an op that
  returns a tensor.

On CUDA (not yet run on a GPU) the ops enqueue on
``torch.cuda.current_stream()``, allocate only through torch's caching
allocator and never synchronize or copy from the host: with every argument
a tensor on the GPU they can be captured by ``torch.cuda.graph``. The first
call on a stream makes its context (:func:`context`; not capture-safe): a
CUDA ``LayerRingCache`` does that at construction; otherwise run the op
once before capturing (the usual warm-up does).
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import inspect
import math
from typing import Any, Optional

import torch
from torch import Tensor

from . import _arrays as ar
from ._args import short_repr
from ._handle import LIVE_MODELS, OwnedHandle
from ._lib import AttentionArgs, BackendStorage, Geometry, check, lib
from ._lib import cuda as _cuda_lib
from .attention import check_q, set_visibility
from .errors import (RingKVArrayError, RingKVDeviceError, RingKVIndexError, RingKVRuntimeError,
                     RingKVTypeError, RingKVValueError)

__all__ = ["upsert", "visible_row", "attend", "ring_scatter", "model_upsert", "model_attend",
           "error_word", "check_error", "model_key", "MIN_TORCH"]

#: The oldest torch the ops are written for (custom_op, register_fake,
#: opcheck, FlexAttention's BlockMask.from_kv_blocks with seq_lengths).
MIN_TORCH = (2, 6)

_CODES = {ar.torch_dtype(d.code): d.code for d in ar.DTYPES}
_P64 = ctypes.POINTER(ctypes.c_int64)


# ---- argument checks shared by the ops ----------------------------------------

def _tensors(op: str, **args: Any) -> None:
    """RingKVTypeError naming the first of an op's tensor arguments that is
    not a torch tensor (None included), before any attribute of it is read:
    the op's name and the argument, not an AttributeError."""
    for name, x in args.items():
        if not isinstance(x, Tensor):
            raise RingKVTypeError(f"ringkv.ops.{op}: {name} must be a torch.Tensor; got "
                                  f"{short_repr(x, 60)} ({type(x).__name__})")


def _op(name: str, mutates: tuple[str, ...] = (), fake: Any = None) -> Any:
    """``fn`` as the custom op ``ringkv::name`` mutating ``mutates``: its
    tensor arguments checked first (:func:`_tensors`; an Optional one may be
    None), its fake implementation ``fake`` (called with the arguments by
    name; None: the op returns nothing)."""
    def register(fn: Any) -> Any:
        sig = inspect.signature(fn)
        tensors = [n for n, p in sig.parameters.items() if p.annotation == "Tensor"]
        optional = [n for n, p in sig.parameters.items() if p.annotation == "Optional[Tensor]"]

        @functools.wraps(fn)
        def impl(*args: Any, **kwargs: Any) -> Any:
            given = dict(zip(sig.parameters, args), **kwargs)  # not sig.bind: per call
            _tensors(name, **{n: given.get(n) for n in tensors},
                     **{n: given[n] for n in optional if given.get(n) is not None})
            return fn(*args, **kwargs)

        def fake_impl(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            return None if fake is None else fake(**bound.arguments)

        op = torch.library.custom_op(f"ringkv::{name}", mutates_args=mutates)(impl)
        op.register_fake(fake_impl)
        return op
    return register


def _like_q(q: Tensor, out_dtype: Optional[torch.dtype], **_: Any) -> Tensor:
    """The fake result of an attention op: ``q``'s shape, ``out_dtype``."""
    return q.new_empty(q.shape, dtype=q.dtype if out_dtype is None else out_dtype)


def _storage(ring: Tensor | None, written: Tensor, error: Tensor | None, geometry: Any,
             **inputs: Any) -> Geometry:
    """An op's storage checks: the geometry (a list of 7 ints in ``ring``'s
    dtype, or a model layer's Geometry) against ``ring`` (None: an op that
    reads the written bits only) and ``written`` (RingKVArrayError), and
    every tensor of ``inputs`` (None: absent) and the error word (None: a
    model op's, which has none) on their device (RingKVDeviceError). The
    Geometry."""
    if isinstance(geometry, Geometry):
        g = geometry
    elif len(geometry) != 7:
        raise RingKVValueError(f"geometry must be [S, H, RF, RB, D, T, PD] (7 ints); got "
                               f"{list(geometry)}")
    else:
        dtype = torch.float32 if ring is None else ring.dtype
        if dtype not in _CODES:
            raise RingKVArrayError(f"ring storage dtype {dtype} is not one ringkv has "
                                   f"({ar.REALS})")
        g = Geometry(*(int(x) for x in geometry), _CODES[dtype])
    S, H, RF, T, D = g.num_sessions, g.n_kv_heads, g.ring_frames, g.tokens_per_frame, g.d_head
    N = S * (RF + 1) * T
    if ring is not None:
        if tuple(ring.shape) not in ((2, 1, H, N, D), (2, H, N, D)) or not ring.is_contiguous():
            raise RingKVArrayError(
                f"ring must be a C-contiguous [2, 1, H, N, D] = {[2, 1, H, N, D]} tensor for the "
                f"geometry {[S, H, RF, g.ring_buckets, D, T, g.pinned_dilation]}; got "
                f"{list(ring.shape)}" + ("" if ring.is_contiguous() else " (not contiguous)"))
        if written.device != ring.device:
            raise RingKVDeviceError(f"ringkv: written is on {written.device} and ring on "
                                    f"{ring.device}; both must be on one device")
    if (tuple(written.shape) != (N,) or written.dtype not in (torch.bool, torch.uint8)
            or not written.is_contiguous()):
        raise RingKVArrayError(f"written must be a contiguous [N] = [{N}] bool tensor; got "
                               f"{list(written.shape)} {written.dtype}")
    if ring is not None and _CODES.get(ring.dtype) != g.dtype:  # a model layer's
        raise RingKVArrayError(f"ring dtype {ring.dtype} is not the model's "
                               f"{ar.DTYPE_NAMES[g.dtype]}")
    for name, x in inputs.items():
        if x is not None and x.device != written.device:
            raise RingKVDeviceError(f"ringkv: {name} is a tensor on {x.device}, but the ring is "
                                    f"on {written.device}: pass it on {written.device}")
    if error is not None and (error.device != written.device or error.dtype != torch.int32
                              or error.numel() < 1 or not error.is_contiguous()):
        raise RingKVArrayError(f"error must be a contiguous int32 tensor of at least one element "
                               f"on {written.device} (ringkv.ops.error_word(device)); got "
                               f"{tuple(error.shape)} {error.dtype} on {error.device}")
    return g


def _i64(x: Tensor, name: str) -> Tensor:
    if x.ndim != 1 or x.dtype != torch.int64:
        raise RingKVArrayError(f"{name} must be a [B] int64 tensor; got {tuple(x.shape)} "
                               f"{x.dtype}")
    return x.contiguous()


def _kv_input(kv: Tensor, g: Geometry, batch: int) -> Tensor:
    ar.check_kv(kv, (2, 1, g.n_kv_heads, batch * g.tokens_per_frame, g.d_head), g.dtype)
    return _aligned(kv)


def _aligned(x: Tensor) -> Tensor:
    """``x`` C-contiguous and, on CUDA, 16-byte aligned (what the kernels
    read with vector loads), copied once on its device otherwise."""
    if x.is_contiguous() and (x.device.type == "cpu" or x.data_ptr() % 16 == 0):
        return x
    return x.clone(memory_format=torch.contiguous_format)


# ---- the op's tensors as a layer ------------------------------------------------

class _TableHead(ctypes.Structure):
    """The first members of ``rkv_backend_ops`` (include/ringkv_backend.h),
    down to ``ctx_destroy``: how a context made here is freed."""
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32),
                ("name", ctypes.c_char_p), ("ctx_destroy", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]


class _Context(OwnedHandle):
    """A CUDA backend context (``rkv_cuda_backend``) on one GPU for one
    stream: its ``table`` and ``ptr``, freed (the table's ``ctx_destroy``)
    with the last object holding it: the per-stream cache until exit, each
    layer created on it for the layer's life. Not yet run on a GPU."""

    _copy_hint = "it holds a CUDA backend context (an address in this process)"

    __slots__ = ("table",)

    def __init__(self, table: int, ptr: int, destroy: Any):
        super().__init__(ptr, None, destroy)
        self.table = table


# the per-stream cache of _Context (by device index and stream)
_CONTEXTS: dict = {}
atexit.register(_CONTEXTS.clear)


def context(device: Any) -> _Context:
    """The context for torch's current stream on the CUDA ``device``, made
    once per stream (device properties, kernel limits, pinned staging
    memory: not capture-safe; a CUDA LayerRingCache makes its stream's at
    construction), torch's current device left as it was."""
    device = torch.device(device)
    stream = torch.cuda.current_stream(device).cuda_stream
    ctx = _CONTEXTS.get((device.index, stream))
    if ctx is None:
        table, ptr = ctypes.c_void_p(), ctypes.c_void_p()
        with torch.cuda.device(device):
            check(_cuda_lib().rkv_cuda_backend(device.index, stream, ctypes.byref(table),
                                               ctypes.byref(ptr)))
        head = ctypes.cast(table.value, ctypes.POINTER(_TableHead)).contents
        ctx = _Context(table.value, ptr.value, head.ctx_destroy or None)
        _CONTEXTS[device.index, stream] = ctx
    return ctx


@contextlib.contextmanager
def wrapped(ring: Tensor | None, written: Tensor, error: Tensor | None, g: Geometry):
    """``with wrapped(ring, written, error, g) as h:`` the tensors as a layer
    (``rkv_layer_wrap``, no copy; ring None: a call that reads the written
    bits only, which then stand in for the K/V pointer too), destroyed on
    exit: on the CPU table, or for CUDA tensors on the context of torch's
    current stream (:func:`context`), their GPU current for the call."""
    dev = written.device
    ctx = None if dev.type == "cpu" else context(dev)  # not yet run on a GPU
    storage = BackendStorage(written.data_ptr() if ring is None else ring.data_ptr(),
                             written.data_ptr(), None if error is None else error.data_ptr())
    h = ctypes.c_void_p()
    with contextlib.nullcontext() if ctx is None else torch.cuda.device(dev):
        check(lib.rkv_layer_wrap(ctx and ctx.table, ctx and ctx.ptr, ctypes.byref(g),
                                 ctypes.byref(storage), ctypes.byref(h)))
        try:
            yield h.value
        finally:
            lib.rkv_layer_destroy(h.value)


# ---- upsert ---------------------------------------------------------------------

@_op("upsert", ("ring", "written", "error"))
def upsert(ring: Tensor, written: Tensor, kv: Tensor, frame_pos: Tensor, session_idx: Tensor,
           geometry: list[int], commit: bool, error: Tensor) -> None:
    """One upsert of SEMANTICS 3 for B rows, in place on ``ring`` and
    ``written`` (``rkv_layer_upsert`` on a layer over them). Errors as
    ``LayerRingCache.upsert``; nothing is written when it raises."""
    g = _storage(ring, written, error, geometry, kv=kv, frame_pos=frame_pos,
                 session_idx=session_idx)
    fp, si = _i64(frame_pos, "frame_pos"), _i64(session_idx, "session_idx")
    if si.shape != fp.shape:
        raise RingKVArrayError(f"session_idx must be a {list(fp.shape)} int64 tensor matching "
                               f"frame_pos; got {tuple(si.shape)}")
    B = fp.shape[0]
    src = _kv_input(kv, g, B)
    if B == 0:  # an empty batch writes nothing, as the reference's (the C calls take B >= 1)
        return
    with wrapped(ring, written, error, g) as h:
        check(lib.rkv_layer_upsert(h, src.data_ptr(), g.dtype, B, fp.data_ptr(), si.data_ptr(),
                                   1 if commit else 0, None))


# ---- the visibility row ---------------------------------------------------------

@_op("visible_row", ("error",),
     lambda written, **_: written.new_empty((written.shape[0],), dtype=torch.bool))
def visible_row(written: Tensor, frame_pos: Tensor, session_idx: Tensor, geometry: list[int],
                error: Tensor) -> Tensor:
    """The reference's visibility row ``[N]`` bool of one row (``frame_pos``
    and ``session_idx`` of shape [1]) from the bits as they are: written AND
    the session's slots, minus the ring frame a write step overwrites
    (``rkv_layer_visible_row``). A new tensor the caller owns."""
    g = _storage(None, written, error, geometry, frame_pos=frame_pos, session_idx=session_idx)
    fp, si = _i64(frame_pos, "frame_pos"), _i64(session_idx, "session_idx")
    if fp.shape[0] != 1 or si.shape[0] != 1:
        raise RingKVRuntimeError("ring cache's fallback visibility row only supports B == 1; "
                                 "the engine path passes build_visibility=False.")
    row = torch.empty(written.shape[0], dtype=torch.bool, device=written.device)
    with wrapped(None, written, error, g) as h:
        check(lib.rkv_layer_visible_row(h, si.data_ptr(), fp.data_ptr(), row.data_ptr()))
    return row


# ---- attention ------------------------------------------------------------------

def _attention(q: Tensor, g: Geometry, batch: int, scale: float,
               out_dtype: Optional[torch.dtype]) -> tuple[AttentionArgs, Tensor, Tensor]:
    """The checked ``q`` (C-contiguous, aligned), a new ``out`` and the
    attention arguments over them (session rows and visibility to set)."""
    check_q(tuple(q.shape), _CODES.get(q.dtype), q.dtype, g.d_head, batch, kv_heads=g.n_kv_heads)
    if not math.isfinite(scale):
        raise RingKVValueError(f"scale must be finite; got {scale}")
    dt = q.dtype if out_dtype is None else out_dtype
    if dt not in _CODES:
        raise RingKVArrayError(f"out_dtype {dt} is not {ar.REALS}")
    qc = _aligned(q)
    out = torch.empty(q.shape, dtype=dt, device=q.device)
    args = AttentionArgs(batch=batch, n_q_heads=q.shape[1], n_queries=q.shape[2],
                         q=qc.data_ptr(), q_dtype=_CODES[q.dtype], out=out.data_ptr(),
                         out_dtype=_CODES[dt], scale=scale)
    return args, qc, out


@_op("attend", ("error",), _like_q)
def attend(ring: Tensor, written: Tensor, q: Tensor, session_idx: Tensor,
           frame_pos: Optional[Tensor], visible: Optional[Tensor], geometry: list[int],
           scale: float, out_dtype: Optional[torch.dtype], error: Tensor) -> Tensor:
    """Attention of ``q`` over the ring (SEMANTICS 5): visibility from the
    bits and ``frame_pos``, or from the rows ``visible``. Returns a new
    ``[B, Hq, Tq, D]`` tensor (``rkv_layer_attend``)."""
    g = _storage(ring, written, error, geometry, q=q, session_idx=session_idx,
                 frame_pos=frame_pos, visible=visible)
    si = _i64(session_idx, "session_idx")
    args, qc, out = _attention(q, g, si.shape[0], scale, out_dtype)
    args.session_idx = ctypes.cast(si.data_ptr(), _P64)
    rows = None if visible is None else _aligned(visible.reshape(-1))
    fp = None if visible is not None or frame_pos is None else _i64(frame_pos, "frame_pos")
    set_visibility(args, written.shape[0], fp, rows)  # rows and fp live until the call
    with wrapped(ring, written, error, g) as h:
        ws_bytes = int(lib.rkv_layer_attend_workspace_bytes(h, ctypes.byref(args)))
        if ws_bytes:  # the caching allocator: capture-safe, ordered by the stream
            ws = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device)
            args.workspace, args.workspace_bytes = ws.data_ptr(), ws_bytes
        check(lib.rkv_layer_attend(h, ctypes.byref(args)))
    return out


# ---- the reference's scatter --------------------------------------------------------

@_op("ring_scatter", ("cache", "written"))
def ring_scatter(cache: Tensor, written: Tensor, dst: Tensor, kv: Tensor, mark: bool) -> None:
    """The reference's ``mstar::ring_scatter`` (``seed_ring_cache.py``): writes
    ``kv`` ``[2, 1, H, M, D]`` into the token slots ``dst`` (``[M]`` int64)
    of ``cache`` ``[2, 1, H, N, D]`` and, when ``mark``, sets ``written[dst]``
    (``[N]`` bool). Same signature, same semantics, any dtype and device
    (torch's ``index_copy_`` and ``index_fill_``, as the reference; not
    ``written[dst] = True``, whose host scalar breaks graph capture)."""
    cache.index_copy_(3, dst, kv)
    if mark:
        written.index_fill_(0, dst, True)


# ---- a Model's calls ------------------------------------------------------------

def model_key(model: Any) -> int:
    """The int that names ``model`` (a :class:`ringkv.Model`) in the model
    ops: its ``rkv_model*``, registered (ringkv._handle.LIVE_MODELS) while
    the model lives; the ops refuse a key that names no live model.
    RingKVTypeError for anything but a live Model."""
    key = getattr(getattr(model, "_h", None), "ptr", None)
    if key is None or LIVE_MODELS.get(key) is not model:
        raise RingKVTypeError(f"model must be a ringkv.Model; got {short_repr(model)} "
                              f"({type(model).__name__})")
    return int(key)


def _model_layer(ring: Tensor, written: Tensor, model: int, layer: int, **inputs: Any) -> Geometry:
    """The geometry of layer ``layer`` of the live model ``model`` (a key of
    :func:`model_key`), checked against the storage given (CPU models) and
    ``inputs`` (:func:`_storage`)."""
    if LIVE_MODELS.get(model) is None:
        raise RingKVValueError(f"ringkv: model key {model:#x} names no live ringkv.Model "
                               "(ringkv.ops.model_key(model) gives a model's key)")
    if ring.device.type != "cpu":
        raise RingKVDeviceError(f"ringkv: ring is a tensor on {ring.device}, but a Model's "
                                "layers are on cpu")
    g = Geometry()
    cfg = lib.rkv_model_get_config(model).contents
    if not 0 <= layer < cfg.n_layers:
        raise RingKVIndexError(f"layer {layer} out of range; expected 0..{cfg.n_layers - 1}")
    check(lib.rkv_model_config_layer_geometry(ctypes.byref(cfg), layer, ctypes.byref(g)))
    return _storage(ring, written, None, g, **inputs)


@_op("model_upsert", ("ring", "written"))
def model_upsert(ring: Tensor, written: Tensor, kv: Tensor, session_idx: Tensor, model: int,
                 layer: int, commit: bool) -> None:
    """``Model.upsert`` on the given storage of layer ``layer``
    (``rkv_model_upsert`` with a ring): the model's checks (sessions held and inside
    a frame) and clocks; a commit marks the layer, and the frame ends once
    every layer has committed."""
    g = _model_layer(ring, written, model, layer, kv=kv, session_idx=session_idx)
    si = _i64(session_idx, "session_idx")
    src = _kv_input(kv, g, si.shape[0])
    with wrapped(ring, written, None, g) as h:
        check(lib.rkv_model_upsert(model, layer, h, si.shape[0], si.data_ptr(),
                                   src.data_ptr(), g.dtype, 1 if commit else 0))


@_op("model_attend", (), _like_q)
def model_attend(ring: Tensor, written: Tensor, q: Tensor, session_idx: Tensor, model: int,
                 layer: int, scale: float = 0.0,
                 out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """``Model.attend`` on the given storage of layer ``layer``
    (``rkv_model_attend`` with a ring): the sessions' declared clocks, the
    bits-and-clock rule. Returns ``[B, Hq, Tq, D]``."""
    g = _model_layer(ring, written, model, layer, q=q, session_idx=session_idx)
    si = _i64(session_idx, "session_idx")
    args, qc, out = _attention(q, g, si.shape[0], scale, out_dtype)
    with wrapped(ring, written, None, g) as h:
        check(lib.rkv_model_attend(model, layer, h, si.shape[0], si.data_ptr(),
                                   ctypes.byref(args)))
    return out


# ---- device error words ---------------------------------------------------------

def error_word(device: Any) -> Tensor:
    """A zeroed int32 error word for the ops on tensors of ``device`` (16
    bytes: the CUDA kernels use the first int; the CPU never writes it)."""
    return torch.zeros(4, dtype=torch.int32, device=device)


def check_error(written: Tensor, error: Tensor, geometry: list[int]) -> None:
    """Reads and clears the device error word ``error`` of the ops on the
    CUDA ring whose written bits are ``written`` (``rkv_layer_check``:
    synchronizes the current stream; not capture-safe). Raises the
    IndexError / ValueError class of the first invalid row recorded (the
    call wrote nothing). A no-op for CPU tensors, which the library checks
    before writing."""
    _tensors("check_error", written=written, error=error)
    if written.device.type == "cpu":
        return
    with wrapped(None, written, error, _storage(None, written, error, geometry)) as h:
        check(lib.rkv_layer_check(h))
