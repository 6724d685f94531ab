"""LayerRingCache on the CUDA backend (libringkv_cuda.so) with torch CUDA tensors.

Two groups:

- Without a GPU (run everywhere): the CUDA library is loaded lazily, found
  beside libringkv.so or through RINGKV_CUDA_LIBRARY, reports its errors
  through libringkv's rkv_last_error() (one instance of the core), and
  ``device="cuda"`` raises a clear RuntimeError when the library is missing or
  sees no device; device strings are parsed; the __cuda_array_interface__
  the views are built from.
- With a CUDA device (``requires_cuda``; scripts/gpu_check.sh runs them on the
  GPU machine): zero-copy views, the CPU and CUDA layers side by side (K/V,
  written bits, visibility rows, attention), device errors through check(),
  device mismatches, host index vectors, graph capture. The reference module
  on CUDA is in test_differential.py; the golden traces in test_golden.py.
"""
from __future__ import annotations

import ctypes
import gc
import os
import re

import numpy as np
import pytest

from conftest import requires_cuda, run_python, torch_or_skip

import ringkv
from ringkv import _arrays as ar
from ringkv import _lib
from ringkv.layer import _parse_device


def _cuda_library_or_skip():
    """libringkv_cuda.so, or skip where it was not built (no nvcc). It must
    load when RINGKV_CUDA_LIBRARY names it or RKV_CUDA_BUILT=1 (ctest in a
    CUDA build), and whenever it is found."""
    try:
        return _lib.cuda()
    except RuntimeError as exc:
        must = os.environ.get("RINGKV_CUDA_LIBRARY") or os.environ.get("RKV_CUDA_BUILT") == "1"
        if must or "was not found" not in str(exc):
            raise
        pytest.skip(f"libringkv_cuda.so not built: {exc}")


# ---- without a GPU --------------------------------------------------------------

def test_import_and_cpu_layers_do_not_load_the_cuda_library():
    r = run_python("""
        import ringkv
        from ringkv import _lib
        c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32", "cpu")
        c.upsert(__import__("numpy").zeros((2, 1, 1, 128, 8), "float32"), [0], True, [0])
        maps = open("/proc/self/maps").read()
        print(_lib.cuda_library_path(), "libringkv_cuda" in maps)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["None", "False"]


def test_missing_cuda_library_is_a_clear_runtime_error():
    r = run_python("""
        import ringkv
        for device in ("cuda", "cuda:0"):
            try:
                ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32", device)
            except RuntimeError as exc:
                print(type(exc).__name__, exc)
            else:
                print("no error")
        c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32")  # the CPU still works
        print("cpu", c.device, ringkv.cuda_device_count())
    """, RINGKV_CUDA_LIBRARY="/nonexistent/libringkv_cuda.so")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[2] == "cpu cpu 0", r.stdout
    for line in lines[:2]:
        assert line.startswith("RingKVRuntimeError ringkv: CUDA devices need the CUDA backend "
                               "library libringkv_cuda.so, which was not found"), line
        assert "RINGKV_CUDA_LIBRARY=/nonexistent/libringkv_cuda.so does not exist" in line
        assert "--target ringkv_cuda_shared" in line  # how to build it


def test_cuda_library_loads_and_reports_through_libringkv():
    """One core in the process: an error set by a CUDA call (a host check, no
    CUDA call made) is what libringkv's rkv_last_error() returns."""
    clib = _cuda_library_or_skip()
    assert _lib.cuda_library_path() and os.path.exists(_lib.cuda_library_path())
    g = _lib.Geometry(1, 1, 4, 4, 8, 128, 1, 0)
    assert clib.rkv_cuda_backend(0, None, None, None) == -2  # RKV_ERR_NULL
    assert _lib.lib.rkv_last_error() == b"rkv_cuda_backend: ops is NULL"
    assert clib.rkv_cuda_attention_describe(None, None, None, 0) == -2
    assert _lib.lib.rkv_last_error() == b"rkv_cuda_attention_describe: layer is NULL"
    ops, ctx = ctypes.c_void_p(), ctypes.c_void_p()
    if clib.rkv_cuda_device_count() == 0:  # the CUDA library's own check, no CUDA call made
        assert clib.rkv_cuda_backend(0, None, ctypes.byref(ops), ctypes.byref(ctx)) == -3
        assert b"sees 0 device" in _lib.lib.rkv_last_error()
    else:  # bad geometry: the core's own check, for a layer on the CUDA table
        assert clib.rkv_cuda_backend(0, None, ctypes.byref(ops), ctypes.byref(ctx)) == 0
        g.ring_buckets = 5
        assert _lib.lib.rkv_layer_create_on(ops, ctx, ctypes.byref(g),
                                            ctypes.byref(ctypes.c_void_p())) == -1
        assert b"ring_buckets" in _lib.lib.rkv_last_error()
    assert clib.rkv_cuda_device_count() >= 0
    assert ringkv.cuda_device_count() == clib.rkv_cuda_device_count()


def test_no_cuda_device_is_a_clear_runtime_error():
    _cuda_library_or_skip()
    if ringkv.cuda_device_count() != 0:
        pytest.skip("the CUDA backend sees a device here")
    torch = torch_or_skip()
    for device in ("cuda", "cuda:0", "cuda:3", torch.device("cuda"), torch.device("cuda", 1)):
        with pytest.raises(RuntimeError, match=r"sees no CUDA device: "
                                               r"rkv_cuda_device_count\(\) == 0"):
            ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, torch.float32, device)


