"""The ctypes mirror of include/ringkv.h and ringkv_cpu.h, and the later additions to the API
(thread pools, the reference attention, forks, batched steps, snapshot
files): bound when the loaded library has them."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import PYTHON_DIR, REPO

import ringkv
from ringkv import _lib

HEADER = REPO / "include" / "ringkv.h"
CPU_HEADER = REPO / "include" / "ringkv_cpu.h"  # the CPU calls, split out of ringkv.h


def api_text() -> str:
    """ringkv.h, and ringkv_cpu.h where the checkout has it."""
    return HEADER.read_text() + (CPU_HEADER.read_text() if CPU_HEADER.exists() else "")


MIRRORS = {"rkv_geometry": _lib.Geometry, "rkv_layer_spec": _lib.LayerSpec,
           "rkv_model_config": _lib.ModelConfigStruct, "rkv_attention_args": _lib.AttentionArgs,
           "rkv_snapshot_info": _lib.SnapshotInfo, "rkv_session_region": _lib.SessionRegion,
           "rkv_backend_storage": _lib.BackendStorage}
BACKEND_HEADER = REPO / "include" / "ringkv_backend.h"  # rkv_backend_storage (rkv_layer_wrap)


def header_fields(text: str, name: str) -> list[str] | None:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), text, flags=re.S)
    if not m:
        return None
    fields = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if decl:
            fields.append(re.match(r".*?(\w+)\s*(\[[^\]]*\])?$", decl, flags=re.S).group(1))
    return fields


def test_relative_library_path_is_made_absolute(tmp_path):
    """RINGKV_LIBRARY=build/libringkv.so (python/README.md) names the file
    from the folder ringkv is imported in: ringkv.library_path and the
    environment then hold it absolute, so that a process started in another
    folder (a subprocess, a Ray worker) loads the same file."""
    if not os.path.isabs(ringkv.library_path):  # found by the system loader, by name
        pytest.skip(f"ringkv.library_path {ringkv.library_path!r} is not a path")
    lib = os.path.realpath(ringkv.library_path)
    base = os.path.dirname(os.path.dirname(lib))
    relative = os.path.relpath(lib, base)
    assert os.sep in relative and not os.path.isabs(relative)
    (tmp_path / "empty").mkdir()
    code = f"""
import os, subprocess, sys
import ringkv
assert ringkv.library_path == os.environ["RINGKV_LIBRARY"] == {lib!r}, ringkv.library_path
child = subprocess.run([sys.executable, "-c", "import ringkv; print(ringkv.library_path)"],
                       cwd={str(tmp_path / "empty")!r}, capture_output=True, text=True)
assert child.returncode == 0 and child.stdout.strip() == {lib!r}, child.stderr
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=base, capture_output=True, text=True,
                          env=dict(os.environ, RINGKV_LIBRARY=relative, PYTHONPATH=str(PYTHON_DIR)),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_structs_mirror_the_header(name):
    if not HEADER.exists():
        pytest.skip("no include/ringkv.h next to this package")
    fields = header_fields(api_text() + (BACKEND_HEADER.read_text()
                                         if BACKEND_HEADER.exists() else ""), name)
    if fields is None:
        pytest.skip(f"{name} is not in this header")
    assert [f[0] for f in MIRRORS[name]._fields_] == fields, \
        f"ringkv/_lib.py's {name} differs from include/ringkv.h"


def test_every_header_function_is_bound():
    if not HEADER.exists():
        pytest.skip("no include/ringkv.h next to this package")
    names = set(re.findall(r"\b(rkv_[a-z0-9_]+)\s*\(", re.sub(r"/\*.*?\*/", "", api_text(),
                                                              flags=re.S)))
    names.discard("RKV_SCRATCH_FRAME")
    bound = set(_lib._PROTOTYPES) | set(_lib._OPTIONAL)
    assert sorted(names - bound) == []


def needs(name):
    return pytest.mark.skipif(not _lib.has(name), reason=f"the loaded library lacks {name}")


