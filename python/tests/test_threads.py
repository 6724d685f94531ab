"""What python/README.md's "Threads" section says: library calls release
the GIL (the library is a ctypes CDLL, not a PyDLL), concurrent readers of
one layer get the results of a serial run, and each thread's exception
carries its own call's message (rkv_last_error() is thread-local)."""
from __future__ import annotations

import ctypes
import threading

import numpy as np

import ringkv
from ringkv import _lib


def test_library_calls_release_the_gil():
    # PyDLL (a CDLL subclass) sets FUNCFLAG_PYTHONAPI: its calls keep the GIL
    for lib in (_lib.lib,):
        assert isinstance(lib, ctypes.CDLL) and not isinstance(lib, ctypes.PyDLL)
        assert not lib._func_flags_ & ctypes._FUNCFLAG_PYTHONAPI
        assert not lib.rkv_layer_attend._flags_ & ctypes._FUNCFLAG_PYTHONAPI


def _run(threads):
    errors = []

    def guard(fn):
        def body():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        return body
    ts = [threading.Thread(target=guard(fn)) for fn in threads]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_concurrent_readers_of_one_layer_match_a_serial_run():
    rng = np.random.default_rng(7)
    c = ringkv.LayerRingCache(2, 2, 4, 3, 64, 128, 2, "f32")
    for f in range(6):
        for s in (0, 1):
            kv = rng.standard_normal((2, 1, 2, 128, 64), dtype=np.float32)
            c.upsert(kv, np.array([f]), True, np.array([s]), build_visibility=False)
    qs = [rng.standard_normal((1, 4, 128, 64), dtype=np.float32) for _ in range(4)]
    want = [c.attend(q, [i % 2], [6]) for i, q in enumerate(qs)]
    got = [[None] * 8 for _ in qs]
    pools = [ringkv.ThreadPool(1) for _ in qs]

    def reader(i):
        def fn():
            for r in range(8):   # own pool or the shared default one: same bits
                got[i][r] = c.attend(qs[i], [i % 2], [6], pool=pools[i] if r % 2 else None)
        return fn
    _run([reader(i) for i in range(len(qs))])
    for i in range(len(qs)):
        assert all(np.array_equal(g, want[i]) for g in got[i]), i


def test_each_thread_gets_its_own_error_message():
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    seen: dict[int, set] = {0: set(), 1: set()}

    def failing(i):
        def fn():
            for _ in range(200):
                try:
                    m.lookup(f"missing-{i}")       # RKV_ERR_NOT_FOUND naming this thread's id
                except ringkv.RingKVKeyError as e:
                    seen[i].add(str(e))
        return fn
    _run([failing(0), failing(1)])
    for i in (0, 1):
        assert seen[i] == {f"Model.lookup: no session holds request 'missing-{i}' "
                           "[RKV_ERR_NOT_FOUND]"}, seen[i]
