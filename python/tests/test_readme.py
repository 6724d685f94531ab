"""Every ```python snippet of python/README.md runs as pasted at a plain
``python3`` prompt, in order, in one namespace (issue 20: the "Sessions that
leave and move" block failed after the Model block, and the Ray one left its
checkpoint folder behind; trial 20: blocks that ran as a file failed when
pasted).

Pasting is what the test does: each block's lines are pushed one by one to
a ``code.InteractiveConsole`` (the interactive prompt's own reader) over a
fresh ``__main__`` module, then one empty line (the Enter that runs a
compound statement left open at the end of the paste). There, a blank line
ends an indented block, and an unindented line right after an indented one
is a SyntaxError: a loop followed at once by the next statement runs from a
file but not when pasted. Any error the console reports (a SyntaxError or a
traceback) fails the test, naming the README line of the statement.

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

from conftest import PYTHON_DIR, REPO, SPEC, run_python

README = PYTHON_DIR / "README.md"
CUDA_MARKER = "# needs a CUDA GPU"

# Pastes the blocks (argv[1]: a JSON list of [line, code]) into one
# interactive console; prints one line per block ("RAN n" / "SKIP n: why"),
# "FAILED n: what" for a line the console refused (then exits 1), then the
# Ray cluster's record as "RAY {json}".
DRIVER = textwrap.dedent('''
    import code, importlib.util, json, sys, types
    blocks = json.load(open(sys.argv[1]))
    record = {}

    class Paste(code.InteractiveConsole):
        """The prompt's reader; an error it would print and go past stops the run."""
        def __init__(self, namespace):
            super().__init__(namespace)
            self.error = None

        def showsyntaxerror(self, *args, **kwargs):
            self.error = "SyntaxError"
            super().showsyntaxerror(*args, **kwargs)

        def showtraceback(self, *args, **kwargs):
            self.error = f"{sys.exc_info()[0].__name__}: {sys.exc_info()[1]}"
            super().showtraceback(*args, **kwargs)

    def paste(console, first_line, text):
        """Pushes the block's lines, then the Enter after the paste."""
        lines = text.split("\\n")
        if lines and lines[-1] == "":
            lines.pop()  # the newline that ends the block's last line
        more, at = False, first_line
        for i, one in enumerate(lines):
            at = first_line + i if not more else at
            more = console.push(one)
            if console.error:
                return at, first_line + i
        if more:
            console.push("")
        return (at, first_line + len(lines) - 1) if console.error else None

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

    # the prompt's namespace is the module __main__, as at a real prompt
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    console = Paste(main.__dict__)
    for line, block in blocks:
        if block.startswith(%(marker)r) and not cuda():
            print(f"SKIP {line}: needs a CUDA device", flush=True)
            continue
        if "ringkv.ray" in block:
            if not has("ray", "xxhash"):
                print(f"SKIP {line}: needs Ray and xxhash", flush=True)
                continue
            watch_ray()
        failed = paste(console, line + 1, block)  # its code starts after the fence
        if failed:
            print(f"FAILED python/README.md:{failed[0]}-{failed[1]} (the statement from line "
                  f"{failed[0]}, refused at line {failed[1]}): {console.error}", flush=True)
            sys.exit(1)
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


def test_quick_start_python_prints_what_the_readme_says():
    """The top README's quick start: its Python lines (the ``python3 -c``
    of the "From Python" block) run with this build's library and print
    exactly what the text after them says they print (trial 20: they printed
    nothing, so a new user could not tell that they worked)."""
    text = (REPO / "README.md").read_text()
    m = re.search(r"From Python.*?python3 -c '\n(.*?)'\n```\n\nIt prints `([^`]*)`", text, re.S)
    assert m, "README.md: no quick-start python3 -c block followed by 'It prints `...`'"
    code, said = m.group(1), m.group(2)
    assert len(code.strip().splitlines()) == 4, code   # an import, a cache, an upsert, a print
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == said + "\n", (proc.stdout, said)


def test_python_blocks_are_found():
    """The extraction itself: fences, order, lines."""
    text = "a\n```python\nx = 1\n```\n```sh\nls\n```\n```python\ny = 2\nz = 3\n```\n"
    assert python_blocks(text) == [(2, "x = 1\n"), (8, "y = 2\nz = 3\n")]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