@needs("rkv_threadpool_create")
def test_thread_pools_and_reference_attention_agree():
    c = ringkv.LayerRingCache(2, 2, 4, 4, 32, 128, 1, "f32")
    rng = np.random.default_rng(0)
    for f in range(5):
        c.upsert(rng.standard_normal((2, 1, 2, 128, 32)).astype(np.float32), [f], True, [1],
                 build_visibility=False)
    q = rng.standard_normal((1, 4, 128, 32)).astype(np.float32)
    ref = c.attend(q, [1], [5], reference=True)
    outs = []
    for n in (1, 3):
        with ringkv.ThreadPool(n) as pool:
            assert pool.size == n
            outs.append(c.attend(q, [1], [5], pool=pool))
    assert np.array_equal(outs[0], outs[1])  # bit-identical whatever the thread count
    assert np.linalg.norm(outs[0] - ref) / np.linalg.norm(ref) < 1e-5
    assert ringkv.attention_isa() in ("amx", "avx512bf16", "avx512", "avx2", "generic")
    with pytest.raises(ValueError):
        ringkv.ThreadPool(-1)
    closed = ringkv.ThreadPool(1)
    closed.close()
    with pytest.raises(ValueError, match="ThreadPool"):
        c.attend(q, [1], [5], pool=closed)


def _rollout(m, s, frames, seed=0):
    rng = np.random.default_rng(seed)
    cfg = m.config
    for f in frames:
        m.begin_frame([s], [f])
        for p in range(5):
            for layer in range(m.n_layers):
                kv = rng.standard_normal((2, 1, cfg.n_kv_heads, cfg.tokens_per_frame, cfg.d_head))
                m.upsert(layer, [s], kv.astype(np.float32), p == 4)


def _span(m, s):
    out = []
    for i in range(m.n_layers):
        lay = m.layer(i)
        lo, hi = lay.session_span(s)
        out.append((lay.kv[:, :, :, lo:hi].copy(), lay.written[lo:hi].copy()))
    return out


def _same(a, b):
    return all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b))


@needs("rkv_model_fork")
def test_fork():
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    a, b = m.claim("a"), m.claim("b")
    _rollout(m, a, range(6))
    m.fork(a, b)
    assert m.clock(b) == 5 and _same(_span(m, a), _span(m, b))
    assert m.lookup("b") == b
    with pytest.raises(ValueError):
        m.fork(a, a)
    _rollout(m, b, [6], seed=1)
    assert m.clock(a) == 5 and m.clock(b) == 6


@needs("rkv_model_step")
def test_step_equals_upsert_then_attend():
    m1 = ringkv.Model.from_preset("demo", num_sessions=2)
    m2 = ringkv.Model.from_preset("demo", num_sessions=2)
    rng = np.random.default_rng(4)
    for m in (m1, m2):
        m.claim("a"), m.claim("b")
    for f in range(3):
        for m in (m1, m2):
            m.begin_frame([0, 1], [f, f + 10])
        for p in range(5):
            for layer in range(2):
                kv = rng.standard_normal((2, 1, 1, 256, 64)).astype(np.float32)
                q = rng.standard_normal((2, 1, 128, 64)).astype(np.float32)
                m1.upsert(layer, [0, 1], kv, p == 4)
                want = m1.attend(layer, [0, 1], q)
                got = m2.step(layer, [0, 1], kv, p == 4, q)
                assert np.array_equal(got, want)
    assert m2.clock(0) == 2 and m2.clock(1) == 12
    assert _same(_span(m1, 1), _span(m2, 1))
    with pytest.raises(RuntimeError):  # no frame begun
        m2.step(0, [0], np.zeros((2, 1, 1, 128, 64), np.float32), False,
                np.zeros((1, 1, 128, 64), np.float32))


@needs("rkv_model_save_session")
def test_snapshot_files(tmp_path):
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    a = m.claim("req-a")
    _rollout(m, a, range(4))
    path = tmp_path / "a.safetensors"
    m.save_session(a, path)
    image = m.save_session_bytes(a)
    assert path.read_bytes() == bytes(image)
    info = ringkv.inspect_snapshot(path)
    assert info.request_id == "req-a" and info.last_committed == 3
    assert info.file_bytes == path.stat().st_size and info.config.n_layers == 2
    assert ringkv.inspect_snapshot(image).last_committed == 3
    b = m.claim("req-b")
    m.load_session(b, str(path))
    assert m.clock(b) == 3 and _same(_span(m, a), _span(m, b))
    m.reset(b)
    m.load_session_bytes(b, image)
    assert _same(_span(m, a), _span(m, b))
    bad = bytearray(image)
    bad[-1] ^= 1
    with pytest.raises(ValueError, match="corrupted"):
        m.load_session_bytes(b, bad)
    with pytest.raises(OSError):
        m.load_session(b, tmp_path / "missing")
    other = ringkv.Model.from_preset("demo", full_global_ring=True)
    other.claim("x")
    with pytest.raises(ValueError, match="geometry"):
        other.load_session(0, path)


