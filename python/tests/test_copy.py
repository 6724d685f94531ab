"""Copies and pickles of the classes that hold a C handle (issue 10, 3).

- Every class of the package that holds a C handle or address derives from
  ``ringkv._handle.HandleOwner``, and every such class has a case here: a
  class added later cannot be copied into a second owner of its handle, or
  pickled with an address in the stream, without a test saying so.
- ``copy.copy`` / ``copy.deepcopy`` of a LayerRingCache (CPU, CUDA, borrowed
  from a Model) and of a Model give independent objects with equal
  contents; the originals are untouched by the copies' writes, and freeing
  both is fine (checked in a second process, where a double free would
  abort).
- ``pickle`` round-trips CPU layers (f32, bf16) and models (claim table with a
  gap, clocks, request ids) into a second process, which continues streaming
  with results bit-identical to the uncopied originals; the stream holds no
  handle or storage address.
- Thread pools, the handle classes and CUDA layers (pickle) refuse with
  RingKVTypeError; a model inside a frame with RingKVRuntimeError.
"""
from __future__ import annotations

import copy
import ctypes
import gc
import importlib
import inspect
import pickle
import pkgutil
import re

import numpy as np
import pytest

from conftest import requires_cuda, run_python, torch_or_skip
from copy_workload import layer_stream, model_stream, storage

import ringkv
import ringkv.ops  # noqa: F401 - its _Context holds a handle
from ringkv import _arrays as ar
from ringkv import _lib
from ringkv._handle import HANDLE_CLASSES, HandleOwner
from ringkv.layer import _LayerHandle, _layer_from_state
from ringkv.model import _ModelHandle, _model_from_state


def _package_classes() -> list[type]:
    """Every class defined in the ringkv package's modules."""
    found = {}
    for info in pkgutil.iter_modules(ringkv.__path__, "ringkv."):
        mod = importlib.import_module(info.name)
        for obj in vars(mod).values():
            if inspect.isclass(obj) and obj.__module__ == mod.__name__:
                found[obj] = None
    return list(found)


# A class holds a C handle or address when its code keeps one (a `ptr`
# attribute or variable, a `_ptr`), frees one (`__del__`) or creates one
# (`rkv_..._create(`). The ctypes mirrors of C structs are checked apart.
_HOLDS = re.compile(r"\bptr\b|\b_ptr\b|def __del__|rkv_\w+_create\(")


def _holds_handle(cls: type) -> bool:
    if issubclass(cls, (ctypes.Structure, BaseException)):
        return False
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return bool(_HOLDS.search(source))


# Every HandleOwner subclass of the package, and what its instances do.
COPIES_AND_PICKLES = {ringkv.LayerRingCache, ringkv.Model}
REFUSES = {ringkv.ThreadPool, _LayerHandle, _ModelHandle, ringkv.ops._Context, ar._Interface,
           ar.CudaInterface, ar.CBuffer, ringkv.SessionRegion}


def test_every_class_holding_a_handle_derives_from_handle_owner():
    classes = _package_classes()
    holders = {cls for cls in classes if _holds_handle(cls)}
    assert ringkv.LayerRingCache in holders and ringkv.ThreadPool in holders  # the rule sees them
    missing = sorted(c.__qualname__ for c in holders if not issubclass(c, HandleOwner))
    assert missing == [], ("these classes hold a C handle or address but do not derive from "
                           "ringkv._handle.HandleOwner (copies would share it, pickles would "
                           f"store it): {missing}")
    owners = {c for c in HANDLE_CLASSES if c.__module__.startswith("ringkv.")}
    cases = COPIES_AND_PICKLES | REFUSES
    assert owners == cases, (
        "a HandleOwner subclass without a case in test_copy.py (add it to COPIES_AND_PICKLES "
        f"with tests, or to REFUSES): {sorted(c.__qualname__ for c in owners ^ cases)}")


def test_copying_classes_implement_all_three_and_refusing_ones_none():
    for cls in COPIES_AND_PICKLES:
        for name in ("__copy__", "__deepcopy__", "__reduce__"):
            assert getattr(cls, name) is not getattr(HandleOwner, name), (cls, name)
    for cls in REFUSES:
        for name in ("__copy__", "__deepcopy__", "__reduce__"):
            assert getattr(cls, name) is getattr(HandleOwner, name), (cls, name)
        assert cls.__reduce_ex__ is object.__reduce_ex__, cls
        assert "__getstate__" not in vars(cls) and "__setstate__" not in vars(cls), cls


