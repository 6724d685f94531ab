#!/usr/bin/env python3
"""Summary table of scripts/gpu_check.sh: reads the GPU bench's rows in
OUTDIR/h200.jsonl (`ringkv bench --backend cuda --json`: one JSON object per
line, bench/row.c's format), the RESULT lines of reference.log and tests.log
and the step statuses, and prints the issue-9 goals against the
measurements. Usage: summary.py OUTDIR"""
import json
import math
import os
import re
import sys


def parse(path):
    res = {}
    if not os.path.exists(path):
        return res
    for line in open(path, errors="replace"):
        m = re.match(r"RESULT (\w+)=(\S+) (.*)", line.strip())
        if not m:
            continue
        kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
        key = kv.get("bench") or kv.get("test")
        res[key] = kv
    return res


def bench_rows(path):
    """The ringkv bench's rows of a .jsonl file (the reference's, marked with
    a source, are left to reference.log)."""
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path, errors="replace"):
        line = line.strip()
        if not line:
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(r, dict) and "name" in r and "source" not in r:
            out.append(r)
    return out


def pick(bench, name, **keys):
    """The value of the first row `name` whose keys match (NaN when none)."""
    for r in bench:
        if r.get("name") == name and all(r.get(k) == v for k, v in keys.items()):
            v = r.get("value")
            return float(v) if isinstance(v, (int, float)) else math.nan
    return math.nan


def num(d, k, field="value"):
    try:
        return float(d[k][field])
    except (KeyError, ValueError):
        return math.nan


