"""Error mapping: the reference's exception types, the library's messages, and
no partial writes."""
from __future__ import annotations

import numpy as np
import pytest

import ringkv
from ringkv import RingKVError


def make(S=2, PD=2):
    return ringkv.LayerRingCache(S, 1, 4, 3, 4, 128, PD, "f32", "cpu")


def frame(B=1, value=1.0):
    return np.full((2, 1, 1, B * 128, 4), value, dtype=np.float32)


def i64(*xs):
    return np.array(xs, dtype=np.int64)


@pytest.mark.parametrize("args, words", [
    ((0, 1, 4, 3, 4, 128, 1), "num_sessions"),
    ((1, 1, 4, 3, 4, 128, 0), "pinned_dilation"),
    ((1, 1, 4, 5, 4, 128, 1), "ring_buckets"),
    ((1, 1, 4, 0, 4, 128, 1), "ring_buckets"),
    ((1, 1, 4, 3, 4, 100, 1), "tokens_per_frame"),
    ((1, 1, 4, 3, 4, 0, 1), "tokens_per_frame"),   # the reference lets 0 through
    ((1, 0, 4, 3, 4, 128, 1), "n_kv_heads"),
    ((1, 1, 4, 3, 0, 128, 1), "d_head"),
    ((2 ** 40, 2 ** 10, 2 ** 20, 3, 2 ** 10, 128, 1), "overflow"),
])
def test_construction_raises_value_error(args, words):
    with pytest.raises(ValueError, match=words) as info:
        ringkv.LayerRingCache(*args, "f32", "cpu")
    assert isinstance(info.value, RingKVError) and info.value.status < 0
    assert info.value.status_name.startswith("RKV_ERR_")


@pytest.mark.parametrize("dtype", ["f64", np.float64, np.int32, "int8", object()])
def test_bad_dtype(dtype):
    with pytest.raises(ValueError):
        ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, dtype, "cpu")


def test_devices():
    for bad in ("tpu", "gpu:0", "cuda:x"):
        with pytest.raises(ValueError, match="unknown device"):
            ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, "f32", bad)
    # CUDA devices (test_cuda.py): without the CUDA library or a device, a
    # RuntimeError that says which
    if ringkv.cuda_device_count() == 0:  # 0 also without libringkv_cuda.so
        for dev in ("cuda", "cuda:1"):
            with pytest.raises(RuntimeError, match="libringkv_cuda.so|no CUDA device"):
                ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, "f32", dev)


def test_session_span_and_reset_index_error():
    c = make()
    for bad in (-1, 2, 2 ** 70):
        with pytest.raises(IndexError, match="out of range"):
            c.session_span(bad)
        with pytest.raises(IndexError):
            c.reset(bad)
    assert c.session_span(np.int64(1)) == (c.capacity, 2 * c.capacity)


def _unchanged(c, fn):
    kv, written = c.kv.copy(), c.written.copy()
    fn()
    assert np.array_equal(c.kv, kv) and np.array_equal(c.written, written)


@pytest.mark.parametrize("call, exc, words", [
    # the reference's torch._check failures: RuntimeError, its messages
    (lambda c: c.upsert(frame(), np.array([0], np.int32), True, i64(0)), RuntimeError,
     "frame_pos must be a \\[B\\] int64"),
    (lambda c: c.upsert(frame(), np.int64(0), True, i64(0)), RuntimeError, "frame_pos"),
    (lambda c: c.upsert(frame(), np.zeros((1, 1), np.int64), True, i64(0)), RuntimeError,
     "frame_pos"),
    (lambda c: c.upsert(frame(B=2), i64(0), True, i64(0)), RuntimeError,
     "exactly one frame per session"),
    (lambda c: c.upsert(frame(), i64(0), True, i64(0, 1)), RuntimeError,
     "session_idx must be a \\[1\\] int64"),
    (lambda c: c.upsert(frame(), i64(0), True, np.array([0], np.int32)), RuntimeError,
     "session_idx"),
    (lambda c: c.upsert(frame(B=2), i64(0, 0), True, i64(0, 1)), RuntimeError,
     "only supports B == 1"),
    (lambda c: c.upsert(np.zeros((2, 1, 2, 128, 4), np.float32), i64(0), True, i64(0)),
     RuntimeError, "kv must be"),
    (lambda c: c.upsert(frame().astype(np.float16), i64(0), True, i64(0)), RuntimeError,
     "dtype"),
    # what ringkv checks and the reference does not
    (lambda c: c.upsert(frame(), i64(0), True, i64(2)), IndexError, "out of range"),
    (lambda c: c.upsert(frame(), i64(-1), True, i64(0)), ValueError, "expected >= 0"),
    (lambda c: c.upsert(frame(B=2), i64(0, 1), True, i64(1, 1), build_visibility=False),
     ValueError, "twice"),
])
def test_upsert_errors_change_nothing(call, exc, words):
    c = make()
    c.upsert(frame(value=7.0), i64(0), True, i64(0))
    with pytest.raises(exc, match=words):
        _unchanged(c, lambda: call(c))


