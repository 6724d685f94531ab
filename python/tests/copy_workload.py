"""Streaming workloads for test_copy.py, imported both by the test and by the
second process it starts (which loads the pickled caches and continues
streaming): the same seeded inputs in both, so that the copy and the
uncopied original must give bit-identical results."""
from __future__ import annotations

import numpy as np

import ringkv


def _as(x: np.ndarray, dtype_name: str) -> np.ndarray:
    return ringkv.convert(x, dtype_name) if dtype_name != "f32" else x


def layer_stream(cache: ringkv.LayerRingCache, frames, session: int, seed: int) -> np.ndarray:
    """Frames of one session through the 4+1 schedule (four passes into the
    scratch, a commit on the fifth), each pass followed by attention at the
    frame's clock (GQA 2:1, queries in the storage dtype). Returns every
    attention output, stacked (float32)."""
    rng = np.random.default_rng(seed)
    H, T, D, dt = cache.n_kv_heads, cache.tokens_per_frame, cache.d_head, cache.dtype_name
    outs = []
    for f in frames:
        for p in range(5):
            kv = _as(rng.standard_normal((2, 1, H, T, D)).astype(np.float32), dt)
            q = _as(rng.standard_normal((1, 2 * H, T, D)).astype(np.float32), dt)
            cache.upsert(kv, np.array([f]), p == 4, np.array([session]), build_visibility=False)
            outs.append(cache.attend(q, [session], [f], out_dtype="f32"))
    return np.stack(outs)


def model_stream(model: ringkv.Model, sessions, first_frames, n_frames: int,
                 seed: int) -> np.ndarray:
    """``n_frames`` frames of a batch of held sessions (clocks ``first_frames``,
    then + 1 each frame): begin_frame, five passes over every layer (upsert,
    then attention at the declared clocks; commit on the fifth). Returns
    every attention output, stacked."""
    rng = np.random.default_rng(seed)
    cfg = model.config
    B = len(sessions)
    outs = []
    for i in range(n_frames):
        model.begin_frame(sessions, [f + i for f in first_frames])
        for p in range(5):
            for layer in range(model.n_layers):
                kv = rng.standard_normal((2, 1, cfg.n_kv_heads, B * cfg.tokens_per_frame,
                                          cfg.d_head))
                q = rng.standard_normal((B, cfg.n_q_heads, cfg.tokens_per_frame, cfg.d_head))
                model.upsert(layer, sessions, _as(kv.astype(np.float32), cfg.dtype), p == 4)
                outs.append(model.attend(layer, sessions, _as(q.astype(np.float32), cfg.dtype),
                                         out_dtype="f32"))
    return np.stack(outs)


def storage(obj) -> dict:
    """K/V and written bits of a layer, or of every layer of a model, as
    host copies (for comparisons)."""
    layers = [obj] if isinstance(obj, ringkv.LayerRingCache) else \
        [obj.layer(i) for i in range(obj.n_layers)]
    return {f"{i}.{name}": np.array(getattr(lay, name)) for i, lay in enumerate(layers)
            for name in ("kv", "written")}
