"""docs/snapshot-format.md, "Rewriting a file": a snapshot file rewritten by
another tool (here: its tensors in reverse order, as a re-save in another
order writes them) is refused until both checksums are recomputed, and the
doc's own recipe (the ``fix_checksums`` block, run as written) makes it
load bit-exact. Skipped without the ``xxhash`` package (installed by
scripts/install-deps.sh for ringkv.ray)."""
from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

from conftest import REPO

import ringkv

xxhash = pytest.importorskip("xxhash")


def _doc_recipe():
    """The doc's Python block that defines fix_checksums, executed."""
    text = (REPO / "docs" / "snapshot-format.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "def fix_checksums" in b]
    assert len(blocks) == 1, "docs/snapshot-format.md: one python block defines fix_checksums"
    scope: dict = {}
    exec(compile(blocks[0], "docs/snapshot-format.md", "exec"), scope)
    return scope["fix_checksums"]


def _reorder(path):
    """The tensors in reverse order, offsets rewritten, metadata as it was
    (stale checksums): what a tool that re-saves the file writes."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    meta = head.pop("__metadata__")
    out, parts, off = {"__metadata__": meta}, [], 0
    for name in sorted(head, key=lambda k: head[k]["data_offsets"][0], reverse=True):
        b, e = head[name]["data_offsets"]
        parts.append(data[b:e])
        out[name] = {**head[name], "data_offsets": [off, off + e - b]}
        off += e - b
    text = json.dumps(out).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(parts))
    return [name for name in out if name != "__metadata__"]


def test_a_reordered_file_loads_bit_exact_after_the_docs_recipe(tmp_path):
    fix_checksums = _doc_recipe()
    rng = np.random.default_rng(3)
    m = ringkv.Model.from_preset("demo", num_sessions=2)
    a = m.claim("a")
    for f in range(5):
        m.begin_frame([a], [f])
        for layer in range(m.n_layers):
            m.upsert(layer, [a], rng.standard_normal((2, 1, 1, 128, 64), dtype=np.float32), True)
    path = tmp_path / "a.safetensors"
    m.save_session(a, path)
    original = path.read_bytes()
    order = _reorder(path)
    assert order[0] == "layer.1.written" and path.read_bytes() != original
    with pytest.raises(ringkv.RingKVValueError, match="header checksum mismatch"):
        ringkv.inspect_snapshot(path)
    fix_checksums(path)
    info = ringkv.inspect_snapshot(path)
    assert info.last_committed == 4 and info.request_id == "a"
    assert info.data_xxh3 != ringkv.inspect_snapshot(original).data_xxh3   # another order
    b = m.claim("b")
    m.load_session(b, path)
    assert m.clock(b) == 4 and m.session_digest(b) == m.session_digest(a)
    # bit-exact: the images' data sections (their headers name the sessions)
    d = info.data_bytes
    assert m.snapshot(b)[-d:] == m.snapshot(a)[-d:]
    # the header checksum alone is not enough: data_xxh3 must be of the new order
    fixed = path.read_bytes()
    stale = fixed.replace(info.data_xxh3.to_bytes(8, "big").hex().encode(),
                          ringkv.inspect_snapshot(original).data_xxh3.to_bytes(8, "big").hex()
                          .encode(), 1)
    assert stale != fixed
    path.write_bytes(stale)
    _rehash_header(path)
    with pytest.raises(ringkv.RingKVValueError, match="data checksum mismatch"):
        ringkv.inspect_snapshot(path)


def _rehash_header(path):
    """header_xxh3 recomputed over the header as it is (the doc's verify
    rule: its own 16 digits read as 0), nothing else."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    head = raw[8:8 + n]
    at = re.search(rb'"header_xxh3"\s*:\s*"', head).end()
    zeroed = head[:at] + b"0" * 16 + head[at + 16:]
    digest = xxhash.xxh3_64_hexdigest(raw[:8] + zeroed).encode()
    path.write_bytes(raw[:8] + zeroed[:at] + digest + zeroed[at + 16:] + raw[8 + n:])