def test_library_message_and_status():
    c = make()
    with pytest.raises(IndexError) as info:
        c.upsert(frame(), i64(0), True, i64(5))
    e = info.value
    assert e.status == -3 and e.status_name == "RKV_ERR_RANGE"
    assert "session_idx[0] = 5 is out of range" in str(e) and "[RKV_ERR_RANGE]" in str(e)


def test_attend_errors():
    c = make()
    q = np.zeros((1, 2, 128, 4), np.float32)
    with pytest.raises(ValueError, match="frame_pos"):
        c.attend(q, i64(0))
    with pytest.raises(ValueError, match="d_head"):
        c.attend(np.zeros((1, 1, 128, 5), np.float32), i64(0), i64(0))
    with pytest.raises(ValueError, match="multiple of"):
        ringkv.LayerRingCache(1, 2, 4, 3, 4, 128, 1, "f32").attend(
            np.zeros((1, 3, 128, 4), np.float32), i64(0), i64(0))
    with pytest.raises(IndexError):
        c.attend(q, i64(3), i64(0))
    with pytest.raises(ValueError, match="expected >= 0"):
        c.attend(q, i64(0), i64(-2))
    with pytest.raises(ValueError, match="visible has"):
        c.attend(q, i64(0), visible=np.ones(10, bool))
    with pytest.raises(ValueError, match="contiguous"):
        c.attend(q, i64(0), i64(0), out=np.zeros((1, 2, 4, 128), np.float32).transpose(0, 1, 3, 2))


def test_model_errors():
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    with pytest.raises(KeyError, match="unknown preset"):
        ringkv.preset("nope")
    s = m.claim("a")
    assert m.claim("a") == s
    with pytest.raises(RuntimeError, match="all 1 sessions are held") as info:
        m.claim("b")
    assert info.value.status_name == "RKV_ERR_FULL"
    with pytest.raises(KeyError, match="no session holds request 'b'"):
        m.lookup("b")
    with pytest.raises(ValueError):
        m.claim("")
    with pytest.raises(RuntimeError, match="no frame begun"):
        m.upsert(0, [s], np.zeros((2, 1, 1, 128, 64), np.float32), False)
    m.begin_frame([s], [10])
    with pytest.raises(RuntimeError, match="inside frame"):
        m.begin_frame([s], [11])
    with pytest.raises(RuntimeError, match="inside frame"):
        m.snapshot(s)
    for layer in range(m.n_layers):
        m.upsert(layer, [s], np.zeros((2, 1, 1, 128, 64), np.float32), True)
    assert m.clock(s) == 10
    with pytest.raises(RuntimeError, match="expected 11") as info:
        m.begin_frame([s], [12])
    assert info.value.status_name == "RKV_ERR_CLOCK"
    with pytest.raises(IndexError):
        m.release(4)
    other = ringkv.Model(ringkv.preset("demo", True))
    other.claim("x")
    with pytest.raises(ValueError, match="snapshot has"):
        other.restore(0, m.snapshot(s))
    with pytest.raises(ValueError):
        m.upsert(0, [s], np.zeros((2, 1, 1, 128, 64), np.float16), True)
    m.release(s)
    with pytest.raises(RuntimeError, match="not claimed"):
        m.reset(s)