def test_device_parsing():
    torch = pytest.importorskip("torch")
    assert _parse_device(None) == ("cpu", None)
    assert _parse_device("cpu") == ("cpu", None)
    assert _parse_device(torch.device("cpu")) == ("cpu", None)
    assert _parse_device("cuda") == ("cuda", None)
    assert _parse_device("cuda:1") == ("cuda", 1)
    assert _parse_device(torch.device("cuda", 2)) == ("cuda", 2)
    assert _parse_device(torch.device("cuda")) == ("cuda", None)
    for bad in ("gpu", "cuda:x", "cuda:-1", "cpu:1", "meta", torch.device("meta"), 0):
        with pytest.raises(ValueError, match="device"):
            _parse_device(bad)
    # a CUDA layer's views are torch tensors: asking for NumPy fails before
    # anything is loaded or allocated
    with pytest.raises(ValueError, match="torch CUDA tensors"):
        ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32", "cuda", array_kind="numpy")


def test_cpu_layer_check_is_a_no_op():
    c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32")
    assert c.check() is None


def test_cuda_array_interface_of_the_views():
    """The interface torch.as_tensor reads (version 3, C order, no stream),
    with typestrs whose sizes are the library's element sizes."""
    owner = object()
    obj = ar.CudaInterface(0x7F0000001000, (2, 1, 3, 256, 64), ar._CUDA_TYPESTR[ar.BF16], owner)
    assert obj.owner is owner
    assert obj.__cuda_array_interface__ == {
        "version": 3, "shape": (2, 1, 3, 256, 64), "typestr": "<i2",
        "data": (0x7F0000001000, False), "strides": None, "stream": None}
    for code in (ar.F32, ar.F16, ar.BF16):
        assert np.dtype(ar._CUDA_TYPESTR[code]).itemsize == \
            ringkv.dtype_size(ar.DTYPE_NAMES[code])
    assert np.dtype(ar._CUDA_TYPESTR["bool"]) == np.bool_
    assert np.dtype(ar._CUDA_TYPESTR[ar.F16]) == np.float16


# ---- with a CUDA device ---------------------------------------------------------

@pytest.fixture(scope="module")
def torch():
    return torch_or_skip((2, 5))


def i64(torch, *xs, device="cuda"):
    return torch.tensor(xs, dtype=torch.int64, device=device)


def _bits(t, torch):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


