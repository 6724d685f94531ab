"""LayerRingCache and Model with torch CPU tensors (skipped without torch)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import torch_or_skip

import ringkv


@pytest.fixture(scope="module")
def torch():
    return torch_or_skip()


def i64(torch, *xs):
    return torch.tensor(xs, dtype=torch.int64)


def test_torch_dtype_gives_torch_views(torch):
    c = ringkv.LayerRingCache(2, 2, 4, 3, 8, 128, 2, torch.float32, torch.device("cpu"))
    assert c.array_kind == "torch"
    assert isinstance(c.kv, torch.Tensor) and c.kv.shape == (2, 1, 2, c.total_slots, 8)
    assert c.written.dtype == torch.bool and c.kv.dtype == c.dtype == torch.float32
    assert c.kv.data_ptr() == c.views("numpy")[0].ctypes.data
    assert c.written.data_ptr() == c.views("numpy")[3].ctypes.data
    assert c.memory_bytes == c.kv.numel() * c.kv.element_size()
    assert torch.equal(c.frame_offsets, torch.arange(128))
    x = torch.randn(2, 1, 2, 128, 8)
    k, v, vis = c.upsert(x, i64(torch, 0), True, i64(torch, 1))
    assert isinstance(k, torch.Tensor) and k.shape == (1, 2, c.total_slots, 8)
    assert k.data_ptr() == c.kv.data_ptr() and v.data_ptr() == c.kv[1].data_ptr()
    lo = c.capacity
    assert torch.equal(k[0, :, lo:lo + 128], x[0, 0]) and torch.equal(v[0, :, lo:lo + 128], x[1, 0])
    assert vis.dtype == torch.bool and int(vis.sum()) == 128
    # numpy in -> numpy out, on the same cache
    k2, _, vis2 = c.upsert(x.numpy(), np.array([1]), False, np.array([1]))
    assert isinstance(k2, np.ndarray) and isinstance(vis2, np.ndarray)


def test_torch_bf16(torch):
    c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, torch.bfloat16, "cpu")
    assert c.kv.dtype == torch.bfloat16 and c.views("numpy")[0].dtype == np.uint16
    x = torch.randn(2, 1, 1, 128, 8).to(torch.bfloat16)
    k, v, _ = c.upsert(x, i64(torch, 0), True, i64(torch, 0))
    assert k.dtype == torch.bfloat16 and torch.equal(k[0, :, :128], x[0, 0])
    # the numpy view holds the same bits
    assert np.array_equal(c.views("numpy")[0][0, 0, 0, :128], x[0, 0, 0].view(torch.int16).numpy()
                          .view(np.uint16))
    with pytest.raises(RuntimeError, match="dtype"):
        c.upsert(x.float(), i64(torch, 0), True, i64(torch, 0))
    q = torch.randn(1, 2, 128, 8).to(torch.bfloat16)
    out = c.attend(q, i64(torch, 0), i64(torch, 1))
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), c.kv[0, :, [0, 0]][:, :, list(range(128)) + list(range(512, 640))].float(),
        c.kv[1, :, [0, 0]][:, :, list(range(128)) + list(range(512, 640))].float())
    assert torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref) < 1e-2


def test_noncontiguous_torch_input(torch):
    a = ringkv.LayerRingCache(1, 2, 4, 4, 8, 128, 1, "f32", array_kind="torch")
    b = ringkv.LayerRingCache(1, 2, 4, 4, 8, 128, 1, "f32")
    x = torch.randn(2, 1, 8, 128, 2).transpose(2, 4)  # [2,1,2,128,8], not contiguous
    assert not x.is_contiguous()
    a.upsert(x, i64(torch, 0), True, i64(torch, 0))
    b.upsert(x.contiguous().numpy(), np.array([0]), True, np.array([0]))
    assert np.array_equal(a.kv.numpy(), b.kv)


def test_non_cpu_tensors_raise(torch):
    """A CPU layer takes host memory only: a tensor on another device raises
    RingKVDeviceError (a ValueError and a RuntimeError) naming both devices,
    before anything is written."""
    c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32")
    x = torch.empty(2, 1, 1, 128, 8, device="meta")
    good = torch.ones(2, 1, 1, 128, 8)
    for args in ((x, i64(torch, 0), True, i64(torch, 0)),
                 (good, i64(torch, 0).to("meta"), True, i64(torch, 0)),
                 (good, i64(torch, 0), True, i64(torch, 0).to("meta"))):
        with pytest.raises(ringkv.RingKVDeviceError, match=r"on meta, but the layer is on cpu") \
                as exc:
            c.upsert(*args)
        assert isinstance(exc.value, ValueError) and isinstance(exc.value, RuntimeError)
    with pytest.raises(ringkv.RingKVDeviceError, match="q is a tensor on meta"):
        c.attend(torch.empty(1, 1, 128, 8, device="meta"), [0], [0])
    assert not c.written[:c.ring_len].any() and not c.kv.any()  # nothing written
    if torch.cuda.is_available():
        with pytest.raises(ringkv.RingKVDeviceError, match=r"cuda:0, but the layer is on cpu"):
            c.upsert(good.cuda(), i64(torch, 0), True, i64(torch, 0))


def test_device_hint_names_the_class_held(torch):
    """The CPU-device refusal's hint says to create on the GPU the class the
    caller holds: "the LayerRingCache" for a layer, "the Model" for a model
    (op route, direct route, session rows and attention inputs alike)."""
    meta = {"device": "meta"}
    c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32")
    with pytest.raises(ringkv.RingKVDeviceError, match=r"^ringkv: kv is a tensor "
                       r"on meta, .*create the LayerRingCache with device='cuda' to run"):
        c.upsert(torch.empty(2, 1, 1, 128, 8, **meta), i64(torch, 0), True, i64(torch, 0))
    m = ringkv.Model.from_preset("demo", num_sessions=1)
    s = m.claim("a")
    kv, q = np.zeros((2, 1, 1, 128, 64), np.float32), np.zeros((1, 1, 128, 64), np.float32)
    written = m.layer(0).written.copy()
    for call, name in ((lambda: m.upsert(0, [s], torch.empty(2, 1, 1, 128, 64, **meta), True),
                        "upsert: kv"),
                       (lambda: m.upsert(0, i64(torch, s).to("meta"), kv, True),
                        "upsert: session_idx"),
                       (lambda: m.attend(0, [s], torch.empty(1, 1, 128, 64, **meta)), "attend: q"),
                       (lambda: m.attend(0, [s], torch.empty(1, 1, 128, 64, **meta), out=q),
                        "attend: q")):
        with pytest.raises(ringkv.RingKVDeviceError, match=rf"^Model.{name} is a tensor on meta, "
                           r".*: pass a CPU tensor \(\w+.cpu\(\)\), or create the Model with "
                           r"device='cuda' to run on the GPU"):
            call()
    assert m.clock(s) is None and np.array_equal(m.layer(0).written, written)  # nothing written


def test_reference_check_messages(torch):
    c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, torch.float32, "cpu")
    x = torch.zeros(2, 1, 1, 128, 8)
    with pytest.raises(RuntimeError, match=r"frame_pos must be a \[B\] int64 tensor; got \(1,\) "
                                           r"torch.int32"):
        c.upsert(x, torch.tensor([0], dtype=torch.int32), True, i64(torch, 0))
    with pytest.raises(RuntimeError, match="session_idx must be a"):
        c.upsert(x, i64(torch, 0), True, torch.tensor([0], dtype=torch.int32))


def test_model_with_torch(torch):
    m = ringkv.Model.from_preset("demo", num_sessions=2, array_kind="torch")
    s = m.claim("a")
    assert isinstance(m.layer(0).kv, torch.Tensor)
    q = torch.randn(1, 1, 128, 64)
    for f in range(3):
        m.begin_frame(i64(torch, s), i64(torch, f))
        for p in range(5):
            for layer in range(m.n_layers):
                k, v = m.upsert(layer, i64(torch, s), torch.randn(2, 1, 1, 128, 64), p == 4)
                out = m.attend(layer, i64(torch, s), q)
                assert isinstance(k, torch.Tensor) and isinstance(out, torch.Tensor)
    assert m.clock(s) == 2
    snap = m.snapshot(s)
    t = m.claim("b")
    m.restore(t, snap)
    lay = m.layer(1)
    (a0, a1), (b0, b1) = lay.session_span(s), lay.session_span(t)
    assert torch.equal(lay.kv[:, :, :, a0:a1], lay.kv[:, :, :, b0:b1])
