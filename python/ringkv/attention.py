"""Attention over a ring (SEMANTICS 5): the arguments of ``rkv_layer_attend``,
``rkv_model_attend`` and ``rkv_model_step``, for NumPy arrays, for torch
tensors with ``pool=`` or ``reference=True`` (or a torch older than 2.6),
and a CUDA model's torch CUDA tensors (not yet run on a GPU).

``out[b, h, i, :] = softmax_j(scale * q[b, h, i, :] . K[h // (Hq // H), j, :]) V[...]``
over the visible slots ``j`` of row ``b``'s session; no causal mask; f32
accumulation; GQA maps query head ``h`` to KV head ``h // (Hq // H)``.

Shapes and dtypes:

- ``q``: ``[B, Hq, Tq, D]``, float32, float16 or bf16 (NumPy: float32,
  float16, or uint16 bf16 bits; torch: float32, float16, bfloat16), on the
  CPU (a CUDA model: on its GPU).
- ``session_idx``: ``[B]`` int64 (list, NumPy array or tensor), distinct.
- ``frame_pos``: ``[B]`` int64 row clocks: visibility from the written bits
  and the clock (the engine path; no mask is built).
- ``visible``: instead of ``frame_pos``, ``[B, N]`` (or ``[N]`` when B == 1)
  bool/uint8 rows, as returned by ``upsert(..., build_visibility=True)``:
  row ``b`` attends to every slot marked in it.
- ``out``: ``[B, Hq, Tq, D]``; allocated (same kind as ``q``, dtype
  ``out_dtype`` or ``q``'s) when not given; a given ``out`` must be
  C-contiguous and is written whole.
- ``pool``: a :class:`ringkv.ThreadPool` to run on (default: the library's
  process-wide pool).
- ``reference=True`` (layers only) runs the reference table's attention
  (``rkv_backend_cpu_reference``), the
  simple single-thread implementation kept as the test oracle.

Other torch tensors take the custom op ``ringkv::attend`` (:mod:`ringkv.ops`).
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from . import _arrays as ar
from ._args import as_instance
from ._lib import AttentionArgs, BackendStorage, check, lib
from .threadpool import ThreadPool
from .errors import RingKVArrayError, RingKVTypeError, RingKVValueError

__all__ = ["prepare", "check_q", "check_out", "set_visibility", "attend_reference"]

_P64 = ctypes.POINTER(ctypes.c_int64)
_PU8 = ctypes.POINTER(ctypes.c_uint8)


def _scale(scale: Any) -> float:
    """``scale`` as a float (None: 0.0, the library's 1/sqrt(D))."""
    if scale is None:
        return 0.0
    if isinstance(scale, (str, bytes)) or not hasattr(scale, "__float__"):
        raise RingKVTypeError(f"scale must be a real number; got {scale!r}")
    return float(scale)


def check_q(shape: tuple, code: int | None, dtype: Any, d_head: int, batch: int,
            kv_heads: int | None = None, q_heads: int | None = None) -> None:
    """RingKVArrayError unless ``q`` (of ``shape``, ringkv dtype ``code``:
    None for another ``dtype``) is ``[batch, Hq, Tq, d_head]`` with Hq a
    multiple of ``kv_heads`` (a layer) or equal to ``q_heads`` (a model), in
    a supported dtype (the library checks the heads too, as
    RKV_ERR_INVALID_ARG: checked here so that every shape mistake of q has
    one class). The direct calls and the ops (ringkv.ops) alike."""
    if len(shape) != 4:
        raise RingKVArrayError(f"q must be [B, Hq, Tq, D]; got shape {shape}")
    B, Hq, Tq, D = shape
    if B != batch:
        raise RingKVArrayError(f"q has B = {B} rows but session_idx has {batch}")
    if D != d_head:
        raise RingKVArrayError(f"q has d_head {D}; the layer's is {d_head}")
    if Tq < 1 or Hq < 1:
        raise RingKVArrayError(f"q must have at least one head and one query; got shape {shape}")
    if kv_heads is not None and Hq % kv_heads:
        raise RingKVArrayError(f"q has n_q_heads = {Hq}; expected a positive multiple of the "
                               f"layer's n_kv_heads = {kv_heads} (GQA)")
    if q_heads is not None and Hq != q_heads:
        raise RingKVArrayError(f"q has n_q_heads = {Hq}; this model has {q_heads}")
    if code is None:
        raise RingKVArrayError(f"q dtype {dtype} is not {ar.REALS}")


def check_out(out: Any, q_shape: tuple, contiguous: bool, aligned: bool = False) -> None:
    """RingKVArrayError unless a given ``out`` is ``contiguous`` (and on a
    GPU 16-byte aligned: ``aligned`` says it is asked), of ``q``'s shape, in
    a supported dtype: the direct calls and the torch route alike."""
    if not contiguous:
        raise RingKVArrayError("out must be C-contiguous " + ("and 16-byte aligned " if aligned
                                                              else "") + "(it is written in place)")
    if tuple(out.shape) != tuple(q_shape):
        raise RingKVArrayError(f"out has shape {tuple(out.shape)}; expected {tuple(q_shape)}")
    if ar.array_dtype_code(out) is None:
        raise RingKVArrayError(f"out dtype {out.dtype} is not {ar.REALS}")


def prepare(q: Any, d_head: int, batch: int, out: Any, out_dtype: Any, scale: float | None,
             pool: Any = None, kv_heads: int | None = None, q_heads: int | None = None,
             device: Any = None, owner: str = "LayerRingCache"
             ) -> tuple[AttentionArgs, Any, list]:
    """The attention arguments over ``q`` and ``out`` (made when None: of
    ``q``'s kind and device), checked, and what must live until the call;
    ``device`` a CUDA model's (:class:`ringkv._arrays.CBuffer`)."""
    qb = ar.CBuffer(q, "q", device=device, owner=owner)
    check_q(qb.shape, qb.code, qb.keep.dtype, d_head, batch, kv_heads, q_heads)
    B, Hq, Tq, _ = qb.shape
    if out is None:
        out_code = qb.code if out_dtype is None else ar.parse_dtype(out_dtype)
        if qb.kind == ar.TORCH:
            out = ar.torch_module().empty(qb.shape, dtype=ar.torch_dtype(out_code),
                                          device=qb.keep.device)
        else:
            out = np.empty(qb.shape, dtype=ar.numpy_dtype(out_code))
    ob = ar.CBuffer(out, "out", device=device, owner=owner)
    check_out(ob.keep, qb.shape, not ob.copied, device is not None)
    if ob.kind == ar.NUMPY and not ob.keep.flags.writeable:
        raise RingKVArrayError("out is read-only")
    if pool is not None and not as_instance(pool, ThreadPool, "pool")._ptr:
        raise RingKVValueError("pool must be an open ringkv.ThreadPool; this one was closed")
    args = AttentionArgs(batch=B, n_q_heads=Hq, n_queries=Tq, q=qb.ptr, q_dtype=qb.code,
                         out=ob.ptr, out_dtype=ob.code, scale=_scale(scale),
                         pool=pool and pool._ptr)
    return args, out, [qb, ob, pool]


def set_visibility(args: AttentionArgs, slots: int, fp: Any, rows: Any) -> None:
    """Sets ``args``' visibility for its ``batch`` rows: the explicit
    ``rows`` (bool/uint8, ``batch * slots`` entries, C-contiguous), else the
    ``[batch]`` int64 clocks ``fp`` (neither: RingKVValueError). NumPy
    arrays or tensors: the direct calls and the op alike."""
    B, x = args.batch, fp if rows is None else rows
    if rows is not None:
        if str(rows.dtype).removeprefix("torch.") not in ("bool", "uint8"):
            raise RingKVArrayError("visible must be a bool or uint8 array of rows [B, N]")
        if math.prod(rows.shape) != B * slots:
            raise RingKVArrayError(f"visible has {math.prod(rows.shape)} entries; expected B*N = "
                                   f"{B}*{slots}")
    elif fp is None:
        raise RingKVValueError("attend needs frame_pos (the bits-and-clock rule) or visible "
                               "(explicit per-slot rows)")
    elif fp.shape[0] != B:
        raise RingKVArrayError(f"frame_pos has {fp.shape[0]} rows; session_idx has {B}")
    ptr = x.data_ptr() if ar.is_torch_tensor(x) else x.ctypes.data
    if rows is None:
        args.frame_pos = ctypes.cast(ptr, _P64)
    else:
        args.visible = ctypes.cast(ptr, _PU8)


def attend_reference(layer_ptr: int, args: Any) -> int:
    """The oracle on a layer's bytes: its storage wrapped on the reference
    table, then rkv_layer_attend (its status)."""
    st = BackendStorage(lib.rkv_layer_kv(layer_ptr), lib.rkv_layer_written(layer_ptr), None)
    ref = ctypes.c_void_p()
    status = lib.rkv_layer_wrap(lib.rkv_backend_cpu_reference(), None,
                                lib.rkv_layer_geometry(layer_ptr), ctypes.byref(st),
                                ctypes.byref(ref))
    if status:
        return status
    try:
        return lib.rkv_layer_attend(ref, args)
    finally:
        lib.rkv_layer_destroy(ref)

