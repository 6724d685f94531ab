#!/usr/bin/env python3
"""Ray migration pause per session (issue 13): one session moved between two
SessionHost actors of a local Ray cluster on loopback (ringkv.ray), at the
Waypoint-1.5 360P and 720P geometries (bf16; one session per model), its
rings filled first (17 frames of the commit pass), after one unmeasured
migration (the object store's memory touched once). The pause is the time
the session cannot be stepped: from the source's export to the
destination's import (export + object store + copy into the reserved slot +
digests + import checks), as SessionRouter.migrate measures it; the bytes
are the session's regions (K, V and written bits) moved through Ray's
object store. Prints one row per measurement in the `ringkv bench` row
format (docs/json.md): name, value, unit, the row's parameters, then
ceiling_kind, isa, cpu_model, blas_core.

    RINGKV_LIBRARY=build/libringkv.so python3 bench/ray_migration.py [--quick] [--json]

Needs Ray and xxhash (scripts/install-deps.sh). Memory: the 720P session is
816 MiB, held by the source, the object store and the destination at
once (about 2.5 GiB, the object store sized to 2 GiB)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
if not os.environ.get("RINGKV_LIBRARY"):
    default = os.path.join(HERE, "..", "build", "libringkv.so")
    if os.path.exists(default):
        os.environ["RINGKV_LIBRARY"] = os.path.abspath(default)

import ringkv  # noqa: E402
import ringkv.ray as rr  # noqa: E402


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def emit(args, name: str, value: float, unit: str, params: dict) -> None:
    row = {"name": name, "value": round(value, 3), "unit": unit, **params,
           "ceiling_kind": "none", "isa": ringkv.attention_isa(), "cpu_model": cpu_model(),
           "blas_core": "none"}
    if args.json:
        print(json.dumps(row, separators=(",", ":")), flush=True)
    else:
        extra = " ".join(f"{k}={v}" for k, v in params.items())
        print(f"{name:<32} {value:10.2f} {unit:<8} {extra}", flush=True)


def measure(args, preset: str, reps: int) -> None:
    import ray
    cfg = ringkv.preset(preset, num_sessions=1)
    hosts = rr.make_hosts(["A", "B"], cfg)
    router = None
    try:
        router = rr.SessionRouter(hosts, name=f"bench-{preset}")
        rid = "bench"
        router.open(rid)
        ray.get(hosts[router.where[rid]].prefill.remote(rid, 17))
        pauses, totals, moved = [], [], 0
        router.migrate(rid, "B" if router.where[rid] == "A" else "A")  # warm-up: the object
        for k in range(reps):                                          # store's pages touched
            dst = "B" if router.where[rid] == "A" else "A"
            t = time.perf_counter()
            mig = router.migrate(rid, dst)
            totals.append(time.perf_counter() - t)
            pauses.append(mig.pause_s)
            moved = mig.bytes
        best = min(pauses)
        params = {"preset": preset, "dtype": cfg.dtype, "bytes": moved, "reps": reps,
                  "transport": "ray_object_store", "hosts": "2 actors, one machine"}
        emit(args, "ray_migration_pause_ms", best * 1e3, "ms", dict(params))
        emit(args, "ray_migration_gbps", moved / best / 1e9, "GB/s", dict(params))
        emit(args, "ray_migration_total_ms", min(totals) * 1e3, "ms", dict(params))
    finally:
        if router is not None:
            router.shutdown()
        for h in hosts.values():
            ray.kill(h)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON row per line")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--presets", default="waypoint-1.5-360p,waypoint-1.5-720p")
    args = ap.parse_args()
    import ray
    rr.init_loopback(num_cpus=2, object_store_memory=2 << 30)
    try:
        for preset in args.presets.split(","):
            measure(args, preset, 2 if args.quick else 4)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
