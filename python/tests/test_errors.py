"""Error mapping: the reference's exception types, the library's messages, no
partial writes, and one exception class per mistake across every public entry
point (the table-driven test at the end)."""
from __future__ import annotations

import copy
import os
import inspect
import pickle

import numpy as np
import pytest

from conftest import REPO, torch_or_skip

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


# Flags take bools only (the reference types them ``bool`` but tests their
# truth: "no" and "False" commit there); integers refuse bools (an int
# subclass: True would mean 1 session). The trial's inputs first.
def _torch_upsert(c, commit):
    torch = torch_or_skip()
    return c.upsert(torch.from_numpy(frame()), torch.tensor([0]), commit, torch.tensor([0]))


def _bool_flag_calls():
    return [
        ("commit", lambda c, m: c.upsert(frame(), i64(0), "no", i64(0))),
        ("commit", lambda c, m: c.upsert(frame(), i64(0), "False", i64(0))),
        ("commit", lambda c, m: c.upsert(frame(), i64(0), 1, i64(0))),
        ("commit", lambda c, m: c.upsert(frame(), i64(0), None, i64(0))),
        ("commit", lambda c, m: c.upsert(frame(), i64(0), [0], i64(0))),
        ("commit", lambda c, m: _torch_upsert(c, "no")),     # the torch-op path too
        ("build_visibility",
         lambda c, m: c.upsert(frame(), i64(0), True, i64(0), build_visibility="yes")),
        ("build_visibility",
         lambda c, m: c.upsert(frame(), i64(0), True, i64(0), build_visibility=0)),
        ("commit", lambda c, m: m.upsert(0, [0], np.zeros((2, 1, 1, 128, 64), F32), "no")),
        ("commit", lambda c, m: m.step(0, [0], np.zeros((2, 1, 1, 128, 64), F32), 1,
                                       np.zeros((1, 1, 128, 64), F32))),
        ("reference", lambda c, m: c.attend(np.zeros((1, 1, 128, 4), F32), i64(0), i64(0),
                                            reference="yes")),
        ("full_global_ring", lambda c, m: ringkv.preset("demo", "no")),
        ("full_global_ring", lambda c, m: ringkv.Model.from_preset("demo", full_global_ring=1)),
    ]


@pytest.mark.parametrize("name, call", _bool_flag_calls())
def test_flags_take_bools_only(name, call):
    c = make()
    c.upsert(frame(value=7.0), i64(0), True, i64(0))
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    m.begin_frame([m.claim("a")], [0])
    # (a Model's or module function's message starts with its name)
    with pytest.raises(ringkv.RingKVTypeError,
                       match=rf"^(?:[\w.]+: )?{name} must be a bool") as info:
        _unchanged(c, lambda: call(c, m))
    assert isinstance(info.value, TypeError) and info.value.status_name == "python"
    assert m.clock(0) is None                      # the model's frame did not advance either


def test_flags_accept_python_and_numpy_bools():
    c = make()
    for commit in (np.True_, np.bool_(False), False):
        _, _, vis = c.upsert(frame(value=3.0), i64(0), commit, i64(0),
                             build_visibility=np.True_)
        assert vis.dtype == np.bool_
    assert c.written[:128].all() and c.kv[0, 0, 0, 0, 0] == 3.0   # np.True_ committed
    ref = c.attend(np.ones((1, 1, 128, 4), F32), i64(0), i64(1), reference=np.True_)
    assert np.allclose(ref, c.attend(np.ones((1, 1, 128, 4), F32), i64(0), i64(1)), atol=1e-6)


def test_flags_accept_zero_d_bool_arrays_and_tensors():
    """A 0-d bool array or tensor is a flag where a 0-d integer one is an
    int (trial 20: ``layer=torch.tensor(0)`` was taken, ``commit=
    torch.tensor(False)`` refused), on the NumPy path, the torch-op path and
    a Model; each acts as the Python bool it holds. A 0-d integer or float
    tensor and a one-element bool vector stay refused."""
    torch = torch_or_skip()
    for commit, build in ((torch.tensor(False), torch.tensor(True)),
                          (np.array(True), np.array(False)), (torch.tensor(True), False)):
        for as_torch in (False, True):
            c, twin = make(), make()
            kv = torch.from_numpy(frame(value=5.0)) if as_torch else frame(value=5.0)
            fp, si = (torch.tensor([0]), torch.tensor([0])) if as_torch else (i64(0), i64(0))
            _, _, vis = c.upsert(kv, fp, commit, si, build_visibility=build)
            _, _, want = twin.upsert(frame(value=5.0), i64(0), bool(commit), i64(0),
                                     build_visibility=bool(build))
            assert np.array_equal(np.asarray(c.written), twin.written)
            assert np.array_equal(np.asarray(c.kv), twin.kv)
            if bool(build):
                assert np.array_equal(np.asarray(vis), want)
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    s = m.claim("a")
    m.begin_frame([s], [0])
    for layer in range(m.n_layers):
        m.upsert(layer, [s], torch.zeros((2, 1, 1, 128, 64)), torch.tensor(True))
    assert m.clock(s) == 0                           # committed: tensor(True) is True
    c = make()
    for bad in (torch.tensor(1), torch.tensor(0.0), torch.tensor([True]), np.array([True]),
                np.array(1)):
        with pytest.raises(ringkv.RingKVTypeError, match="^commit must be a bool"):
            _unchanged(c, lambda: c.upsert(frame(), i64(0), bad, i64(0)))


def test_none_where_an_object_is_expected_names_the_argument():
    """None (or another type) where a ringkv object or a tensor is expected:
    RingKVTypeError naming the argument and the class, not an
    AttributeError about None (trial 20: flex_block_mask(None, ...))."""
    torch = torch_or_skip()
    import ringkv.ops as ops
    c = make()
    g = c.geometry_list
    for call, words in (
            (lambda: ringkv.flex_block_mask(None, session=0, frame_pos=0),
             "ringkv.flex_block_mask: cache must be a ringkv.LayerRingCache; got None"),
            (lambda: ringkv.Model(None), "Model: config must be a ringkv.ModelConfig; got None"),
            (lambda: ringkv.visible_frames_from_clock(None, 0),
             "geometry must be a ringkv.LayerGeometry (e.g. cache.geometry); got None"),
            (lambda: c.attend(np.zeros((1, 1, 128, 4), F32), [0], [0], pool=3),
             "pool must be a ringkv.ThreadPool; got 3 (int)"),
            (lambda: ops.model_key(None), "model must be a ringkv.Model; got None"),
            (lambda: ops.ring_scatter(None, torch.from_numpy(c.written), torch.tensor([0]),
                                      torch.zeros(1), True),
             "ringkv.ops.ring_scatter: cache must be a torch.Tensor; got None"),
            (lambda: ops.upsert(torch.from_numpy(c.kv), torch.from_numpy(c.written), None,
                                torch.tensor([0]), torch.tensor([0]), g, True,
                                ops.error_word("cpu")),
             "ringkv.ops.upsert: kv must be a torch.Tensor; got None"),
            (lambda: ops.visible_row(None, torch.tensor([0]), torch.tensor([0]), g,
                                     ops.error_word("cpu")),
             "ringkv.ops.visible_row: written must be a torch.Tensor; got None"),
            (lambda: ops.attend(torch.from_numpy(c.kv), torch.from_numpy(c.written), None,
                                torch.tensor([0]), torch.tensor([0]), None, g, 1.0, None,
                                ops.error_word("cpu")),
             "ringkv.ops.attend: q must be a torch.Tensor; got None"),
            (lambda: ops.check_error(None, ops.error_word("cpu"), g),
             "ringkv.ops.check_error: written must be a torch.Tensor; got None"),
            (lambda: ringkv.inspect_snapshot(3),
             "source must be a file path (a str or os.PathLike) or a snapshot image")):
        with pytest.raises(ringkv.RingKVTypeError) as info:
            call()
        assert words in str(info.value), str(info.value)


