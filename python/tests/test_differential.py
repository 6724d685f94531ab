"""Differential test: the reference (shared/spec/seed_ring_cache.py) and
ringkv.LayerRingCache driven by the same random operation sequences (B >= 1,
dilation, clock jumps, resets). After every operation the K/V storage and the
written bits must be identical, and so must the visibility row: the new row
whenever build_visibility is true, and with it false, once a row was built,
the row the reference returns then (its row buffer: the last row built; in
ringkv that row itself).

Skipped only where torch >= 2.5 is not importable. On the CPU ringkv is fed
both torch tensors and NumPy arrays (the reference runs on the CPU); on a
CUDA device (the "cuda" cases, skipped without one) both the reference and a
CUDA ringkv layer run there on torch CUDA tensors, and the layer's device
error word is checked after every operation (LayerRingCache.check()).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from conftest import requires_cuda, torch_or_skip

import ringkv

SEEDS = range(16)
# f32 on every sequence, bf16 on every 4th (copies are bit-exact in any dtype)
CASES = [(seed, "float32") for seed in SEEDS] + [(seed, "bfloat16") for seed in SEEDS[::4]]
# (device, what ringkv is fed): a CUDA layer takes CUDA tensors only
BACKENDS = [pytest.param("cpu", "torch", id="cpu-torch"),
            pytest.param("cpu", "numpy", id="cpu-numpy"),
            pytest.param("cuda", "torch", id="cuda-torch", marks=requires_cuda)]


@pytest.fixture(scope="module")
def torch():
    return torch_or_skip((2, 5))


def random_geometry(rng: random.Random) -> dict:
    rf = rng.randint(1, 6)
    return dict(num_sessions=rng.randint(1, 4), n_kv_heads=rng.randint(1, 3), ring_frames=rf,
                ring_buckets=rng.randint(1, rf), d_head=rng.randint(1, 6),
                tokens_per_frame=rng.choice([128, 128, 256]),
                pinned_dilation=rng.choice([1, 1, 2, 3, 4, 8]))


def operations(rng: random.Random, g: dict, count: int):
    """Yields ("reset", s) or ("upsert", sessions, frames, commit, build_visibility):
    mostly the 4+1 schedule per session, with clock jumps, repeats and batches."""
    S = g["num_sessions"]
    clock = [rng.randint(0, 3) for _ in range(S)]
    passes = [0] * S
    for _ in range(count):
        r = rng.random()
        if r < 0.06:
            s = rng.randrange(S)
            clock[s], passes[s] = rng.randint(0, 2), 0
            yield ("reset", s)
            continue
        B = 1 if rng.random() < 0.6 else rng.randint(1, S)
        sessions = rng.sample(range(S), B)
        frames, commits = [], []
        for s in sessions:
            if rng.random() < 0.05:
                clock[s], passes[s] = rng.randint(0, 300), 0  # a jump
            frames.append(clock[s])
            commits.append(passes[s] == 4)
        commit = all(commits) if rng.random() < 0.8 else rng.random() < 0.5
        for s in sessions:
            passes[s] += 1
            if commit or passes[s] > 4:
                clock[s], passes[s] = clock[s] + 1, 0
        build = B == 1 and rng.random() < 0.7
        yield ("upsert", sessions, frames, commit, build)


def test_sequences_cover_batches_dilation_resets_and_jumps():
    """The generator (no torch needed) exercises what the test is for."""
    seen = dict(batch=0, reset=0, pd=0, write=0, nonwrite_commit=0, vis=0)
    for seed in SEEDS:
        rng = random.Random(seed)
        g = random_geometry(rng)
        seen["pd"] += g["pinned_dilation"] > 1
        for op in operations(rng, g, 60):
            if op[0] == "reset":
                seen["reset"] += 1
                continue
            _, sessions, frames, commit, build = op
            seen["batch"] += len(sessions) > 1
            seen["vis"] += build
            for f in frames:
                write = f % g["pinned_dilation"] == 0
                seen["write"] += commit and write
                seen["nonwrite_commit"] += commit and not write
    assert all(v > 0 for v in seen.values()), seen


@pytest.mark.parametrize("device, inputs", BACKENDS)
@pytest.mark.parametrize("seed, dtype", CASES)
def test_same_outputs_as_reference(torch, reference, seed, dtype, device, inputs):
    rng = random.Random(seed)
    g = random_geometry(rng)
    tdt = getattr(torch, dtype)
    ref = reference.LayerRingCache(**g, dtype=tdt, device=device)
    mine = ringkv.LayerRingCache(**g, dtype=tdt, device=device)
    assert mine.array_kind == "torch"
    assert mine.kv.device == ref.kv.device and mine.written.device == ref.written.device
    assert (mine.capacity, mine.total_slots, mine.ring_len, mine.memory_bytes) == \
        (ref.capacity, ref.total_slots, ref.ring_len, ref.memory_bytes)
    gen = torch.Generator().manual_seed(seed)
    H, T, D = g["n_kv_heads"], g["tokens_per_frame"], g["d_head"]
    checked_rows = stale_rows = 0
    for n, op in enumerate(operations(rng, g, 60)):
        if op[0] == "reset":
            ref.reset(op[1])
            mine.reset(op[1])
        else:
            _, sessions, frames, commit, build = op
            B = len(sessions)
            kv = torch.randn(2, 1, H, B * T, D, generator=gen).to(tdt).to(device)
            fp = torch.tensor(frames, dtype=torch.int64, device=device)
            si = torch.tensor(sessions, dtype=torch.int64, device=device)
            rk, rv, rvis = ref.upsert(kv, fp, commit, si, build_visibility=build)
            if inputs == "torch":
                k, v, vis = mine.upsert(kv, fp, commit, si, build_visibility=build)
            else:
                raw = kv.view(torch.int16).numpy().view(np.uint16) if dtype == "bfloat16" \
                    else kv.numpy()
                k, v, vis = mine.upsert(raw, fp.numpy(), commit, si.numpy(),
                                        build_visibility=build)
                k, v = mine.kv[0], mine.kv[1]
                vis = torch.from_numpy(vis)
            assert k.device == rk.device
            assert torch.equal(k.view(torch.int16) if dtype == "bfloat16" else k,
                               rk.view(torch.int16) if dtype == "bfloat16" else rk)
            assert torch.equal(v.view(torch.int16) if dtype == "bfloat16" else v,
                               rv.view(torch.int16) if dtype == "bfloat16" else rv)
            assert vis.device == rvis.device and vis.shape == rvis.shape
            if build:
                assert torch.equal(vis, rvis), f"seed {seed} op {n} {op}: visibility differs"
                checked_rows += 1
            elif checked_rows:  # the reference returns its last row (stale): ringkv that row
                assert torch.equal(vis, rvis), f"seed {seed} op {n} {op}: stale row differs"
                stale_rows += 1
        mine.check()  # CUDA: no device error recorded (synchronizes); CPU: no-op
        a, b = mine.kv, ref.kv
        if dtype == "bfloat16":
            a, b = a.view(torch.int16), b.view(torch.int16)
        assert torch.equal(a, b), f"seed {seed} op {n} {op}: K/V differs"
        assert torch.equal(mine.written, ref.written), f"seed {seed} op {n} {op}: written differs"
    assert checked_rows > 0 and stale_rows > 0


def _raises(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return type(exc)
    return None


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
def test_same_exception_types_as_reference(torch, reference, device):
    """Where the reference raises, ringkv raises the same built-in type."""
    good = dict(num_sessions=2, n_kv_heads=1, ring_frames=4, ring_buckets=3, d_head=4,
                tokens_per_frame=128, pinned_dilation=2, dtype=torch.float32, device=device)
    for bad in (dict(num_sessions=0), dict(pinned_dilation=0), dict(ring_buckets=5),
                dict(ring_buckets=0), dict(tokens_per_frame=100)):
        args = {**good, **bad}
        want = _raises(lambda: reference.LayerRingCache(**args))
        assert want is ValueError
        assert issubclass(_raises(lambda: ringkv.LayerRingCache(**args)), want), bad
    # a dtype that is not a torch.dtype, a non-integer size: TypeError; an
    # unknown device: RuntimeError (torch's own errors in the reference)
    for bad, want in ((dict(dtype="f64"), TypeError), (dict(dtype=np.float64), TypeError),
                      (dict(dtype=object()), TypeError), (dict(num_sessions="2"), TypeError),
                      (dict(d_head=None), TypeError), (dict(device="tpu"), RuntimeError)):
        args = {**good, **bad}
        assert _raises(lambda: reference.LayerRingCache(**args)) is want, bad
        assert issubclass(_raises(lambda: ringkv.LayerRingCache(**args)), want), bad
    ref, mine = reference.LayerRingCache(**good), ringkv.LayerRingCache(**good)
    for s in (-1, 2):
        assert _raises(lambda: ref.session_span(s)) is IndexError
        assert issubclass(_raises(lambda: mine.session_span(s)), IndexError)
        assert issubclass(_raises(lambda: mine.reset(s)), IndexError)
    for s in ("0", None):
        assert _raises(lambda: ref.session_span(s)) is TypeError
        assert issubclass(_raises(lambda: mine.session_span(s)), TypeError)
        assert _raises(lambda: ref.reset(s)) is TypeError
        assert issubclass(_raises(lambda: mine.reset(s)), TypeError)
    kv1 = torch.zeros(2, 1, 1, 128, 4, device=device)
    kv2 = torch.zeros(2, 1, 1, 256, 4, device=device)
    i64 = lambda *x: torch.tensor(x, dtype=torch.int64, device=device)  # noqa: E731
    i32 = torch.tensor([0], dtype=torch.int32, device=device)
    for args, kw in (((kv1, i32, True, i64(0)), {}),
                     ((kv1, torch.tensor(0, device=device), True, i64(0)), {}),
                     ((kv2, i64(0), True, i64(0)), {}),
                     ((kv1, i64(0), True, i64(0, 1)), {}),
                     ((kv1, i64(0), True, i32), {}),
                     ((kv2, i64(0, 0), True, i64(0, 1)), dict(build_visibility=True))):
        want = _raises(lambda: ref.upsert(*args, **kw))
        assert want is RuntimeError, args
        assert issubclass(_raises(lambda: mine.upsert(*args, **kw)), want), args
    mine.check()  # the host checks enqueued nothing: no device error either
    assert not mine.kv.any()


# ---- minimized cases of the randomized driver (test_differential_random.py) ----

def test_empty_batch_is_a_no_op_as_in_reference(torch, reference):
    """B = 0 (kv with no tokens, empty frame_pos / session_idx): the
    reference writes nothing and returns its row buffer; ringkv used to
    raise ("kv is NULL": an empty tensor's data pointer). With a row asked
    for, both raise the B == 1 check's RuntimeError."""
    g = dict(num_sessions=2, n_kv_heads=1, ring_frames=3, ring_buckets=3, d_head=2,
             tokens_per_frame=128, pinned_dilation=1, dtype=torch.float32, device="cpu")
    ref, mine = reference.LayerRingCache(**g), ringkv.LayerRingCache(**g)
    kv1 = torch.arange(2 * 128 * 2, dtype=torch.float32).reshape(2, 1, 1, 128, 2)
    one = torch.tensor([0])
    ref.upsert(kv1, one, True, one, build_visibility=True)
    mine.upsert(kv1, one, True, one, build_visibility=True)
    kv0 = torch.zeros(2, 1, 1, 0, 2)
    none = torch.zeros(0, dtype=torch.int64)
    for commit in (False, True):
        rk, rv, rrow = ref.upsert(kv0, none, commit, none, build_visibility=False)
        k, v, row = mine.upsert(kv0, none, commit, none, build_visibility=False)
        assert torch.equal(k, rk) and torch.equal(v, rv) and torch.equal(row, rrow)
        _, _, nrow = mine.upsert(kv0.numpy(), none.numpy(), commit, none.numpy(),
                                 build_visibility=False)
        assert np.array_equal(nrow, rrow.numpy())
        # the op itself (torch.compile's route) takes the empty batch too
        torch.ops.ringkv.upsert(mine.kv, mine.written, kv0, none, none, mine.geometry_list,
                                commit, mine.error_word)
    assert torch.equal(mine.kv, ref.kv) and torch.equal(mine.written, ref.written)
    # the row of the last build (frame 0 hidden on its write step): session 0's scratch only
    assert int(rrow.sum()) == 128 and bool(rrow[3 * 128:4 * 128].all())
    for kv, fp, si in ((kv0, none, none), (kv0.numpy(), none.numpy(), none.numpy())):
        with pytest.raises(RuntimeError, match="only supports B == 1"):
            ref.upsert(kv0, none, True, none, build_visibility=True)
        with pytest.raises(RuntimeError, match="only supports B == 1"):
            mine.upsert(kv, fp, True, si, build_visibility=True)
    assert torch.equal(mine.kv, ref.kv) and torch.equal(mine.written, ref.written)


def test_clock_at_int64_top_addresses_the_reference_slot(torch, reference):
    """frame_pos = 2**63 - 2 with PD 3, RB 4: a write step whose
    frame_pos + (PD - 1) wraps in the reference's int64 arithmetic, so its
    bucket is floor(-2**63 / 3) and its slot 1, not ceil(f/3) mod 4 = 2
    (ringkv's before). The commit lands in slot 1, the row hides slot 1,
    and visibility and attention at that clock follow the reference."""
    f = 2 ** 63 - 2
    g = dict(num_sessions=1, n_kv_heads=1, ring_frames=4, ring_buckets=4, d_head=2,
             tokens_per_frame=128, pinned_dilation=3, dtype=torch.float32, device="cpu")
    ref, mine = reference.LayerRingCache(**g), ringkv.LayerRingCache(**g)
    gen = torch.Generator().manual_seed(5)
    s0 = torch.tensor([0])
    for clock in (0, 3, 6, 9, f):  # fill slots 0..3, then the top clock
        kv = torch.randn(2, 1, 1, 128, 2, generator=gen)
        fp = torch.tensor([clock])
        _, _, rrow = ref.upsert(kv, fp, True, s0, build_visibility=True)
        _, _, row = mine.upsert(kv, fp, True, s0, build_visibility=True)
        assert torch.equal(row, rrow), clock
        assert torch.equal(mine.kv, ref.kv) and torch.equal(mine.written, ref.written), clock
    # the reference's values: the top clock's frame is in ring slot 1
    assert torch.equal(ref.kv[:, :, :, 128:256], kv)
    assert [int(x) for x in rrow.reshape(5, 128).all(1).nonzero().flatten()] == [0, 2, 3, 4]
    assert mine.visible_frames(0, f) == [0, 2, 3, 4]
    assert torch.equal(mine.visible_row(0, f), rrow)
    assert ringkv.visible_frames_from_clock(mine.geometry, f) == [0, 2, 3, 4]
    q = torch.randn(1, 2, 3, 2, generator=gen)
    keys = rrow.nonzero().flatten()
    K, V = ref.kv[0, 0, 0, keys].double(), ref.kv[1, 0, 0, keys].double()
    want = torch.softmax(q[0].double() @ K.T / 2 ** 0.5, dim=-1) @ V
    for out in (mine.attend(q, s0, torch.tensor([f])), mine.attend(q, s0, visible=rrow[None])):
        assert float((out[0].double() - want).norm() / want.norm()) < 1e-5


def test_session_out_of_range_wins_over_other_row_errors(torch, reference):
    """A call with a session out of range is the reference's IndexError
    (its index_copy_ fails) whatever else is wrong with it: a negative clock
    (found by the randomized driver: ringkv raised ValueError for the
    clock), or a session repeated in an earlier row. Nothing is written."""
    g = dict(num_sessions=2, n_kv_heads=1, ring_frames=2, ring_buckets=2, d_head=2,
             tokens_per_frame=128, pinned_dilation=1, dtype=torch.float32, device="cpu")
    ref, mine = reference.LayerRingCache(**g), ringkv.LayerRingCache(**g)
    i64 = lambda *x: torch.tensor(x, dtype=torch.int64)  # noqa: E731
    for fp, si in ((i64(-1), i64(2)), (i64(-3, 0), i64(0, -1)), (i64(0, 1, 2), i64(1, 1, 5)),
                   (i64(5, -1), i64(-2, 0))):
        kv = torch.ones(2, 1, 1, 128 * len(fp), 2)
        for build in (False, True) if len(fp) == 1 else (False,):
            with pytest.raises(IndexError):
                ref.upsert(kv, fp, True, si, build_visibility=build)
            for args in ((kv, fp, si), (kv.numpy(), fp.numpy(), si.numpy())):
                with pytest.raises(IndexError):
                    mine.upsert(args[0], args[1], True, args[2], build_visibility=build)
    assert not mine.kv.any() and not mine.written[:256].any() and mine.written[256:384].all()
