"""LayerRingCache with NumPy inputs: views without copies, attributes, dtypes,
the 4+1 schedule properties, visibility rules, attention."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ringkv


def make(S=2, H=2, RF=4, RB=3, D=8, T=128, PD=2, dtype="f32"):
    return ringkv.LayerRingCache(S, H, RF, RB, D, T, PD, dtype, "cpu")


def frame(cache, B=1, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 1, cache.n_kv_heads, B * cache.tokens_per_frame, cache.d_head))
    return x.astype(dtype)


def i64(*xs):
    return np.array(xs, dtype=np.int64)


def test_attributes_and_layout():
    c = make(S=3, H=2, RF=5, RB=3, D=8, T=256, PD=2)
    assert (c.num_sessions, c.n_kv_heads, c.ring_frames, c.ring_buckets, c.d_head,
            c.tokens_per_frame, c.pinned_dilation) == (3, 2, 5, 3, 8, 256, 2)
    assert c.ring_len == 5 * 256 and c.capacity == 6 * 256 and c.total_slots == 3 * 6 * 256
    assert c.kv.shape == (2, 1, 2, c.total_slots, 8) and c.kv.dtype == np.float32
    assert c.dtype == np.float32 and c.dtype_name == "f32" and c.device == "cpu"
    assert c.memory_bytes == 2 * 2 * c.total_slots * 8 * 4 == c.kv.nbytes
    assert c.written.shape == (c.total_slots,) and c.written.dtype == np.bool_
    w = c.written.reshape(3, c.capacity)
    assert not w[:, :c.ring_len].any() and w[:, c.ring_len:].all()
    assert not c.kv.any()
    assert c.session_span(2) == (2 * c.capacity, 3 * c.capacity)
    assert np.array_equal(c.frame_offsets, np.arange(256))
    assert c.geometry == ringkv.LayerGeometry(3, 2, 5, 3, 8, 256, 2, "f32")
    assert "LayerRingCache(num_sessions=3" in repr(c)


def test_views_share_storage_and_outlive_cache():
    c = make()
    kv, k, v, written = c.views()
    assert kv.ctypes.data == c.kv.ctypes.data
    assert np.shares_memory(k, kv) and np.shares_memory(v, kv)
    x = frame(c, seed=1)
    k2, v2, _ = c.upsert(x, i64(0), True, i64(1), build_visibility=False)
    assert np.shares_memory(k2, kv)
    lo = c.capacity  # session 1, ring slot 0
    assert np.array_equal(k2[0, :, lo:lo + 128], x[0, 0])
    assert np.array_equal(v2[0, :, lo:lo + 128], x[1, 0])
    del c, kv, k, v, written
    gc.collect()
    assert np.array_equal(k2[0, :, lo:lo + 128], x[0, 0])  # the storage is still alive


def test_4d_and_noncontiguous_inputs_equal_contiguous():
    a, b = make(), make()
    x = frame(a, seed=2)
    a.upsert(x, i64(3), True, i64(0))
    xf = np.asfortranarray(x[:, 0])  # [2, H, T, D], not C-contiguous: copied once
    assert not xf.flags.c_contiguous
    b.upsert(xf, i64(3), True, i64(0))
    assert np.array_equal(a.kv, b.kv) and np.array_equal(a.written, b.written)


def test_sequences_of_ints_accepted():
    c = make()
    _, _, vis = c.upsert(frame(c), [0], True, [1])
    assert vis.sum() == 128


def test_worked_example_of_the_spec():
    """SEMANTICS 3: RF 4, RB 3, PD 2, one session."""
    c = make(S=1, H=1, RF=4, RB=3, D=4, PD=2)
    # p -> visible ring slots (as frames held) on all passes of frame p
    table = {0: [], 1: [0], 2: [0], 3: [0, 1], 4: [0, 1], 5: [0, 1, 2], 6: [1, 2],
             7: [0, 1, 2], 8: [0, 2]}
    for p, want in table.items():
        for pas in range(5):
            _, _, vis = c.upsert(frame(c, seed=p), i64(p), pas == 4, i64(0))
            rows = vis.reshape(-1, 128)  # frame slots 0..3, then scratch 4
            assert rows[4].all()
            assert [r for r in range(4) if rows[r].all()] == want, (p, pas)
            assert not rows[[r for r in range(4) if r not in want]].any()
            assert c.visible_frames(0, p) == want + [4]
            assert np.array_equal(c.visible_row(0, p), vis)


def test_five_passes_see_identical_kv_and_rerun_is_idempotent():
    c = make(S=2, PD=1, RB=4)
    for f in range(6):
        x = frame(c, seed=f)
        seen = []
        for pas in range(5):
            k, v, _ = c.upsert(x, i64(f), pas == 4, i64(1), build_visibility=False)
            seen.append((k.copy(), v.copy()))
        for k, v in seen[1:4]:
            assert np.array_equal(k, seen[0][0]) and np.array_equal(v, seen[0][1])
    before = (c.kv.copy(), c.written.copy())
    c.upsert(x, i64(5), True, i64(1))
    assert np.array_equal(c.kv, before[0]) and np.array_equal(c.written, before[1])


def test_commit_every_pass_equals_4_plus_1():
    a, b = make(PD=2), make(PD=2)
    for f in range(10):
        x = frame(a, seed=f)
        for pas in range(5):
            a.upsert(x, i64(f), pas == 4, i64(0), build_visibility=False)
            b.upsert(x, i64(f), True, i64(0), build_visibility=False)
    assert np.array_equal(a.kv, b.kv) and np.array_equal(a.written, b.written)


def test_non_write_frames_never_reach_the_ring():
    c = make(S=1, H=1, RF=4, RB=4, D=4, PD=3)
    for f in range(12):
        x = np.full((2, 1, 1, 128, 4), f + 1, dtype=np.float32)
        c.upsert(x, i64(f), True, i64(0), build_visibility=False)
    ring = c.kv[0, 0, 0, :c.ring_len, 0].reshape(4, 128)[:, 0]
    assert set(ring.tolist()) <= {f + 1 for f in range(12) if f % 3 == 0}


def test_batched_upsert_and_reset():
    c = make(S=3, PD=1, RB=4)
    x = frame(c, B=2, seed=5)
    c.upsert(x, i64(0, 7), True, i64(2, 0), build_visibility=False)
    T = 128
    assert np.array_equal(c.kv[:, :, :, 2 * c.capacity:2 * c.capacity + T], x[:, :, :, :T])
    slot = 7 % 4
    lo = slot * T
    assert np.array_equal(c.kv[:, :, :, lo:lo + T], x[:, :, :, T:])
    assert c.written[lo:lo + T].all()
    c.reset(0)
    s0 = slice(0, c.capacity)
    assert not c.kv[:, :, :, s0].any()
    assert not c.written[:c.ring_len].any() and c.written[c.ring_len:c.capacity].all()
    assert c.kv[:, :, :, 2 * c.capacity:].any()  # other sessions untouched


@pytest.mark.parametrize("dtype", ["f16", "bf16", np.float16, "bfloat16", "half"])
def test_half_dtypes(dtype):
    c = make(dtype=dtype)
    x32 = frame(c, seed=3)
    code = "bf16" if str(dtype) in ("bf16", "bfloat16") else "f16"
    x = ringkv.convert(x32, code)
    assert x.dtype == (np.uint16 if code == "bf16" else np.float16)
    assert c.kv.dtype == x.dtype and c.memory_bytes == c.kv.nbytes
    k, _, _ = c.upsert(x, i64(0), True, i64(0))
    assert k.dtype == x.dtype
    assert np.array_equal(c.kv[:, :, :, :128], x)
    back = ringkv.convert(c.kv[:, :, :, :128], "f32", from_dtype=code)
    assert np.allclose(back, x32, rtol=1e-2, atol=1e-2)
    with pytest.raises(RuntimeError):
        c.upsert(x32, i64(0), True, i64(0))  # f32 into half storage


def test_convert_rounds_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, np.nan], dtype=np.float32)  # 1+2^-8, 1+3*2^-8
    b = ringkv.convert(x, "bf16")
    assert b[0] == 0x3F80 and b[1] == 0x3F80 and b[2] == 0x3F82
    assert np.isnan(ringkv.convert(b, "f32", from_dtype="bf16")[3])
    assert ringkv.dtype_size("bf16") == 2 and ringkv.dtype_size(np.float32) == 4


def test_dtype_table_matches_the_library():
    """python/ringkv/_arrays.py's dtype table and src/dtype.c's agree: each
    row's code has the library's name and element size, the library parses
    the name, and the library has no dtype past the table's last."""
    import ctypes

    from ringkv import _arrays as ar
    from ringkv._lib import lib
    for d in ar.DTYPES:
        assert lib.rkv_dtype_name(d.code).decode() == d.name
        assert lib.rkv_dtype_size(d.code) == ar.numpy_dtype(d.code).itemsize
        out = ctypes.c_int(-1)
        assert lib.rkv_dtype_parse(d.name.encode(), ctypes.byref(out)) == 0 and out.value == d.code
    assert [d.code for d in ar.DTYPES] == list(range(len(ar.DTYPES)))
    assert lib.rkv_dtype_name(len(ar.DTYPES)) is None