@requires_cuda
def test_views_are_the_layers_device_memory(torch):
    clib = _lib.cuda()
    c = ringkv.LayerRingCache(2, 2, 4, 3, 64, 128, 2, torch.bfloat16, "cuda")
    dev = torch.device("cuda", torch.cuda.current_device())
    assert c.device == str(dev) and c.array_kind == "torch"
    assert f"device='{dev}'" in repr(c)
    N = c.total_slots
    assert c.kv.is_cuda and c.kv.device == dev and c.kv.shape == (2, 1, 2, N, 64)
    assert c.kv.dtype == c.dtype == torch.bfloat16 and c.written.dtype == torch.bool
    assert c.kv.data_ptr() == _lib.lib.rkv_layer_kv(c._h.ptr)
    assert c.written.data_ptr() == _lib.lib.rkv_layer_written(c._h.ptr)
    assert c.memory_bytes == c.kv.numel() * c.kv.element_size()
    assert c.session_span(1) == (c.capacity, 2 * c.capacity)
    assert torch.equal(c.frame_offsets, torch.arange(128, device=dev))
    w = c.written.view(2, c.capacity).cpu()
    assert not w[:, :c.ring_len].any() and w[:, c.ring_len:].all()
    assert not c.kv.any()
    with pytest.raises(ValueError, match="device memory"):
        c.views("numpy")
    for fn in (c.visible_row, c.visible_frames, c.block_mask):
        with pytest.raises(NotImplementedError, match="CUDA layer"):
            fn(0, 1)

    x = torch.randn(2, 1, 2, 128, 64, device=dev).to(torch.bfloat16)
    k, v, vis = c.upsert(x, i64(torch, 0), True, i64(torch, 1))
    assert k.data_ptr() == c.kv.data_ptr() and v.data_ptr() == c.kv[1].data_ptr()
    assert k.shape == (1, 2, N, 64) and k.is_cuda
    lo = c.capacity  # session 1, ring slot 0 (frame 0, a write step)
    assert torch.equal(_bits(k[0, :, lo:lo + 128], torch), _bits(x[0, 0], torch))
    assert torch.equal(_bits(v[0, :, lo:lo + 128], torch), _bits(x[1, 0], torch))
    assert vis.is_cuda and vis.dtype == torch.bool and vis.shape == (N,)
    assert int(vis.sum()) == 128  # the scratch only: ring slot 0 is hidden (written next)
    c.check()
    # the views keep the device memory alive after the cache object is gone
    del c, v
    gc.collect()
    torch.cuda.synchronize()
    assert torch.equal(_bits(k[0, :, lo:lo + 128], torch), _bits(x[0, 0], torch))


def _schedule(rng, S, frames):
    """(sessions, frame, commit, build) upserts: the 4+1 schedule for each
    session in turn, then one batch of every session."""
    for f in range(frames):
        for s in range(S):
            for p in range(5):
                yield [s], f, p == 4, rng.random() < 0.5
    yield list(range(S)), frames, True, False


GEOMETRIES = [  # S, H, RF, RB, D, T, PD, dtype, Hq
    pytest.param(2, 2, 4, 3, 64, 128, 2, "bfloat16", 4, id="bf16-d64-gqa"),  # tensor cores
    pytest.param(2, 1, 3, 3, 128, 256, 1, "float16", 2, id="f16-d128"),        # tensor cores
    pytest.param(3, 2, 5, 4, 40, 128, 3, "float32", 2, id="f32-d40"),         # generic kernel
]


