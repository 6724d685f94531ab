"""Every ```python snippet of python/README.md runs as pasted, in order, in
one namespace (issue 20: the "Sessions that leave and move" block failed
after the Model block, and the Ray one left its checkpoint folder behind).

The snippets run in a fresh interpreter (conftest.run_python's environment:
this checkout's ringkv, the build's library), in an empty working folder,
with TMPDIR an empty folder of the test's: afterwards both must still be
empty (a snippet that leaves a file or a folder behind fails). The
reference's module (shared/spec/seed_ring_cache.py) is importable, as the
README's first snippet imports it; "change the import and nothing else" is
checked by running that snippet again after the next one rebinds
``LayerRingCache`` to ringkv's.

Skipped blocks are said in the test's output: a block whose first line is
the marker comment ``# needs a CUDA GPU`` runs only where torch sees a CUDA
device, and the Ray block (it imports ``ringkv.ray``) only where Ray and
xxhash are importable. The Ray block follows the suite's loopback rules
(ray_cluster.py): its cluster must listen on 127.0.0.1 only (checked when
the snippet calls ``ray.shutdown()``, which is wrapped for that), and no
process of it may be left afterwards.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import PYTHON_DIR, SPEC

README = PYTHON_DIR / "README.md"
CUDA_MARKER = "# needs a CUDA GPU"

# Runs the blocks (argv[1]: a JSON list of [line, code]) in one namespace;
# prints one line per block ("RAN n" / "SKIP n: why"), then the Ray
# cluster's record as "RAY {json}".
DRIVER = textwrap.dedent('''
    import importlib.util, json, sys
    blocks = json.load(open(sys.argv[1]))
    record = {}

    def has(*mods):
        return all(importlib.util.find_spec(m) is not None for m in mods)

    def cuda():
        if not has("torch"):
            return False
        import torch
        return torch.cuda.is_available()

    def watch_ray():
        import ray
        import ray_cluster
        real = ray.shutdown

        def shutdown(*args, **kwargs):
            pids = ray_cluster.cluster_pids(ray)
            record["addresses"] = ray_cluster.listening_addresses(ray_cluster._children(pids))
            ray.shutdown = real
            ray_cluster.stop_cluster(ray, pids)  # real shutdown; asserts nothing is left
            record["stopped"] = not ray.is_initialized()
        ray.shutdown = shutdown

    ns = {"__name__": "__readme__"}
    for line, code in blocks:
        if code.startswith(%(marker)r) and not cuda():
            print(f"SKIP {line}: needs a CUDA device", flush=True)
            continue
        if "ringkv.ray" in code:
            if not has("ray", "xxhash"):
                print(f"SKIP {line}: needs Ray and xxhash", flush=True)
                continue
            watch_ray()
        exec(compile(code, f"python/README.md:{line}", "exec"), ns)
        print(f"RAN {line}", flush=True)
    print("RAY " + json.dumps(record), flush=True)
''') % {"marker": CUDA_MARKER}


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of ``text`` in order: (line of the fence, code)."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S)]


def test_readme_snippets_run_in_order(tmp_path):
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 8, blocks
    first, swap = blocks[0], blocks[1]
    assert "from seed_ring_cache import LayerRingCache" in first[1]
    assert swap[1].strip() == "from ringkv import LayerRingCache"
    # after the swap, the reference's snippet again without its import: ringkv's class
    again = (first[0], first[1].replace("from seed_ring_cache import LayerRingCache\n", "")
             + "\nimport ringkv\nassert type(cache) is ringkv.LayerRingCache\n")
    blocks.insert(2, again)
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "driver.py").write_text(DRIVER)
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    tests = Path(__file__).resolve().parent
    # Ray's and torch's own caches stay where they would be without TMPDIR
    # (or under the test's folder): what is checked is what the snippets leave
    env = dict(os.environ, TMPDIR=str(tmp),
               RAY_TMPDIR=os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(),
               TORCHINDUCTOR_CACHE_DIR=os.environ.get("TORCHINDUCTOR_CACHE_DIR")
               or str(tmp_path / "torch-cache"),
               PYTHONPATH=os.pathsep.join([str(PYTHON_DIR), str(tests), str(SPEC)]))
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"),
                           str(tmp_path / "blocks.json")], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout
    print(out)  # which blocks ran and which were skipped, in the test's output
    assert proc.returncode == 0, f"{out}\n{proc.stderr[-6000:]}"
    ran = [int(x) for x in re.findall(r"^RAN (\d+)", out, re.M)]
    skipped = re.findall(r"^SKIP (\d+): (.*)$", out, re.M)
    assert len(ran) + len(skipped) == len(blocks)
    assert all(why in ("needs a CUDA device", "needs Ray and xxhash") for _, why in skipped)
    for line, code in blocks:  # skipped only for a reason the block has
        why = dict(skipped).get(str(line))
        if why == "needs a CUDA device":
            assert code.startswith(CUDA_MARKER)
        elif why:
            assert "ringkv.ray" in code
    record = json.loads(re.search(r"^RAY (.*)$", out, re.M).group(1))
    ray_block = next(line for line, code in blocks if "ringkv.ray" in code)
    if ray_block in ran:
        from ray_cluster import is_loopback
        assert record["addresses"] and all(is_loopback(a) for a in record["addresses"]), record
        assert record["stopped"]
    assert sorted(os.listdir(work)) == [], "the snippets left files in the working folder"
    assert sorted(os.listdir(tmp)) == [], "the snippets left temporary files or folders"


def test_python_blocks_are_found():
    """The extraction itself: fences, order, lines."""
    text = "a\n```python\nx = 1\n```\n```sh\nls\n```\n```python\ny = 2\nz = 3\n```\n"
    assert python_blocks(text) == [(2, "x = 1\n"), (8, "y = 2\nz = 3\n")]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