@pytest.mark.parametrize("name, call", [
    ("num_sessions", lambda: ringkv.LayerRingCache(True, 1, 4, 3, 4, 128, 1, "f32")),
    ("pinned_dilation", lambda: ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, np.True_, "f32")),
    ("session_idx", lambda: make().reset(True)),
    ("session_idx", lambda: make().session_span(False)),
    ("frame_pos", lambda: make().visible_frames(0, True)),
    ("layer", lambda: ringkv.Model.from_preset("demo").layer(False)),
    ("num_sessions", lambda: ringkv.preset("demo", num_sessions=True)),
    ("num_sessions", lambda: ringkv.Model(ringkv.ModelConfig(**{
        **vars(ringkv.preset("demo")), "num_sessions": True}))),
    ("n_threads", lambda: ringkv.ThreadPool(True)),
])
def test_counts_refuse_bools(name, call):
    with pytest.raises(ringkv.RingKVTypeError,
                       match=rf"^(?:[\w.]+: )?{name} must be an int, not a bool"):
        call()


@pytest.mark.parametrize("bad", [[True], [0.7], ["1"], (np.True_,)])
def test_index_lists_hold_integers_only(bad):
    """NumPy would read [True] as session 1, [0.7] as 0 and ["1"] as 1."""
    c = make()
    with pytest.raises(ringkv.RingKVArrayError):
        _unchanged(c, lambda: c.upsert(frame(), bad, True, i64(0)))
    with pytest.raises(ringkv.RingKVArrayError):
        _unchanged(c, lambda: c.upsert(frame(), i64(0), True, bad))
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    m.claim("a")
    with pytest.raises(ringkv.RingKVArrayError):
        m.begin_frame(bad, [0])
    assert m.clock(0) is None
    assert make().attend(np.zeros((1, 1, 128, 4), F32), [np.int64(0)], (0,)).shape == (1, 1, 128, 4)


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


# ---- one exception class per mistake, whichever entry point finds it ------------
#
# Each row: (mistake, entry point, call). The class of each mistake is
# MISTAKES[mistake] (ringkv/errors.py has the table); every row must raise
# exactly that class, so one mistake never raises two types from two entry
# points (the input: a wrong kv dtype raised RuntimeError from
# LayerRingCache.upsert and ValueError from Model.upsert; a bad layer a plain
# IndexError from Model).

MISTAKES = {
    "wrong Python type": ringkv.RingKVTypeError,
    "copy or pickle refused": ringkv.RingKVTypeError,
    "unknown dtype": ringkv.RingKVDtypeError,
    "unknown device or array on another device": ringkv.RingKVDeviceError,
    "array shape, dtype or layout": ringkv.RingKVArrayError,
    "index out of range": ringkv.RingKVIndexError,
    "bad value": ringkv.RingKVValueError,
    "unknown name": ringkv.RingKVKeyError,
    "wrong state": ringkv.RingKVRuntimeError,
    "file input/output": ringkv.RingKVOSError,
}

F32 = np.float32


