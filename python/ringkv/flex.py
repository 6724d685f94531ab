"""FlexAttention block masks from ringkv's frame lists (SEMANTICS 4, 5).

:func:`flex_block_mask` gives a ``torch.nn.attention.flex_attention.BlockMask``
for one session row's queries over a cache's whole K/V views
(python/README.md, "FlexAttention": shapes, GQA, why it equals
``cache.attend`` and the reference's row)::

    bm = ringkv.flex_block_mask(cache, session, frame_pos)
    out = flex_attention(q, cache.kv[0], cache.kv[1], block_mask=bm, enable_gqa=True)

Its block lists are the frames of the bits-and-clock rule as FULL blocks (T
is a multiple of 128: compiled FlexAttention skips the mask function and
every invisible block); its mask function encodes the same ``[N]`` row for
eager FlexAttention. The mask is a snapshot of the bits at the call: build
it after the pass's upserts and use it for that pass.

It is torch operations on the cache's own tensors (the row from the op
``ringkv::visible_row``, the block lists by sorting and counting: static
shapes, no host read), so it can be called inside a region
``torch.compile(fullgraph=True)`` traces, with ``session`` and
``frame_pos`` ints (SymInts there) or int64 tensors of one element, and on
a CUDA layer it runs on the device (not yet run on a GPU).
"""
from __future__ import annotations

from typing import Any

from . import _arrays as ar
from ._args import as_instance, as_int, as_session
from ._lib import RKV_BLOCK_TOKENS
from .errors import RingKVArrayError, RingKVIndexError, RingKVRuntimeError, RingKVValueError, \
    python_call

__all__ = ["flex_block_mask"]


def _row_input(x: Any, name: str, device: Any, torch: Any, as_value: Any) -> Any:
    """``session`` / ``frame_pos`` as the ``[1]`` int64 tensor the op takes,
    on ``device``: an int (or SymInt) checked by ``as_value`` and made a
    tensor; an int64 tensor of one element reshaped (its value is checked
    by the op: on a CUDA layer a bad one is a device error, see check())."""
    if ar.is_torch_tensor(x):
        if x.dtype != torch.int64 or x.numel() != 1:
            raise RingKVArrayError(f"{name} must be an int or an int64 tensor of one element; "
                                   f"got {tuple(x.shape)} {x.dtype}")
        ar.check_device(x, name, device)
        return x.reshape(1)
    # torch.full, not torch.tensor: a dynamic int stays symbolic (no recompile per value)
    return torch.full((1,), as_value(x, name), dtype=torch.int64, device=device)


@python_call("ringkv.flex_block_mask")
def flex_block_mask(cache: Any, session: Any, frame_pos: Any, *,
                    n_queries: int | None = None) -> Any:
    """A FlexAttention ``BlockMask`` for session ``session`` of ``cache`` (a
    :class:`ringkv.LayerRingCache`) at clock ``frame_pos`` (ints, or int64
    tensors of one element on the cache's device): queries
    ``[1, Hq, n_queries, D]`` (default ``tokens_per_frame``) over the K/V
    views ``[1, H, N, D]``, on the cache's device (see the module docstring).
    RingKVTypeError (a TypeError) for a ``cache`` that is not a
    LayerRingCache (None included); IndexError for a session out of range,
    ValueError for ``frame_pos < 0`` (for tensors on a CUDA layer, not yet
    run on a GPU: a device error that ``cache.check()`` raises);
    RuntimeError without torch >= 2.6 (the ops)."""
    from .layer import LayerRingCache, _torch_ops
    as_instance(cache, LayerRingCache, "cache")
    S, T, N, B = cache.num_sessions, cache.tokens_per_frame, cache.total_slots, RKV_BLOCK_TOKENS
    if not ar.is_torch_tensor(session):
        session = as_session(session, "session")
        if not 0 <= session < S:
            raise RingKVIndexError(f"session {session} out of range for {S} sessions")
    if not ar.is_torch_tensor(frame_pos):
        frame_pos = as_int(frame_pos, "frame_pos")
        if frame_pos < 0:
            raise RingKVValueError(f"frame_pos = {frame_pos}; expected >= 0")
    tq = T if n_queries is None else as_int(n_queries, "n_queries")
    torch = ar.torch_module()
    ops = None if torch is None else _torch_ops()
    if ops is None:
        raise RingKVRuntimeError("ringkv.flex_block_mask needs torch >= 2.6 (FlexAttention's "
                                 "BlockMask and ringkv's custom ops)"
                                 + ("" if torch is None else f"; this is {torch.__version__}"))
    from torch.nn.attention.flex_attention import BlockMask

    _, _, _, written = cache.views(ar.TORCH)
    device = written.device
    si = _row_input(session, "session", device, torch, as_session)
    fp = _row_input(frame_pos, "frame_pos", device, torch, as_int)
    # the row of the bits-and-clock rule: the session's visible frames, slot by slot
    row = ops.visible_row(written, fp, si, cache.geometry_list, cache.error_word)
    # frames are written whole and T is a multiple of 128: a block's first
    # slot stands for it. Visible blocks ascending, then 0s (a stable sort
    # puts the visible ones first in their order).
    kv_blocks = N // B
    visible = row.view(kv_blocks, B)[:, 0]
    order = torch.sort((~visible).to(torch.int8), stable=True).indices
    count = visible.sum(dtype=torch.int32)
    ids = torch.arange(kv_blocks, device=device)
    idx = torch.where(ids < count, order, 0).to(torch.int32)
    q_blocks = max(1, (tq + B - 1) // B)
    full_num = count.reshape(1, 1, 1).expand(1, 1, q_blocks).contiguous()
    full_idx = idx.reshape(1, 1, 1, kv_blocks).expand(1, 1, q_blocks, kv_blocks).contiguous()
    none_num = torch.zeros((1, 1, q_blocks), dtype=torch.int32, device=device)
    none_idx = torch.zeros((1, 1, q_blocks, kv_blocks), dtype=torch.int32, device=device)

    def mask_mod(b, h, q_idx, kv_idx):
        return row[kv_idx]

    return BlockMask.from_kv_blocks(none_num, none_idx, full_num, full_idx, BLOCK_SIZE=B,
                                    mask_mod=mask_mod, seq_lengths=(tq, N))