@requires_cuda
@pytest.mark.parametrize("S, H, RF, RB, D, T, PD, dtype, Hq", GEOMETRIES)
def test_cuda_layer_matches_cpu_layer(torch, S, H, RF, RB, D, T, PD, dtype, Hq):
    """The same upserts on a CPU and a CUDA layer: identical K/V bits, written
    bits and visibility rows; attention on the same contents agrees (both
    rules, batched rows, GQA, out dtypes)."""
    tdt = getattr(torch, dtype)
    cpu = ringkv.LayerRingCache(S, H, RF, RB, D, T, PD, tdt, "cpu")
    gpu = ringkv.LayerRingCache(S, H, RF, RB, D, T, PD, tdt, "cuda")
    dev = gpu.kv.device
    rng = np.random.default_rng(S * 100 + D)
    gen = torch.Generator().manual_seed(D)
    for sessions, f, commit, build in _schedule(rng, S, 2 * RF * PD):
        B = len(sessions)
        x = torch.randn(2, 1, H, B * T, D, generator=gen).to(tdt)
        fp, si = [f] * B, sessions
        _, _, want = cpu.upsert(x, torch.tensor(fp), commit, torch.tensor(si),
                                build_visibility=build)
        _, _, got = gpu.upsert(x.to(dev), i64(torch, *fp), commit, i64(torch, *si),
                               build_visibility=build)
        if build:
            assert torch.equal(got.cpu(), want)
    gpu.check()
    assert torch.equal(_bits(gpu.kv.cpu(), torch), _bits(cpu.kv, torch))
    assert torch.equal(gpu.written.cpu(), cpu.written)

    f = 2 * RF * PD  # every session's clock after the batch
    # GPU vs CPU, each within tests/cuda/test_cuda_diff.c's bounds of the
    # exact result (f32 generic kernel 1e-5; tensor cores bf16 1e-2, f16 3e-3,
    # plus the rounding of a 16-bit output): their sum
    rtol = {"float32": 2e-5, "float16": 1.2e-2, "bfloat16": 4e-2}[dtype]

    def close(a, b):
        a, b = a.float().cpu(), b.float()
        return float(torch.linalg.norm(a - b) / torch.linalg.norm(b)) < rtol

    q = torch.randn(S, Hq, T, D, generator=gen).to(tdt)
    sessions = list(range(S))[::-1]  # rows in any session order
    want = cpu.attend(q, torch.tensor(sessions), torch.tensor([f] * S))
    got = gpu.attend(q.to(dev), i64(torch, *sessions), i64(torch, *([f] * S)))
    assert got.is_cuda and got.dtype == tdt and got.shape == q.shape
    assert close(got, want)
    # f32 output of half inputs (the tensor-core kernel's f32 epilogue)
    got32 = gpu.attend(q.to(dev), i64(torch, *sessions), i64(torch, *([f] * S)),
                       out_dtype=torch.float32)
    assert got32.dtype == torch.float32 and close(got32, want.float())
    # a given out, and a scale
    out = torch.empty(q.shape, dtype=tdt, device=dev)
    assert gpu.attend(q.to(dev), i64(torch, *sessions), i64(torch, *([f] * S)), out=out,
                      scale=0.25) is out
    assert close(out, cpu.attend(q, torch.tensor(sessions), torch.tensor([f] * S), scale=0.25))
    # explicit visibility rows (the reference's fallback consumer): the row
    # upsert returns, on the device, for session 0 on its next frame
    x = torch.randn(2, 1, H, T, D, generator=gen).to(tdt)
    _, _, row_c = cpu.upsert(x, torch.tensor([f + 1]), False, torch.tensor([0]))
    _, _, row_g = gpu.upsert(x.to(dev), i64(torch, f + 1), False, i64(torch, 0))
    assert torch.equal(row_g.cpu(), row_c)
    q1 = q[:1]
    want = cpu.attend(q1, [0], visible=row_c)
    assert close(gpu.attend(q1.to(dev), i64(torch, 0), visible=row_g), want)
    # host index vectors and rows are copied to the device once
    assert close(gpu.attend(q1.to(dev), [0], visible=row_c), want)
    assert close(gpu.attend(q1.to(dev), np.array([0]), np.array([f + 1])),
                 cpu.attend(q1, [0], [f + 1]))
    gpu.check()


@requires_cuda
def test_device_errors_come_from_check(torch):
    """Session ids and clocks on the device are the kernel's to check: the
    call writes nothing and check() raises the library's error later."""
    c = ringkv.LayerRingCache(2, 1, 4, 4, 64, 128, 1, torch.bfloat16, "cuda")
    dev = c.kv.device
    x = torch.ones(2, 1, 1, 128, 64, device=dev, dtype=torch.bfloat16)
    x2 = torch.ones(2, 1, 1, 256, 64, device=dev, dtype=torch.bfloat16)
    written0 = c.written.clone()
    up = r"LayerRingCache\.upsert \(device check\): "  # rkv_layer_upsert, named as Python
    cases = [((x, i64(torch, 0), True, i64(torch, 2)), IndexError,
              up + r"session_idx\[0\] out of range for 2 sessions"),
             ((x, i64(torch, -1), True, i64(torch, 0)), ValueError, up + r"frame_pos\[0\] < 0"),
             ((x2, i64(torch, 0, 0), True, i64(torch, 1, 1)), ValueError,
              up + r"session_idx\[1\] repeats")]
    for args, exc, match in cases:
        c.upsert(*args, build_visibility=False)  # no host error: the values are on the device
        with pytest.raises(exc, match=match) as info:
            c.check()
        assert isinstance(info.value, ringkv.RingKVError)
        assert not c.kv.any() and torch.equal(c.written, written0)  # nothing written
        c.check()  # the error word was cleared
    # build_visibility (the default) runs the row kernel first: its device
    # check names the call made as well (rkv_layer_visible_row: upsert)
    c.upsert(x, i64(torch, 0), True, i64(torch, 2))
    with pytest.raises(IndexError, match=up + r"session_idx\[0\] out of range for 2 sessions"):
        c.check()
    assert not c.kv.any() and torch.equal(c.written, written0)
    q = torch.ones(1, 1, 128, 64, device=dev, dtype=torch.bfloat16)
    c.attend(q, i64(torch, 5), i64(torch, 0))
    with pytest.raises(IndexError, match=r"LayerRingCache\.attend \(device check\)"):
        c.check()
    # host checks still raise at once, as on the CPU
    with pytest.raises(IndexError):
        c.reset(2)
    with pytest.raises(RuntimeError, match="only supports B == 1"):
        c.upsert(x2, i64(torch, 0, 0), True, i64(torch, 0, 1), build_visibility=True)
    c.check()