def test_ctypes_structs_with_pointers_refuse_pickling():
    """The argument structs hold addresses; ctypes refuses to pickle them."""
    for struct in (_lib.AttentionArgs, _lib.BackendStorage):
        with pytest.raises(ValueError, match="pointers cannot be pickled"):
            pickle.dumps(struct())


def _refusing_instances():
    layer = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32")
    model = ringkv.Model.from_preset("demo")
    yield ringkv.ThreadPool(1) if _lib.has("rkv_threadpool_create") else None
    yield layer._h                                  # owned
    yield model.layer(0)._h                         # borrowed
    yield model._h
    yield ringkv.ops._Context(0, 0, None)           # ptr 0: frees nothing
    yield ar._Interface(layer.kv.ctypes.data, (4,), np.float32, layer._h)
    yield ar.CudaInterface(0, (4,), "<f4", None)
    yield ar.CBuffer(np.zeros(4, np.float32), "x")
    if _lib.has("rkv_model_session_regions"):     # a region holds an address
        yield model.session_regions(model.claim("r"))[0]


@pytest.mark.parametrize("action", [copy.copy, copy.deepcopy, pickle.dumps])
def test_refusing_classes_raise_type_error(action):
    seen = set()
    for obj in _refusing_instances():
        if obj is None:
            continue
        seen.add(type(obj))
        with pytest.raises(ringkv.RingKVTypeError, match=f"cannot .*{type(obj).__qualname__}") as e:
            action(obj)
        assert isinstance(e.value, TypeError)
    assert seen >= REFUSES - {ringkv.ThreadPool}


# ---- layers -------------------------------------------------------------------


def filled_layer(dtype="f32", seed=0, **kw) -> ringkv.LayerRingCache:
    c = ringkv.LayerRingCache(2, 2, 4, 3, 16, 128, 2, dtype, **kw)
    layer_stream(c, range(5), 1, seed)
    layer_stream(c, range(2), 0, seed + 1)
    return c


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_layer_copy_is_independent_with_equal_contents(dtype, how):
    c = filled_layer(dtype)
    before = storage(c)
    d = {"copy": copy.copy, "deepcopy": copy.deepcopy,
         "pickle": lambda x: pickle.loads(pickle.dumps(x))}[how](c)
    assert type(d) is ringkv.LayerRingCache and d is not c
    assert d.geometry == c.geometry and d.array_kind == c.array_kind and d.device == "cpu"
    assert _same(storage(d), before)
    assert d._h is not c._h and d._h.ptr != c._h.ptr and d._h.owner is None
    # its own views: no byte of the copy's storage is the original's
    assert d.kv.ctypes.data != c.kv.ctypes.data and not np.shares_memory(d.kv, c.kv)
    assert not np.shares_memory(d.written, c.written)
    # the copy's writes stay in the copy; the original continues the same way
    got = layer_stream(d, range(5, 7), 1, seed=9)
    assert _same(storage(c), before)
    assert np.array_equal(layer_stream(c, range(5, 7), 1, seed=9), got)
    after = storage(c)
    assert _same(storage(d), after)
    d.reset(1)
    d.kv[...] = 0
    assert _same(storage(c), after)


def test_layer_copy_views_keep_their_own_owner_alive():
    c = filled_layer()
    want = np.array(c.kv)
    kv = copy.deepcopy(c).kv        # the copy is gone at once; its view must keep it alive
    gc.collect()
    assert np.array_equal(kv, want)
    assert kv.base.owner is not c._h
    # a view deep-copied or pickled is an array copy, not a second view
    view_copy = copy.deepcopy(c.kv)
    assert not np.shares_memory(view_copy, c.kv) and np.array_equal(view_copy, c.kv)
    assert np.array_equal(pickle.loads(pickle.dumps(c.written)), c.written)