def fmt(x, nd=1):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else ".gpu/out"
    bench = bench_rows(os.path.join(out, "h200.jsonl"))
    ref = parse(os.path.join(out, "reference.log"))
    tests = parse(os.path.join(out, "tests.log"))
    status = {}
    if os.path.exists(os.path.join(out, "status")):
        for line in open(os.path.join(out, "status")):
            parts = line.split()
            if len(parts) == 2:
                status[parts[0]] = parts[1]
    frag = "-"
    tl = os.path.join(out, "tests.log")
    if os.path.exists(tl):
        for line in open(tl, errors="replace"):
            if line.startswith("fragment model:"):
                frag = line.split(":", 1)[1].strip()

    # The wgmma kernel's numbers count only when it computed the right thing:
    # its rows of the differential test ran and none failed, and its float64
    # spot check in the benchmark passed.
    wg_checks = wg_fails = 0
    if os.path.exists(tl):
        for line in open(tl, errors="replace"):
            m = re.match(r"attend wgmma [\w-]+\s+(\d+)\s+(\d+)", line)
            if m:
                wg_checks += int(m.group(1))
                wg_fails += int(m.group(2))
    wg_spot = pick(bench, "cuda_attention_f64_err", kernel="wgmma")
    wg_run = tests.get("cuda_diff_wgmma", {}).get("status")
    wg_ok = wg_checks > 0 and wg_fails == 0 and wg_spot <= 1e-2 and wg_run == "PASS"
    wg_state = (f"wgmma {'VERIFIED' if wg_ok else 'NOT verified'} (diff run {wg_run or '?'}, "
                f"checks {wg_checks}, fails {wg_fails}, f64 spot {fmt(wg_spot, 4)})")

    def best(case):
        """Best TFLOP/s over the kernels of one attention case (wgmma only
        when verified): case "720p_B1_8192keys" -> preset, B, keys."""
        res, b, keys = case.split("_")
        preset = f"waypoint-1.5-{res}"
        cands = [(float(r["value"]), f"{r.get('kernel')} stages{r.get('stages')}")
                 for r in bench if r.get("name") == "cuda_attention_tflops"
                 and r.get("preset") == preset and r.get("B") == int(b[1:])
                 and r.get("keys") == int(keys[:-4]) and isinstance(r.get("value"), (int, float))
                 and (wg_ok or r.get("kernel") != "wgmma")]
        if not cands:
            return math.nan, "-"
        return max(cands)

    rows = []
    copy = pick(bench, "cuda_copy_gbps")
    rows.append(("device copy bandwidth (GB/s)", fmt(copy, 0), "ceiling",
                 f"torch {fmt(num(ref, 'ref_copy_d2d_bandwidth'), 0)}", ""))
    rows.append(("bf16 matmul 8192^3 (TFLOP/s)", "-", "ceiling",
                 f"torch {fmt(num(ref, 'ref_matmul_bf16_8192'), 0)}", ""))
    for c in (0, 1):
        us = pick(bench, "cuda_upsert_us", B=1, commit=bool(c))
        rows.append((f"upsert in graph B=1 commit={c} (us)", fmt(us, 2), "<= 5",
                     f"ref graph {fmt(num(ref, f'ref_upsert_graph_B1_commit{c}'))}, eager "
                     f"{fmt(num(ref, f'ref_upsert_eager_B1_commit{c}'))}",
                     "ok" if us <= 5 else ("MISS" if not math.isnan(us) else "?")))
    for c in (0, 1):
        gbps = pick(bench, "cuda_upsert_gbps", B=8, commit_pass=bool(c))
        pct = 100.0 * gbps / copy if copy > 0 else math.nan
        rows.append((f"upsert in graph B=8 commit={c} (% copy bw)", fmt(pct, 1), ">= 70",
                     f"{fmt(pick(bench, 'cuda_upsert_us', B=8, commit_pass=bool(c)), 1)} us; ref graph "
                     f"{fmt(num(ref, f'ref_upsert_graph_B8_commit{c}'))} us",
                     "ok" if pct >= 70 else ("MISS" if not math.isnan(pct) else "?")))
    for case, goal, refcase in (("720p_B1_8192keys", 370, "720p_B1_8192keys"),
                                ("720p_B1_8704keys", 370, None),
                                ("720p_B8_8704keys", 430, "720p_B8_8704keys"),
                                ("720p_B8_8192keys", 430, None),
                                ("360p_B8_2176keys", 300, "360p_B8_2176keys")):
        v, var = best(case)
        peers = "-"
        if refcase:
            peers = (f"cuDNN {fmt(num(ref, f'ref_cudnn_gathered_{refcase}'), 0)}, "
                     f"flash {fmt(num(ref, f'ref_flash_gathered_{refcase}'), 0)}, "
                     f"flex {fmt(num(ref, f'ref_flex_{refcase}'), 0)}")
        rows.append((f"attention {case} (TFLOP/s) [{var}]", fmt(v, 0), f">= {goal}", peers,
                     "ok" if v >= goal else ("MISS" if not math.isnan(v) else "?")))
    def frame(name, B, better):
        """The mma kernel's value, or the wgmma one's where verified and better."""
        v, wv = pick(bench, name, B=B, kernel="mma"), pick(bench, name, B=B, kernel="wgmma")
        if wg_ok and not math.isnan(wv) and (math.isnan(v) or better(wv, v)):
            return wv, " [wgmma]"
        return v, ""

    f1, k1 = frame("cuda_frame_ms", 1, lambda a, b: a < b)
    rows.append((f"whole frame, 1 session, graph (ms){k1}", fmt(f1, 2), "<= 15",
                 "ref fallback 550",
                 "ok" if f1 <= 15 else ("MISS" if not math.isnan(f1) else "?")))
    f8, k8 = frame("cuda_frame_ms", 8, lambda a, b: a < b)
    rows.append((f"whole frame, 8 sessions/call (ms){k8}", fmt(f8, 2), "-", "", ""))
    s1, _ = frame("cuda_sessions_at_15fps", 1, lambda a, b: a > b)
    s8, _ = frame("cuda_sessions_at_15fps", 8, lambda a, b: a > b)
    s = max([x for x in (s1, s8) if not math.isnan(x)], default=math.nan)
    rows.append(("720P sessions at 15 fps (B=1 / B=8)", f"{fmt(s1)} / {fmt(s8)}", ">= 6 (8)", "",
                 "ok" if s >= 6 else ("MISS" if not math.isnan(s) else "?")))

    print("\n==================== ringkv CUDA gpu_check summary ====================")
    print("steps: " + ", ".join(f"{k}={v}" for k, v in status.items()))
    d = tests.get("cuda_diff_mma") or tests.get("cuda_diff", {})
    dw, g = tests.get("cuda_diff_wgmma", {}), tests.get("cuda_graph", {})
    print(f"tests: fragment model {frag}; cuda_diff mma {d.get('status', '?')} "
          f"(fails {d.get('fails', '?')}), wgmma {dw.get('status', '?')} "
          f"(fails {dw.get('fails', '?')}); backend_parity "
          f"{'PASS' if status.get('backend_parity') == '0' else status.get('backend_parity', '?')}; "
          f"cuda_graph {g.get('status', '?')} "
          f"(frames {g.get('frames', '?')}, max err {g.get('max_err', '?')}); rollout_backend "
          f"{'PASS' if status.get('rollout_backend') == '0' else status.get('rollout_backend', '?')}; "
          f"f64 spot mma {fmt(pick(bench, 'cuda_attention_f64_err', kernel='mma'), 4)}")
    print(wg_state)
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    hdr = ("measure", "ringkv", "goal", "reference / peers (same run)", "")
    w = [max(w[i], len(hdr[i])) for i in range(5)]
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    for r in rows:
        print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
