"""The golden traces (shared/golden/trace_*.txt) and attention vectors replayed
through the Python API, with NumPy and (where importable) torch inputs, and
through a CUDA layer with torch CUDA tensors where there is a CUDA device."""
from __future__ import annotations

import json

import numpy as np
import pytest

import golden_trace as gt
from conftest import GOLDEN, requires_cuda, torch_or_skip

import ringkv

TRACES = gt.traces(GOLDEN)


def test_golden_traces_present():
    assert len(TRACES) == 12, f"expected 12 golden traces under {GOLDEN}; found {len(TRACES)}"


def replay(path, kind):
    torch = torch_or_skip() if kind in ("torch", "cuda") else None
    device = "cuda" if kind == "cuda" else "cpu"
    trace = gt.parse(path)
    g = trace.geometry
    cache = ringkv.LayerRingCache(g["num_sessions"], g["n_kv_heads"], g["ring_frames"],
                                  g["ring_buckets"], g["d_head"], g["tokens_per_frame"],
                                  g["pinned_dilation"], torch.float32 if torch else "f32", device)
    assert cache.array_kind == ("torch" if torch else "numpy")
    H, D, T, N = cache.n_kv_heads, cache.d_head, cache.tokens_per_frame, cache.total_slots
    visible_checked = 0
    last_row = np.zeros(N, dtype=np.bool_)  # before any row was built: all False
    for op in trace.ops:
        if isinstance(op, gt.Reset):
            cache.reset(op.session)
            continue
        kv = gt.upsert_input(op.op, len(op.sessions), H, T, D)
        fp = np.array(op.frames, dtype=np.int64)
        si = np.array(op.sessions, dtype=np.int64)
        if torch:
            kv, fp, si = (torch.from_numpy(x).to(device) for x in (kv, fp, si))
        k, v, vis = cache.upsert(kv, fp, op.commit, si, build_visibility=op.build_visibility)
        if kind == "cuda":
            assert k.is_cuda and k.dtype == torch.float32
            assert k.data_ptr() == cache.kv.data_ptr()  # a view, not a copy
        elif torch:
            assert isinstance(k, torch.Tensor) and k.dtype == torch.float32
            assert k.data_ptr() == cache.views("numpy")[0].ctypes.data
        else:
            assert isinstance(k, np.ndarray) and np.shares_memory(k, cache.kv)
        assert tuple(k.shape) == (1, H, N, D) and tuple(v.shape) == (1, H, N, D)
        got = vis.cpu().numpy() if torch else vis
        assert got.dtype == np.bool_ and got.shape == (N,)
        if op.build_visibility:
            want = last_row = gt.ranges_to_row(op.visible, N)
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, f"{path.name} op {op.op}: visibility differs at slots {bad[:8]}"
            visible_checked += 1
        else:  # the reference's stale row: the last one built, that row itself
            assert np.array_equal(got, last_row), f"{path.name} op {op.op}: not the last row"
    cache.check()  # CUDA: no device error (synchronizes)
    want_kv, want_written = gt.expected_final(trace)
    got_kv = cache.kv.cpu().numpy() if torch else cache.kv
    got_written = cache.written.cpu().numpy() if torch else cache.written
    bad = np.argwhere(got_kv != want_kv)
    assert bad.size == 0, f"{path.name}: K/V differs at [c,0,h,slot,d] {bad[:4].tolist()}"
    assert np.array_equal(got_written, want_written), f"{path.name}: written bits differ"
    return visible_checked


@pytest.mark.parametrize("kind", ["numpy", "torch", pytest.param("cuda", marks=requires_cuda)])
@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_replay_trace(path, kind):
    assert replay(path, kind) > 0


def _attention_cases():
    meta = json.loads((GOLDEN / "attention_vectors.json").read_text())
    blob = (GOLDEN / "attention_vectors.bin").read_bytes()

    def arr(entry, dtype=np.float32):
        off, n, shape = entry
        return np.frombuffer(blob, dtype=dtype, count=n // np.dtype(dtype).itemsize,
                             offset=off).reshape(shape)

    for case in meta["cases"]:
        yield case, {name: arr(case[name], np.uint8 if name == "vis" else np.float32)
                     for name in ("q", "k", "v", "vis", "out_flex", "out_f64")}


def _rel(a, b):
    return float(np.linalg.norm((a - b).ravel()) / np.linalg.norm(b.ravel()))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
@pytest.mark.parametrize("rule", ["visible_row", "frame_pos"])
def test_attention_vectors(golden_dir, rule, device):
    torch = torch_or_skip() if device == "cuda" else None
    n = 0
    for case, a in _attention_cases():
        cache = ringkv.LayerRingCache(case["S"], case["Hkv"], case["ring_frames"],
                                      case["ring_buckets"], case["D"], case["T"],
                                      case["pinned_dilation"], "f32", device)
        assert cache.total_slots == case["slots"]
        # CUDA: the kv view is device memory; assigning host data copies it there
        put = (lambda x: torch.from_numpy(np.array(x)).to(device)) if torch \
            else (lambda x: x)
        cache.kv[0] = put(a["k"])
        cache.kv[1] = put(a["v"])
        s = case["session"]
        if rule == "visible_row":
            out = cache.attend(put(a["q"]), [s], visible=put(a["vis"].astype(bool)),
                               scale=case["scale"])
        else:
            # The bits-and-clock rule needs the written bits: the row marks the
            # session's visible ring slots; the slot hidden at this clock is
            # hidden by the rule whatever its bit.
            lo, hi = cache.session_span(s)
            cache.written[lo:lo + cache.ring_len] = put(a["vis"][lo:lo + cache.ring_len] != 0)
            if not torch:
                row = cache.visible_row(s, case["frame_pos"])
                assert np.array_equal(row, a["vis"] != 0)
            out = cache.attend(put(a["q"]), [s], [case["frame_pos"]], scale=case["scale"])
        if torch:
            cache.check()
            assert out.is_cuda
            out = out.cpu().numpy()
        assert out.shape == a["q"].shape and out.dtype == np.float32
        assert _rel(out, a["out_f64"]) <= 1e-5
        assert _rel(out, a["out_flex"]) <= 1e-5
        n += 1
    assert n == 3