def test_layer_copy_keeps_attributes_the_caller_added():
    c = filled_layer()
    c.tags = ["layer-3"]
    shallow, deep, unpickled = copy.copy(c), copy.deepcopy(c), pickle.loads(pickle.dumps(c))
    assert shallow.tags is c.tags                       # as copy.copy does
    assert deep.tags == c.tags and deep.tags is not c.tags
    assert unpickled.tags == ["layer-3"]
    both = copy.deepcopy([c, c])                         # the memo: one copy for one object
    assert both[0] is both[1] and both[0] is not c


def test_torch_kind_layer_copies_as_torch():
    torch = torch_or_skip()
    c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, torch.bfloat16, "cpu")
    kv = torch.randn(2, 1, 1, 128, 8).to(torch.bfloat16)
    c.upsert(kv, torch.tensor([0]), True, torch.tensor([0]))
    for d in (copy.deepcopy(c), pickle.loads(pickle.dumps(c))):
        assert d.array_kind == "torch" and isinstance(d.kv, torch.Tensor)
        assert d.kv.dtype == torch.bfloat16 and torch.equal(d.kv, c.kv)
        assert d.kv.data_ptr() != c.kv.data_ptr()
        d.reset(0)
        assert not d.kv.any() and c.kv.any()


def test_drop_in_deepcopies_like_the_reference(reference):
    """The reference's tensors deepcopy: so does the drop-in, and both then
    evolve apart the same way."""
    torch = torch_or_skip((2, 5))
    args = (2, 1, 4, 3, 8, 128, 2, torch.float32, "cpu")
    ref, mine = reference.LayerRingCache(*args), ringkv.LayerRingCache(*args)
    gen = torch.Generator().manual_seed(0)

    def step(cache, f, s, commit, x):
        return cache.upsert(x, torch.tensor([f]), commit, torch.tensor([s]))

    for f in range(4):
        x = torch.randn(2, 1, 1, 128, 8, generator=gen)
        step(ref, f, 1, True, x)
        step(mine, f, 1, True, x)
    ref2, mine2 = copy.deepcopy(ref), copy.deepcopy(mine)
    for f in range(4, 7):
        x = torch.randn(2, 1, 1, 128, 8, generator=gen)
        _, _, rvis = step(ref2, f, 1, True, x)
        _, _, mvis = step(mine2, f, 1, True, x)
        assert torch.equal(rvis, mvis)
    assert torch.equal(ref2.kv, mine2.kv) and torch.equal(ref2.written, mine2.written)
    assert torch.equal(ref.kv, mine.kv) and torch.equal(ref.written, mine.written)
    assert not torch.equal(mine.kv, mine2.kv)


def test_borrowed_layer_copies_into_a_standalone_layer():
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    s = m.claim("a")
    model_stream(m, [s], [0], 3, seed=1)
    for d in (copy.copy(m.layer(1)), copy.deepcopy(m.layer(1)),
              pickle.loads(pickle.dumps(m.layer(1)))):
        assert d._h.owner is None and d._h.ptr != m.layer(1)._h.ptr
        assert _same(storage(d), storage(m.layer(1)))
        d.reset(s)
        assert m.layer(1).written[:m.layer(1).ring_len].any()   # the model's layer kept its data
    d = copy.deepcopy(m.layer(0))
    want = storage(d)
    del m
    gc.collect()
    assert _same(storage(d), want)   # standalone: it does not need the model


def test_malformed_layer_pickles_are_refused():
    c = ringkv.LayerRingCache(1, 1, 4, 4, 8, 128, 1, "f32")
    _, (cls, state), _ = c.__reduce__()
    assert _layer_from_state(cls, dict(state)).geometry == c.geometry
    for change, words in ((dict(version=2), "format version 2"),
                          (dict(format="x"), "not a LayerRingCache state"),
                          (dict(kv=state["kv"][:-4]), "K/V bytes"),
                          (dict(written=b"\x02" * len(state["written"])), "neither 0 nor 1"),
                          (dict(geometry=state["geometry"][:3]), "TypeError")):
        with pytest.raises(ringkv.RingKVValueError, match=words):
            _layer_from_state(cls, {**state, **change})
    with pytest.raises(ringkv.RingKVValueError, match="not a LayerRingCache state"):
        _layer_from_state(cls, None)


# ---- models --------------------------------------------------------------------