@requires_cuda
def test_device_mismatches_raise_and_write_nothing(torch):
    c = ringkv.LayerRingCache(1, 1, 4, 4, 64, 128, 1, torch.float32, "cuda")
    dev = c.kv.device
    host = torch.ones(2, 1, 1, 128, 64)
    for kv, where in ((host, "on cpu"), (host.numpy(), "on host memory (a NumPy array)")):
        with pytest.raises(ringkv.RingKVDeviceError,
                           match=re.escape(f"kv is {where}, but the layer is on {dev}")):
            c.upsert(kv, [0], True, [0])
    with pytest.raises(ringkv.RingKVDeviceError, match=f"q is on cpu, but the layer is on {dev}"):
        c.attend(torch.ones(1, 1, 128, 64), [0], [0])
    with pytest.raises(ringkv.RingKVDeviceError, match="out is on cpu"):
        c.attend(torch.ones(1, 1, 128, 64, device=dev), [0], [0], out=torch.empty(1, 1, 128, 64))
    meta = torch.zeros(1, dtype=torch.int64, device="meta")
    with pytest.raises(ringkv.RingKVDeviceError, match="frame_pos is on meta"):
        c.upsert(host.to(dev), meta, True, [0])
    cpu_layer = ringkv.LayerRingCache(1, 1, 4, 4, 64, 128, 1, torch.float32, "cpu")
    with pytest.raises(ringkv.RingKVDeviceError, match=f"on {dev}, but the layer is on cpu"):
        cpu_layer.upsert(host.to(dev), [0], True, [0])
    with pytest.raises(ringkv.RingKVDeviceError, match=f"on {dev}, but the layer is on cpu"):
        cpu_layer.attend(torch.ones(1, 1, 128, 64, device=dev), [0], [0])
    if torch.cuda.device_count() > 1:
        other = torch.device("cuda", (dev.index + 1) % torch.cuda.device_count())
        with pytest.raises(ringkv.RingKVDeviceError, match=f"on {other}, but the layer is on "
                                                           f"{dev}"):
            c.upsert(host.to(other), [0], True, [0])
        with pytest.raises(ringkv.RingKVDeviceError, match="session_idx"):
            c.upsert(host.to(dev), [0], True, i64(torch, 0, device=other))
    c.check()
    assert not c.kv.any() and not cpu_layer.kv.any()


