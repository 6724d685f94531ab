"""Parser of shared/golden/trace_*.txt (format: shared/golden/README.md) and
the K/V inputs those traces define."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Upsert:
    op: int
    sessions: list[int]
    frames: list[int]
    commit: bool
    build_visibility: bool
    visible: list[tuple[int, int]] | None = None  # ranges, when build_visibility


@dataclass
class Reset:
    op: int
    session: int


@dataclass
class Trace:
    path: Path
    geometry: dict[str, int]
    ops: list = field(default_factory=list)
    final_written: list[tuple[int, int]] = field(default_factory=list)
    final_tags: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    untouched: list[tuple[int, int]] = field(default_factory=list)


def _kv(fields: list[str]) -> dict[str, str]:
    out = {}
    for f in fields:
        key, _, value = f.partition("=")
        out[key] = value
    return out


def _ranges(text: str) -> list[tuple[int, int]]:
    if text == "none" or not text:
        return []
    out = []
    for r in text.split(","):
        lo, hi = r.split("-")
        out.append((int(lo), int(hi)))
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def parse(path: Path) -> Trace:
    trace = None
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, *rest = line.split()
        f = _kv(rest)
        if kind == "geometry":
            trace = Trace(Path(path), {k: int(v) for k, v in f.items()})
        elif trace is None:
            raise ValueError(f"{path}:{lineno}: record before geometry")
        elif kind == "upsert":
            trace.ops.append(Upsert(int(f["op"]), _ints(f["sessions"]), _ints(f["frames"]),
                                    f["commit"] == "1", f["build_visibility"] == "1"))
        elif kind == "visible":
            last = trace.ops[-1]
            if not isinstance(last, Upsert) or last.op != int(f["op"]):
                raise ValueError(f"{path}:{lineno}: visible without its upsert")
            last.visible = _ranges(f["ranges"])
        elif kind == "reset":
            trace.ops.append(Reset(int(f["op"]), int(f["session"])))
        elif kind == "final_written":
            trace.final_written = _ranges(f["ranges"])
        elif kind == "final_tags":
            runs = [] if f["runs"] == "none" else f["runs"].split(",")
            for run in runs:
                span, o, b, t = run.split(":")
                lo, hi = span.split("-")
                trace.final_tags.append((int(lo), int(hi), int(o), int(b), int(t)))
        elif kind == "untouched":
            trace.untouched = _ranges(f["ranges"])
        else:
            raise ValueError(f"{path}:{lineno}: unknown record {kind!r}")
    if trace is None:
        raise ValueError(f"{path}: no geometry")
    return trace


def value(op, c, b, t, h, d):
    """The K/V value of operation ``op`` (broadcasting NumPy arrays): c 0 = K,
    1 = V; b batch row; t token in the row's frame; h head; d dim."""
    c, b, t, h, d = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64)
                                         for x in (c, b, t, h, d)))
    out = np.where(d >= 4, d + 0.25 * c, 0.0)
    out = np.where(d == 0, op + 1 + 0.5 * c, out)
    out = np.where(d == 1, b, out)
    out = np.where(d == 2, t, out)
    out = np.where(d == 3, h, out)
    return out


def upsert_input(op: int, batch: int, H: int, T: int, D: int) -> np.ndarray:
    """``[2, 1, H, B*T, D]`` float32 input of an upsert operation."""
    c = np.arange(2).reshape(2, 1, 1, 1, 1, 1)
    h = np.arange(H).reshape(1, 1, H, 1, 1, 1)
    b = np.arange(batch).reshape(1, 1, 1, batch, 1, 1)
    t = np.arange(T).reshape(1, 1, 1, 1, T, 1)
    d = np.arange(D).reshape(1, 1, 1, 1, 1, D)
    return value(op, c, b, t, h, d).astype(np.float32).reshape(2, 1, H, batch * T, D)


def expected_final(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The K/V buffer ``[2, 1, H, N, D]`` and written bits ``[N]`` a trace
    ends with."""
    g = trace.geometry
    H, D, T = g["n_kv_heads"], g["d_head"], g["tokens_per_frame"]
    N = g["num_sessions"] * (g["ring_frames"] + 1) * T
    kv = np.full((2, 1, H, N, D), np.nan, dtype=np.float32)
    for lo, hi in trace.untouched:
        kv[:, :, :, lo:hi] = 0
    c = np.arange(2).reshape(2, 1, 1, 1, 1)
    h = np.arange(H).reshape(1, 1, H, 1, 1)
    d = np.arange(D).reshape(1, 1, 1, 1, D)
    for lo, hi, o, b, t in trace.final_tags:
        tt = (t + np.arange(hi - lo)).reshape(1, 1, 1, hi - lo, 1)
        kv[:, :, :, lo:hi] = value(o, c, b, tt, h, d)
    if np.isnan(kv).any():
        raise ValueError(f"{trace.path}: final_tags and untouched do not cover every slot")
    written = np.zeros(N, dtype=bool)
    for lo, hi in trace.final_written:
        written[lo:hi] = True
    return kv, written


def ranges_to_row(ranges: list[tuple[int, int]], n: int) -> np.ndarray:
    row = np.zeros(n, dtype=bool)
    for lo, hi in ranges:
        row[lo:hi] = True
    return row


def traces(golden: Path) -> list[Path]:
    return sorted(Path(golden).glob("trace_*.txt"))