def streamed_model(dtype_preset="demo") -> ringkv.Model:
    """Sessions 0 "a" and 2 "c" held with clocks 4 and 13, session 1 released
    (a gap in the claim table)."""
    m = ringkv.Model.from_preset(dtype_preset, num_sessions=4)
    a, b, c = m.claim("a"), m.claim("b"), m.claim("c")
    assert (a, b, c) == (0, 1, 2)
    model_stream(m, [a, b, c], [0, 5, 9], 3, seed=3)
    m.release(b)
    model_stream(m, [c, a], [12, 3], 2, seed=4)
    return m


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_model_copy_is_independent_with_equal_contents(how):
    m = streamed_model()
    before = storage(m)
    d = {"copy": copy.copy, "deepcopy": copy.deepcopy,
         "pickle": lambda x: pickle.loads(pickle.dumps(x))}[how](m)
    assert type(d) is ringkv.Model and d._h.ptr != m._h.ptr
    assert d.config == m.config and d.array_kind == m.array_kind
    assert _same(storage(d), before)
    assert (d.lookup("a"), d.lookup("c"), d.clock(0), d.clock(2)) == (0, 2, 4, 13)
    with pytest.raises(KeyError):
        d.lookup("b")
    with pytest.raises(RuntimeError, match="not claimed"):
        d.clock(1)
    for i in range(m.n_layers):
        assert d.layer(i)._h.owner is d._h and not np.shares_memory(d.layer(i).kv, m.layer(i).kv)
    # the copy's writes stay in the copy; the original continues the same way
    got = model_stream(d, [0, 2], [5, 14], 2, seed=5)
    assert _same(storage(m), before) and m.clock(0) == 4
    assert np.array_equal(model_stream(m, [0, 2], [5, 14], 2, seed=5), got)
    assert _same(storage(m), storage(d)) and d.clock(2) == m.clock(2) == 15
    assert d.claim("new") == 1 and m.claim("other") == 1  # the gap is free in both


def test_model_copy_is_between_frames_with_no_frame_begun():
    m = streamed_model()
    d = copy.deepcopy(m)
    q = np.zeros((2, 1, 128, 64), np.float32)
    m.attend(0, [2, 0], q)                    # the original: its last batch, at its clocks
    with pytest.raises(RuntimeError, match="frame"):
        d.attend(0, [2, 0], q)                # the copy: as after load_session
    d.begin_frame([0], [5])


def test_model_inside_a_frame_refuses_copies_and_pickles():
    m = streamed_model()
    m.begin_frame([2], [14])
    m.upsert(0, [2], np.zeros((2, 1, 1, 128, 64), np.float32), True)
    for action in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(ringkv.RingKVRuntimeError, match="while session 2 is inside a frame"):
            action(m)
    m.upsert(1, [2], np.zeros((2, 1, 1, 128, 64), np.float32), True)   # the frame ends
    assert copy.deepcopy(m).clock(2) == 14


def test_model_copy_keeps_attributes_and_refuses_malformed_states():
    m = ringkv.Model.from_preset("demo")
    m.name = "world-1"
    assert copy.deepcopy(m).name == "world-1" and pickle.loads(pickle.dumps(m)).name == "world-1"
    m.config.d_head = 999      # the Python-side config is a copy: the model is what C holds
    assert copy.deepcopy(m).config.d_head == 64
    m.config.d_head = 64
    empty = copy.deepcopy(m)                       # no session held
    assert empty.claim("x") == 0
    _, (cls, state), _ = m.__reduce__()
    for change, words in ((dict(version=0), "format version 0"), (dict(format=1), "not a Model"),
                          (dict(sessions=[(0,)]), "ValueError")):
        with pytest.raises(ringkv.RingKVValueError, match=words):
            _model_from_state(cls, {**state, **change})
    s = m.claim("a")
    _, (cls, state), _ = m.__reduce__()
    (_, rid, image), = state["sessions"]
    assert rid == b"a" and ringkv.inspect_snapshot(image).request_id == "a"  # the portable image
    bad = bytearray(image)
    bad[-1] ^= 1
    with pytest.raises(ringkv.RingKVValueError, match="corrupted"):
        _model_from_state(cls, {**state, "sessions": [(s, rid, bytes(bad))]})