@requires_cuda
def test_noncontiguous_and_host_index_inputs(torch):
    a = ringkv.LayerRingCache(2, 2, 4, 4, 64, 128, 1, torch.float32, "cuda")
    b = ringkv.LayerRingCache(2, 2, 4, 4, 64, 128, 1, torch.float32, "cuda")
    dev = a.kv.device
    x = torch.randn(2, 1, 64, 128, 2, device=dev).transpose(2, 4)  # [2,1,2,128,64]
    assert not x.is_contiguous()
    a.upsert(x, i64(torch, 3), True, i64(torch, 1))
    b.upsert(x.contiguous()[:, 0], [3], True, np.array([1]))  # 4-D kv, host vectors
    x1 = torch.randn(2, 1, 2, 128, 64)
    a.upsert(x1.to(dev), torch.tensor([4]), True, torch.tensor([0]))  # CPU tensors
    b.upsert(x1.to(dev), i64(torch, 4), True, i64(torch, 0))
    a.check()
    b.check()
    assert torch.equal(a.kv, b.kv) and torch.equal(a.written, b.written)
    a.reset(1)
    lo, hi = a.session_span(1)
    assert not a.kv[:, :, :, lo:hi].any()
    assert not a.written[lo:lo + a.ring_len].any() and a.written[lo + a.ring_len:hi].all()
    assert torch.equal(a.kv[:, :, :, :lo], b.kv[:, :, :, :lo])


@requires_cuda
def test_side_stream_and_graph_capture(torch):
    """upsert and attend enqueue on torch's current stream; with device
    tensors for every argument a frame's passes capture into a CUDA graph
    that replays frame after frame with the clock advanced on the device."""
    S, H, RF, RB, D, T, PD, Hq = 2, 2, 4, 4, 64, 128, 1, 4
    tdt = torch.bfloat16
    gpu = ringkv.LayerRingCache(S, H, RF, RB, D, T, PD, tdt, "cuda")
    cpu = ringkv.LayerRingCache(S, H, RF, RB, D, T, PD, tdt, "cpu")
    dev = gpu.kv.device
    gen = torch.Generator().manual_seed(0)
    frames = [torch.randn(2, 1, H, T, D, generator=gen).to(tdt) for _ in range(6)]
    q = torch.randn(1, Hq, T, D, generator=gen).to(tdt)
    kv_in = torch.empty(2, 1, H, T, D, dtype=tdt, device=dev)
    q_in = q.to(dev)
    fp, si = i64(torch, 0), i64(torch, 1)

    def one_frame():
        out = None
        for p in range(5):
            gpu.upsert(kv_in, fp, p == 4, si, build_visibility=False)
            out = gpu.attend(q_in, si, fp)
        return out

    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):  # frame 0 eagerly, on a side stream
        kv_in.copy_(frames[0].to(dev))
        one_frame()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    fp.fill_(1)
    with torch.cuda.graph(graph):
        out_static = one_frame()
    outs = []
    for f in range(1, 6):
        kv_in.copy_(frames[f].to(dev))
        fp.fill_(f)
        graph.replay()
        outs.append(out_static.clone())
    torch.cuda.synchronize()
    gpu.check()
    for f in range(6):
        for p in range(5):
            cpu.upsert(frames[f], torch.tensor([f]), p == 4, torch.tensor([1]),
                       build_visibility=False)
        if f:
            want = cpu.attend(q, [1], [f])
            got = outs[f - 1].float().cpu()
            assert float(torch.linalg.norm(got - want.float()) / torch.linalg.norm(want.float())) \
                < 4e-2, f
    assert torch.equal(gpu.kv.cpu().view(torch.int16), cpu.kv.view(torch.int16))
    assert torch.equal(gpu.written.cpu(), cpu.written)


# ---- a whole model on the GPU (issue 11): Model(..., device="cuda") ---------------

def _model_config(dtype="bf16"):
    """2 layers (local; global-like PD 2), S 3, Hq 4, H 2, D 64, T 128."""
    return ringkv.ModelConfig(
        name="cuda-model-test",
        layers=[ringkv.LayerSpec(4, 4, 1), ringkv.LayerSpec(4, 3, 2)],
        num_sessions=3, n_q_heads=4, n_kv_heads=2, d_head=64, tokens_per_frame=128,
        dtype=dtype)


