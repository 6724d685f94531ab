"""The model/session API: presets, claim/lookup/release, clocks, frames,
attention at the declared clocks, snapshots."""
from __future__ import annotations

import numpy as np
import pytest

import ringkv


def test_presets():
    assert ringkv.preset_names() == ["demo", "waypoint-1.5-720p", "waypoint-1.5-360p"]
    cfg = ringkv.preset("waypoint-1.5-720p")
    assert cfg.n_layers == 24 and cfg.n_q_heads == 32 and cfg.n_kv_heads == 16
    assert cfg.d_head == 64 and cfg.tokens_per_frame == 512 and cfg.dtype == "bf16"
    glob = [i for i, l in enumerate(cfg.layers) if l.pinned_dilation == 8]
    assert glob == [3, 7, 11, 15, 19, 23]
    assert cfg.layers[3] == ringkv.LayerSpec(16, 16, 8)
    assert cfg.layers[0] == ringkv.LayerSpec(16, 16, 1)
    assert ringkv.preset("waypoint-1.5-720p", True).layers[3].ring_frames == 128
    per, total = cfg.memory()
    assert per == 816 * 2 ** 20 and total == per  # SEMANTICS 7: 816 MiB per session
    assert ringkv.preset("waypoint-1.5-360p").memory()[0] == 204 * 2 ** 20
    g = cfg.layer_geometry(3)
    assert g == ringkv.LayerGeometry(1, 16, 16, 16, 64, 512, 8, "bf16")
    assert ringkv.preset("demo", num_sessions=3).num_sessions == 3


def frame_kv(m, B, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, 1, m.config.n_kv_heads, B * m.config.tokens_per_frame,
                                m.config.d_head)).astype(np.float32)


def run_frame(m, sessions, frames, seed, q=None):
    m.begin_frame(sessions, frames)
    outs = []
    for p in range(5):
        for layer in range(m.n_layers):
            k, v = m.upsert(layer, sessions, frame_kv(m, len(sessions), seed + layer), p == 4)
            if q is not None:
                outs.append(m.attend(layer, sessions, q))
    return outs


def test_sessions_and_clocks():
    m = ringkv.Model.from_preset("demo", num_sessions=3)
    assert m.n_layers == 2 and m.num_sessions == 3
    assert m.memory_bytes == sum(m.layer(i).memory_bytes for i in range(2))
    a, b = m.claim("req-a"), m.claim("req-b")
    assert (a, b) == (0, 1) and m.lookup("req-b") == b
    assert m.clock(a) is None
    for f in range(3):
        run_frame(m, [a, b], [f, f + 5], seed=f)
    assert m.clock(a) == 2 and m.clock(b) == 7
    m.reset(a)
    assert m.clock(a) is None
    assert not m.layer(0).kv[:, :, :, :m.layer(0).capacity].any()
    run_frame(m, [a], [40], seed=9)  # any clock after a reset
    assert m.clock(a) == 40
    m.release(b)
    with pytest.raises(KeyError):
        m.lookup("req-b")
    assert m.claim("req-c") == b and m.clock(b) is None


def test_clock_refusals_name_session_and_request():
    """begin_frame's refusals of a row name the session index and the
    request id (issue 20: a skipped frame named the index only; a server
    knows its requests). Through the library's message, as Python raises
    it: RingKVRuntimeError for the clock rule, RingKVValueError for a
    negative clock (the class every other call gives it); nothing changes."""
    m = ringkv.Model.from_preset("demo", num_sessions=3)
    m.claim("cam-7/left")
    s = m.claim("user-b")
    run_frame(m, [s], [5], seed=1)
    for f, cls, text in (
            (7, ringkv.RingKVRuntimeError,
             "Model.begin_frame: session 1 (request 'user-b') declared frame 7; expected 6 "
             "(last committed 5 + 1): a skipped or repeated frame would write and hide the "
             "wrong slots"),
            (4, ringkv.RingKVRuntimeError,
             "Model.begin_frame: session 1 (request 'user-b') declared frame 4; expected 6"),
            (-2, ringkv.RingKVValueError,
             "Model.begin_frame: frame_pos[1] = -2 (session 1, request 'user-b'); expected >= 0")):
        with pytest.raises(cls) as e:
            m.begin_frame([0, s], [0, f])
        assert str(e.value).startswith(text), str(e.value)
        assert m.clock(s) == 5
    m.begin_frame([s], [6])
    with pytest.raises(ringkv.RingKVRuntimeError,
                       match=r"session 1 \(request 'user-b'\) is inside frame 6"):
        m.begin_frame([s], [6])
    with pytest.raises(ringkv.RingKVRuntimeError,
                       match=r"^Model.upsert: session 0 \(request 'cam-7/left', row 0\) has no "
                             "frame begun"):
        m.upsert(0, [0], frame_kv(m, 1, 3), False)
    with pytest.raises(ringkv.RingKVRuntimeError,
                       match=r"^Model.snapshot: session 1 \(request 'user-b'\) is inside frame 6"):
        m.snapshot(s)


