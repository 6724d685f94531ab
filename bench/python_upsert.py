#!/usr/bin/env python3
"""The Python binding's per-pass cost against the ring's size (issue 20):
one upsert of the engine path (``build_visibility=False``) must cost the
same whatever the ring and the session count.

For each path, the time of one upsert (one frame of one session: 2 x 2
heads x 128 tokens x 64, bf16, 64 KiB) on three layers of growing size in
one run: 1 session x 8 frames (0.6 MiB of K/V), 8 x 64 (33 MiB) and
64 x 136 (548 MiB), the same geometry otherwise. The sizes take turns
(round after round, so that a change in the machine's load falls on all of
them), and each size's value is the median of its turns' medians. Reported:
microseconds per upsert at each size and the ratio largest / smallest ring.
A flat path has a ratio near 1 whatever the machine; the control row
(``build_visibility=True``, whose [N] row is ring-sized by definition) shows
that the measurement sees a cost that grows.

Paths: ``LayerRingCache.upsert`` with torch tensors (the custom op) and
with NumPy arrays, ``Model.upsert`` with torch tensors (``ringkv::model_upsert``)
and with NumPy arrays (``rkv_model_upsert``), each Model call a whole frame
of a one-layer model (``begin_frame`` and the commit pass), and the control.

Run from the repository root after a build::

    RINGKV_LIBRARY=build/libringkv.so python3 bench/python_upsert.py [--json]

Prints a table (or one JSON object per line with ``--json``) and the
machine's CPU and load average. Needs numpy; the torch rows are skipped
without torch >= 2.6.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import numpy as np  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

import ringkv  # noqa: E402

H, D, T = 2, 64, 128
SIZES = ((1, 8), (8, 64), (64, 136))  # (sessions, ring frames)
ROUNDS, CALLS = 7, 40


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _paths(sessions: int, frames: int) -> tuple[dict, int, int, list]:
    """(one callable per path, K/V bytes, N, the objects to keep alive) for
    layers and a model of this size; each call makes one upsert at the next
    clock (a Model row: a whole frame of its one layer, begin_frame and the
    commit pass)."""
    kv_np = np.zeros((2, 1, H, T, D), dtype=np.uint16)  # bf16 bits
    # one layer per input kind, each with a row of its kind built first (the
    # value build_visibility=False hands back)
    layer = ringkv.LayerRingCache(sessions, H, frames, frames, D, T, 1, "bf16")
    layer.upsert(kv_np, np.array([0]), False, np.array([0]))
    cfg = ringkv.ModelConfig("flat", [ringkv.LayerSpec(frames, frames, 1)], sessions, H, H, D, T,
                             "bf16")
    model = ringkv.Model(cfg)
    s = model.claim("bench")
    clock = [0]

    def layer_np():
        f = clock[0] = clock[0] + 1
        layer.upsert(kv_np, np.array([f]), f % 4 == 0, np.array([0]), build_visibility=False)

    model_clock = [0]

    def model_step(kv):
        def call():  # a whole frame of a one-layer model: begin, the commit pass
            model.begin_frame([s], [model_clock[0]])
            model.upsert(0, [s], kv, True)
            model_clock[0] += 1
        return call

    paths = {"layer_numpy": layer_np, "model_numpy": model_step(kv_np)}
    keep = [layer, model]
    if torch is not None and ringkv.layer._torch_ops() is not None:
        kv_t = torch.zeros((2, 1, H, T, D), dtype=torch.bfloat16)
        si = torch.tensor([0])
        t_layer = ringkv.LayerRingCache(sessions, H, frames, frames, D, T, 1, torch.bfloat16)
        t_layer.upsert(kv_t, torch.tensor([0]), False, si)
        keep.append(t_layer)

        def layer_torch():
            f = clock[0] = clock[0] + 1
            t_layer.upsert(kv_t, torch.tensor([f]), f % 4 == 0, si, build_visibility=False)

        def control():
            f = clock[0] = clock[0] + 1
            t_layer.upsert(kv_t, torch.tensor([f]), False, si, build_visibility=True)

        paths.update(layer_torch=layer_torch, model_torch=model_step(kv_t),
                     control_build_visibility=control)
    return paths, layer.memory_bytes, layer.total_slots, keep


def main() -> None:
    as_json = "--json" in sys.argv[1:]
    built = [_paths(s, f) for s, f in SIZES]
    names = list(built[0][0])
    turns = {(n, i): [] for n in names for i in range(len(SIZES))}
    for _ in range(ROUNDS):
        for name in names:
            for i, (paths, *_rest) in enumerate(built):
                call = paths[name]
                call()  # warm: first touch of the frame's slots
                times = []
                for _ in range(CALLS):
                    t0 = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - t0)
                turns[(name, i)].append(statistics.median(times))
    load = os.getloadavg()
    rows = []
    for name in names:
        us = [statistics.median(turns[(name, i)]) * 1e6 for i in range(len(SIZES))]
        rows.append({"name": "python_upsert_us", "path": name,
                     "ring_mib": [round(b[1] / 2**20, 1) for b in built],
                     "total_slots": [b[2] for b in built], "us": [round(u, 1) for u in us],
                     "ratio_largest_smallest": round(us[-1] / us[0], 2)})
    machine = {"cpu": _cpu_model(), "cores": os.cpu_count(), "loadavg": [round(x, 2) for x in load],
               "python": platform.python_version(), "numpy": np.__version__,
               "torch": None if torch is None else torch.__version__}
    if as_json:
        print(json.dumps({"name": "machine", **machine}))
        for r in rows:
            print(json.dumps(r))
        return
    print(f"machine: {machine['cpu']}, {machine['cores']} cores, load average "
          f"{' '.join(str(x) for x in machine['loadavg'])}; python {machine['python']}, "
          f"numpy {machine['numpy']}, torch {machine['torch']}")
    sizes = "  ".join(f"{m:>8} MiB" for m in rows[0]["ring_mib"])
    print(f"{'path (us per upsert)':<26}{sizes}   largest/smallest")
    for r in rows:
        cells = "  ".join(f"{u:>12.1f}" for u in r["us"])
        print(f"{r['path']:<26}{cells}   {r['ratio_largest_smallest']:.2f}")


if __name__ == "__main__":
    main()