def test_cuda_model_entry_points_without_a_device():
    """rkv_model_create_cuda through ctypes: its checks and messages come back
    through libringkv's rkv_last_error(); without a device the Python Model
    says so before anything is allocated, and a CUDA model's views cannot be
    NumPy."""
    clib = _cuda_library_or_skip()
    cfg = _model_config()._struct()
    out = ctypes.c_void_p()
    assert clib.rkv_model_create_cuda(ctypes.byref(cfg), 0, None, None) == -2  # RKV_ERR_NULL
    assert _lib.lib.rkv_last_error() == b"rkv_model_create_cuda: out is NULL"
    bad = _model_config()._struct()
    bad.n_kv_heads = 3  # Hq 4 is not a multiple: the core's own config check
    assert clib.rkv_model_create_cuda(ctypes.byref(bad), 0, None, ctypes.byref(out)) == -1
    assert out.value is None
    assert _lib.lib.rkv_model_layer(None, 0) is None
    with pytest.raises(ValueError, match="torch CUDA tensors"):
        ringkv.Model(_model_config(), device="cuda", array_kind="numpy")
    if ringkv.cuda_device_count() == 0:
        assert clib.rkv_model_create_cuda(ctypes.byref(cfg), 0, None, ctypes.byref(out)) == -3
        assert b"the CUDA runtime sees 0 device(s)" in _lib.lib.rkv_last_error()
        torch_or_skip()
        with pytest.raises(RuntimeError, match=r"sees no CUDA device"):
            ringkv.Model(_model_config(), device="cuda")


def _frame_inputs(torch, gen, cfg, B, scale=1.0):
    H, T, D, Hq = cfg.n_kv_heads, cfg.tokens_per_frame, cfg.d_head, cfg.n_q_heads
    kv = (torch.randn(2, 1, H, B * T, D, generator=gen) * scale).to(torch.bfloat16)
    q = torch.randn(B, Hq, T, D, generator=gen).to(torch.bfloat16)
    return kv, q


def _rel(got, want):
    got, want = got.float().cpu(), want.float().cpu()
    return float((got - want).norm() / want.norm())


@requires_cuda
def test_cuda_model_matches_cpu_model(torch):
    """The same frames through Model(device="cuda") and a CPU Model: every
    held session's snapshot image (K/V, written bits, clock) byte-equal after
    every frame, attention within 1e-2; reset, fork, restore, snapshot files
    across backends, copies and pickles on the same device."""
    import copy
    import pickle
    cfg = _model_config()
    gpu = ringkv.Model(cfg, device="cuda")
    cpu = ringkv.Model(cfg, array_kind="torch")
    assert gpu.device.startswith("cuda") and gpu.array_kind == "torch" and cpu.stream is None
    assert gpu.layer(0).kv.is_cuda and gpu.layer(0).kv.data_ptr() == \
        _lib.lib.rkv_layer_kv(gpu.layer(0)._h.ptr)
    dev = gpu.layer(0).kv.device
    for rid in ("a", "b", "c"):
        assert gpu.claim(rid) == cpu.claim(rid)
    gen = torch.Generator().manual_seed(3)
    clocks = {0: 0, 2: 5}

    def frame(rows, how):
        B = len(rows)
        fp = [clocks[s] for s in rows]
        gpu.begin_frame(rows, fp)
        cpu.begin_frame(rows, fp)
        for p in range(5):
            for layer in range(cfg.n_layers):
                kv, q = _frame_inputs(torch, gen, cfg, B)
                commit = p == 4
                if how == "step":
                    got = gpu.step(layer, rows, kv.to(dev), commit, q.to(dev), out_dtype="f32")
                    want = cpu.step(layer, rows, kv, commit, q, out_dtype="f32")
                else:
                    gpu.upsert(layer, rows, kv.to(dev), commit)
                    cpu.upsert(layer, rows, kv, commit)
                    got = gpu.attend(layer, rows, q.to(dev))
                    want = cpu.attend(layer, rows, q)
                assert got.is_cuda and got.shape == want.shape
                assert _rel(got, want) <= 1e-2, (rows, fp, p, layer)
        gpu.synchronize()
        for s in rows:
            clocks[s] += 1
        for s in clocks:
            assert bytes(gpu.snapshot(s)) == bytes(cpu.snapshot(s)), (rows, s)
            assert gpu.clock(s) == cpu.clock(s)

    for f in range(6):
        frame([0, 2] if f % 2 else [2, 0], "step" if f % 3 else "upsert")
    gpu.reset(0), cpu.reset(0)
    clocks[0] = 40
    frame([0], "step")
    gpu.fork(2, 1), cpu.fork(2, 1)
    clocks[1] = clocks[2]
    frame([1, 2, 0], "upsert")
    # snapshot files across backends: the GPU's image loads into the CPU model
    image = gpu.save_session_bytes(1)
    assert bytes(image) == bytes(cpu.save_session_bytes(1))
    other = ringkv.Model(cfg)
    other.claim("x")
    other.load_session_bytes(0, image)
    assert other.clock(0) == gpu.clock(1)
    back = ringkv.Model(cfg, device="cuda")
    back.claim("y")
    back.load_session_bytes(0, other.save_session_bytes(0))
    # the same state (the images' headers name other sessions: compare the data)
    data = ringkv.inspect_snapshot(image).data_bytes
    assert bytes(back.snapshot(0))[-data:] == bytes(gpu.snapshot(1))[-data:]
    assert back.clock(0) == gpu.clock(1)
    # copies and pickles: a new model on the same device, equal contents
    for twin in (copy.deepcopy(gpu), pickle.loads(pickle.dumps(gpu))):
        assert twin.device == gpu.device and twin.stream is not None
        for s in clocks:
            assert bytes(twin.snapshot(s)) == bytes(gpu.snapshot(s))