class Env:
    """A fresh layer (S 2, H 2, D 64, T 128, PD 2, f32) and a demo model
    (S 2, Hq = H = 1, D 64, T 128, f32) whose session 0 ("a") committed
    frame 0; session 1 is not claimed."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.layer = ringkv.LayerRingCache(2, 2, 4, 3, 64, 128, 2, "f32")
        self.kv = np.zeros((2, 1, 2, 128, 64), F32)
        self.q = np.zeros((1, 4, 128, 64), F32)
        self.model = ringkv.Model.from_preset("demo", num_sessions=2)
        self.model.claim("a")
        self.model.begin_frame([0], [0])
        self.mkv = np.zeros((2, 1, 1, 128, 64), F32)
        self.mq = np.zeros((1, 1, 128, 64), F32)
        for layer in range(2):
            self.model.upsert(layer, [0], self.mkv, True)
        self.snap = self.model.snapshot(0)
        self.image = self.model.save_session_bytes(0)
        self.path = str(tmp / "a.safetensors")
        self.model.save_session(0, self.path)
        self.cfg = ringkv.preset("demo")
        self.geometry = self.layer.geometry

    def foreign_meta(self):
        """The metadata of a session "f" of another demo model (clock none)."""
        other = ringkv.Model.from_preset("demo", num_sessions=1)
        return other.export_meta(other.claim("f"))

    def in_frame(self):
        self.model.begin_frame([0], [1])
        return self.model

    def closed_pool(self):
        pool = ringkv.ThreadPool(1)
        pool.close()
        return pool

    def with_cfg(self, **changes):
        cfg = ringkv.preset("demo")
        for k, v in changes.items():
            setattr(cfg, k, v)
        return cfg

    def meta(self, shape, dtype="float32"):
        torch = torch_or_skip()
        return torch.zeros(shape, dtype=getattr(torch, dtype), device="meta")


def i64(*xs):
    return np.array(xs, dtype=np.int64)


L = "LayerRingCache."
M = "Model."
ROWS = [
    # -- a wrong Python type ------------------------------------------------------
    ("wrong Python type", L + "__init__",
     lambda e: ringkv.LayerRingCache("2", 2, 4, 3, 64, 128, 2, "f32")),
    ("wrong Python type", L + "__init__",
     lambda e: ringkv.LayerRingCache(2, 2, 4, 3, 64.0, 128, 2, "f32")),
    ("wrong Python type", L + "session_span", lambda e: e.layer.session_span("0")),
    ("wrong Python type", L + "reset", lambda e: e.layer.reset(1.0)),
    ("wrong Python type", L + "visible_frames", lambda e: e.layer.visible_frames(0, 1.5)),
    ("wrong Python type", L + "visible_row", lambda e: e.layer.visible_row(None, 0)),
    ("wrong Python type", L + "block_mask", lambda e: e.layer.block_mask("0", 0)),
    ("wrong Python type", L + "attend", lambda e: e.layer.attend(e.q, [0], [0], pool=object())),
    ("wrong Python type", L + "attend", lambda e: e.layer.attend(e.q, [0], [0], scale="x")),
    ("wrong Python type", "visible_frames_from_clock",
     lambda e: ringkv.visible_frames_from_clock(e.geometry, "3")),
    ("wrong Python type", "visible_frames_from_clock",
     lambda e: ringkv.visible_frames_from_clock(tuple(e.geometry), 3)),
    ("wrong Python type", M + "__init__", lambda e: ringkv.Model({"name": "demo"})),
    ("wrong Python type", M + "__init__", lambda e: ringkv.Model(e.with_cfg(name=5))),
    ("wrong Python type", M + "from_preset", lambda e: ringkv.Model.from_preset(3)),
    ("wrong Python type", M + "layer", lambda e: e.model.layer("0")),
    ("wrong Python type", M + "claim", lambda e: e.model.claim(7)),
    ("wrong Python type", M + "lookup", lambda e: e.model.lookup(None)),
    ("wrong Python type", M + "release", lambda e: e.model.release("0")),
    ("wrong Python type", M + "reset", lambda e: e.model.reset(0.0)),
    ("wrong Python type", M + "clock", lambda e: e.model.clock([0])),
    ("wrong Python type", M + "fork", lambda e: e.model.fork(0, "1")),
    ("wrong Python type", M + "snapshot", lambda e: e.model.snapshot("0")),
    ("wrong Python type", M + "restore", lambda e: e.model.restore("0", e.snap)),
    ("wrong Python type", M + "restore", lambda e: e.model.restore(0, 12345)),
    ("wrong Python type", M + "save_session", lambda e: e.model.save_session(0, 5.5)),
    ("wrong Python type", M + "load_session", lambda e: e.model.load_session(0, None)),
    ("wrong Python type", M + "save_session_bytes", lambda e: e.model.save_session_bytes("0")),
    ("wrong Python type", M + "load_session_bytes", lambda e: e.model.load_session_bytes(0, 3.5)),
    ("wrong Python type", M + "upsert", lambda e: e.model.upsert("0", [0], e.mkv, False)),
    ("wrong Python type", M + "attend", lambda e: e.model.attend(1.5, [0], e.mq)),
    ("wrong Python type", M + "attend", lambda e: e.model.attend(0, [0], e.mq, pool="pool")),
    ("wrong Python type", M + "step", lambda e: e.model.step(None, [0], e.mkv, False, e.mq)),
    ("wrong Python type", "ModelConfig.layer_geometry", lambda e: e.cfg.layer_geometry("0")),
    ("wrong Python type", "ModelConfig.memory",
     lambda e: e.with_cfg(layers=[(16, 16, 1)]).memory()),
    ("wrong Python type", "ThreadPool.__init__", lambda e: ringkv.ThreadPool("2")),
    ("wrong Python type", "preset", lambda e: ringkv.preset(b"demo")),
    ("wrong Python type", "flex_block_mask", lambda e: ringkv.flex_block_mask(e.layer, "0", 1)),
    ("wrong Python type", M + "flex_block_mask", lambda e: e.model.flex_block_mask("0", 0, 1)),
    ("wrong Python type", "inspect_snapshot", lambda e: ringkv.inspect_snapshot(12345)),
    # None where a ringkv object is expected: the argument named, not an
    # AttributeError about None (trial 20)
    ("wrong Python type", "flex_block_mask",
     lambda e: ringkv.flex_block_mask(None, session=0, frame_pos=0)),
    ("wrong Python type", M + "__init__", lambda e: ringkv.Model(None)),
    ("wrong Python type", M + "transfer_session", lambda e: e.model.transfer_session(0, None, 1)),
    ("wrong Python type", "visible_frames_from_clock",
     lambda e: ringkv.visible_frames_from_clock(None, 3)),
    ("wrong Python type", M + "__init__", lambda e: ringkv.Model(e.with_cfg(layers=None))),
    ("wrong Python type", "ModelConfig.memory", lambda e: e.with_cfg(layers=None).memory()),
    ("wrong Python type", "inspect_snapshot", lambda e: ringkv.inspect_snapshot(None)),
    ("copy or pickle refused", "ThreadPool.__copy__", lambda e: copy.copy(ringkv.ThreadPool(1))),
    ("copy or pickle refused", "ThreadPool.__deepcopy__",
     lambda e: copy.deepcopy(ringkv.ThreadPool(1))),
    ("copy or pickle refused", "ThreadPool.__reduce__",
     lambda e: pickle.dumps(ringkv.ThreadPool(1))),
    # -- an unknown dtype -----------------------------------------------------------
    ("unknown dtype", L + "__init__",
     lambda e: ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, "f64")),
    ("unknown dtype", L + "__init__",
     lambda e: ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, np.int32)),
    ("unknown dtype", L + "__init__",
     lambda e: ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, object())),
    ("unknown dtype", L + "attend", lambda e: e.layer.attend(e.q, [0], [0], out_dtype="int8")),
    ("unknown dtype", M + "attend", lambda e: e.model.attend(0, [0], e.mq, out_dtype="f64")),
    ("unknown dtype", M + "__init__", lambda e: ringkv.Model(e.with_cfg(dtype="f64"))),
    ("unknown dtype", "ModelConfig.memory", lambda e: e.with_cfg(dtype="double").memory()),
    ("unknown dtype", "LayerGeometry.check",
     lambda e: e.geometry._replace(dtype="f64").check()),
    ("unknown dtype", "convert", lambda e: ringkv.convert(np.zeros(4, F32), "f64")),
    ("unknown dtype", "convert",
     lambda e: ringkv.convert(np.zeros(4, np.uint16), "f32", from_dtype="x")),
    ("unknown dtype", "dtype_size", lambda e: ringkv.dtype_size("f8")),
    # None is no dtype (NumPy would read it as float64)
    ("unknown dtype", "dtype_size", lambda e: ringkv.dtype_size(None)),
    ("unknown dtype", L + "__init__",
     lambda e: ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, None)),
    ("unknown dtype", M + "__init__", lambda e: ringkv.Model(e.with_cfg(dtype=None))),
    # -- a device -------------------------------------------------------------------
    ("unknown device or array on another device", L + "__init__",
     lambda e: ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, "f32", "tpu")),
    ("unknown device or array on another device", L + "upsert",
     lambda e: e.layer.upsert(e.meta((2, 1, 2, 128, 64)), i64(0), True, i64(0))),
    ("unknown device or array on another device", L + "attend",
     lambda e: e.layer.attend(e.meta((1, 4, 128, 64)), [0], [0])),
    ("unknown device or array on another device", M + "__init__",
     lambda e: ringkv.Model(e.with_cfg(), device="tpu")),
    ("unknown device or array on another device", M + "upsert",
     lambda e: e.in_frame().upsert(0, [0], e.meta((2, 1, 1, 128, 64)), False)),
    ("unknown device or array on another device", M + "attend",
     lambda e: e.model.attend(0, [0], e.meta((1, 1, 128, 64)))),
    # -- an array's shape, dtype or layout ------------------------------------------
    ("array shape, dtype or layout", L + "upsert",
     lambda e: e.layer.upsert(e.kv.astype(np.float16), i64(0), True, i64(0))),
    ("array shape, dtype or layout", L + "upsert",
     lambda e: e.layer.upsert(e.kv[:, :, :1], i64(0), True, i64(0))),
    ("array shape, dtype or layout", L + "upsert",
     lambda e: e.layer.upsert(e.kv, np.array([0], np.int32), True, i64(0))),
    ("array shape, dtype or layout", L + "upsert",
     lambda e: e.layer.upsert(e.kv, i64(0), True, i64(0, 1))),
    ("array shape, dtype or layout", L + "attend",
     lambda e: e.layer.attend(e.q.astype(np.int32), [0], [0])),
    ("array shape, dtype or layout", L + "attend",
     lambda e: e.layer.attend(np.zeros((1, 3, 128, 64), F32), [0], [0])),   # Hq % H
    ("array shape, dtype or layout", L + "attend",
     lambda e: e.layer.attend(e.q, [0], np.array([0], np.int32))),
    ("array shape, dtype or layout", L + "attend", lambda e: e.layer.attend(e.q, [0], [0, 1])),
    ("array shape, dtype or layout", L + "attend",
     lambda e: e.layer.attend(e.q, [0], visible=np.ones(10, bool))),
    ("array shape, dtype or layout", L + "attend",
     lambda e: e.layer.attend(e.q, [0], [0],
                              out=np.zeros((1, 4, 64, 128), F32).transpose(0, 1, 3, 2))),
    ("array shape, dtype or layout", M + "begin_frame",
     lambda e: e.model.begin_frame(np.array([0], np.int32), [1])),
    ("array shape, dtype or layout", M + "begin_frame", lambda e: e.model.begin_frame([0], [1, 2])),
    ("array shape, dtype or layout", M + "upsert",                     # the input
     lambda e: e.in_frame().upsert(0, [0], e.mkv.astype(np.float16), False)),
    ("array shape, dtype or layout", M + "upsert",
     lambda e: e.in_frame().upsert(0, [0], e.mkv[..., :32], False)),
    ("array shape, dtype or layout", M + "upsert",
     lambda e: e.in_frame().upsert(0, [[0]], e.mkv, False)),
    ("array shape, dtype or layout", M + "attend",
     lambda e: e.model.attend(0, [0], np.zeros((1, 2, 128, 64), F32))),   # Hq != model's
    ("array shape, dtype or layout", M + "attend",
     lambda e: e.model.attend(0, [0], e.mq.astype(np.int32))),
    ("array shape, dtype or layout", M + "attend",
     lambda e: e.model.attend(0, [0], e.mq, out=np.zeros((1, 1, 128, 32), F32))),
    ("array shape, dtype or layout", M + "step",
     lambda e: e.in_frame().step(0, [0], e.mkv.astype(np.float16), False, e.mq)),
    ("array shape, dtype or layout", M + "step",
     lambda e: e.in_frame().step(0, [0], e.mkv, False, e.mq[:, :, :, :8])),
    ("array shape, dtype or layout", "convert",
     lambda e: ringkv.convert(np.zeros(4, np.int32), "f32")),
    # -- an index out of range ---------------------------------------------------------
    ("index out of range", L + "session_span", lambda e: e.layer.session_span(2)),
    ("index out of range", L + "reset", lambda e: e.layer.reset(-1)),
    ("index out of range", L + "upsert", lambda e: e.layer.upsert(e.kv, i64(0), True, i64(2))),
    ("index out of range", L + "attend", lambda e: e.layer.attend(e.q, [5], [0])),
    ("index out of range", L + "visible_frames", lambda e: e.layer.visible_frames(2, 0)),
    ("index out of range", L + "visible_row", lambda e: e.layer.visible_row(2, 0)),
    ("index out of range", L + "block_mask", lambda e: e.layer.block_mask(2 ** 70, 0)),
    ("index out of range", M + "layer", lambda e: e.model.layer(2)),           # the input
    ("index out of range", M + "layer", lambda e: e.model.layer(-1)),
    ("index out of range", M + "upsert", lambda e: e.in_frame().upsert(2, [0], e.mkv, False)),
    ("index out of range", M + "upsert", lambda e: e.in_frame().upsert(0, [5], e.mkv, False)),
    ("index out of range", M + "attend", lambda e: e.model.attend(7, [0], e.mq)),
    ("index out of range", M + "attend", lambda e: e.model.attend(0, [2], e.mq)),
    ("index out of range", M + "step", lambda e: e.in_frame().step(9, [0], e.mkv, False, e.mq)),
    ("index out of range", M + "release", lambda e: e.model.release(2)),
    ("index out of range", M + "reset", lambda e: e.model.reset(5)),
    ("index out of range", M + "clock", lambda e: e.model.clock(-1)),
    ("index out of range", M + "begin_frame", lambda e: e.model.begin_frame([2], [1])),
    ("index out of range", M + "fork", lambda e: e.model.fork(0, 2)),
    ("index out of range", M + "snapshot", lambda e: e.model.snapshot(3)),
    ("index out of range", M + "restore", lambda e: e.model.restore(2, e.snap)),
    ("index out of range", M + "save_session", lambda e: e.model.save_session(2, e.path)),
    ("index out of range", M + "load_session", lambda e: e.model.load_session(2, e.path)),
    ("index out of range", M + "save_session_bytes", lambda e: e.model.save_session_bytes(2)),
    ("index out of range", M + "load_session_bytes",
     lambda e: e.model.load_session_bytes(2, e.image)),
    ("index out of range", "ModelConfig.layer_geometry", lambda e: e.cfg.layer_geometry(2)),
    ("index out of range", "flex_block_mask", lambda e: ringkv.flex_block_mask(e.layer, 2, 1)),
    ("index out of range", M + "flex_block_mask", lambda e: e.model.flex_block_mask(2, 0, 1)),
    ("index out of range", M + "flex_block_mask", lambda e: e.model.flex_block_mask(0, 5, 1)),
    # -- a bad value -----------------------------------------------------------------------
    ("bad value", L + "__init__", lambda e: ringkv.LayerRingCache(1, 1, 4, 5, 4, 128, 1, "f32")),
    ("bad value", L + "__init__",
     lambda e: ringkv.LayerRingCache(1, 1, 4, 3, 4, 128, 1, "f32", array_kind="jax")),
    ("bad value", L + "upsert",
     lambda e: e.layer.upsert(np.zeros((2, 1, 2, 256, 64), F32), i64(0, 1), True, i64(1, 1),
                              build_visibility=False)),
    ("bad value", L + "upsert", lambda e: e.layer.upsert(e.kv, i64(-1), True, i64(0))),
    ("bad value", L + "attend", lambda e: e.layer.attend(e.q, [0], [-2])),
    ("bad value", L + "attend", lambda e: e.layer.attend(e.q, [0])),
    ("bad value", L + "attend", lambda e: e.layer.attend(e.q, [0], [0], pool=e.closed_pool())),
    ("bad value", L + "visible_frames", lambda e: e.layer.visible_frames(0, -1)),
    ("bad value", L + "visible_row", lambda e: e.layer.visible_row(0, -1)),
    ("bad value", L + "block_mask", lambda e: e.layer.block_mask(0, -1)),
    ("bad value", "flex_block_mask", lambda e: ringkv.flex_block_mask(e.layer, 0, -1)),
    ("bad value", L + "views", lambda e: e.layer.views("jax")),
    ("bad value", "visible_frames_from_clock",
     lambda e: ringkv.visible_frames_from_clock(e.geometry, -1)),
    ("bad value", "LayerGeometry.check", lambda e: e.geometry._replace(ring_buckets=0).check()),
    ("bad value", M + "__init__", lambda e: ringkv.Model(e.with_cfg(n_kv_heads=0))),
    ("bad value", M + "__init__", lambda e: ringkv.Model(e.with_cfg(), stream=object())),
    ("bad value", M + "begin_frame", lambda e: e.model.begin_frame([0], [-1])),  # was RuntimeError
    ("bad value", M + "begin_frame", lambda e: e.model.begin_frame([0, 0], [1, 1])),
    ("bad value", M + "upsert", lambda e: e.in_frame().upsert(0, [0, 0], np.zeros(
        (2, 1, 1, 256, 64), F32), False)),
    ("bad value", M + "attend",
     lambda e: e.model.attend(0, [0, 0], np.zeros((2, 1, 128, 64), F32))),
    ("bad value", M + "attend", lambda e: e.model.attend(0, [0], e.mq, pool=e.closed_pool())),
    ("bad value", M + "step", lambda e: e.in_frame().step(0, [0, 0], np.zeros(
        (2, 1, 1, 256, 64), F32), False, np.zeros((2, 1, 128, 64), F32))),
    ("bad value", M + "claim", lambda e: e.model.claim("")),
    ("bad value", M + "claim", lambda e: e.model.claim("a\0b")),
    ("bad value", M + "lookup", lambda e: e.model.lookup("x" * 300)),
    ("bad value", M + "fork", lambda e: e.model.fork(0, 0)),
    ("bad value", M + "restore", lambda e: e.model.restore(0, b"not a snapshot")),
    ("bad value", M + "load_session_bytes", lambda e: e.model.load_session_bytes(0, b"garbage")),
    ("bad value", "inspect_snapshot", lambda e: ringkv.inspect_snapshot(b"garbage")),
    ("bad value", "inspect_snapshot",
     lambda e: ringkv.inspect_snapshot(os.fsencode(e.tmp / "x.rkv"))),
    ("bad value", "ModelConfig.memory", lambda e: e.with_cfg(d_head=0).memory()),
    ("bad value", "ThreadPool.__init__", lambda e: ringkv.ThreadPool(-1)),
    ("bad value", "ThreadPool.__init__", lambda e: ringkv.ThreadPool(2 ** 40)),
    # -- an unknown name ----------------------------------------------------------------
    ("unknown name", "preset", lambda e: ringkv.preset("nope")),
    ("unknown name", M + "from_preset", lambda e: ringkv.Model.from_preset("nope")),
    ("unknown name", M + "lookup", lambda e: e.model.lookup("zzz")),
    # -- the wrong state ------------------------------------------------------------------
    ("wrong state", L + "upsert",   # the reference's torch._check: RuntimeError
     lambda e: e.layer.upsert(np.zeros((2, 1, 2, 256, 64), F32), i64(0, 0), True, i64(0, 1))),
    ("wrong state", M + "upsert", lambda e: e.model.upsert(0, [0], e.mkv, False)),
    ("wrong state", M + "step", lambda e: e.model.step(0, [0], e.mkv, False, e.mq)),
    ("wrong state", M + "attend", lambda e: (e.model.claim("b"), e.model.attend(0, [1], e.mq))),
    ("wrong state", M + "begin_frame", lambda e: e.model.begin_frame([0], [5])),    # clock rule
    ("wrong state", M + "begin_frame", lambda e: e.in_frame().begin_frame([0], [2])),
    ("wrong state", M + "begin_frame", lambda e: e.model.begin_frame([1], [0])),    # not claimed
    ("wrong state", M + "snapshot", lambda e: e.in_frame().snapshot(0)),
    ("wrong state", M + "save_session", lambda e: e.in_frame().save_session(0, e.path)),
    ("wrong state", M + "save_session_bytes", lambda e: e.in_frame().save_session_bytes(0)),
    ("wrong state", M + "load_session", lambda e: e.in_frame().load_session(0, e.path)),
    ("wrong state", M + "load_session_bytes",
     lambda e: e.in_frame().load_session_bytes(0, e.image)),
    ("wrong state", M + "restore", lambda e: e.model.restore(1, e.snap)),
    ("wrong state", M + "fork", lambda e: e.model.fork(0, 1)),
    ("wrong state", M + "release", lambda e: e.model.release(1)),
    ("wrong state", M + "reset", lambda e: e.model.reset(1)),
    ("wrong state", M + "clock", lambda e: e.model.clock(1)),
    ("wrong state", M + "claim", lambda e: (e.model.claim("b"), e.model.claim("c"))),
    ("wrong state", M + "__copy__", lambda e: copy.copy(e.in_frame())),
    ("wrong state", M + "__reduce__", lambda e: pickle.dumps(_reserved_model()[0])),
    ("wrong state", M + "__reduce__", lambda e: pickle.dumps(e.in_frame())),
    # -- file input/output --------------------------------------------------------------
    ("file input/output", M + "load_session",
     lambda e: e.model.load_session(0, e.tmp / "missing.safetensors")),
    ("file input/output", M + "save_session",
     lambda e: e.model.save_session(0, e.tmp / "no-such-dir" / "x.safetensors")),
    ("file input/output", "inspect_snapshot",
     lambda e: ringkv.inspect_snapshot(e.tmp / "missing.safetensors")),
    # -- sessions that leave and move (issue 13) -------------------------------------
    ("wrong Python type", M + "offload", lambda e: e.model.offload("0")),
    ("wrong Python type", M + "offload_to_file", lambda e: e.model.offload_to_file(0, 5.5)),
    ("wrong Python type", M + "page_in", lambda e: e.model.page_in(3.5)),
    ("wrong Python type", M + "page_in_file", lambda e: e.model.page_in_file(None)),
    ("wrong Python type", M + "offloaded_clock", lambda e: e.model.offloaded_clock(7)),
    ("wrong Python type", M + "offload_discard", lambda e: e.model.offload_discard(None)),
    ("wrong Python type", M + "session_regions", lambda e: e.model.session_regions("0")),
    ("wrong Python type", M + "export_meta", lambda e: e.model.export_meta(0.0)),
    ("wrong Python type", M + "session_digest", lambda e: e.model.session_digest([0])),
    ("wrong Python type", M + "import_reserve", lambda e: e.model.import_reserve(12345)),
    ("wrong Python type", M + "import_check", lambda e: e.model.import_check("0", b"")),
    ("wrong Python type", M + "import_session", lambda e: e.model.import_session(None, b"")),
    ("wrong Python type", M + "import_cancel", lambda e: e.model.import_cancel("0")),
    ("wrong Python type", M + "transfer_session",
     lambda e: e.model.transfer_session(0, "model", 1)),
    ("index out of range", M + "offload", lambda e: e.model.offload(2)),
    ("index out of range", M + "session_regions", lambda e: e.model.session_regions(2)),
    ("index out of range", M + "export_meta", lambda e: e.model.export_meta(-1)),
    ("index out of range", M + "session_digest", lambda e: e.model.session_digest(5)),
    ("index out of range", M + "import_cancel", lambda e: e.model.import_cancel(2)),
    ("index out of range", M + "import_check",
     lambda e: e.model.import_check(2, e.model.export_meta(0))),
    ("index out of range", M + "transfer_session",
     lambda e: e.model.transfer_session(3, e.model, 1)),
    ("bad value", M + "page_in", lambda e: e.model.page_in(b"garbage")),
    ("bad value", M + "import_reserve", lambda e: e.model.import_reserve(b"garbage")),
    ("bad value", M + "import_session",
     lambda e: e.model.import_session(e.model.import_reserve(e.foreign_meta()), b"x" * 8)),
    ("unknown name", M + "offloaded_clock", lambda e: e.model.offloaded_clock("zz")),
    ("unknown name", M + "offload_discard", lambda e: e.model.offload_discard("zz")),
    ("unknown name", M + "page_in", lambda e: e.model.page_in(e.image)),   # "a" is held
    ("wrong state", M + "offload", lambda e: e.in_frame().offload(0)),
    ("wrong state", M + "offload", lambda e: e.model.offload(1)),        # not claimed
    ("wrong state", M + "offload_to_file", lambda e: e.in_frame().offload_to_file(0, e.path)),
    ("wrong state", M + "session_regions", lambda e: e.model.session_regions(1)),
    ("wrong state", M + "export_meta", lambda e: e.in_frame().export_meta(0)),
    ("wrong state", M + "session_digest", lambda e: e.in_frame().session_digest(0)),
    ("wrong state", M + "import_reserve", lambda e: e.model.import_reserve(e.model.export_meta(0))),
    ("wrong state", M + "import_check", lambda e: e.model.import_check(1, e.model.export_meta(0))),
    ("wrong state", M + "import_session",
     lambda e: e.model.import_session(1, e.model.export_meta(0))),
    ("wrong state", M + "import_cancel", lambda e: e.model.import_cancel(1)),
    ("wrong state", M + "transfer_session", lambda e: e.model.transfer_session(0, e.model, 1)),
    ("wrong state", M + "claim", lambda e: (e.model.offload(0), e.model.claim("a"))),
    ("file input/output", M + "offload_to_file",
     lambda e: e.model.offload_to_file(0, e.tmp / "no-such-dir" / "x.safetensors")),
    ("file input/output", M + "page_in_file",
     lambda e: e.model.page_in_file(e.tmp / "missing.safetensors")),
    # -- strings C cannot take whole: a NUL byte, not encodable, an empty path ----------
    ("bad value", M + "save_session", lambda e: e.model.save_session(0, str(e.tmp / "a\0b"))),
    ("bad value", M + "load_session", lambda e: e.model.load_session(0, "")),
    ("bad value", M + "offload_to_file",
     lambda e: e.model.offload_to_file(0, bytes(e.tmp / "x\0y"))),
    ("bad value", M + "page_in_file", lambda e: e.model.page_in_file(f"{e.tmp}/\ud800.rkv")),
    ("bad value", "inspect_snapshot", lambda e: ringkv.inspect_snapshot(e.tmp / "a\0b")),
    ("bad value", M + "claim", lambda e: e.model.claim("\udcff")),
    ("bad value", M + "lookup", lambda e: e.model.lookup(b"a\0")),
    ("bad value", M + "offloaded_clock", lambda e: e.model.offloaded_clock("\udcff")),
    ("bad value", M + "offload_discard", lambda e: e.model.offload_discard("a\0")),
    ("bad value", "preset", lambda e: ringkv.preset("demo\0x")),
    ("bad value", M + "from_preset", lambda e: ringkv.Model.from_preset("\udcff")),
    ("bad value", M + "__init__", lambda e: ringkv.Model(e.with_cfg(name="a\0b"))),
    ("bad value", "ModelConfig.layer_geometry",
     lambda e: e.with_cfg(name="\udcff").layer_geometry(0)),
]


@pytest.mark.parametrize("mistake, entry, call", ROWS,
                         ids=[f"{entry}-{mistake}-{i}" for i, (mistake, entry, _) in
                              enumerate(ROWS)])
def test_one_exception_class_per_mistake(mistake, entry, call, tmp_path):
    env = Env(tmp_path)
    with pytest.raises(Exception) as info:
        call(env)
    want = MISTAKES[mistake]
    assert type(info.value) is want, (f"{entry}: {mistake} raised {type(info.value).__name__} "
                                      f"({info.value}); expected {want.__name__}")


def _public_entry_points() -> set[str]:
    names = {"LayerRingCache.__init__", "Model.__init__", "ThreadPool.__init__"}
    for cls in (ringkv.LayerRingCache, ringkv.Model, ringkv.ModelConfig, ringkv.ThreadPool,
                ringkv.LayerGeometry):
        for name, member in vars(cls).items():
            if not name.startswith("_") and (inspect.isfunction(member) or
                                             isinstance(member, classmethod)):
                names.add(f"{cls.__name__}.{name}")
    names.update(n for n in ringkv.__all__ if inspect.isfunction(getattr(ringkv, n)))
    return names


# Entry points that take no argument a caller could get wrong.
NO_ARGUMENTS = {"LayerRingCache.check", "Model.synchronize", "Model.end_frame",
                "Model.abandon_frame", "ThreadPool.close", "preset_names", "version",
                "attention_isa", "cuda_device_count", "cuda_library_path"}


def test_the_table_covers_every_public_entry_point():
    covered = {entry for _, entry, _ in ROWS}
    missing = _public_entry_points() - covered - NO_ARGUMENTS
    assert sorted(missing) == [], f"entry points with no row in ROWS: {sorted(missing)}"
    assert set(MISTAKES) == {mistake for mistake, _, _ in ROWS}


def test_dual_classes_are_every_type_they_promise():
    """The classes where the reference's type and ringkv's documented one
    differ are both, so that either `except` works."""
    for cls, bases in ((ringkv.RingKVArrayError, (ValueError, RuntimeError)),
                       (ringkv.RingKVDeviceError, (ValueError, RuntimeError)),
                       (ringkv.RingKVDtypeError, (ValueError, TypeError)),
                       (ringkv.RingKVTypeError, (TypeError,))):
        assert issubclass(cls, RingKVError) and all(issubclass(cls, b) for b in bases), cls


def test_readme_names_every_exception_class():
    readme = (REPO / "python" / "README.md").read_text()
    for name in ringkv.__all__:
        if name.startswith("RingKV") and name.endswith("Error"):
            assert name in readme, name


# ---- messages name Python calls, not C functions ------------------------------------
#
# The library's messages name C calls ("rkv_model_claim: ... page it in with
# rkv_model_page_in"); the binding names the Python call that does the same
# (ringkv.errors.PYTHON_NAMES), the message otherwise identical.

# C names in library messages that no Python call does, so they stay: why.
C_ONLY = {
    "rkv_dtype_parse": "the binding parses dtypes itself",
    "rkv_attention_isa": "C API only on a layer (the binding's isa is rkv_attention_isa(NULL))",
    "rkv_layer_read_span": "C API only (the binding copies through views)",
    "rkv_layer_write_span": "C API only",
    "rkv_layer_copy_span": "C API only",
    "rkv_cuda_clock_advance": "C API only (CUDA graph replays)",
    "rkv_cuda_attention_describe": "C API only (the bench's kernel choice)",
    "rkv_model_cuda_attention_describe": "C API only",
    "rkv_model_frame_upsert": "C API only (graph capture of a whole frame)",
    "rkv_model_frame_attend": "C API only",
    "rkv_model_frame_step": "C API only",
    "rkv_model_host_alloc": "C API only (pinned image buffers)",
    "rkv_model_session_meta_bytes": "the binding sizes export_meta's buffer itself",
    "rkv_model_session_region_count": "the binding sizes session_regions' array itself",
    "rkv_model_snapshot_bytes": "only in an out-of-memory message (Model.snapshot_bytes)",
    "rkv__attend_engine": "private: ringkv bench's A/B of two CPU engines (src/cpu/isa.h)",
    # struct names in the struct_size messages (include/ringkv.h, "Structs that
    # grow"): C types; the binding's ctypes structs set struct_size themselves
    "rkv_attention_args": "a C struct's name (struct_size messages)",
    "rkv_cuda_attention_args": "a C struct's name (struct_size messages)",
    "rkv_model_config": "a C struct's name (struct_size messages)",
    "rkv_snapshot_info": "a C struct's name (struct_size messages)",
}


def _message_c_names() -> set[str]:
    """Every rkv_ name inside a string literal of src/ (comments dropped)."""
    import re
    names = set()
    for path in (REPO / "src").rglob("*"):
        if path.suffix not in (".c", ".cu", ".h", ".inc"):
            continue
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.S)
        for literal in re.findall(r'"((?:[^"\\\n]|\\.)*)"', text):
            names.update(re.findall(r"\brkv_[a-z0-9_]+", literal))
    return names


def test_every_c_name_in_a_message_has_a_python_name_or_a_reason():
    from ringkv.errors import PYTHON_NAMES
    names = _message_c_names()
    assert "rkv_model_page_in" in names and len(names) > 50, "the scan found too little"
    assert sorted(names - set(PYTHON_NAMES) - set(C_ONLY)) == [], \
        "add these to ringkv.errors.PYTHON_NAMES (or to C_ONLY with the reason)"
    assert not set(PYTHON_NAMES) & set(C_ONLY)
    for c_name, py_name in PYTHON_NAMES.items():   # each names a real Python call
        obj = ringkv
        for part in py_name.split("(")[0].removeprefix("ringkv.").split("."):
            obj = getattr(obj, part, None)
            assert obj is not None, f"{c_name} -> {py_name}: no such Python call"


def test_python_message_replaces_only_known_c_names():
    from ringkv.errors import python_message
    assert python_message("rkv_model_claim: request 'rkv_model_claim' is paged out "
                          "(rkv_model_offload); rkv_model_offload_discard, rkv_model_host_alloc, "
                          "rkv_layer*, xrkv_model_claim") == (
        "Model.claim: request 'Model.claim' is paged out (Model.offload); "
        "Model.offload_discard, rkv_model_host_alloc, rkv_layer*, xrkv_model_claim")


def test_the_trial_message_names_python_calls():
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    m.offload(m.claim("request-42"))
    with pytest.raises(ringkv.RingKVRuntimeError) as info:
        m.claim("request-42")
    assert str(info.value) == (
        "Model.claim: request 'request-42' is paged out of this model (Model.offload); page it "
        "in with Model.page_in, or drop it with Model.offload_discard, before its id is used "
        "again [RKV_ERR_STATE]")
    c = make()
    with pytest.raises(ringkv.RingKVValueError) as info:
        c.upsert(frame(), i64(-3), True, i64(0))
    assert str(info.value) == ("LayerRingCache.upsert: frame_pos[0] = -3; expected >= 0 "
                               "[RKV_ERR_INVALID_ARG]")


@pytest.mark.parametrize("mistake, entry, call", ROWS,
                         ids=[f"{entry}-{mistake}-{i}" for i, (mistake, entry, _) in
                              enumerate(ROWS)])
def test_library_messages_name_python_calls(mistake, entry, call, tmp_path):
    """Every library error of the table: the message is rkv_last_error()'s,
    each C call with a Python counterpart named as that, nothing else
    changed but the call leading it, which is the one the user made
    (test_messages_name_the_call_made)."""
    import re
    from ringkv._lib import lib
    from ringkv.errors import PYTHON_NAMES, _LEADING_CALL, python_message
    env = Env(tmp_path)
    with pytest.raises(RingKVError) as info:
        call(env)
    e = info.value
    if e.status != 0:   # (0: found by the Python layer, no library message)
        raw = python_message(lib.rkv_last_error().decode("utf-8", "replace"))
        body = _LEADING_CALL.sub("", raw, count=1)
        assert body and f"{body} [{e.status_name}]" in str(e)   # (copy/pickle wrap it)
    left = set(re.findall(r"\brkv_[a-z0-9_]+", str(e)))
    assert not left & set(PYTHON_NAMES), str(e)


# ---- messages name the call the user made --------------------------------------------

def _python_name(entry: str) -> str | None:
    """The name a message of ROWS' ``entry`` starts with (Model, ModelConfig
    and module functions), None for the drop-in's (reference wording) and
    the entries not named by the binding (copies, ThreadPool, LayerGeometry)."""
    if entry.startswith(("LayerRingCache.", "ThreadPool.", "LayerGeometry.")) or ".__" in entry \
            and not entry.endswith("__init__"):
        return None
    if entry == M + "__init__":
        return "Model"
    return entry if "." in entry else f"ringkv.{entry}"


@pytest.mark.parametrize("mistake, entry, call", ROWS,
                         ids=[f"{entry}-{mistake}-{i}" for i, (mistake, entry, _) in
                              enumerate(ROWS)])
def test_messages_name_the_call_made(mistake, entry, call, tmp_path):
    """A Model/ModelConfig method's or module function's message starts with
    its Python name whoever found the mistake (a helper, a nested public
    call, the library: ``Model.upsert(5, ...)`` is not ``Model.layer``'s
    "layer 5 out of range"); a drop-in message that names a call names the
    method called."""
    import re
    env = Env(tmp_path)
    with pytest.raises(RingKVError) as info:
        call(env)
    text = str(info.value)
    name = _python_name(entry)
    if name is not None:
        assert re.match(rf"{re.escape(name)}(\(.*?\))?: ", text), (entry, text)
    elif entry.startswith(L):
        lead = re.match(r"(LayerRingCache[\w.]*)(\(.*?\))?: ", text)
        want = "LayerRingCache" if entry == L + "__init__" else entry
        assert lead is None or lead.group(1) == want, (entry, text)


def test_model_layer_out_of_range_names_the_method():
    """The trial's Model.upsert(5, ...) and every method that takes a layer,
    NumPy and torch inputs alike."""
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    m.begin_frame([m.claim("a")], [0])
    kv, q = np.zeros((2, 1, 1, 128, 64), F32), np.zeros((1, 1, 128, 64), F32)
    calls = {"upsert": lambda x, y: m.upsert(5, [0], x, False),
             "attend": lambda x, y: m.attend(5, [0], y),
             "step": lambda x, y: m.step(5, [0], x, False, y),
             "flex_block_mask": lambda x, y: m.flex_block_mask(5, 0, 0),
             "layer": lambda x, y: m.layer(5)}
    torch = None
    try:
        import torch
    except ImportError:
        pass
    for name, call in calls.items():
        for x, y in [(kv, q)] + ([(torch.from_numpy(kv), torch.from_numpy(q))] if torch else []):
            with pytest.raises(ringkv.RingKVIndexError) as info:
                call(x, y)
            assert str(info.value) == f"Model.{name}: layer 5 out of range; expected 0..1"
    assert m.clock(0) is None


class _Path:
    """An os.PathLike (a str or bytes path)."""

    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return self.path


# Every call that takes a file path, with its argument's name.
PATH_CALLS = {
    "Model.save_session": ("path", lambda m, p: m.save_session(0, p)),
    "Model.load_session": ("path", lambda m, p: m.load_session(0, p)),
    "Model.offload_to_file": ("path", lambda m, p: m.offload_to_file(0, p)),
    "Model.page_in_file": ("path", lambda m, p: m.page_in_file(p)),
    "ringkv.inspect_snapshot": ("source", lambda m, p: ringkv.inspect_snapshot(p)),
}


# (call, kind of bad path, form): bytes are not encoded, and inspect_snapshot
# reads bytes as a snapshot image (a path is a str or an os.PathLike there).
BAD_PATHS = [(call, kind, form) for call in sorted(PATH_CALLS)
             for kind in ("nul", "empty", "unencodable") for form in ("str", "bytes", "PathLike")
             if not (kind == "unencodable" and form != "str")
             and not (call == "ringkv.inspect_snapshot" and form == "bytes")]


@pytest.mark.parametrize("call, kind, form", BAD_PATHS)
def test_bad_paths_are_refused_before_anything_is_done(call, kind, form, tmp_path):
    """A path with a NUL byte once acted on the path cut short there
    (save_session wrote d/a for d/a\\0b); an empty one gave OSError from
    load and ValueError from save. Now every path argument, as str, bytes
    or os.PathLike: ValueError (as open()) naming the call and the
    argument, nothing written, the model unchanged."""
    d = tmp_path / "d"
    d.mkdir()
    path = {"nul": f"{d}/a\0b", "empty": "", "unencodable": f"{d}/\ud800"}[kind]
    if form == "bytes":
        path = path.encode()
    elif form == "PathLike":
        path = _Path(path)
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    m.claim("a")
    before = bytes(m.snapshot(0))
    arg, fn = PATH_CALLS[call]
    with pytest.raises(ringkv.RingKVValueError) as info:
        fn(m, path)
    text = str(info.value)
    assert text.startswith(f"{call}: {arg} "), text
    assert {"nul": "contains a NUL byte", "empty": "is empty",
            "unencodable": "cannot be encoded"}[kind] in text
    assert info.value.status_name == "python"        # refused before the library call
    assert sorted(p.name for p in d.iterdir()) == []  # nothing written, not even "a"
    assert m.lookup("a") == 0 and m.offloaded_count == 0 and bytes(m.snapshot(0)) == before


def test_paths_open_would_take_still_work(tmp_path):
    """str, bytes and os.PathLike paths, non-UTF-8 bytes and the str that
    os.fsdecode makes of them included."""
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    s = m.claim("a")
    raw = bytes(tmp_path) + b"/x\xff.rkv"
    for path in (str(tmp_path / "p.rkv"), _Path(bytes(tmp_path) + b"/q.rkv"), raw,
                 os.fsdecode(raw)):
        m.save_session(s, path)
        m.load_session(s, path)
        assert ringkv.inspect_snapshot(_Path(path) if isinstance(path, bytes) else path) \
            .request_id == "a"
    assert sorted(os.listdir(bytes(tmp_path))) == [b"p.rkv", b"q.rkv", b"x\xff.rkv"]


@pytest.mark.parametrize("call, arg", [
    (lambda m: m.claim, "request_id"), (lambda m: m.lookup, "request_id"),
    (lambda m: m.offloaded_clock, "request_id"), (lambda m: m.offload_discard, "request_id"),
    (lambda m: ringkv.preset, "name"), (lambda m: ringkv.Model.from_preset, "name"),
    (lambda m: (lambda v: ringkv.Model(ringkv.ModelConfig(**{**vars(ringkv.preset("demo")),
                                                            "name": v}))), "ModelConfig.name"),
    (lambda m: (lambda v: ringkv.ModelConfig(**{**vars(ringkv.preset("demo")),
                                               "name": v}).memory()), "ModelConfig.name"),
])
@pytest.mark.parametrize("value, words", [
    ("\udcff", "cannot be encoded as UTF-8"),        # the trial's claim: a bare UnicodeEncodeError
    ("\ud800x", "cannot be encoded as UTF-8"),
    ("demo\0x", "contains a NUL byte"),              # C read "demo": accepted as the preset
    ("a\0", "contains a NUL byte"),
])
def test_strings_c_cannot_take_whole_are_value_errors(call, arg, value, words):
    """Every string the binding encodes for the library: RingKVValueError (as
    README says every error is a RingKVError) naming the argument, never a
    bare UnicodeEncodeError, never a name cut short at a NUL."""
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    with pytest.raises(ringkv.RingKVValueError) as info:
        call(m)(value)
    assert f": {arg} {value!r} {words}" in str(info.value), str(info.value)
    assert m.num_sessions == 1 and m.offloaded_count == 0


def _upsert_routes(torch, bad_frame_pos, bad_session):
    """(route, exception) of the drop-in's upsert of one bad row on every
    route: NumPy and torch input, build_visibility True and False."""
    out = []
    for kind in ("numpy", "torch"):
        for build in (True, False):
            c = ringkv.LayerRingCache(1, 1, 4, 3, 64, 128, 1, torch.float32 if kind == "torch"
                                      else "f32", "cpu")
            kv = torch.ones(2, 1, 1, 128, 64)
            fp, si = torch.tensor([bad_frame_pos]), torch.tensor([bad_session])
            if kind == "numpy":
                kv, fp, si = kv.numpy(), fp.numpy(), si.numpy()
            state = (lambda: [np.array(x.numpy() if kind == "torch" else x)
                              for x in (c.kv, c.written)])
            before = state()
            with pytest.raises(RingKVError) as info:
                c.upsert(kv, fp, True, si, build_visibility=build)
            assert all(np.array_equal(a, b) for a, b in zip(state(), before))  # nothing written
            out.append(((kind, build), info.value))
    return out


@pytest.mark.parametrize("frame_pos, session, cls, text", [
    (0, 3, ringkv.RingKVIndexError,
     "LayerRingCache.upsert: session_idx[0] = 3 is out of range; expected 0..0 [RKV_ERR_RANGE]"),
    (0, -1, ringkv.RingKVIndexError,
     "LayerRingCache.upsert: session_idx[0] = -1 is out of range; expected 0..0 [RKV_ERR_RANGE]"),
    (-1, 0, ringkv.RingKVValueError,
     "LayerRingCache.upsert: frame_pos[0] = -1; expected >= 0 [RKV_ERR_INVALID_ARG]"),
    (-1, 3, ringkv.RingKVIndexError,     # the session first, as rkv_layer_upsert
     "LayerRingCache.upsert: session_idx[0] = 3 is out of range; expected 0..0 [RKV_ERR_RANGE]"),
])
def test_dropin_upsert_says_upsert_on_every_route(frame_pos, session, cls, text, reference):
    """The trial: torch input with build_visibility (the default) said
    "LayerRingCache.visible_row: session_idx 3 out of range for 1 sessions",
    the other routes the upsert message. One type and one message now; a
    session out of range is an IndexError as the reference's index_copy_
    raises (frame_pos < 0 the reference lets through: a listed difference)."""
    torch = torch_or_skip()
    for route, exc in _upsert_routes(torch, frame_pos, session):
        assert type(exc) is cls and str(exc) == text, (route, type(exc), str(exc))
    if session != 0:   # the reference's index_copy_ fails, whatever the clock
        ref = reference.LayerRingCache(1, 1, 4, 3, 64, 128, 1, torch.float32, "cpu")
        with pytest.raises(Exception) as info:
            ref.upsert(torch.ones(2, 1, 1, 128, 64), torch.tensor([frame_pos]), True,
                       torch.tensor([session]))
        assert type(info.value) is IndexError and issubclass(cls, IndexError)


def test_a_helper_name_does_not_leak():
    """visible_row reads visible_frames, flex_block_mask the layer's rows:
    their messages name the call made."""
    c = ringkv.LayerRingCache(2, 1, 4, 3, 64, 128, 1, "f32")
    with pytest.raises(ringkv.RingKVValueError) as info:
        c.visible_row(0, -1)
    assert str(info.value).startswith("LayerRingCache.visible_row: frame_pos"), str(info.value)
    with pytest.raises(ringkv.RingKVValueError) as info:
        ringkv.flex_block_mask(c, 0, -1)
    assert str(info.value).startswith("ringkv.flex_block_mask: frame_pos"), str(info.value)


def test_stream_keys_take_any_str():
    """ringkv.ray's deterministic streams hash the request id: any str is a
    key (a lone surrogate raised a bare UnicodeEncodeError), and an id's
    tokens do not change."""
    pytest.importorskip("xxhash")
    from ringkv.ray.stream import frame_tokens
    cfg = ringkv.preset("demo")
    kv, q = frame_tokens(cfg, "\udcff", 0, 0, 0)
    assert kv.shape == (2, 1, 128, 64) and q.shape == (1, 128, 64) and np.isfinite(kv).all()
    assert not np.array_equal(kv, frame_tokens(cfg, "\udcfe", 0, 0, 0)[0])
    assert np.array_equal(frame_tokens(cfg, "é", 1, 2, 0)[0], frame_tokens(cfg, "é", 1, 2, 0)[0])


@pytest.mark.parametrize("message, name, prefix, want", [
    ("Model.layer: layer 5 out of range", "Model.upsert", True,
     "Model.upsert: layer 5 out of range"),
    ("layer 5 out of range", "Model.upsert", True, "Model.upsert: layer 5 out of range"),
    ('Model(device="cpu"): layer 0: bad', "Model.from_preset", True,
     "Model.from_preset: layer 0: bad"),
    ('Model(device="cpu"): bad', "Model", True, 'Model(device="cpu"): bad'),
    ("ringkv.preset: unknown preset 'x'", "Model.from_preset", True,
     "Model.from_preset: unknown preset 'x'"),
    ("rkv_layer_view: bad", "LayerRingCache.upsert", False, "LayerRingCache.upsert: bad"),
    ("ringkv: stream is on cuda:1", "Model.upsert", True, "Model.upsert: stream is on cuda:1"),
    # the drop-in's wording: no prefix, a bare "ringkv" and its own call stay
    ("session_idx 2 out of range for 2 sessions", "LayerRingCache.reset", False,
     "session_idx 2 out of range for 2 sessions"),
    ("ringkv: CUDA devices need", "LayerRingCache", False, "ringkv: CUDA devices need"),
    ("LayerRingCache.attend(reference=True): bad", "LayerRingCache.attend", False,
     "LayerRingCache.attend(reference=True): bad"),
    ("LayerRingCache.visible_frames: frame_pos = -1", "LayerRingCache.visible_row", False,
     "LayerRingCache.visible_row: frame_pos = -1"),
    # a device check reports an earlier call: it stays named
    ("LayerRingCache.upsert (device check): bad", "LayerRingCache.check", False,
     "LayerRingCache.upsert (device check): bad"),
    ("Model.claim: request 'x' is paged out; page it in with Model.page_in", "Model.claim",
     True, "Model.claim: request 'x' is paged out; page it in with Model.page_in"),
])
def test_called_as(message, name, prefix, want):
    from ringkv.errors import called_as
    assert called_as(message, name, prefix) == want


def _reserved_model() -> tuple:
    """A model whose session 0 holds "a" and whose session 1 is reserved
    for an import of "b" (not yet imported)."""
    src = ringkv.Model.from_preset("demo", num_sessions=2)
    src.claim("b")
    dst = ringkv.Model.from_preset("demo", num_sessions=2)
    dst.claim("a")
    return dst, dst.import_reserve(src.export_meta(0))


def test_trial2_messages_name_the_call(tmp_path):
    """ThreadPool's own checks lead with "ThreadPool:" as every other call's
    (the router's: test_ray.py)."""
    with pytest.raises(ringkv.RingKVValueError) as e:
        ringkv.ThreadPool(-1)
    assert str(e.value) == "ThreadPool: n_threads = -1; expected 0 (the machine's cores) to 1024"
    with pytest.raises(ringkv.RingKVValueError) as e:
        ringkv.ThreadPool(1025)
    assert str(e.value).startswith("ThreadPool: n_threads = 1025;")


def test_inspect_snapshot_paths_and_images(tmp_path):
    """str and os.PathLike are paths, bytes-like are images; bytes that
    cannot be an image (no NUL byte: a path, most likely) are refused
    saying how to pass a path; the request id is lossless."""
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    s = m.claim(b"\xff\xfeid")                       # not UTF-8
    path = tmp_path / "x.rkv"
    m.save_session(s, path)
    image = m.save_session_bytes(s)
    for source in (str(path), path, os.fsdecode(os.fsencode(path)), image, bytes(image),
                   memoryview(image)):
        info = ringkv.inspect_snapshot(source)
        assert info.request_id == "\udcff\udcfeid"   # surrogateescape, as os.fsdecode
        assert info.request_id_bytes == b"\xff\xfeid"
        assert m.lookup(info.request_id_bytes) == s
        with pytest.raises(ringkv.RingKVValueError, match="cannot be encoded as UTF-8"):
            m.lookup(info.request_id)                  # a str with lone surrogates: refused
    for source in (os.fsencode(path), bytearray(os.fsencode(path))):
        with pytest.raises(ringkv.RingKVValueError) as e:
            ringkv.inspect_snapshot(source)
        raw = os.fsencode(path)
        shown = raw if len(raw) <= 64 else raw[:64] + b"..."   # long ones cut at 64 bytes
        assert str(e.value).startswith(
            f"ringkv.inspect_snapshot: source is {type(source).__name__} of {len(raw)} bytes "
            f"with no NUL byte ({shown!r}): not a snapshot image")
        assert str(e.value).endswith("to inspect a file, pass its path as a str or os.PathLike "
                                     "(os.fsdecode(path) for a bytes path)")
    with pytest.raises(ringkv.RingKVValueError, match="corrupted header length"):
        ringkv.inspect_snapshot(b"\x10" + bytes(20))  # NUL bytes: read as an image
    info = ringkv.inspect_snapshot(image)
    assert copy.copy(info) == info and pickle.loads(pickle.dumps(info)) == info