def test_session_metadata_version_is_the_one_written():
    """Every statement of the session metadata's version (include/ringkv.h's
    comments, docs/migration.md, src/model_regions.c) is
    RKV_SESSION_META_VERSION, the version export_meta writes (its header's
    ``session_meta_version``) and import_reserve requires (issue 20:
    import_reserve's comment and the layout table said 1 where the code
    wrote 2; issue 22: version 3 is the session's snapshot header). An
    older version is named only as refused."""
    if not HEADER.exists():
        pytest.skip("no include/ringkv.h next to this package")
    header = HEADER.read_text()
    want = int(re.search(r"^#define RKV_SESSION_META_VERSION +([0-9]+)", header, re.M).group(1))
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    meta = bytearray(m.export_meta(m.claim("a")))
    n = int.from_bytes(meta[:8], "little")
    assert len(meta) == 8 + n
    assert json.loads(meta[8:])["__metadata__"]["session_meta_version"] == str(want)
    texts = {"include/ringkv.h": header,
             "docs/migration.md": (REPO / "docs" / "migration.md").read_text(),
             "src/model_regions.c": (REPO / "src" / "model_regions.c").read_text()}
    claims = [r"version-([0-9]+) metadata", r"metadata(?: blob)?,? version ([0-9]+)",
              r"metadata of version RKV_SESSION_META_VERSION \(([0-9]+)\)",
              r"[Vv]ersion ([0-9]+): the bytes", r"\"session_meta_version\" \(\"([0-9]+)\""]
    found = [(name, int(x)) for name, text in texts.items() for c in claims
             for x in re.findall(c, text)]
    assert {name for name, _ in found} >= {"include/ringkv.h", "docs/migration.md"}, found
    assert all(v == want for _, v in found), found
    older = [int(x) for text in texts.values()
             for x in re.findall(r"[Vv]ersion ([0-9]+) \(the\s+(?:\*\s+)?binary "
                                 r"[\"`]RKVSESS[\"`] blob\) is refused", text)]
    assert older and all(v < want for v in older)
    # and the library refuses the older one (the version is read before the checksum)
    field = f'"session_meta_version":"{want}"'.encode()
    at = meta.index(field)
    meta[at:at + len(field)] = f'"session_meta_version":"{want - 1}"'.encode()
    other = ringkv.Model.from_preset("demo", num_sessions=2)
    with pytest.raises(ringkv.RingKVValueError, match=f"version {want - 1}; this ringkv reads "
                                                       f"version {want}"):
        other.import_reserve(bytes(meta))


def test_version_is_the_header_macros():
    """ringkv.__version__, the package's and the library's version are the
    RKV_VERSION_* macros of include/ringkv.h (the one place it is written)."""
    if not HEADER.exists():
        pytest.skip("no include/ringkv.h next to this package")
    text = HEADER.read_text()
    want = ".".join(re.search(r"^#define RKV_VERSION_%s +([0-9]+)" % p, text, re.M).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))
    assert ringkv.version() == want
    assert ringkv.__version__ == want
    pyproject = (REPO / "python" / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == want


def test_growing_structs_carry_their_size():
    """The structs that grow (include/ringkv.h, "Structs that grow") start
    with struct_size, set on construction; the library refuses 0 and a
    size it does not know, with the struct named."""
    import ctypes
    for cls in (_lib.AttentionArgs, _lib.ModelConfigStruct,
                _lib.SnapshotInfo):
        assert cls._fields_[0][0] == "struct_size"
        assert cls().struct_size == ctypes.sizeof(cls)
    cfg = _lib.ModelConfigStruct()
    assert _lib.lib.rkv_model_preset(b"demo", 0, ctypes.byref(cfg)) == 0
    per, tot = ctypes.c_size_t(7), ctypes.c_size_t(7)
    assert _lib.lib.rkv_model_config_memory(ctypes.byref(cfg), ctypes.byref(per),
                                            ctypes.byref(tot)) == 0
    for bad, says in ((0, b"cfg->struct_size is 0"),
                      (ctypes.sizeof(cfg) + 8, b"newer ringkv header")):
        cfg.struct_size = bad
        per.value = tot.value = 7
        assert _lib.lib.rkv_model_config_memory(ctypes.byref(cfg), ctypes.byref(per),
                                                ctypes.byref(tot)) == -1  # RKV_ERR_INVALID_ARG
        assert says in _lib.lib.rkv_last_error()
        assert per.value == tot.value == 7