@requires_cuda
def test_cuda_model_stream_and_graph_capture(torch):
    """A model's calls run on its stream: per-pass calls made under another
    current stream are refused; a frame's per-pass calls captured once with
    torch.cuda.graph on the model's stream replay frame after frame as
    begin_frame, replay, end_frame (the capture contract), equal to a CPU
    model's frames; begin_frame inside the capture is refused."""
    cfg = _model_config()
    dev = torch.device("cuda", torch.cuda.current_device())
    s = torch.cuda.Stream(dev)
    gpu = ringkv.Model(cfg, device=dev, stream=s)
    cpu = ringkv.Model(cfg, array_kind="torch")
    assert gpu.stream is s
    gpu.claim("a"), cpu.claim("a")
    gen = torch.Generator().manual_seed(5)
    H, T, D, Hq = cfg.n_kv_heads, cfg.tokens_per_frame, cfg.d_head, cfg.n_q_heads
    kv_in = [[torch.empty(2, 1, H, T, D, dtype=torch.bfloat16, device=dev) for _ in range(2)]
             for _ in range(5)]
    q_in = torch.empty(1, Hq, T, D, dtype=torch.bfloat16, device=dev)
    gpu.begin_frame([0], [0])
    with pytest.raises(RuntimeError, match="own stream"):
        gpu.upsert(0, [0], kv_in[0][0], False)  # torch's current stream is not s
    host = {}

    def fill(f):
        host[f] = [[_frame_inputs(torch, gen, cfg, 1)[0] for _ in range(2)] for _ in range(5)]
        host[f, "q"] = _frame_inputs(torch, gen, cfg, 1)[1]
        with torch.cuda.stream(s):
            for p in range(5):
                for layer in range(2):
                    kv_in[p][layer].copy_(host[f][p][layer], non_blocking=False)
            q_in.copy_(host[f, "q"])

    def passes():
        out = None
        for p in range(5):
            for layer in range(2):
                out = gpu.step(layer, [0], kv_in[p][layer], p == 4, q_in, out_dtype="f32")
        return out

    fill(0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        with pytest.raises(RuntimeError, match="captur"):
            gpu.begin_frame([0], [0])  # its host copy must not be recorded
        out_static = passes()  # recorded: the host ends frame 0 here
    with torch.cuda.stream(s):  # replays on the model's stream, after its batch copy
        graph.replay()  # runs frame 0
    outs = {}
    for f in range(1, 8):
        with torch.cuda.stream(s):  # ordered before the next frame's inputs and replay
            outs[f - 1] = out_static.clone()
        fill(f)
        gpu.begin_frame([0], [f])
        with torch.cuda.stream(s):
            graph.replay()
        gpu.end_frame()
    with torch.cuda.stream(s):
        outs[7] = out_static.clone()
    gpu.synchronize()  # waits for s
    assert gpu.clock(0) == 7
    for f in range(8):
        cpu.begin_frame([0], [f])
        for p in range(5):
            for layer in range(2):
                want = cpu.step(layer, [0], host[f][p][layer], p == 4, host[f, "q"],
                                out_dtype="f32")
        assert _rel(outs[f], want) <= 1e-2, f
    assert bytes(gpu.snapshot(0)) == bytes(cpu.snapshot(0))
