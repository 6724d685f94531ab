"""Cases built from public bug reports of peer systems (sliding-window, ring
and rolling KV caches in LLM engines and world models), in the binding's
terms. Each cites its report (GitHub owner/repo#N) and the kind of fault, and
asserts the right value: the reference module (shared/spec/seed_ring_cache.py)
on torch CPU, or float64 attention over the reference's own tensors. The C
side of the same reports: tests/test_peer_reports.c.
"""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from conftest import torch_or_skip

import ringkv


@pytest.fixture(scope="module")
def torch():
    return torch_or_skip((2, 5))


def _f64_attention(torch, q, k, v, row, group):
    """float64 softmax(q k^T / sqrt(D)) v over the slots of ``row`` (bool [N]),
    query head h reading KV head h // group. q [Hq, Tq, D]; k, v [H, N, D]."""
    idx = torch.nonzero(row).flatten()
    kk = k[:, idx].double().repeat_interleave(group, dim=0)
    vv = v[:, idx].double().repeat_interleave(group, dim=0)
    s = q.double() @ kk.transpose(-1, -2) / q.shape[-1] ** 0.5
    return torch.softmax(s, dim=-1) @ vv


def _rel(torch, got, ref):
    return float(torch.linalg.vector_norm(got.double() - ref) / torch.linalg.vector_norm(ref))


@pytest.mark.parametrize("dtype,pd,rf,rb", [("float32", 1, 4, 4), ("bfloat16", 1, 5, 3),
                                            ("float32", 3, 4, 3), ("bfloat16", 8, 3, 3)])