def test_visible_frames_from_clock_agrees_with_bits_rule():
    c = make(S=1, H=1, RF=5, RB=3, D=4, PD=2)
    for f in range(20):
        want = ringkv.visible_frames_from_clock(c.geometry, f)
        for pas in range(5):
            _, _, vis = c.upsert(frame(c, seed=f), i64(f), pas == 4, i64(0))
            assert c.visible_frames(0, f) == want
            assert np.array_equal(c.visible_row(0, f), vis)


def test_block_mask():
    c = make(S=2, H=1, RF=4, RB=4, D=4, T=256, PD=1)
    for f in range(3):
        c.upsert(frame(c, seed=f), i64(f), True, i64(1), build_visibility=False)
    num, idx = c.block_mask(1, 3)
    assert num.dtype == np.int32 and idx.shape == (2, c.total_slots // 128)
    lo = c.capacity // 128
    want = [lo + b for r in (0, 1, 2, 4) for b in (2 * r, 2 * r + 1)]
    assert num.tolist() == [len(want)] * 2
    assert idx[0, :len(want)].tolist() == want and not idx[:, len(want):].any()


def naive_attention(c, q, s, row, scale=None):
    B, Hq, Tq, D = q.shape
    group = Hq // c.n_kv_heads
    cols = np.flatnonzero(row)
    out = np.empty(q.shape, dtype=np.float64)
    scale = 1 / np.sqrt(D) if scale is None else scale
    for h in range(Hq):
        k = c.kv[0, 0, h // group, cols].astype(np.float64)
        v = c.kv[1, 0, h // group, cols].astype(np.float64)
        sc = scale * q[0, h].astype(np.float64) @ k.T
        p = np.exp(sc - sc.max(axis=1, keepdims=True))
        out[0, h] = (p / p.sum(axis=1, keepdims=True)) @ v
    return out


def test_attend_rules_and_gqa():
    c = make(S=2, H=2, RF=4, RB=3, D=8, PD=2)
    rng = np.random.default_rng(9)
    for f in range(5):
        for s in (0, 1):
            c.upsert(frame(c, seed=10 * f + s), i64(f), True, i64(s), build_visibility=False)
    _, _, vis = c.upsert(frame(c, seed=99), i64(5), False, i64(1))
    q = rng.standard_normal((1, 4, 128, 8)).astype(np.float32)
    by_row = c.attend(q, i64(1), visible=vis)
    by_clock = c.attend(q, i64(1), i64(5))
    ref = naive_attention(c, q, 1, vis)
    rel = np.linalg.norm(by_clock - ref) / np.linalg.norm(ref)
    assert rel < 1e-5
    assert np.allclose(by_row, by_clock, rtol=0, atol=1e-6)
    out = np.zeros_like(q)
    assert c.attend(q, i64(1), i64(5), out=out, scale=0.5) is out
    assert np.linalg.norm(out - naive_attention(c, q, 1, vis, 0.5)) / np.linalg.norm(out) < 1e-5
    half = c.attend(q, i64(1), i64(5), out_dtype="bf16")
    assert half.dtype == np.uint16
    assert np.allclose(ringkv.convert(half, "f32", from_dtype="bf16"), by_clock, atol=1e-2)
    # batched rows
    q2 = rng.standard_normal((2, 2, 128, 8)).astype(np.float32)
    both = c.attend(q2, i64(0, 1), i64(5, 5))
    assert np.allclose(both[1], c.attend(q2[1:], i64(1), i64(5))[0], atol=1e-6)