def _addresses(*objs) -> list[bytes]:
    """The little-endian bytes pickle would write for each handle and storage
    address of the given layers and models (as a long, minimal length)."""
    out = []
    for obj in objs:
        layers = [obj] if isinstance(obj, ringkv.LayerRingCache) else \
            [obj.layer(i) for i in range(obj.n_layers)]
        ptrs = [obj._h.ptr] + [lay._h.ptr for lay in layers] + \
            [lay.kv.ctypes.data for lay in layers] + [lay.written.ctypes.data for lay in layers]
        out += [p.to_bytes(p.bit_length() // 8 + 1, "little", signed=True) for p in ptrs]
    return out


def test_pickles_round_trip_into_another_process(tmp_path):
    """Pickle CPU layers (f32, bf16) and a model, load them in a second
    process, continue streaming there; the uncopied originals continue
    here with the same inputs: results and final states bit-identical."""
    layer32, layer16, model = filled_layer("f32", 1), filled_layer("bf16", 2), streamed_model()
    blob = pickle.dumps({"layer32": layer32, "layer16": layer16, "model": model})
    for addr in _addresses(layer32, layer16, model):
        assert addr not in blob, "an address in the byte stream"
    (tmp_path / "caches.pkl").write_bytes(blob)
    r = run_python(f"""
        import pickle
        import numpy as np
        from copy_workload import layer_stream, model_stream, storage
        with open({str(tmp_path / "caches.pkl")!r}, "rb") as fh:
            c = pickle.load(fh)
        m = c["model"]
        out = {{"layer32": layer_stream(c["layer32"], range(5, 9), 1, seed=11),
               "layer16": layer_stream(c["layer16"], range(5, 9), 1, seed=12),
               "model": model_stream(m, [0, 2], [5, 14], 3, seed=13),
               "ids": np.array([m.lookup("a"), m.lookup("c"), m.clock(0), m.clock(2),
                                m.claim("new")])}}
        for name in ("layer32", "layer16", "model"):
            out.update({{name + "." + k: v for k, v in storage(c[name]).items()}})
        np.savez({str(tmp_path / "child.npz")!r}, **out)
        print("child ok")
    """)
    assert r.returncode == 0 and "child ok" in r.stdout, r.stderr
    child = np.load(tmp_path / "child.npz")
    want = {"layer32": layer_stream(layer32, range(5, 9), 1, seed=11),
            "layer16": layer_stream(layer16, range(5, 9), 1, seed=12),
            "model": model_stream(model, [0, 2], [5, 14], 3, seed=13),
            "ids": np.array([0, 2, 7, 16, model.claim("new")])}
    for name, obj in (("layer32", layer32), ("layer16", layer16), ("model", model)):
        want.update({name + "." + k: v for k, v in storage(obj).items()})
    assert set(child.files) == set(want)
    for key, value in want.items():
        assert np.array_equal(child[key], value), key


def test_freeing_a_copy_and_its_original_is_safe():
    """The issue's input: deepcopy, upsert into the copy, free both. Before
    the fix the copy wrote into the original and freeing both aborted
    ("double free or corruption"); run in a second process so that an abort
    fails this test instead of killing the suite."""
    r = run_python("""
        import copy, gc, pickle
        import numpy as np
        import ringkv
        c = ringkv.LayerRingCache(1, 2, 4, 4, 64, 128, 1, "f32", "cpu")
        d = copy.deepcopy(c)
        d.upsert(np.ones((2, 1, 2, 128, 64), np.float32), np.array([0]), True, np.array([0]))
        assert not c.kv.any() and d.kv.any() and not c.written[:512].any()
        e = pickle.loads(pickle.dumps(d))
        e.upsert(np.full((2, 1, 2, 128, 64), 2, np.float32), np.array([1]), True, np.array([0]))
        m = ringkv.Model.from_preset("demo")
        m.claim("a")
        n = copy.deepcopy(m)
        del c, d, e, m, n
        gc.collect()
        print("freed")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "freed", r.stderr


# ---- CUDA ----------------------------------------------------------------------


@requires_cuda
def test_cuda_layer_copies_on_its_device_and_refuses_pickle():
    torch = torch_or_skip()
    c = ringkv.LayerRingCache(2, 1, 4, 4, 64, 128, 1, torch.bfloat16, "cuda")
    x = torch.randn(2, 1, 1, 128, 64, device=c.kv.device).to(torch.bfloat16)
    c.upsert(x, torch.tensor([0], device=c.kv.device), True,
             torch.tensor([1], device=c.kv.device))
    for d in (copy.copy(c), copy.deepcopy(c)):
        assert d.device == c.device and d.kv.device == c.kv.device
        assert d.kv.data_ptr() != c.kv.data_ptr() and d._h.ptr != c._h.ptr
        assert torch.equal(d.kv, c.kv) and torch.equal(d.written, c.written)
        d.reset(1)
        d.check()
        assert not d.kv.any() and c.kv.any()
    with pytest.raises(ringkv.RingKVTypeError,
                       match="cannot pickle a ringkv.LayerRingCache on cuda"):
        pickle.dumps(c)


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_model_with_a_slot_reserved_for_import_is_refused(how):
    """A reservation (import_reserve, not imported or cancelled) is transient
    state a copy cannot hold: refused, naming the slot and what to do,
    rather than a copy that silently drops it; the model is unchanged (the
    reservation is still there); after import_cancel the copy works."""
    src = ringkv.Model.from_preset("demo", num_sessions=2)
    src.claim("b")
    meta = src.export_meta(0)
    dst = ringkv.Model.from_preset("demo", num_sessions=2)
    dst.claim("a")
    slot = dst.import_reserve(meta)
    do = {"copy": copy.copy, "deepcopy": copy.deepcopy,
          "pickle": lambda m: pickle.loads(pickle.dumps(m))}[how]
    action = "pickle" if how == "pickle" else "copy"
    with pytest.raises(ringkv.RingKVRuntimeError) as e:
        do(dst)
    assert str(e.value) == (
        f"cannot {action} a ringkv.Model while session {slot} is reserved for an import "
        "(Model.import_reserve): the copy could not hold the reservation; finish it "
        "(Model.import_session) or cancel it (Model.import_cancel) first")
    with pytest.raises(ringkv.RingKVRuntimeError):     # still reserved: "b" cannot be claimed
        dst.claim("b")
    dst.import_cancel(slot)
    twin = do(dst)
    assert twin.lookup("a") == 0 and twin.clock(0) is None
    assert twin.claim("b") == slot                     # the slot is free in the copy


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_model_with_a_paged_out_session_is_refused(how):
    """A paged-out session (offload) leaves its request id reserved with
    its image's checksum: a copy that dropped it would let claim() take the
    id and refuse the image's page_in (issue 20: copies and pickles did
    that silently). Refused, saying how many and what to do; the model is
    unchanged (still paged out, the image pages in); once every session is
    back or discarded, the copy works and holds them."""
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    a, b = m.claim("a"), m.claim("b")
    for s in (a, b):
        m.begin_frame([s], [0])
        for layer in range(m.n_layers):
            m.upsert(layer, [s], np.full((2, 1, 1, 128, 64), s + 1, np.float32), True)
    image_a, image_b = m.offload(a), m.offload(b)
    do = {"copy": copy.copy, "deepcopy": copy.deepcopy,
          "pickle": lambda x: pickle.loads(pickle.dumps(x))}[how]
    action = "pickle" if how == "pickle" else "copy"
    for count in (2, 1):
        with pytest.raises(ringkv.RingKVRuntimeError) as e:
            do(m)
        assert str(e.value) == (
            f"cannot {action} a ringkv.Model while {count} session(s) are paged out "
            "(Model.offload): the copy could not hold their reservations (their request ids "
            "would be free there and their images would not page in); page them in "
            "(Model.page_in) or discard them (Model.offload_discard) first")
        assert m.offloaded_count == count
        if count == 2:
            with pytest.raises(ringkv.RingKVRuntimeError):   # still reserved
                m.claim("a")
            assert m.page_in(image_a) == 0
    m.offload_discard("b")
    twin = do(m)
    assert twin.offloaded_count == 0 and twin.lookup("a") == 0 and twin.clock(0) == 0
    assert np.array_equal(twin.layer(0).kv, m.layer(0).kv)
    assert twin.claim("b") == 1  # discarded: free in both
    del image_b