def test_wrap_boundary_matches_reference(torch, reference, dtype, pd, rf, rb):
    """huggingface/transformers#37574 (SWA cache update wrong once the
    sequence reaches the window size), huggingface/transformers#47708
    (rolling-buffer index off by one on wrap-around). Kind: off-by-one at
    wrap-around. Every pass of 3*RB*PD + 2 frames (first fill, wraps) of two
    interleaved sessions: ringkv's K/V, written bits and visibility row equal
    the reference's bit for bit, and attention over the row (explicit, and
    by the clock rule) equals float64 over the reference's tensors."""
    tdt = getattr(torch, dtype)
    H, Hq, D, T, S = 2, 4, 8, 128, 2
    ref = reference.LayerRingCache(S, H, rf, rb, D, T, pd, tdt, "cpu")
    rk = ringkv.LayerRingCache(S, H, rf, rb, D, T, pd, tdt, "cpu")
    g = torch.Generator().manual_seed(37574)
    for f in range(3 * rb * pd + 2):
        for p in range(5):
            for s in range(S):
                kv = torch.randn(2, 1, H, T, D, generator=g).to(tdt)
                fp, si = torch.tensor([f]), torch.tensor([s])
                _, _, vref = ref.upsert(kv, fp, p == 4, si)
                vref = vref.clone()
                _, _, vrk = rk.upsert(kv, fp, p == 4, si)
                assert torch.equal(torch.as_tensor(vrk).bool(), vref), (f, p, s)
                assert torch.equal(torch.as_tensor(rk.kv).view(torch.int16 if tdt != torch.float32
                                                                 else torch.int32),
                                   ref.kv.view(torch.int16 if tdt != torch.float32
                                               else torch.int32)), (f, p, s)
                assert torch.equal(torch.as_tensor(rk.written).bool(), ref.written)
                if p in (0, 4):
                    q = torch.randn(1, Hq, T, D, generator=g)
                    want = _f64_attention(torch, q[0], ref.kv[0, 0], ref.kv[1, 0], vref,
                                          Hq // H)
                    tol = 1e-2 if tdt == torch.bfloat16 else 1e-5
                    by_row = rk.attend(q, [s], visible=vref)
                    by_clock = rk.attend(q, [s], [f])
                    assert _rel(torch, by_row[0], want) < tol, (f, p, s)
                    assert _rel(torch, by_clock[0], want) < tol, (f, p, s)


def test_deepcopy_does_not_share_storage(torch, reference):
    """huggingface/transformers#32681 and #32159 (copying a cache: copy.deepcopy
    failed or shared tensors, so a copied prompt cache was modified by the
    next request). Kind: copy sharing storage. A deep and a shallow copy of a
    wrapped layer are equal to it; writing into the copy leaves the original
    (and the reference's equally treated copy) unchanged."""
    H, D, T = 1, 8, 128
    ref = reference.LayerRingCache(1, H, 3, 3, D, T, 1, torch.float32, "cpu")
    rk = ringkv.LayerRingCache(1, H, 3, 3, D, T, 1, torch.float32, "cpu")
    g = torch.Generator().manual_seed(32681)
    for f in range(5):
        kv = torch.randn(2, 1, H, T, D, generator=g)
        ref.upsert(kv, torch.tensor([f]), True, torch.tensor([0]))
        rk.upsert(kv, torch.tensor([f]), True, torch.tensor([0]))
    for make in (copy.deepcopy, copy.copy):
        before = torch.as_tensor(rk.kv).clone(), torch.as_tensor(rk.written).clone()
        dup, rdup = make(rk), copy.deepcopy(ref)
        assert torch.equal(torch.as_tensor(dup.kv), before[0])
        kv = torch.randn(2, 1, H, T, D, generator=g)
        dup.upsert(kv, torch.tensor([5]), True, torch.tensor([0]))
        rdup.upsert(kv, torch.tensor([5]), True, torch.tensor([0]))
        assert torch.equal(torch.as_tensor(rk.kv), before[0]), make.__name__
        assert torch.equal(torch.as_tensor(rk.written), before[1]), make.__name__
        assert torch.equal(torch.as_tensor(dup.kv), rdup.kv), make.__name__
        assert torch.equal(torch.as_tensor(rk.kv), ref.kv)


def test_pickle_round_trip_mid_wrap_continues_identically(torch):
    """ggml-org/llama.cpp#827 (a saved-and-reloaded KV cache gave nonsense:
    part of the state was not saved), ggml-org/llama.cpp#26676 (restore read
    the file but the slot stayed empty). Kind: serialization losing state. A
    pickled bf16 layer with PD 2 in the middle of a wrap, reloaded, holds the
    same bytes and gives the same upserts and attention as the original."""
    H, Hq, D, T = 2, 4, 32, 128
    rk = ringkv.LayerRingCache(2, H, 3, 3, D, T, 2, torch.bfloat16, "cpu")
    g = torch.Generator().manual_seed(827)
    for f in range(9):
        for s in range(2):
            rk.upsert(torch.randn(2, 1, H, T, D, generator=g).bfloat16(), torch.tensor([f]),
                      True, torch.tensor([s]), build_visibility=False)
    back = pickle.loads(pickle.dumps(rk))
    assert torch.equal(torch.as_tensor(back.kv), torch.as_tensor(rk.kv))
    assert torch.equal(torch.as_tensor(back.written), torch.as_tensor(rk.written))
    for f in range(9, 13):
        kv = torch.randn(2, 1, H, T, D, generator=g).bfloat16()
        for c in (rk, back):
            c.upsert(kv, torch.tensor([f]), True, torch.tensor([1]), build_visibility=False)
        q = torch.randn(1, Hq, T, D, generator=g)
        assert torch.equal(rk.attend(q, [1], [f]), back.attend(q, [1], [f])), f
    assert torch.equal(torch.as_tensor(back.kv), torch.as_tensor(rk.kv))


def test_model_restore_carries_the_clock():
    """ggml-org/llama.cpp#730 (the KV-cache API could not restore the model
    state: the position n_past was lost), microsoft/onnxruntime-genai#2334
    (rewind past evicted positions must be refused). Kind: restore without
    the clock; rewind. A session snapshotted after frames 0..9 and restored
    into another session index of a second model has clock 9; frame 10 is
    accepted, a repeated or rewound frame refused, and both sessions then
    attend identically."""
    cfg = ringkv.ModelConfig(name="peer", layers=[ringkv.LayerSpec(4, 4, 1),
                                                  ringkv.LayerSpec(4, 3, 4)],
                             num_sessions=2, n_q_heads=2, n_kv_heads=1, d_head=16,
                             tokens_per_frame=128, dtype="f32")
    a, b = ringkv.Model(cfg), ringkv.Model(cfg)
    sa = a.claim("a")
    b.claim("other")
    sb = b.claim("b")
    assert sb != sa
    rng = np.random.default_rng(730)

    def frame(m, s, f, kvs, qs):
        m.begin_frame([s], [f])
        outs = []
        for p in range(5):
            for layer in range(2):
                m.upsert(layer, [s], kvs[p][layer], commit=(p == 4))
                outs.append(m.attend(layer, [s], qs[p][layer]))
        return outs

    def data():
        return ([[rng.standard_normal((2, 1, 128, 16)).astype(np.float32) for _ in range(2)]
                 for _ in range(5)],
                [[rng.standard_normal((1, 2, 128, 16)).astype(np.float32) for _ in range(2)]
                 for _ in range(5)])

    for f in range(10):
        frame(a, sa, f, *data())
    b.restore(sb, a.snapshot(sa))
    assert b.clock(sb) == 9
    for bad in (9, 11, 2):
        with pytest.raises(ringkv.RingKVRuntimeError):
            b.begin_frame([sb], [bad])
    for f in range(10, 13):
        kvs, qs = data()
        for x, y in zip(frame(a, sa, f, kvs, qs), frame(b, sb, f, kvs, qs)):
            assert np.array_equal(x, y), f


def test_gqa_repeat_interleave_not_tile(torch):
    """ekzhang/jax-js#180 (KV heads tiled instead of repeated for GQA),
    PSAL-POSTECH/ONNXim#33 (kv_head_idx = head_idx / n_kv_heads). Kind: GQA
    head mapping. Torch queries through ringkv's op against torch's own SDPA
    with enable_gqa (the repeat_interleave convention), on 12 query heads
    over 3 KV heads."""
    H, Hq, D, T = 3, 12, 16, 128
    rk = ringkv.LayerRingCache(1, H, 2, 2, D, T, 1, torch.float32, "cpu")
    g = torch.Generator().manual_seed(180)
    for f in range(3):
        rk.upsert(torch.randn(2, 1, H, T, D, generator=g), torch.tensor([f]), f < 2,
                  torch.tensor([0]))
    row = torch.as_tensor(rk.visible_row(0, 2)).bool()
    q = torch.randn(1, Hq, T, D, generator=g)
    k = torch.as_tensor(rk.kv)[0, 0][:, row].unsqueeze(0)
    v = torch.as_tensor(rk.kv)[1, 0][:, row].unsqueeze(0)
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            enable_gqa=True)
    got = rk.attend(q, [0], [2])
    assert _rel(torch, got, want) < 1e-5
    tiled = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat(1, Hq // H, 1, 1), v.double().repeat(1, Hq // H, 1, 1))
    assert _rel(torch, got, tiled) > 1e-2  # the test can tell the two mappings apart


def test_all_masked_row_is_zero_like_safe_softmax(torch):
    """pytorch/pytorch#41508 -> #131060 (_safe_softmax: a fully masked row
    gives 0, not NaN), tracel-ai/burn#4697, robertknight/rten#1321. Kind:
    all-masked row. An explicit all-False row next to a normal one: the
    first output row is exactly 0, as torch's SDPA gives for it; the second
    equals torch's."""
    H, D, T = 1, 16, 128
    rk = ringkv.LayerRingCache(2, H, 2, 2, D, T, 1, torch.float32, "cpu")
    g = torch.Generator().manual_seed(131060)
    rk.upsert(torch.randn(2, 1, H, T, D, generator=g), torch.tensor([0]), True,
              torch.tensor([1]))
    n = rk.total_slots
    rows = torch.zeros(2, n, dtype=torch.bool)
    rows[1] = torch.as_tensor(rk.visible_row(1, 1)).bool()
    q = torch.randn(2, 1, T, D, generator=g)
    got = rk.attend(q, [0, 1], visible=rows)
    kv = torch.as_tensor(rk.kv)
    mask = rows[:, None, None, :].expand(2, 1, T, n)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double(), kv[0, 0].double().expand(2, 1, n, D), kv[1, 0].double().expand(2, 1, n, D),
        attn_mask=mask)
    assert torch.count_nonzero(got[0]) == 0 and not torch.isnan(got).any()
    assert _rel(torch, got[1], want[1]) < 1e-5
    if not torch.isnan(want[0]).any():  # torch >= 2.5: _safe_softmax
        assert torch.count_nonzero(want[0]) == 0
