"""FlexAttention block masks from ringkv's frame lists (SEMANTICS 4, 5).

:func:`flex_block_mask` gives a ``torch.nn.attention.flex_attention.BlockMask``
for the queries of one session row, ``[1, Hq, Tq, D]``, over a cache's whole
``[1, H, N, D]`` K/V views (``k, v = cache.kv[0], cache.kv[1]``; N = every
slot of every session; GQA when Hq > H: ``enable_gqa=True``)::

    bm = ringkv.flex_block_mask(cache, session, frame_pos)
    out = flex_attention(q, cache.kv[0], cache.kv[1], block_mask=bm, enable_gqa=True)

It is right under eager FlexAttention and under compiled FlexAttention
alike, equal to ``cache.attend(q, [session], [frame_pos])`` and to the
reference's visibility row:

- its block lists come from the frame list of the bits-and-clock rule
  (``cache.visible_frames``: the visible ring frames, then the scratch), as
  FULL blocks: visibility is frame-granular and T is a multiple of 128, so
  no block is partial and compiled FlexAttention skips the mask function
  and every invisible block (no dense pass over the ring, as
  ``create_block_mask`` would make);
- its mask function encodes the same visibility (``row[kv_idx]``, the
  ``[N]`` row of those frames), because eager FlexAttention does not skip
  blocks: it evaluates the mask function over the whole ``[Tq, N]`` grid.
  (A mask function that lets everything through, as with ringkv's raw
  ``block_mask()`` lists, is right compiled and wrong eager.)

The mask is a snapshot of the bits at the call: build it after the
upserts of the pass (or before the commit pass's upsert, whose scratch
holds the same frame) and use it for that pass, as the reference's
consumer does with its row.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from . import _arrays as ar
from ._lib import RKV_BLOCK_TOKENS, RingView, lib
from ._args import as_int, as_session
from .errors import RingKVRuntimeError, check, python_call

__all__ = ["flex_block_mask"]


def _visible_frames(cache: Any, session: int, frame_pos: int) -> list[int]:
    """The frame list of the bits-and-clock rule; a CUDA layer's bits are
    copied to the host first (this synchronizes)."""
    if cache._cuda is None:
        return cache.visible_frames(session, frame_pos)
    bits = np.ascontiguousarray(cache.written.cpu().numpy())
    row = np.empty(cache.total_slots, dtype=np.bool_)
    view = RingView(cache._g, None, bits.ctypes.data)
    check(lib.rkv_ring_visible_row(ctypes.byref(view), session, frame_pos, row.ctypes.data))
    lo, T = session * cache.capacity, cache.tokens_per_frame
    return [r for r in range(cache.ring_frames + 1) if row[lo + r * T]]


@python_call("ringkv.flex_block_mask")
def flex_block_mask(cache: Any, session: int, frame_pos: int, *,
                    n_queries: int | None = None) -> Any:
    """A FlexAttention ``BlockMask`` for session ``session`` of ``cache`` (a
    :class:`ringkv.LayerRingCache`) at clock ``frame_pos``: queries
    ``[1, Hq, n_queries, D]`` (default ``tokens_per_frame``) over the K/V
    views ``[1, H, N, D]``, on the cache's device. Right in eager and in
    compiled FlexAttention (see the module docstring). IndexError for a
    session out of range, ValueError for ``frame_pos < 0``; a CUDA layer
    copies its written bits to the host (synchronizes: not capture-safe)."""
    s, f = as_session(session, "session"), as_int(frame_pos, "frame_pos")
    tq = cache.tokens_per_frame if n_queries is None else as_int(n_queries, "n_queries")
    frames = _visible_frames(cache, s, f)  # IndexError, ValueError
    torch = ar.torch_module()
    if torch is None:
        raise RingKVRuntimeError("ringkv.flex_block_mask needs torch (FlexAttention)")
    from torch.nn.attention.flex_attention import BlockMask

    T, N, B = cache.tokens_per_frame, cache.total_slots, RKV_BLOCK_TOKENS
    per_frame = T // B
    first = s * cache.capacity // B
    blocks = [first + r * per_frame + k for r in frames for k in range(per_frame)]
    device = cache.written.device if ar.is_torch_tensor(cache.written) else torch.device("cpu")
    q_blocks, kv_blocks = max(1, math.ceil(tq / B)), N // B
    full_num = torch.full((1, 1, q_blocks), len(blocks), dtype=torch.int32, device=device)
    full_idx = torch.zeros((1, 1, q_blocks, kv_blocks), dtype=torch.int32, device=device)
    full_idx[..., :len(blocks)] = torch.tensor(blocks, dtype=torch.int32, device=device)
    none_num = torch.zeros((1, 1, q_blocks), dtype=torch.int32, device=device)
    none_idx = torch.zeros((1, 1, q_blocks, kv_blocks), dtype=torch.int32, device=device)
    row = torch.zeros(N, dtype=torch.bool, device=device)
    for r in frames:  # the same frames, slot by slot (rkv_visible_row_from_frames' row)
        row[s * cache.capacity + r * T: s * cache.capacity + (r + 1) * T] = True

    def mask_mod(b, h, q_idx, kv_idx):
        return row[kv_idx]

    return BlockMask.from_kv_blocks(none_num, none_idx, full_num, full_idx, BLOCK_SIZE=B,
                                    mask_mod=mask_mod, seq_lengths=(tq, N))