def test_model_attend_equals_layer_attend_at_declared_clock():
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    s = m.claim("x")
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, 128, 64)).astype(np.float32)
    for f in range(10):
        run_frame(m, [s], [f], seed=f)
    m.begin_frame([s], [10])
    for layer in range(m.n_layers):
        m.upsert(layer, [s], frame_kv(m, 1, 77), False)
        got = m.attend(layer, [s], q)
        want = m.layer(layer).attend(q, [s], [10])
        assert np.array_equal(got, want)


def test_snapshot_restore_bit_exact_with_clock():
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    s = m.claim("a")
    for f in range(9):
        run_frame(m, [s], [f], seed=f)
    snap = m.snapshot(s)
    assert len(snap) == m.snapshot_bytes
    before = [(m.layer(i).kv.copy(), m.layer(i).written.copy()) for i in range(m.n_layers)]
    t = m.claim("b")
    m.restore(t, bytes(snap))  # read-only bytes work too
    assert m.clock(t) == 8
    for i in range(m.n_layers):
        lay = m.layer(i)
        (lo_s, hi_s), (lo_t, hi_t) = lay.session_span(s), lay.session_span(t)
        assert np.array_equal(lay.kv[:, :, :, lo_t:hi_t], before[i][0][:, :, :, lo_s:hi_s])
        assert np.array_equal(lay.written[lo_t:hi_t], before[i][1][lo_s:hi_s])
    with pytest.raises(RuntimeError):
        m.begin_frame([t], [8])
    run_frame(m, [t], [9], seed=1)
    bad = bytearray(snap)  # the snapshot file's image: its header length, damaged
    bad[0] ^= 0xFF
    with pytest.raises(ValueError, match=r"Model\.restore: \(memory\): corrupted header"):
        m.restore(t, bad)
    assert m.clock(t) == 9


def test_layer_views_keep_model_alive():
    import gc
    m = ringkv.Model.from_preset("demo")
    s = m.claim("a")
    run_frame(m, [s], [0], seed=0)
    kv = m.layer(0).kv
    total = float(np.abs(kv).sum())
    del m
    gc.collect()
    assert float(np.abs(kv).sum()) == total


def test_bf16_model_with_uint16_bits():
    cfg = ringkv.preset("waypoint-1.5-360p", num_sessions=1)
    cfg.layers = cfg.layers[:4]  # a short model: 3 local, 1 global
    cfg.n_kv_heads, cfg.n_q_heads = 2, 4
    m = ringkv.Model(cfg)
    s = m.claim("a")
    x32 = np.random.default_rng(0).standard_normal((2, 1, 2, 128, 64)).astype(np.float32)
    x = ringkv.convert(x32, "bf16")
    q = ringkv.convert(np.ones((1, 4, 128, 64), np.float32), "bf16")
    m.begin_frame([s], [0])
    for p in range(5):
        for layer in range(4):
            k, _ = m.upsert(layer, [s], x, p == 4)
            assert k.dtype == np.uint16
            out = m.attend(layer, [s], q)
            assert out.dtype == np.uint16 and out.shape == (1, 4, 128, 64)
    assert m.clock(s) == 0
    out32 = m.attend(0, [s], q, out_dtype="f32")
    assert out32.dtype == np.float32
    assert np.isfinite(out32).all()
