"""Deterministic token streams for sessions (no Ray needed): what a
:class:`~ringkv.ray.SessionHost` feeds its sessions, frame after frame,
through the 4+1 schedule (4 denoising passes, then the commit pass), and
the digest of a frame's attention outputs.

A frame's tokens depend only on (request id, frame, pass, layer), never on
the host, the session slot or the batch, so a session that moved, was
paged out or was restored from a checkpoint must produce, frame by frame,
the same attention outputs as one that never left: the digests say so.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import xxhash

from .. import convert
from ..errors import RingKVTypeError
from ..model import Model, ModelConfig

__all__ = ["PASSES", "frame_tokens", "step_frame", "reference_digests"]

#: Passes of one frame: 4 denoising passes, then the commit pass.
PASSES = 5


def request_key(request_id: Any) -> str:
    """The one str form of a request id: a str as it is, bytes decoded from
    UTF-8 with ``surrogateescape`` (a byte that is not UTF-8 becomes a lone
    surrogate, so two ids never read alike). RingKVTypeError otherwise."""
    if isinstance(request_id, str):
        return request_id
    if isinstance(request_id, (bytes, bytearray, memoryview)):
        return bytes(request_id).decode("utf-8", "surrogateescape")
    raise RingKVTypeError(f"request id must be a str or bytes; got {request_id!r}")


def model_id(key: str) -> str | bytes:
    """What ``Model.claim`` takes for the key: the str itself, or its bytes
    when it holds a surrogate-escaped byte (a str the model would refuse)."""
    try:
        key.encode("utf-8")
        return key
    except UnicodeEncodeError:
        try:
            return key.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return key  # not an id: the model's claim refuses it, naming it


def _rng(request_id: str | bytes, frame: int, pass_: int, layer: int) -> np.random.Generator:
    # any str is a key (a lone surrogate too: no UnicodeEncodeError here;
    # the model's claim refuses such an id with RingKVValueError)
    key = f"{request_key(request_id)}\x00{frame}\x00{pass_}\x00{layer}"
    return np.random.default_rng(xxhash.xxh3_64_intdigest(key.encode("utf-8", "surrogatepass")))


def frame_tokens(config: ModelConfig, request_id: str, frame: int, pass_: int,
                 layer: int) -> tuple[np.ndarray, np.ndarray]:
    """``(kv, q)`` of one session for one pass of one layer: kv
    ``[2, H, T, D]`` and q ``[Hq, T, D]`` in the model's dtype (bf16 as
    uint16 bits, rounded to nearest even by :func:`ringkv.convert`),
    standard normal values scaled by 1/2."""
    rng = _rng(request_id, frame, pass_, layer)
    H, Hq = config.n_kv_heads, config.n_q_heads
    T, D = config.tokens_per_frame, config.d_head
    kv = (rng.standard_normal((2, H, T, D), dtype=np.float32) * 0.5)
    q = (rng.standard_normal((Hq, T, D), dtype=np.float32) * 0.5)
    if config.dtype != "f32":
        kv, q = convert(kv, config.dtype), convert(q, config.dtype)
    return kv, q


def step_frame(model: Model, sessions: Sequence[int], request_ids: Sequence[str],
               frames: Sequence[int]) -> list[int]:
    """One frame of B sessions of ``model`` (session slots, their request
    ids, their clocks: each the session's last committed + 1): begin_frame,
    then 5 passes of upsert + attention over every layer, the 5th
    committing. Returns, per session, the XXH3-64 of its attention outputs
    of the frame (every pass, every layer, in that order)."""
    cfg = model.config
    B = len(sessions)
    model.begin_frame(list(sessions), list(frames))
    hashes = [xxhash.xxh3_64() for _ in range(B)]
    for p in range(PASSES):
        for layer in range(cfg.n_layers):
            parts = [frame_tokens(cfg, r, f, p, layer) for r, f in zip(request_ids, frames)]
            kv = np.concatenate([kv for kv, _ in parts], axis=2)  # [2, H, B*T, D]
            q = np.stack([q for _, q in parts])                    # [B, Hq, T, D]
            out = model.step(layer, list(sessions), kv, p == PASSES - 1, q)
            for b in range(B):
                hashes[b].update(np.ascontiguousarray(out[b]))
    return [h.intdigest() for h in hashes]


def reference_digests(config: ModelConfig, request_id: str | bytes, frames: int) -> list[int]:
    """The digests of frames 0 .. frames-1 of one session that never left a
    fresh one-session model of ``config``'s geometry: what every other run
    of that session (moved, paged or recovered) must match."""
    model = Model(ModelConfig(**{**config.__dict__, "num_sessions": 1}))
    key = request_key(request_id)
    s = model.claim(model_id(key))
    return [step_frame(model, [s], [key], [f])[0] for f in range(frames)]
